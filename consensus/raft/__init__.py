"""The pure Raft core: Raft with the JournalKeeper extensions as a deterministic state
machine (no sockets, threads, clocks or disks). Full contract: docs/raft-core.md.

Drive one node like this (the runtime's loop)::

    node = RaftNode(node_id, storage, RaftOptions(), configuration=bootstrap, applied=n)
    node.tick()                          # every tick (e.g. 10 ms); deliver missed ticks
    node.step(message)                   # or step_many(batch): a message for this node
    node.propose(data) / propose_many()  # leader: -> index; NotLeader(leader_id) elsewhere
    node.read_index(ctx, lease=False)    # -> ReadState(ctx, index, status) in a Ready
    node.query_snapshot(index, q, ...)   # two-step read, step two, at any node
    node.transfer_leader(target); node.change_voters(voters); node.update_observers(...)
    node.add_server(id, address); node.remove_server(id)     # JRaft's flows
    driver = ReadyDriver(node, disk, network, app, clock)   # driver.py: THE Ready loop
    driver.tick(); driver.run()          # persist, send, apply, advance, in one order

`Storage` is what the core reads of the persisted log (first_index, last_index, term,
entries, snapshot, initial_state); `MemoryStorage` implements it in memory. Messages
(`messages.py`) are wire-agnostic dataclasses the runtime maps onto JRaft's binary
types plus extensions. Time is ticks only; `RaftOptions` holds the tunables.
"""
from .configuration import Configuration
from .entry import Entry, EntryType
from .errors import (CompactedError, ConfigurationError, InvalidMessage, MembershipChangeError,
                     NotLeader, OptionsError, ProposalDropped, RaftError, StorageStateError,
                     UnavailableError)
from .messages import (AppendEntries, AppendEntriesResponse, InstallSnapshot,
                       InstallSnapshotResponse, JoinClusterRequest, JoinClusterResponse,
                       LeaveClusterRequest, LeaveClusterResponse, Message, PullEntries,
                       PullEntriesResponse, PullSnapshot, PullSnapshotResponse, PullStatus,
                       ReadIndexRequest, ReadIndexResponse, RequestVote, RequestVoteResponse,
                       SyncLogRequest, SyncLogResponse, TimeoutNow)
from .driver import Application, Clock, Disk, Network, ReadyDriver
from .node import FollowerContact, RaftNode
from .options import RaftOptions
from .ready import Ready, SoftState
from .roles import Role
from .reads import (ReadState, ReadStatus, SnapshotQueryResult, SparseSnapshots, StateMachine,
                    query_snapshot)
from .storage import HardState, MemoryStorage, Snapshot, Storage

__all__ = [
    "AppendEntries", "AppendEntriesResponse", "Application", "Clock", "CompactedError", "Configuration",
    "ConfigurationError", "Disk", "Entry", "EntryType", "FollowerContact", "HardState", "InstallSnapshot",
    "InstallSnapshotResponse", "InvalidMessage", "JoinClusterRequest", "JoinClusterResponse",
    "LeaveClusterRequest", "LeaveClusterResponse", "MembershipChangeError", "MemoryStorage",
    "Message", "Network", "NotLeader", "OptionsError", "ProposalDropped", "PullEntries",
    "PullEntriesResponse", "PullSnapshot", "PullSnapshotResponse", "PullStatus", "RaftError",
    "RaftNode", "RaftOptions", "ReadIndexRequest", "ReadIndexResponse", "ReadState",
    "ReadStatus", "Ready", "ReadyDriver", "RequestVote", "RequestVoteResponse", "Role", "Snapshot",
    "SnapshotQueryResult", "SoftState", "SparseSnapshots", "StateMachine", "Storage",
    "StorageStateError", "SyncLogRequest", "SyncLogResponse", "TimeoutNow",
    "UnavailableError", "query_snapshot",
]
