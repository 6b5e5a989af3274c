"""The values the farm's client API returns (plain dataclasses, picklable, no sockets)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StagedInfo:
    """What a STAGED ledger entry belongs to (the exactly-once sink's task output)."""
    query_id: str
    batch_id: int
    partition: int
    attempt: int
    content_type: str


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """A COMMIT ledger entry. `effective` is True when this entry made the batch visible,
    False for a second commit of the same batch or one naming bad staged entries; None
    when the member could not tell (it no longer remembers the batch)."""
    query_id: str
    batch_id: int
    staged: tuple[int, ...]
    metadata: dict
    effective: bool | None = None


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One committed log entry as `FarmClient.read_entries` returns it.

    `type` is "journal", "staged", "commit", "status", "kv", "configuration", "noop" or
    "control" (the other ledger commands and application bytes of a pluggable state
    machine). `records` is the journal batch (journal entries only); `payload` is the
    staged payload for "staged", the JSON for "status", the configuration JSON for
    "configuration", else the entry's bytes. `timestamp_ms` is the leader's clock when it
    appended the entry (0 where the entry has no stamp: noop, configuration, status uses
    its own "date")."""
    index: int
    term: int
    type: str
    records: list[bytes] | None
    payload: bytes
    timestamp_ms: int
    staged: StagedInfo | None = None
    commit: CommitInfo | None = None
    duplicate: bool = False     #: a retried write applied before: the state ignored it
    count: int = 0              #: records of a journal entry (also without payloads)


@dataclass(frozen=True, slots=True)
class RowCounts:
    """`FarmClient.entry_rows`: entries [start, stop) as planning sees them. `rows` holds
    each entry's journal rows, little-endian uint32 (0 for every entry that is not a
    journal entry showing rows); `commits` the effective COMMIT entries among them, as
    headers (LogRecord without payloads), in index order."""
    start: int
    stop: int
    rows: bytes
    commits: list[LogRecord]


@dataclass(frozen=True, slots=True)
class VisibleRecords:
    """What `read_committed` yields per visible log entry: a journal entry's records, or
    one committed batch (the payloads of its staged entries, in commit order)."""
    index: int                      #: the journal entry's or the COMMIT entry's index
    term: int
    timestamp_ms: int
    records: list[bytes]
    commit: CommitInfo | None = None    #: set for a committed batch
    content_types: tuple[str, ...] = ()  #: per record of a batch (e.g. "arrow")


@dataclass(frozen=True, slots=True)
class BatchCommit:
    """The outcome of `commit_batch` / `batch_status`."""
    committed: bool             #: this call made the batch visible
    index: int                  #: the log index of the (first) commit of the batch
    duplicate: bool = False     #: the batch was committed before: this one was ignored
    query_id: str = ""
    batch_id: int = -1
    staged: tuple[int, ...] = ()
    metadata: dict = field(default_factory=dict)
    #: batch_status in partition 0: prepared commits of the batch were aborted after
    #: --prepared-timeout and no run has decided it since (metadata says which)
    aborted: bool = False


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member as the leader sees it."""
    id: int
    endpoint: str
    role: str                   #: "leader", "follower", "observer", "joining", ...
    voter: bool
    match_index: int | None     #: replicated up to (None: not tracked by the leader)
    status: dict | None         #: its latest Garlic Farm status from the log
    #: seconds since the leader last heard from it (None: not a follower the leader
    #: replicates to, such as the leader itself or an observer, or nothing heard yet)
    ack_age: float | None = None
    #: False: the leader has not heard from it within the election timeout; None: the
    #: leader does not track it (an observer) or the answer came from an older node
    reachable: bool | None = None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """JournalKeeper's getServers."""
    leader_id: int | None
    term: int
    commit_index: int
    voters: dict[int, str]
    observers: dict[int, str]
    outgoing: dict[int, str]    #: C_old while a joint configuration is in force
    members: dict[int, MemberView]

    @property
    def leader_endpoint(self) -> str | None:
        return self.voters.get(self.leader_id) if self.leader_id is not None else None

    def to_dict(self) -> dict:
        """JSON-ready (member ids become strings, as JSON object keys must)."""
        return _json_ready(asdict(self))


@dataclass(frozen=True, slots=True)
class FarmStatus:
    """The farm's shared view: who leads, who publishes, each member's status and lag."""
    cluster: str
    leader_id: int | None
    term: int
    commit_index: int
    publisher: int | None
    members: dict[int, MemberView]
    lag: dict[int, int]         #: commit index - member's match (or status commit)
    leader_since_ms: int | None = None  #: the leader's wall clock when it was elected
    election_timeout: float | None = None   #: seconds (the leader's setting)
    #: readers' positions and lag, at the leader (consumers.ConsumerLag.to_dict each)
    consumers: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready (member ids become strings, as JSON object keys must)."""
        return _json_ready(asdict(self))


@dataclass(frozen=True, slots=True)
class Event:
    """A JournalKeeper event: "leader-changed", "state-changed" or "voters-changed".
    `node` is the member that reported it."""
    name: str
    node: int
    term: int
    leader_id: int | None
    data: dict[str, Any] = field(default_factory=dict)


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value
