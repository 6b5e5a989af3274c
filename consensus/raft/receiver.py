"""The receiving side of replication (Raft §5.3, §7): AppendEntries and InstallSnapshot
from the leader of our term, and what hearing from that leader means."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from .elections import Elections
from .entry import Entry
from .errors import InvalidMessage
from .log import RaftLog
from .messages import AppendEntries, AppendEntriesResponse, InstallSnapshot, InstallSnapshotResponse
from .ready import Outbox
from .roles import Role
from .state import NodeState
from .storage import Snapshot
from .tenure import Tenure


def check_run(entries: Sequence[Entry], first: int, field: str) -> None:
    """Entries must run from `first` on without gaps (their ends are checked; the
    transport numbers them from the request's position, so the middle follows)."""
    if entries and (entries[0].index != first or entries[-1].index != first + len(entries) - 1):
        raise InvalidMessage(field, f"{len(entries)} entries numbered {entries[0].index}.."
                             f"{entries[-1].index} do not follow index {first - 1}")


@dataclass
class IncomingSnapshot:
    """Chunks of a leader's snapshot being received."""

    leader: int
    term: int
    index: int
    snapshot_term: int
    data: bytearray = field(default_factory=bytearray)


class Receiver:
    def __init__(self, *, state: NodeState, log: RaftLog, outbox: Outbox,
                 elections: Elections, tenure: Tenure,
                 become_follower: Callable[[int, int | None], None],
                 after_log_change: Callable[[], None]) -> None:
        """`after_log_change` is the node's: it re-reads the configuration after the log
        took entries or a snapshot."""
        self.state = state
        self.log = log
        self.outbox = outbox
        self.elections = elections
        self.tenure = tenure
        self.become_follower = become_follower
        self.after_log_change = after_log_change
        self.incoming: IncomingSnapshot | None = None   # a snapshot's chunks so far

    def hear_from_leader(self, leader: int) -> bool:
        """A leader of our term spoke. False if that cannot be (we lead this term): the
        message is dropped, and a checker will see two leaders in one term."""
        state = self.state
        if state.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            self.become_follower(state.term, leader)
        elif state.role is Role.LEADER:
            return False
        state.leader_id = leader
        self.elections.heard_leader()
        tenure = self.tenure
        if tenure.leave_at is not None:     # JRaft: a leader still talks to us: wait on
            tenure.start_leaving()
        return True

    def on_append_entries(self, msg: AppendEntries) -> None:
        check_run(msg.entries, msg.prev_log_index + 1, "entries")
        if not self.hear_from_leader(msg.source):
            return
        self.outbox.later.append(self._append_response(msg))
        self.after_log_change()

    def _append_response(self, msg: AppendEntries) -> AppendEntriesResponse:
        log = self.log
        prev, prev_term, entries = msg.prev_log_index, msg.prev_log_term, msg.entries
        committed = log.committed
        if prev < committed:
            # The head of the request is committed here already, hence identical: skip it.
            skip = min(len(entries), committed - prev)
            if skip:
                prev_term = entries[skip - 1].term
                prev, entries = prev + skip, entries[skip:]
            if prev < committed:     # nothing beyond our commit index: nothing to check
                return self._reply(msg, True, msg.prev_log_index + len(msg.entries) + 1)
        last_new = log.maybe_append(prev, prev_term, msg.commit, entries)
        if last_new is None:
            return self._reply(msg, False, log.rejection_hint(prev))
        return self._reply(msg, True, last_new + 1)

    def _reply(self, msg: AppendEntries, success: bool, next_index: int) -> AppendEntriesResponse:
        state = self.state
        return AppendEntriesResponse(term=state.term, source=state.id, destination=msg.source, success=success, next_index=next_index,
                                     log_index=msg.prev_log_index + 1, entry_count=len(msg.entries), ctx=msg.ctx)

    def on_install_snapshot(self, msg: InstallSnapshot) -> None:
        if not self.hear_from_leader(msg.source):
            return
        state, log = self.state, self.log
        later = self.outbox.later
        if msg.snapshot_index <= log.committed:
            self.incoming = None
            later.append(InstallSnapshotResponse(
                term=state.term, source=state.id, destination=msg.source, success=True, next_offset=len(msg.data) + msg.offset,
                snapshot_index=msg.snapshot_index, done=True))
            return
        inc = self.incoming
        if inc is None or (inc.leader, inc.term, inc.index) != (msg.source, msg.term,
                                                                msg.snapshot_index):
            inc = self.incoming = IncomingSnapshot(msg.source, msg.term, msg.snapshot_index,
                                                   msg.snapshot_term)
        if msg.offset != len(inc.data):
            later.append(InstallSnapshotResponse(
                term=state.term, source=state.id, destination=msg.source, success=False, next_offset=len(inc.data), snapshot_index=msg.snapshot_index))
            return
        inc.data += msg.data
        if not msg.done:
            later.append(InstallSnapshotResponse(
                term=state.term, source=state.id, destination=msg.source, success=True, next_offset=len(inc.data), snapshot_index=msg.snapshot_index))
            return
        self.incoming = None
        self.restore(Snapshot(msg.snapshot_index, msg.snapshot_term, msg.configuration,
                              bytes(inc.data)))
        log.commit_to(min(msg.commit, log.last_index()))
        later.append(InstallSnapshotResponse(
            term=state.term, source=state.id, destination=msg.source, success=True, next_offset=len(inc.data), snapshot_index=msg.snapshot_index, done=True))

    def restore(self, snapshot: Snapshot) -> None:
        """Take a snapshot received from a leader or an observer's parent."""
        log = self.log
        if snapshot.index <= log.committed:
            return
        if log.match_term(snapshot.index, snapshot.term):
            log.commit_to(snapshot.index)      # we hold those entries: fast-forward
            return
        if not snapshot.configuration.members:
            # Its maker did not know the configuration there: a node that joined without
            # the bootstrap configuration labels the entries below its first configuration
            # entry with the empty one. No farm has an empty configuration: keep ours
            # until the configuration entries after the snapshot arrive (with the empty
            # one, an observer would know nobody to pull them from).
            snapshot = replace(snapshot, configuration=log.configuration)
        log.restore(snapshot)
        self.after_log_change()
