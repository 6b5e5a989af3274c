"""The Raft state machine of one node: `tick`, `step`, `propose`..., then `ready`/`advance`.

No sockets, threads, clocks or disks: time comes in as `tick()`, messages as `step()`,
and everything to persist, send and apply goes out through `ready()` (see ready.py for
the order). Randomness (election timeouts, observer parents) comes from a generator
seeded by `RaftOptions.seed`, so a run is reproducible.
"""
from __future__ import annotations

import logging
import random
from itertools import count
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from .configuration import EMPTY, Configuration
from .entry import Entry, EntryType
from .errors import InvalidMessage, MembershipChangeError, NotLeader, ProposalDropped, RaftError, \
    StorageStateError
from .log import LogView, RaftLog
from .membership import IncomingSnapshot, JoinPhase, Joiner, Leaver, ObserverPull
from .messages import (AppendEntries, AppendEntriesResponse, InstallSnapshot,
                       InstallSnapshotResponse, JoinClusterRequest, JoinClusterResponse,
                       LeaveClusterRequest, LeaveClusterResponse, Message, PullEntries,
                       PullEntriesResponse, PullSnapshot, PullSnapshotResponse, PullStatus,
                       ReadIndexRequest, ReadIndexResponse, RequestVote, RequestVoteResponse,
                       SyncLogRequest, SyncLogResponse, TimeoutNow)
from .options import RaftOptions
from .progress import Progress, ProgressState
from .ready import Ready, Role, SoftState
from .reads import (STAMP_BITS, PendingRead, ReadState, ReadStatus, ReadTracker,
                    SnapshotQueryResult, SparseSnapshots, StateMachine, query_snapshot,
                    stamp_tick)
from .storage import HardState, Snapshot, Storage

log = logging.getLogger("garlicfarm.raft")

_LEADER_MESSAGES = (AppendEntries, InstallSnapshot, TimeoutNow, JoinClusterRequest,
                    SyncLogRequest, LeaveClusterRequest)
_MAX_STAMP_SEQ = (1 << STAMP_BITS) - 1


