"""What the client `Service` may use of its node: the core's client operations, a
read-only view of the log, the state machine, the transport and a few node services -
not the whole `FarmNode`, and never the core's internals."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Protocol

from consensus.raft import (Configuration, Entry, FollowerContact, Role, Snapshot,
                            SnapshotQueryResult, StateMachine)
from consensus.raft.log import LogView
from consensus.raft.progress import Progress

if TYPE_CHECKING:
    from consensus.runtime.config import NodeConfig
    from consensus.runtime.consumers import ConsumerBook
    from consensus.runtime.disk_storage import SnapshotView
    from consensus.runtime.log_reads import LogReads
    from consensus.runtime.reader_process import ReaderProcess
    from consensus.storage.segment import PinnedRecords
    from consensus.runtime.machines import FarmStateMachine
    from consensus.runtime.transport import Transport


class Core(Protocol):
    """The `RaftNode` operations a service calls (RaftNode implements them)."""

    @property
    def role(self) -> Role: ...
    @property
    def term(self) -> int: ...
    @property
    def leader_id(self) -> int | None: ...
    @property
    def commit_index(self) -> int: ...
    @property
    def last_index(self) -> int: ...
    @property
    def committed_in_term(self) -> bool: ...
    @property
    def configuration(self) -> Configuration: ...
    @property
    def progress(self) -> Mapping[int, Progress]: ...
    @property
    def transferring_to(self) -> int | None: ...

    def follower_contact(self) -> Mapping[int, FollowerContact]: ...
    def propose_many(self, datas: list[bytes]) -> int: ...
    def read_index(self, ctx: bytes, *, lease: bool = False) -> None: ...
    def query_snapshot(self, index: int, query: Any, snapshots: Any,
                       new_machine: Callable[[], StateMachine]) -> SnapshotQueryResult: ...
    def change_voters(self, voters: Collection[int],
                      addresses: Mapping[int, str] | None = None) -> int: ...
    def update_observers(self, add: Collection[int] = (), remove: Collection[int] = (),
                         addresses: Mapping[int, str] | None = None) -> int: ...
    def add_server(self, node_id: int, address: str = "") -> None: ...
    def remove_server(self, node_id: int) -> None: ...
    def transfer_leader(self, target: int) -> None: ...


@dataclass(frozen=True)
class NodeView:
    """The node as its `Service` sees it."""

    id: int
    config: "NodeConfig"
    core: Core
    log: LogView
    #: applied entries [lo, hi) within max_bytes, on any thread (DiskStorage.read_applied)
    read_applied: Callable[[int, int, int | None], list[Entry]]
    machine: "FarmStateMachine"
    transport: "Transport"
    snapshots: "SnapshotView"                       #: sparse snapshots, for two-step reads
    latest_snapshot: Callable[[], Snapshot | None]
    new_machine: Callable[[], StateMachine]
    address_of: Callable[[int], str | None]         #: where peers and clients reach a node
    learn_address: Callable[[int, str], None]
    status: Callable[[], dict]                      #: this node's status (role, commit, ...)
    proposals_dropped: Callable[[int], None]        #: the metrics: proposals refused
    consumers: "ConsumerBook"                       #: readers' positions (at the leader)
    #: the node's view of every partition it hosts (role, term, leader, commit, ...)
    partitions: Callable[[], list[dict]] = lambda: []
    #: the node's reader threads, shared by its groups (None: the service makes its own)
    reads: "LogReads | None" = None
    #: the node's reader process (--log-readers process), shared by its groups
    reader: "ReaderProcess | None" = None
    #: applied entries [lo, hi) located for the reader process (DiskStorage.pin_applied)
    pin_applied: "Callable[[int, int, int | None], list[PinnedRecords]] | None" = None