class RaftNode:
    """One Raft node (voter or observer). See the package docstring for the contract."""

    def __init__(self, node_id: int, storage: Storage, options: RaftOptions | None = None, *,
                 configuration: Configuration | None = None, applied: int = 0) -> None:
        """`configuration` bootstraps a brand-new cluster (every initial member gets the
        same one); a node that joins later or restarts takes its configuration from its
        log and snapshot. `applied` is the index the application's state already
        reflects (at least the snapshot's)."""
        if node_id <= 0:
            raise ValueError(f"node_id must be a positive integer, got {node_id}")
        self.id = node_id
        self.options = options or RaftOptions()
        seed = self.options.seed if self.options.seed is not None else node_id
        self._rng = random.Random(seed)
        self.log = RaftLog(storage, configuration or EMPTY, applied)
        self.log_view = LogView(self.log)   #: read-only, for the runtime's services
        state = storage.initial_state()
        self.term = state.term
        self.vote = state.vote
        if state.commit > self.log.last_index() and state.commit > self.log.first_index() - 1:
            # Commit is saved after the entries; a log shorter than it lost data.
            raise StorageStateError(f"saved commit {state.commit} is beyond the last index "
                                    f"{self.log.last_index()}: the log lost durable entries")
        self.log.committed = max(state.commit, self.log.first_index() - 1)
        self.leader_id: int | None = None
        self.role = Role.OBSERVER if self.options.observer else Role.FOLLOWER
        self.progress: dict[int, Progress] = {}
        self._ticks = 0
        self._heard_leader_tick = 0
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._boot_lease = True     # we may have confirmed a leader just before a restart
        self._votes: dict[int, bool] = {}
        self._send_now: list[Message] = []
        self._send_later: list[Message] = []
        self._read_states: list[ReadState] = []
        self._reads = ReadTracker(self.options.max_pending_reads)
        self._reads_before_commit: list[tuple[bytes, bool, int | None]] = []
        self._stamp_seq = 0
        self._stamp_used = False
        self._heartbeat_due = False
        self._notices_due = False   # a tick passed: a commit index alone may go out
        self._dirty = False         # the leader has something to (re)consider sending
        self._transfer_target: int | None = None
        self._transfer_elapsed = 0
        self._timeout_now_sent = False
        self._joiner: Joiner | None = None
        self._leaver: Leaver | None = None
        self._catching_up = False
        self._leave_at: int | None = None   # leaving: report removed at this tick
        self._config_at_leave: Configuration | None = None
        self._was_member = False
        self._removed = False
        self._pull = ObserverPull()
        self._incoming: IncomingSnapshot | None = None
        self._config = self.log.configuration
        self._prev_hard = HardState(self.term, self.vote, self.log.committed)
        self._prev_soft: SoftState | None = None
        self._handed: Ready | None = None
        self._refresh_role()
        self._update_removed()
        self._prev_soft = self.soft_state()

    # ====================================================================================
    # Inspection
    # ====================================================================================
    @property
    def configuration(self) -> Configuration:
        return self.log.configuration

    @property
    def commit_index(self) -> int:
        return self.log.committed

    @property
    def applied_index(self) -> int:
        return self.log.applied

    @property
    def last_index(self) -> int:
        return self.log.last_index()

    @property
    def committed_in_term(self) -> bool:
        """Whether an entry of the current term has committed: only then does a new
        leader know the commit index (Raft §8; until its no-op commits it may be behind
        what its predecessor acknowledged)."""
        return self._committed_in_term()

    @property
    def removed(self) -> bool:
        return self._removed

    @property
    def transferring_to(self) -> int | None:
        return self._transfer_target

    @property
    def installing_snapshot(self) -> bool:
        """A snapshot from the leader replaced the log and awaits persisting (it comes
        in the next Ready): the application's state is about to be replaced, so taking
        a snapshot of it now is pointless (`snapshot_at` refuses)."""
        return self.log.pending_snapshot is not None

    def soft_state(self) -> SoftState:
        return SoftState(self.leader_id, self.role, self.term, self.log.configuration,
                         self._removed)

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def status(self) -> dict[str, Any]:
        """A snapshot of the node's state for logs and the admin CLI."""
        return {
            "id": self.id, "role": self.role.value, "term": self.term, "vote": self.vote,
            "leader": self.leader_id, "commit": self.log.committed,
            "applied": self.log.applied, "first_index": self.log.first_index(),
            "last_index": self.log.last_index(), "configuration": str(self.configuration),
            "progress": {p: {"match": pr.match, "next": pr.next, "state": pr.state.value,
                             "inflight": len(pr.inflight)} for p, pr in self.progress.items()},
        }

    def end_boot_lease(self) -> None:
        """Vote at once: forget that this node may have confirmed a leader just before a
        restart (it refuses votes for its first election timeout otherwise). For a
        caller that knows no leader is alive, such as a test electing a chosen node."""
        self._boot_lease = False

    # ====================================================================================
    # Time
    # ====================================================================================
    def tick(self) -> None:
        """One unit of time passed (the runtime's tick, e.g. 10 ms)."""
        self._ticks += 1
        self._stamp_seq = 0
        self._stamp_used = False
        if self._leave_at is not None and self._ticks >= self._leave_at:
            self._removed = True
        if self.role is Role.LEADER:
            self._dirty = True
            self._notices_due = True
            self._tick_leader()
            return
        if self.role is Role.OBSERVER:
            self._election_elapsed += 1     # lets a leader's lease lapse here too (we vote)
        else:
            self._tick_election()
        if self.role is Role.OBSERVER or \
                self._ticks - self._heard_leader_tick > 2 * self.options.election_timeout_max:
            self._tick_pull()

    def _random_timeout(self) -> int:
        return self._rng.randrange(self.options.election_timeout_min,
                                   self.options.election_timeout_max)

    def _reset_election_timer(self) -> None:
        self._election_elapsed = 0
        self._timeout = self._random_timeout()

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self._election_elapsed < self._timeout:
            return
        self._reset_election_timer()
        self._boot_lease = False
        self.leader_id = None       # silent for a whole timeout: its lease is over here
        if self._promotable():
            self._campaign(pre_vote=self.options.pre_vote)

    def _tick_leader(self) -> None:
        opts = self.options
        self._election_elapsed += 1
        self._heartbeat_elapsed += 1
        if opts.check_quorum and self._election_elapsed >= opts.election_timeout_min:
            self._election_elapsed = 0
            active = {self.id} | {p for p, pr in self.progress.items() if pr.recent_active}
            if not self.log.configuration.has_quorum(active):
                self._become_follower(self.term, None)
                return
            self._drop_departed(silent_too=True)
            for pr in self.progress.values():
                pr.recent_active = False
        if self._transfer_target is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= opts.election_timeout_max:
                self._transfer_target = None
        if self._heartbeat_elapsed >= opts.heartbeat_interval:
            self._heartbeat_elapsed = 0
            self._heartbeat_due = True
        retry = opts.retry
        for pr in self.progress.values():
            sent = pr.oldest_sent_tick()
            if sent is not None and self._ticks - sent >= retry:
                if pr.state is ProgressState.SNAPSHOT:
                    pr.snapshot_sent_tick = None        # resend the chunk
                else:
                    pr.become_probe(pr.rep_start)
        for read in self._reads.expire(self._ticks, opts.election_timeout_max):
            self._deliver_read(read, ReadStatus.TIMEOUT)
        self._tick_membership()

    # ====================================================================================
    # Messages in
    # ====================================================================================
    def step(self, msg: Message) -> None:
        """Process one message addressed to this node."""
        if msg.destination != self.id:
            raise RaftError(f"node {self.id} got a message for node {msg.destination}")
        self._dirty = True
        if msg.TERM_RULES and not self._apply_term_rules(msg):
            return
        handler = self._HANDLERS.get(type(msg))
        if handler is None:
            raise RaftError(f"no handler for {type(msg).__name__}")
        handler(self, msg)

    def step_many(self, msgs: Iterable[Message]) -> None:
        """Process a batch (e.g. everything read from the sockets at once). Runs of
        AppendEntries are processed in log order, as JournalKeeper's receiver keeps its
        pending requests sorted, while their responses keep the arrival order."""
        run: list[AppendEntries] = []
        for msg in msgs:
            if isinstance(msg, AppendEntries):
                run.append(msg)
                continue
            self._step_append_run(run)
            run = []
            self.step(msg)
        self._step_append_run(run)

    def _step_append_run(self, run: list[AppendEntries]) -> None:
        if len(run) < 2:
            for msg in run:
                self.step(msg)
            return
        order = sorted(range(len(run)), key=lambda i: (run[i].term, run[i].prev_log_index))
        replies: dict[int, list[Message]] = {}
        for i in order:
            now, later = len(self._send_now), len(self._send_later)
            self.step(run[i])
            replies[i] = self._send_now[now:] + self._send_later[later:]
            del self._send_now[now:], self._send_later[later:]
        for i in range(len(run)):
            self._send_later.extend(replies[i])

    def _apply_term_rules(self, msg: Message) -> bool:
        """Raft's term rules; False when the message must be dropped (already answered)."""
        if msg.term > self.term:
            if isinstance(msg, RequestVote):
                if self._in_lease() and not msg.leader_transfer:
                    return False        # a leader is alive: do not let this one disrupt
                if not msg.pre_vote:
                    self._become_follower(msg.term, None)
            elif isinstance(msg, RequestVoteResponse) and msg.pre_vote and msg.granted:
                pass                    # carries the term the pre-candidate would use
            else:
                leader = msg.source if isinstance(msg, _LEADER_MESSAGES) else None
                self._become_follower(msg.term, leader)
            return True
        if msg.term < self.term:
            self._answer_stale(msg)
            return False
        return True

    def _answer_stale(self, msg: Message) -> None:
        """Tell a sender from an older term about ours, so that it steps down."""
        if isinstance(msg, AppendEntries):
            self._send_later.append(AppendEntriesResponse(
                self.term, self.id, msg.source, False, self.log.last_index() + 1,
                msg.prev_log_index + 1, len(msg.entries), msg.ctx))
        elif isinstance(msg, InstallSnapshot):
            self._send_later.append(InstallSnapshotResponse(
                self.term, self.id, msg.source, False, 0, msg.snapshot_index))
        elif isinstance(msg, RequestVote):
            self._send_later.append(RequestVoteResponse(
                self.term, self.id, msg.source, False, msg.pre_vote))

    def _in_lease(self) -> bool:
        """Have we heard from a live leader within the shortest election timeout? Then
        (with CheckQuorum) we refuse to vote, so the leader's lease stays valid."""
        if not self.options.check_quorum:
            return False
        known = self.leader_id is not None or self._boot_lease
        return known and self._election_elapsed < self.options.election_timeout_min

    # -- elections --------------------------------------------------------------------------
    def _still_voter(self) -> bool:
        """A voter of our latest configuration; or (Raft dissertation §4.2.2) of the one
        before while the latest is not committed: a leader that removed itself may still
        be needed to elect the leader that commits C_new. (Our own vote counts only
        where we are a voter.)"""
        log = self.log
        return log.configuration.is_voter(self.id) or (
            log.configuration_index > log.committed
            and log.configuration_at(log.configuration_index - 1).is_voter(self.id))

    def _promotable(self) -> bool:
        """May we campaign?"""
        return self._still_voter() and self._leave_at is None and not self._removed \
            and self.log.pending_snapshot is None

    def _campaign(self, *, pre_vote: bool, transfer: bool = False) -> None:
        if pre_vote:
            self.role = Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self.term += 1
            self.vote = self.id
            self.role = Role.CANDIDATE
            term = self.term
        self.leader_id = None
        self._votes = {self.id: True}
        self._reset_election_timer()
        if self._tally() is not None:
            return
        last_index, last_term = self.log.last_index(), self.log.last_term()
        outbox = self._send_now if pre_vote else self._send_later
        for peer in sorted(self.log.configuration.all_voters - {self.id}):
            outbox.append(RequestVote(term, self.id, peer, last_index, last_term,
                                      pre_vote, transfer))

    def _tally(self) -> bool | None:
        granted = {n for n, ok in self._votes.items() if ok}
        rejected = {n for n, ok in self._votes.items() if not ok}
        result = self.log.configuration.vote_result(granted, rejected)
        if result is True:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False)
            else:
                self._become_leader()
        elif result is False:
            self._become_follower(self.term, None)
        return result

    def _on_request_vote(self, msg: RequestVote) -> None:
        can_vote = (self.vote == msg.source
                    or (self.vote is None and self.leader_id is None)
                    or (msg.pre_vote and msg.term > self.term))
        grant = can_vote and self.log.is_up_to_date(msg.last_log_index, msg.last_log_term)
        if grant and not msg.pre_vote:
            self.vote = msg.source
            self._reset_election_timer()
        term = msg.term if (grant and msg.pre_vote) else self.term
        self._send_later.append(RequestVoteResponse(term, self.id, msg.source, grant,
                                                    msg.pre_vote))

    def _on_vote_response(self, msg: RequestVoteResponse) -> None:
        expected = Role.PRE_CANDIDATE if msg.pre_vote else Role.CANDIDATE
        if self.role is not expected or msg.source in self._votes:
            return
        if not msg.pre_vote and msg.term != self.term:
            return
        self._votes[msg.source] = msg.granted
        self._tally()

    def _on_timeout_now(self, msg: TimeoutNow) -> None:
        if self.role is not Role.LEADER and self._promotable():
            self._campaign(pre_vote=False, transfer=True)

    # -- role changes -----------------------------------------------------------------------
    def _become_follower(self, term: int, leader: int | None) -> None:
        was_leader = self.role is Role.LEADER
        if term > self.term:
            self.term = term
            self.vote = None
        self.leader_id = leader
        self.role = Role.OBSERVER if self.role is Role.OBSERVER else Role.FOLLOWER
        self._votes = {}
        self._reset_election_timer()
        if was_leader:
            self.progress = {}
            self._transfer_target = None
            self._joiner = self._leaver = None
            for read in self._reads.drain():
                self._deliver_read(read, ReadStatus.NOT_LEADER)
        for ctx, _, requester in self._reads_before_commit:
            self._deliver_read(PendingRead(ctx, 0, 0, 0, requester), ReadStatus.NOT_LEADER)
        self._reads_before_commit = []
        self._refresh_role()

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id
        self._votes = {}
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._transfer_target = None
        self.progress = {}
        self._sync_progress()
        self._append(EntryType.NOOP, (b"",))

    def _refresh_role(self) -> None:
        """Observers and voters switch when their configuration says so. (A node that
        believes itself a voter on the strength of a stale or truncated configuration
        is not stuck: without a leader it pulls committed entries and finds out.)"""
        config = self.log.configuration
        if self.id in config.members:
            self._was_member = True
        if self.role is Role.LEADER:
            return
        voter = self._still_voter()
        if self.role is Role.OBSERVER:
            if voter:
                self.role = Role.FOLLOWER
                self._reset_election_timer()
        elif not voter and (self.id in config.observers or self.options.observer):
            self.role = Role.OBSERVER
        if voter:
            self._catching_up = False

    # -- replication: follower side ---------------------------------------------------------------
    def _hear_from_leader(self, leader: int) -> bool:
        """A leader of our term spoke. False if that cannot be (we lead this term): the
        message is dropped, and a checker will see two leaders in one term."""
        if self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            self._become_follower(self.term, leader)
        elif self.role is Role.LEADER:
            return False
        self.leader_id = leader
        self._election_elapsed = 0
        self._heard_leader_tick = self._ticks
        if self._leave_at is not None:     # JRaft: a leader still talks to us: wait on
            self._start_leaving()
        return True

    def _on_append_entries(self, msg: AppendEntries) -> None:
        _check_run(msg.entries, msg.prev_log_index + 1, "entries")
        if not self._hear_from_leader(msg.source):
            return
        self._send_later.append(self._append_response(msg))
        self._after_log_change()

    def _append_response(self, msg: AppendEntries) -> AppendEntriesResponse:
        prev, prev_term, entries = msg.prev_log_index, msg.prev_log_term, msg.entries
        committed = self.log.committed
        if prev < committed:
            # The head of the request is committed here already, hence identical: skip it.
            skip = min(len(entries), committed - prev)
            if skip:
                prev_term = entries[skip - 1].term
                prev, entries = prev + skip, entries[skip:]
            if prev < committed:     # nothing beyond our commit index: nothing to check
                return self._append_reply(msg, True, msg.prev_log_index + len(msg.entries) + 1)
        last_new = self.log.maybe_append(prev, prev_term, msg.commit, entries)
        if last_new is None:
            return self._append_reply(msg, False, self.log.rejection_hint(prev))
        return self._append_reply(msg, True, last_new + 1)

    def _append_reply(self, msg: AppendEntries, success: bool, next_index: int) -> AppendEntriesResponse:
        return AppendEntriesResponse(self.term, self.id, msg.source, success, next_index,
                                     msg.prev_log_index + 1, len(msg.entries), msg.ctx)

    def _on_install_snapshot(self, msg: InstallSnapshot) -> None:
        if not self._hear_from_leader(msg.source):
            return
        if msg.snapshot_index <= self.log.committed:
            self._incoming = None
            self._send_later.append(InstallSnapshotResponse(
                self.term, self.id, msg.source, True, len(msg.data) + msg.offset,
                msg.snapshot_index, done=True))
            return
        inc = self._incoming
        if inc is None or (inc.leader, inc.term, inc.index) != (msg.source, msg.term,
                                                                msg.snapshot_index):
            inc = self._incoming = IncomingSnapshot(msg.source, msg.term, msg.snapshot_index,
                                                    msg.snapshot_term)
        if msg.offset != len(inc.data):
            self._send_later.append(InstallSnapshotResponse(
                self.term, self.id, msg.source, False, len(inc.data), msg.snapshot_index))
            return
        inc.data += msg.data
        if not msg.done:
            self._send_later.append(InstallSnapshotResponse(
                self.term, self.id, msg.source, True, len(inc.data), msg.snapshot_index))
            return
        self._incoming = None
        self._restore(Snapshot(msg.snapshot_index, msg.snapshot_term, msg.configuration,
                               bytes(inc.data)))
        self.log.commit_to(min(msg.commit, self.log.last_index()))
        self._send_later.append(InstallSnapshotResponse(
            self.term, self.id, msg.source, True, len(inc.data), msg.snapshot_index, done=True))

    def _restore(self, snapshot: Snapshot) -> None:
        if snapshot.index <= self.log.committed:
            return
        if self.log.match_term(snapshot.index, snapshot.term):
            self.log.commit_to(snapshot.index)      # we hold those entries: fast-forward
            return
        self.log.restore(snapshot)
        self._after_log_change()

    # -- replication: leader side ----------------------------------------------------------------
    def _stamp(self) -> int:
        self._stamp_used = True
        return (self._ticks << STAMP_BITS) | self._stamp_seq

    def _sync_progress(self) -> None:
        """Track every voter of the configuration; peers that left stay tracked until
        they hold (and know committed) the configuration that removed them."""
        config = self.log.configuration
        next_index = self.log.last_index() + 1
        for peer in config.all_voters - {self.id}:
            if peer not in self.progress:
                joiner = self._joiner
                pr = joiner.progress if joiner and joiner.node_id == peer else \
                    Progress(next_index, self.options.max_inflight)
                if joiner and joiner.node_id == peer:
                    self._joiner = None
                    pr.become_probe(pr.next)
                self.progress[peer] = pr
        if self._transfer_target is not None and not config.is_voter(self._transfer_target):
            self._transfer_target = None

    def _drop_departed(self, silent_too: bool = False) -> None:
        """Stop replicating to peers that left the configuration once they hold the entry
        that removed them and know it committed (or, with `silent_too`, once they have
        not answered for a quorum-check period)."""
        index = self.log.configuration_index
        if index > self.log.committed:
            return
        config = self.log.configuration
        for peer in [p for p in self.progress if not config.is_voter(p)]:
            pr = self.progress[peer]
            if (pr.match >= index and pr.sent_commit >= index) or \
                    (silent_too and not pr.recent_active):
                del self.progress[peer]

    def _append(self, kind: EntryType, datas: Iterable[bytes]) -> int:
        """The leader appends new entries of its term; returns the last index."""
        first, term = self.log.last_index() + 1, self.term
        entries = [Entry(term, index, kind, data) for index, data in zip(count(first), datas)]
        if not entries:
            return first - 1
        index = entries[-1].index
        self.log.append(entries)
        self._dirty = True
        if kind is EntryType.CONFIGURATION:
            self._after_log_change()
        self._maybe_commit()
        return index

    def _flush(self) -> None:
        """Turn the leader's replication state into messages (lazily, so that many
        proposals between two Readys share AppendEntries)."""
        if self.role is not Role.LEADER or not (self._dirty or self._heartbeat_due):
            return
        self._dirty = False
        heartbeat = self._heartbeat_due
        self._heartbeat_due = False
        # A commit index that nothing else carries goes out at most once per tick: the
        # next entries carry it anyway, and a notice per commit costs every follower a
        # message, a turn and an answer per write when writes come one at a time.
        notices = self._notices_due
        self._notices_due = False
        commit = self.log.committed
        for peer, pr in self.progress.items():
            if not self._send_append(peer, pr) and (
                    heartbeat or (notices and pr.commit_lags(commit))):
                self._send_heartbeat(peer, pr)
        joiner = self._joiner
        if joiner is not None and joiner.phase is JoinPhase.SNAPSHOT:
            self._send_snapshot_chunk(joiner.node_id, joiner.progress)

    def _send_append(self, peer: int, pr: Progress) -> bool:
        """Send what the window allows; True when at least one message went out."""
        if pr.paused_until > self._ticks:
            return False            # it refused what it should take: see _hold_off
        if pr.state is ProgressState.SNAPSHOT:
            return self._send_snapshot_chunk(peer, pr)
        sent = False
        log = self.log
        last = log.last_index()
        opts = self.options
        while pr.can_send():
            next_index = pr.next
            prev_term = log.term(next_index - 1)
            if prev_term is None or next_index < log.first_index():
                pr.become_snapshot(self._catch_up_snapshot())
                return self._send_snapshot_chunk(peer, pr) or sent
            if next_index > last:
                if pr.state is ProgressState.PROBE:     # empty probe: find the match point
                    self._emit_append(peer, pr, next_index - 1, prev_term, [])
                    pr.sent(next_index, 0, self._ticks)
                    sent = True
                break
            entries = log.slice(next_index, min(last + 1, next_index + opts.max_entries_per_message),
                                opts.max_bytes_per_message)
            self._emit_append(peer, pr, next_index - 1, prev_term, entries)
            pr.sent(next_index, len(entries), self._ticks)
            sent = True
        return sent

    def _emit_append(self, peer: int, pr: Progress, prev: int, prev_term: int,
                     entries: list[Entry]) -> None:
        # The commit index goes no further than the entries this request vouches for
        # (etcd: min(match, committed) in heartbeats). Raft followers cap it anyway; a
        # JRaft follower trusts it when its log is empty (lastLogIndex 0) and would
        # raise its commit past its log, then refuse every snapshot.
        commit = min(self.log.committed, prev + len(entries))
        pr.sent_commit = max(pr.sent_commit, commit)
        self._send_now.append(AppendEntries(self.term, self.id, peer, prev, prev_term,
                                            entries, commit, self._stamp()))

    def _send_heartbeat(self, peer: int, pr: Progress) -> None:
        """An empty AppendEntries at the follower's match point: it cannot fail on a
        follower that kept what it acknowledged, and it carries the commit index up to
        that point, the lease stamp and the ReadIndex round."""
        prev = pr.match
        prev_term = self.log.term(prev)
        if prev_term is None:
            prev, prev_term = 0, 0
        self._emit_append(peer, pr, prev, prev_term, [])

    def _catch_up_snapshot(self) -> Snapshot:
        """What a member behind our log's start installs (Storage.catch_up_snapshot: not
        the latest, so that it gets the entries the application still needs below it)."""
        snapshot = self.log.storage.catch_up_snapshot()
        if snapshot is None:
            raise StorageStateError(f"the log starts at {self.log.first_index()} but storage "
                                    "has no snapshot to send instead")
        return snapshot

    def _send_snapshot_chunk(self, peer: int, pr: Progress) -> bool:
        if pr.snapshot_sent_tick is not None or pr.snapshot is None:
            return False
        snap = pr.snapshot
        offset = min(pr.snapshot_offset, len(snap.data))
        chunk = snap.data[offset:offset + self.options.snapshot_chunk_bytes]
        done = offset + len(chunk) >= len(snap.data)
        self._send_now.append(InstallSnapshot(self.term, self.id, peer, snap.index, snap.term,
                                              snap.configuration, offset, chunk, done,
                                              min(self.log.committed, snap.index)))
        pr.snapshot_sent_tick = self._ticks
        return True

    def _on_append_response(self, msg: AppendEntriesResponse) -> None:
        if self.role is not Role.LEADER:
            return
        pr = self.progress.get(msg.source)
        if pr is None:
            return
        pr.recent_active = True
        if msg.ctx > pr.ack_ctx:
            pr.ack_ctx = msg.ctx
        if msg.success:
            if msg.entry_count:
                pr.refusals = 0         # entries taken (a heartbeat proves nothing)
            last = msg.log_index + msg.entry_count - 1
            if msg.entry_count == 0:
                advanced = last > pr.match
                if advanced:
                    pr.match = last
                if pr.state is ProgressState.PROBE and pr.match >= pr.next - 1:
                    pr.become_replicate()
            else:
                advanced = pr.on_success(msg.log_index, last)
            if advanced:
                self._maybe_commit()
            if msg.source not in self.log.configuration.all_voters:
                self._drop_departed()       # best effort: it was told, unless that was lost
            self._maybe_send_timeout_now(msg.source, pr)
        elif pr.is_refusal_at_start(msg.log_index) and \
                not pr.back_off(msg.log_index, msg.next_index):
            self._hold_off(msg.source, pr, f"refused entries from {msg.log_index} again "
                           f"(it asks for {msg.next_index}; we know it holds up to {pr.match})")
        self._release_reads()

    def _hold_off(self, peer: int, pr: Progress, what: str) -> None:
        """A follower refuses what it should take (a JRaft node that raised its commit
        past its log, a disk that lost acknowledged entries): back off instead of
        resending at once, and say so (the first time, then at every doubling)."""
        pause = pr.hold_off(self._ticks, self.options.retry)
        if pr.refusals & (pr.refusals - 1) == 0:
            log.warning("node %d: follower %d %s; refusal %d in a row, resending in %d "
                        "ticks", self.id, peer, what, pr.refusals, pause)

    def _on_install_snapshot_response(self, msg: InstallSnapshotResponse) -> None:
        if self.role is not Role.LEADER:
            return
        joiner = self._joiner
        if joiner is not None and msg.source == joiner.node_id:
            pr = joiner.progress
            joiner.sent_tick = None
        else:
            pr = self.progress.get(msg.source)
            if pr is None:
                return
            pr.recent_active = True
        snap = pr.snapshot
        if pr.state is not ProgressState.SNAPSHOT or snap is None or \
                msg.snapshot_index != snap.index:
            return
        pr.snapshot_sent_tick = None
        if not msg.success:
            if msg.next_offset != pr.snapshot_offset and not pr.refusals:
                pr.refusals = 1         # it asks to resume elsewhere: once, at once
            else:
                self._hold_off(msg.source, pr, f"refused snapshot {snap.index} at offset "
                               f"{pr.snapshot_offset} (it asks for {msg.next_offset})")
        if msg.done and msg.success:
            pr.refusals = 0
            pr.match = max(pr.match, snap.index)
            pr.become_probe(snap.index + 1)
            if joiner is not None and pr is joiner.progress:
                joiner.phase = JoinPhase.SYNCING
                self._sync_joiner(joiner)
            else:
                self._maybe_commit()
        else:
            pr.snapshot_offset = max(0, min(msg.next_offset, len(snap.data)))

    def _maybe_commit(self) -> None:
        if self.role is not Role.LEADER:
            return
        log = self.log
        progress = self.progress
        me, persisted = self.id, log.persisted

        def match(node: int) -> int:
            if node == me:
                return persisted
            pr = progress.get(node)
            return pr.match if pr is not None else 0

        index = min(log.configuration.committed_index(match), log.last_index())
        if index > log.committed and log.term(index) == self.term:
            log.commit_to(index)
            self._on_commit()

    def _on_commit(self) -> None:
        log = self.log
        if self._reads_before_commit and self._committed_in_term():
            waiting, self._reads_before_commit = self._reads_before_commit, []
            for ctx, lease, requester in waiting:
                self._leader_read(ctx, lease, requester)
        config = log.configuration
        if log.configuration_index <= log.committed:
            if config.is_joint:
                self._append(EntryType.CONFIGURATION, (config.leave_joint().encode(),))
            elif not config.is_voter(self.id):
                self._become_follower(self.term, None)     # we managed our own removal
                self._update_removed()
                return
        self._drop_departed()

    def _committed_in_term(self) -> bool:
        return self.log.term(self.log.committed) == self.term

    # -- after the log changed -------------------------------------------------------------------
    def _after_log_change(self) -> None:
        """Configuration follows the log: re-read it after appends and truncations."""
        config = self.log.configuration
        if config is self._config:          # the commit index may have reached it
            self._refresh_role()
            self._update_removed()
            return
        self._config = config
        if self.role is Role.LEADER:
            self._sync_progress()
        elif self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE) and not self._promotable():
            self._become_follower(self.term, None)
        self._refresh_role()
        self._update_removed()

    def _update_removed(self) -> None:
        """Leaving: we were a member and a committed configuration no longer lists us.
        As in JRaft, a leaving node reports itself removed only after two election
        timeouts without a leader's message, so that a server added back meanwhile
        (or still being told its removal committed) does not stop."""
        log = self.log
        config = log.configuration
        if self.id in config.members:
            if self._leave_at is not None and config is not self._config_at_leave:
                self._leave_at = None       # added back since we were asked to leave
                self._removed = False
        elif self._was_member and log.configuration_index <= log.committed \
                and not self._catching_up and self._leave_at is None:
            self._start_leaving()

    def _start_leaving(self) -> None:
        if self._leave_at is None:
            self._config_at_leave = self.log.configuration
        self._leave_at = self._ticks + 2 * self.options.election_timeout_max

    # ====================================================================================
    # Client requests (leader)
    # ====================================================================================
    def propose(self, data: bytes) -> int:
        """Append an APPLICATION entry; returns its index. It took effect iff the entry
        committed at that index carries the term this node had when proposing."""
        return self.propose_many((data,))

    def propose_many(self, datas: Iterable[bytes]) -> int:
        """Append several entries at once (one AppendEntries round for all); returns
        the index of the last."""
        self._check_accepting()
        datas = datas if isinstance(datas, (list, tuple)) else list(datas)
        if self.log.last_index() + len(datas) - self.log.committed > \
                self.options.max_uncommitted_entries:
            raise ProposalDropped(f"more than {self.options.max_uncommitted_entries} entries "
                                  "await commit (RaftOptions.max_uncommitted_entries): retry "
                                  "when commits catch up")
        return self._append(EntryType.APPLICATION, datas)

    def _check_accepting(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.id, self.leader_id)
        if self._transfer_target is not None:
            raise ProposalDropped(f"leadership is moving to node {self._transfer_target}: "
                                  "retry at the new leader")

    # -- reads ------------------------------------------------------------------------------------
    def read_index(self, ctx: bytes, *, lease: bool = False) -> None:
        """Start a linearizable read; a `ReadState` with this `ctx` comes in a later Ready.
        With `lease`, the leader answers at once while JournalKeeper's lease holds.
        Followers forward to the leader. Raises NotLeader when no leader is known."""
        if self.role is Role.LEADER:
            self._leader_read(ctx, lease, None)
        elif self.leader_id is not None and self.role is not Role.OBSERVER:
            self._send_now.append(ReadIndexRequest(self.term, self.id, self.leader_id, ctx, lease))
        else:
            raise NotLeader(self.id, self.leader_id)

    def lease_valid(self) -> bool:
        """JournalKeeper's leader validity check: a quorum's latest responses were sent
        within the lease window (and the leader committed an entry of its term)."""
        if self.role is not Role.LEADER or not self._committed_in_term():
            return False
        now, window = self._ticks, self.options.lease
        fresh = {self.id} | {p for p, pr in self.progress.items()
                             if pr.ack_ctx and now - stamp_tick(pr.ack_ctx) < window}
        return self.log.configuration.has_quorum(fresh)

    def _leader_read(self, ctx: bytes, lease: bool, requester: int | None) -> None:
        if not self._committed_in_term():
            self._reads_before_commit.append((ctx, lease, requester))
            return
        index = self.log.committed
        read = PendingRead(ctx, index, 0, self._ticks, requester)
        if self.log.configuration.all_voters <= {self.id} or (lease and self.lease_valid()):
            self._deliver_read(read, ReadStatus.OK)
            return
        if self._stamp_used and self._stamp_seq < _MAX_STAMP_SEQ:
            self._stamp_seq += 1
            self._stamp_used = False
        read.stamp = (self._ticks << STAMP_BITS) | self._stamp_seq
        if not self._reads.add(read):
            self._deliver_read(read, ReadStatus.TIMEOUT)
            return
        self._heartbeat_due = True

    def _release_reads(self) -> None:
        if not self._reads:
            return
        config, progress, me = self.log.configuration, self.progress, self.id

        def confirmed(stamp: int) -> bool:
            return config.has_quorum({me} | {p for p, pr in progress.items() if pr.ack_ctx >= stamp})

        for read in self._reads.release(confirmed):
            self._deliver_read(read, ReadStatus.OK)

    def _deliver_read(self, read: PendingRead, status: ReadStatus) -> None:
        if read.requester is None:
            self._read_states.append(ReadState(read.ctx, read.index, status))
        else:
            self._send_now.append(ReadIndexResponse(self.term, self.id, read.requester, read.ctx,
                                                    read.index, status is ReadStatus.OK))

    def _on_read_index_request(self, msg: ReadIndexRequest) -> None:
        if self.role is Role.LEADER:
            self._leader_read(msg.ctx, msg.lease, msg.source)
        else:
            self._send_now.append(ReadIndexResponse(self.term, self.id, msg.source, msg.ctx, 0, False))

    def _on_read_index_response(self, msg: ReadIndexResponse) -> None:
        status = ReadStatus.OK if msg.success else ReadStatus.NOT_LEADER
        self._read_states.append(ReadState(msg.ctx, msg.index, status))

    def query_snapshot(self, index: int, query: Any, snapshots: SparseSnapshots,
                       new_machine: Callable[[], StateMachine]) -> SnapshotQueryResult:
        """Two-step read, step two (any node): the answer to `query` from the state at
        exactly `index` (see reads.query_snapshot for INDEX_OVERFLOW / UNDERFLOW)."""
        return query_snapshot(index, query, applied=self.log.applied,
                              first_index=self.log.first_index(), snapshots=snapshots,
                              read_entries=self.log.slice, new_machine=new_machine)

    def snapshot_at(self, index: int, data: bytes) -> Snapshot:
        """Describe the application's snapshot taken after applying up to `index`, with
        the term and configuration there; the runtime stores it, then may compact."""
        if index > self.log.applied:
            raise RaftError(f"cannot snapshot at {index}: only {self.log.applied} is applied")
        if self.installing_snapshot:
            raise RaftError(f"cannot snapshot at {index}: a snapshot from the leader is being "
                            "installed (check installing_snapshot first)")
        term = self.log.term(index)
        if term is None:
            raise RaftError(f"cannot snapshot at {index}: the entry is compacted")
        return Snapshot(index, term, self.log.configuration_at(index), data)

    # -- leader transfer ------------------------------------------------------------------------
    def transfer_leader(self, target: int) -> None:
        """Hand leadership to `target` (JournalKeeper's leader transfer): new proposals
        are refused, the target is brought up to date, then told to campaign at once.
        Gives up after election_timeout_max ticks; the caller retries if another node won."""
        if self.role is not Role.LEADER:
            raise NotLeader(self.id, self.leader_id)
        if target == self.id:
            return
        if target not in self.progress or not self.log.configuration.is_voter(target):
            raise MembershipChangeError(f"node {target} is not a voter: cannot lead")
        self._dirty = True
        self._transfer_target = target
        self._transfer_elapsed = 0
        self._timeout_now_sent = False
        self._maybe_send_timeout_now(target, self.progress[target])

    def _maybe_send_timeout_now(self, peer: int, pr: Progress) -> None:
        if self._transfer_target == peer and not self._timeout_now_sent and \
                pr.match == self.log.last_index():
            self._timeout_now_sent = True
            self._send_now.append(TimeoutNow(self.term, self.id, peer))

    # ====================================================================================
    # Membership
    # ====================================================================================
    def _check_can_change(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.id, self.leader_id)
        if not self._committed_in_term():
            raise MembershipChangeError("the new leader has not committed an entry of its "
                                        "term yet: retry in a moment")
        if self.log.configuration_index > self.log.committed or self.configuration.is_joint:
            raise MembershipChangeError("a configuration change is still in progress: retry "
                                        "once it has committed")
        if self._joiner is not None or self._leaver is not None:
            raise MembershipChangeError("a server is being added or removed: retry after")
        if self._transfer_target is not None:
            raise MembershipChangeError("a leader transfer is in progress")

    def _append_configuration(self, config: Configuration) -> int:
        return self._append(EntryType.CONFIGURATION, (config.encode(),))

    def change_voters(self, voters: Collection[int],
                      addresses: Mapping[int, str] | None = None) -> int:
        """JournalKeeper's updateVoters by joint consensus: appends C_old,new now (in
        force at once) and C_new automatically once C_old,new commits. Returns the index
        of C_old,new."""
        self._check_can_change()
        new = frozenset(voters)
        if not new or any(v <= 0 for v in new):
            raise MembershipChangeError("the new voter set must hold positive node ids")
        if new == self.configuration.voters:
            raise MembershipChangeError(f"the voters already are {sorted(new)}")
        return self._append_configuration(self.configuration.enter_joint(new, addresses))

    def update_observers(self, add: Collection[int] = (), remove: Collection[int] = (),
                         addresses: Mapping[int, str] | None = None) -> int:
        """JournalKeeper's updateObservers. Observers count in no quorum, so one
        configuration entry suffices."""
        self._check_can_change()
        try:
            config = self.configuration.with_observers(add, remove, addresses)
        except ValueError as exc:
            raise MembershipChangeError(str(exc)) from None
        return self._append_configuration(config)

    def add_server(self, node_id: int, address: str = "") -> None:
        """JRaft's AddServer: invite, sync, then append C + {node_id}."""
        self._check_can_change()
        if node_id <= 0 or node_id in self.configuration.members:
            raise MembershipChangeError(f"node {node_id} is already a member (or not a valid id)")
        pr = Progress(1, self.options.max_inflight)
        self._joiner = Joiner(node_id, address, pr)
        self._invite(self._joiner)

    def remove_server(self, node_id: int) -> None:
        """JRaft's RemoveServer: LeaveClusterRequest, then append C - {node_id}."""
        self._check_can_change()
        if node_id == self.id:
            raise MembershipChangeError("the leader cannot remove itself: transfer "
                                        "leadership first, or use change_voters")
        if node_id not in self.configuration.voters:
            raise MembershipChangeError(f"node {node_id} is not a voter")
        self._leaver = Leaver(node_id)
        self._ask_to_leave(self._leaver)

    def _invite(self, joiner: Joiner) -> None:
        config = self.configuration.with_observers(addresses={joiner.node_id: joiner.address}) \
            if joiner.address else self.configuration
        self._send_now.append(JoinClusterRequest(self.term, self.id, joiner.node_id, config,
                                                 self.log.committed, self.log.last_index()))
        joiner.sent_tick = self._ticks

    def _ask_to_leave(self, leaver: Leaver) -> None:
        self._send_now.append(LeaveClusterRequest(self.term, self.id, leaver.node_id,
                                                  self.log.committed, self.log.last_index()))
        leaver.sent_tick = self._ticks

    def _sync_joiner(self, joiner: Joiner) -> None:
        """Send the next SyncLogRequest, or add the joiner once it is close enough."""
        log, opts = self.log, self.options
        start = joiner.progress.next
        if log.committed - (start - 1) < opts.log_sync_stop_gap:
            address = {joiner.node_id: joiner.address} if joiner.address else None
            self._append_configuration(self.configuration.with_voters(
                self.configuration.voters | {joiner.node_id}, address))
            return
        if start < log.first_index():
            joiner.phase = JoinPhase.SNAPSHOT
            joiner.progress.become_snapshot(self._catch_up_snapshot())
            joiner.sent_tick = self._ticks
            self._send_snapshot_chunk(joiner.node_id, joiner.progress)
            return
        hi = min(log.committed, start + opts.log_sync_batch - 1)
        entries = log.slice(start, hi + 1, opts.max_bytes_per_message)
        self._send_now.append(SyncLogRequest(self.term, self.id, joiner.node_id, start,
                                             entries, log.committed))
        joiner.sent_tick = self._ticks

    def _tick_membership(self) -> None:
        retry, limit = self.options.retry, self.options.membership_retries
        joiner = self._joiner
        if joiner is not None:
            sent = joiner.progress.snapshot_sent_tick if joiner.phase is JoinPhase.SNAPSHOT \
                else joiner.sent_tick
            if sent is not None and self._ticks - sent >= retry:
                joiner.retries += 1
                if joiner.retries > limit:
                    self._joiner = None         # the new server does not answer: give up
                elif joiner.phase is JoinPhase.INVITING:
                    self._invite(joiner)
                elif joiner.phase is JoinPhase.SYNCING:
                    self._sync_joiner(joiner)
                else:
                    joiner.progress.snapshot_sent_tick = None
        leaver = self._leaver
        if leaver is not None and leaver.sent_tick is not None and \
                self._ticks - leaver.sent_tick >= retry:
            leaver.retries += 1
            if leaver.retries > limit:
                self._finish_leave(leaver)      # JRaft removes a silent server anyway
            else:
                self._ask_to_leave(leaver)

    def _finish_leave(self, leaver: Leaver) -> None:
        self._leaver = None
        self._append_configuration(self.configuration.with_voters(
            self.configuration.voters - {leaver.node_id}))

    def _on_join_cluster_response(self, msg: JoinClusterResponse) -> None:
        joiner = self._joiner
        if self.role is not Role.LEADER or joiner is None or msg.source != joiner.node_id \
                or joiner.phase is not JoinPhase.INVITING:
            return
        if not msg.accepted:
            self._joiner = None
            return
        joiner.phase = JoinPhase.SYNCING
        joiner.retries = 0
        self._sync_joiner(joiner)

    def _on_sync_log_response(self, msg: SyncLogResponse) -> None:
        joiner = self._joiner
        if self.role is not Role.LEADER or joiner is None or msg.source != joiner.node_id \
                or joiner.phase is not JoinPhase.SYNCING:
            return
        joiner.retries = 0
        pr = joiner.progress
        pr.next = max(1, msg.next_index)
        if msg.accepted:
            pr.match = max(pr.match, msg.next_index - 1)
        self._sync_joiner(joiner)

    def _on_leave_cluster_response(self, msg: LeaveClusterResponse) -> None:
        leaver = self._leaver
        if self.role is not Role.LEADER or leaver is None or msg.source != leaver.node_id:
            return
        if msg.accepted:
            self._finish_leave(leaver)
        else:
            self._leaver = None

    def _on_join_cluster(self, msg: JoinClusterRequest) -> None:
        committed = self.log.configuration_at(self.log.committed)    # re-invites welcome
        ok = not committed.is_voter(self.id) and \
            (not self._catching_up or self.leader_id in (None, msg.source))
        if ok:
            self._hear_from_leader(msg.source)
            self._catching_up = True
            if self.log.configuration_index == 0:
                self.log.base_configuration = msg.configuration
                self._after_log_change()
        self._send_later.append(JoinClusterResponse(self.term, self.id, msg.source, ok,
                                                    self.log.last_index() + 1))

    def _on_sync_log(self, msg: SyncLogRequest) -> None:
        _check_run(msg.entries, msg.start_index, "entries")
        log = self.log
        if not self._catching_up or msg.start_index > log.last_index() + 1 or \
                msg.start_index < log.first_index():
            self._send_later.append(SyncLogResponse(self.term, self.id, msg.source, False,
                                                    log.last_index() + 1))
            return
        self._hear_from_leader(msg.source)
        entries = msg.entries[max(0, log.committed + 1 - msg.start_index):]
        conflict = log.find_conflict(entries)
        if conflict:        # committed entries: a conflict can only be an uncommitted tail
            log.append(entries[conflict - entries[0].index:])
        end = msg.start_index + len(msg.entries) - 1
        log.commit_to(min(msg.commit, end))
        self._after_log_change()
        self._send_later.append(SyncLogResponse(self.term, self.id, msg.source, True, end + 1))

    def _on_leave_cluster(self, msg: LeaveClusterRequest) -> None:
        changing = self.log.configuration_index > self.log.committed
        if not changing and self._hear_from_leader(msg.source):
            self._start_leaving()
        self._send_later.append(LeaveClusterResponse(self.term, self.id, msg.source, not changing))

    # ====================================================================================
    # Observers
    # ====================================================================================
    def _pull_parents(self) -> list[int]:
        parents = self.options.observer_parents or tuple(self.log.configuration.members)
        return sorted(set(parents) - {self.id})

    def _tick_pull(self) -> None:
        """Observers pull committed entries (JournalKeeper); so does any node that has
        not heard from a leader for two election timeouts, so that one stranded on a
        stale configuration (no leader replicates to it) still catches up."""
        pull = self._pull
        if pull.sent_tick is not None:
            if self._ticks - pull.sent_tick < self.options.retry:
                return
            pull.sent_tick = None       # unanswered: try another parent
            pull.parent = None
            pull.fetching_snapshot = False
        if self._ticks >= pull.next_pull_tick:
            self._send_pull()

    def _send_pull(self) -> None:
        pull = self._pull
        parents = self._pull_parents()
        if not parents:
            return
        if pull.parent not in parents:      # JournalKeeper: a random parent per round
            pull.parent = self._rng.choice(parents)
        if pull.fetching_snapshot:
            msg: Message = PullSnapshot(self.term, self.id, pull.parent, pull.snapshot_index,
                                        len(pull.snapshot_data))
        else:
            opts = self.options
            msg = PullEntries(self.term, self.id, pull.parent, self.log.committed + 1,
                              opts.observer_pull_max_entries, opts.max_bytes_per_message)
        self._send_now.append(msg)
        pull.sent_tick = self._ticks

    def _on_pull_entries(self, msg: PullEntries) -> None:
        log = self.log
        commit, first = log.committed, log.first_index()
        entries: list[Entry] = []
        if msg.index < first:
            status = PullStatus.INDEX_UNDERFLOW
        elif msg.index > commit:
            status = PullStatus.INDEX_OVERFLOW
        else:
            status = PullStatus.SUCCESS
            hi = min(commit, msg.index + max(1, msg.max_entries) - 1)
            entries = log.slice(msg.index, hi + 1, msg.max_bytes)
        self._send_now.append(PullEntriesResponse(self.term, self.id, msg.source, status,
                                                  msg.index, entries, first, commit))

    def _on_pull_entries_response(self, msg: PullEntriesResponse) -> None:
        pull = self._pull
        if self.role is Role.LEADER or msg.source != pull.parent or \
                msg.index != self.log.committed + 1:
            return
        _check_run(msg.entries, msg.index, "entries")
        pull.sent_tick = None
        interval = self.options.observer_pull_interval
        if msg.status is PullStatus.SUCCESS and msg.entries:
            entries = msg.entries
            conflict = self.log.find_conflict(entries)
            if conflict:
                self.log.append(entries[conflict - entries[0].index:])
            self.log.commit_to(entries[-1].index)
            self._after_log_change()
            full = len(entries) >= self.options.observer_pull_max_entries
            pull.next_pull_tick = self._ticks if full else self._ticks + interval
            if full and self.role is not Role.LEADER:
                self._send_pull()
        elif msg.status is PullStatus.INDEX_UNDERFLOW:
            pull.fetching_snapshot = True
            pull.snapshot_index = 0
            pull.snapshot_data = bytearray()
            self._send_pull()
        else:       # caught up with this parent: next round, pick one at random again
            pull.next_pull_tick = self._ticks + interval
            pull.parent = None

    def _on_pull_snapshot(self, msg: PullSnapshot) -> None:
        snap = self.log.storage.catch_up_snapshot()
        if snap is None:
            self._send_now.append(PullSnapshotResponse(self.term, self.id, msg.source, 0, 0,
                                                       EMPTY, 0, b"", True))
            return
        offset = msg.offset if msg.snapshot_index == snap.index else 0
        chunk = snap.data[offset:offset + self.options.snapshot_chunk_bytes]
        self._send_now.append(PullSnapshotResponse(
            self.term, self.id, msg.source, snap.index, snap.term, snap.configuration, offset,
            chunk, offset + len(chunk) >= len(snap.data)))

    def _on_pull_snapshot_response(self, msg: PullSnapshotResponse) -> None:
        pull = self._pull
        if self.role is Role.LEADER or not pull.fetching_snapshot or msg.source != pull.parent:
            return
        pull.sent_tick = None
        if msg.snapshot_index == 0:         # the parent has no snapshot after all
            pull.fetching_snapshot = False
            pull.next_pull_tick = self._ticks + self.options.observer_pull_interval
            return
        if msg.snapshot_index != pull.snapshot_index or msg.offset == 0:
            pull.snapshot_index = msg.snapshot_index
            pull.snapshot_data = bytearray()
        if msg.offset != len(pull.snapshot_data):
            self._send_pull()
            return
        pull.snapshot_data += msg.data
        if not msg.done:
            self._send_pull()
            return
        pull.fetching_snapshot = False
        self._restore(Snapshot(msg.snapshot_index, msg.snapshot_term, msg.configuration,
                               bytes(pull.snapshot_data)))
        pull.snapshot_data = bytearray()
        self._send_pull()

    # ====================================================================================
    # Ready / advance
    # ====================================================================================
    def has_ready(self) -> bool:
        """Is there anything to persist, send, apply or report?"""
        self._flush()
        log = self.log
        return bool(self._send_now or self._send_later or self._read_states or log.unstable
                    or log.pending_snapshot is not None or log.has_next_committed()
                    or self._hard_changed() or self._soft_changed())

    def _hard_changed(self) -> bool:
        prev = self._prev_hard
        return prev.commit != self.log.committed or prev.term != self.term or \
            prev.vote != self.vote

    def _soft_changed(self) -> bool:
        prev = self._prev_soft
        return prev is None or prev.leader_id != self.leader_id or prev.role is not self.role \
            or prev.term != self.term or prev.removed != self._removed \
            or prev.configuration is not self.log.configuration

    def ready(self) -> Ready:
        """Everything to do now (see ready.py); call advance(ready) when done."""
        if self._handed is not None:
            raise RaftError("call advance() with the previous Ready before asking for another")
        self._flush()
        log = self.log
        rd = Ready()
        if self._soft_changed():
            rd.soft_state = self.soft_state()
        if self._hard_changed():
            rd.hard_state = hard = self.hard_state()
            rd.term_or_vote_changed = (hard.term, hard.vote) != (self._prev_hard.term,
                                                                 self._prev_hard.vote)
        rd.snapshot = log.pending_snapshot
        rd.entries = list(log.unstable)
        rd.committed_entries = log.next_committed(self.options.max_committed_bytes_per_ready)
        rd.send_now, self._send_now = self._send_now, []
        rd.send_after_persist, self._send_later = self._send_later, []
        rd.read_states, self._read_states = self._read_states, []
        self._handed = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """The runtime has persisted, sent and applied `rd`."""
        if rd is not self._handed:
            raise RaftError("advance() takes the Ready that ready() returned last")
        self._handed = None
        log = self.log
        if rd.soft_state is not None:
            self._prev_soft = rd.soft_state
        if rd.hard_state is not None:
            self._prev_hard = rd.hard_state
        if rd.snapshot is not None:
            log.snapshot_persisted(rd.snapshot)
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
            self._maybe_commit()
        if rd.committed_entries:
            log.applied_to(rd.committed_entries[-1].index)

    _HANDLERS: dict[type, Callable[["RaftNode", Any], None]] = {
        RequestVote: _on_request_vote,
        RequestVoteResponse: _on_vote_response,
        AppendEntries: _on_append_entries,
        AppendEntriesResponse: _on_append_response,
        InstallSnapshot: _on_install_snapshot,
        InstallSnapshotResponse: _on_install_snapshot_response,
        TimeoutNow: _on_timeout_now,
        ReadIndexRequest: _on_read_index_request,
        ReadIndexResponse: _on_read_index_response,
        JoinClusterRequest: _on_join_cluster,
        JoinClusterResponse: _on_join_cluster_response,
        SyncLogRequest: _on_sync_log,
        SyncLogResponse: _on_sync_log_response,
        LeaveClusterRequest: _on_leave_cluster,
        LeaveClusterResponse: _on_leave_cluster_response,
        PullEntries: _on_pull_entries,
        PullEntriesResponse: _on_pull_entries_response,
        PullSnapshot: _on_pull_snapshot,
        PullSnapshotResponse: _on_pull_snapshot_response,
    }


def _check_run(entries: Sequence[Entry], first: int, field: str) -> None:
    """Entries must run from `first` on without gaps (their ends are checked; the
    transport numbers them from the request's position, so the middle follows)."""
    if entries and (entries[0].index != first or entries[-1].index != first + len(entries) - 1):
        raise InvalidMessage(field, f"{len(entries)} entries numbered {entries[0].index}.."
                             f"{entries[-1].index} do not follow index {first - 1}")
