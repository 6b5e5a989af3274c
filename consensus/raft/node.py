"""The Raft state machine of one node: `tick`, `step`, `propose`..., then `ready`/`advance`.

No sockets, threads, clocks or disks: time comes in as `tick()`, messages as `step()`,
and everything to persist, send and apply goes out through `ready()` (driver.py drives
it). Randomness (election timeouts, observer parents) comes from a generator seeded by
`RaftOptions.seed`, so a run is reproducible.

`RaftNode` builds the parts and holds the role changes; what each role does with a
message is data in roles.py, and the concerns are helpers, one module each:
`elections`, `receiver` (follower side of replication), `replication` (leader side),
`membership`, `puller` (observers), `reads`, `transfer`. Each helper is given, at
construction, only what it uses: the `NodeState` (id, ticks, term, vote, role, leader),
the log, the `ProgressTracker`, the `Outbox`, the options, the helpers it calls, and
the role changes it may cause as callables. The runtime uses only the methods and
properties below.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping

from .configuration import EMPTY, Configuration
from .elections import Elections
from .entry import EntryType
from .errors import NotLeader, ProposalDropped, RaftError, StorageStateError
from .receiver import Receiver
from .log import LogView, RaftLog
from .membership import Membership
from .messages import (AppendEntries, AppendEntriesResponse, InstallSnapshot,
                       InstallSnapshotResponse, JoinClusterRequest, LeaveClusterRequest,
                       Message, RequestVote, RequestVoteResponse, SyncLogRequest, TimeoutNow)
from .observer import Puller
from .options import RaftOptions
from .progress import Progress
from .tracker import ProgressTracker
from .read_index import ReadIndex
from .reads import SnapshotQueryResult, SparseSnapshots, StateMachine, query_snapshot
from .ready import Outbox, Ready, SoftState
from .roles import Role
from .replication import ReplicationDue, Replicator
from .roles import KNOWN, bind
from .state import NodeState
from .storage import HardState, Snapshot, Storage
from .tenure import Tenure
from .transfer import Transfer

log = logging.getLogger("garlicfarm.raft")

_LEADER_MESSAGES = (AppendEntries, InstallSnapshot, TimeoutNow, JoinClusterRequest,
                    SyncLogRequest, LeaveClusterRequest)


@dataclass(frozen=True, slots=True)
class FollowerContact:
    """A leader's view of one follower: `ack_age` ticks since its last answer in this
    leadership (None: none yet); `reachable` is False once it has been silent for longer
    than the election timeout (counted from when the leader began tracking it)."""
    ack_age: int | None
    reachable: bool


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
        self.options = opts = options or RaftOptions()
        seed = opts.seed if opts.seed is not None else node_id
        self.rng = random.Random(seed)
        self.log = log = RaftLog(storage, configuration or EMPTY, applied)
        self.log_view = LogView(log)   #: read-only, for the runtime's services
        saved = storage.initial_state()
        if saved.commit > log.last_index() and saved.commit > log.first_index() - 1:
            # Commit is saved after the entries; a log shorter than it lost data.
            raise StorageStateError(f"saved commit {saved.commit} is beyond the last index "
                                    f"{log.last_index()}: the log lost durable entries")
        log.committed = max(saved.commit, log.first_index() - 1)
        self.state = state = NodeState(node_id, saved.term, saved.vote, Role.FOLLOWER)
        self.tracker = tracker = ProgressTracker(node_id, lambda: log.configuration)
        self._stalls = 0            #: catch-ups seen (tick(count > 1)): numbers a stall
        self.outbox = outbox = Outbox()     # the same object for life: the helpers hold it
        self.due = due = ReplicationDue()
        self.tenure = tenure = Tenure(state, log, opts)
        # The parts, each given what it uses (a part comes after the parts it calls).
        self.elections = Elections(
            state=state, log=log, tracker=tracker, outbox=outbox, options=opts, rng=self.rng,
            tenure=tenure, set_role=self.set_role, become_leader=self.become_leader,
            become_follower=self.become_follower)
        self.receiver = Receiver(
            state=state, log=log, outbox=outbox, elections=self.elections, tenure=tenure,
            become_follower=self.become_follower, after_log_change=self.after_log_change)
        self.transfer = Transfer(state=state, log=log, tracker=tracker, outbox=outbox,
                                 options=opts)
        self.reads = ReadIndex(state=state, log=log, tracker=tracker, outbox=outbox,
                               options=opts, due=due)
        self.replication = Replicator(
            state=state, log=log, tracker=tracker, outbox=outbox, options=opts, due=due,
            reads=self.reads, transfer=self.transfer, after_log_change=self.after_log_change,
            on_commit=self._on_leader_commit)
        self.membership = Membership(
            state=state, log=log, tracker=tracker, outbox=outbox, options=opts, tenure=tenure,
            replication=self.replication, receiver=self.receiver, transfer=self.transfer,
            become_follower=self.become_follower, after_log_change=self.after_log_change)
        self.puller = Puller(state=state, log=log, outbox=outbox, options=opts, rng=self.rng,
                             receiver=self.receiver, after_log_change=self.after_log_change)
        self._tables = bind(self)
        self.set_role(Role.OBSERVER if self.options.observer else Role.FOLLOWER)
        self._config = self.log.configuration
        self._prev_hard = HardState(state.term, state.vote, log.committed)
        self._prev_soft: SoftState | None = None
        self._handed: Ready | None = None
        self._refresh_role()
        tenure.update_removed()
        self._prev_soft = self.soft_state()

    def set_role(self, role: Role) -> None:
        """Every role change goes through here: the role brings its message handlers
        (roles.py)."""
        self.state.role = role
        self._handlers = self._tables[role]

    # ====================================================================================
    # Inspection
    # ====================================================================================
    @property
    def term(self) -> int:
        return self.state.term

    @property
    def vote(self) -> int | None:
        return self.state.vote

    @property
    def role(self) -> Role:
        return self.state.role

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    @leader_id.setter
    def leader_id(self, leader: int | None) -> None:
        """For a test that makes a node forget its leader."""
        self.state.leader_id = leader

    @property
    def ticks(self) -> int:
        return self.state.ticks

    @property
    def configuration(self) -> Configuration:
        return self.log.configuration

    @property
    def progress(self) -> Mapping[int, Progress]:
        """The leader's view of each follower (empty elsewhere), for inspection."""
        return self.tracker.progress

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
        return self.log.term(self.log.committed) == self.state.term

    @property
    def removed(self) -> bool:
        return self.tenure.removed

    @property
    def transferring_to(self) -> int | None:
        return self.transfer.target

    @property
    def installing_snapshot(self) -> bool:
        """A snapshot from the leader replaced the log and awaits persisting (it comes
        in the next Ready): the application's state is about to be replaced, so taking
        a snapshot of it now is pointless (`snapshot_at` refuses)."""
        return self.log.pending_snapshot is not None

    def soft_state(self) -> SoftState:
        state = self.state
        return SoftState(state.leader_id, state.role, state.term, self.log.configuration,
                         self.tenure.removed)

    def hard_state(self) -> HardState:
        return HardState(self.state.term, self.state.vote, self.log.committed)

    def status(self) -> dict[str, Any]:
        """A snapshot of the node's state for logs and the admin CLI."""
        return {
            "id": self.id, "role": self.role.value, "term": self.term, "vote": self.vote,
            "leader": self.leader_id, "commit": self.log.committed,
            "applied": self.log.applied, "first_index": self.log.first_index(),
            "last_index": self.log.last_index(), "configuration": str(self.configuration),
            "progress": {p: {"match": pr.match, "next": pr.next, "state": pr.state.value,
                             "inflight": len(pr.inflight), "silent": pr.silent_ticks(self.ticks)}
                         for p, pr in self.progress.items()},
        }

    def follower_contact(self) -> dict[int, FollowerContact]:
        """On a leader, how recently each follower it replicates to answered (empty on
        other roles): what tells a dead or cut-off member from a live one."""
        if self.state.role is not Role.LEADER:
            return {}
        now, timeout = self.state.ticks, self.options.election_timeout_min
        return {peer: FollowerContact(None if pr.acked_tick is None else now - pr.acked_tick,
                                      pr.silent_ticks(now) <= timeout)
                for peer, pr in dict(self.progress).items()}   # a copy: metrics' thread

    def can_quiesce(self) -> bool:
        """May the runtime stop ticking this group (quiesce it, as CockroachDB does)? A
        pure query. A leader: every entry is committed and every tracked peer holds it and
        was sent the commit index, and nothing waits for time (a read, a transfer, a
        membership change, a snapshot). A follower: it knows its leader and has applied
        nothing it has not committed, with no read or snapshot waiting; the runtime still
        checks the leader's word (term, last index) before it stops ticking. An observer:
        it holds nothing uncommitted and no pull is in flight; the runtime checks the
        word of the member it pulls from (that the group is quiet at its last index)."""
        log_ = self.log
        last = log_.last_index()
        if last != log_.committed or log_.pending_snapshot is not None or self.reads.waiting \
                or self.reads.before_commit or self.tenure.leaving \
                or self.tenure.catching_up or self.removed:
            return False
        if self.role is Role.FOLLOWER:
            return self.leader_id is not None
        if self.role is Role.OBSERVER:
            return self.puller.idle()
        return self.role is Role.LEADER and self.committed_in_term \
            and self.transfer.target is None and self.membership.joiner is None \
            and self.membership.leaver is None and not log_.configuration.is_joint \
            and log_.configuration_index <= log_.committed \
            and all(pr.match == last and pr.sent_commit >= last and not pr.inflight
                    for pr in self.tracker.progress.values())

    def end_boot_lease(self) -> None:
        """Vote at once: forget that this node may have confirmed a leader just before a
        restart (it refuses votes for its first election timeout otherwise). For a
        caller that knows no leader is alive, such as a test electing a chosen node."""
        self.elections.end_boot_lease()

    # ====================================================================================
    # Time
    # ====================================================================================
    def tick(self, count: int = 1) -> None:
        """`count` units of time passed (the runtime's tick, e.g. 10 ms); more than one
        when the runtime was stalled (no CPU) and delivers the missed ticks at once.
        Nothing can be heard between the ticks of one call, so a stall is not taken for
        silence: a follower counts at most `heartbeat_interval` of them (the time a live
        leader needs to speak; counting less only lengthens its refusal of votes, which
        keeps leases safe), and a leader defers a CheckQuorum verdict that falls in the
        stall by two heartbeat intervals, once, so that its followers can answer the
        heartbeats it sends after the stall (every tick still counts for its lease)."""
        if count > 1 and self.state.role is Role.FOLLOWER:
            count = min(count, self.options.heartbeat_interval)
        self._stalls += count > 1
        for _ in range(count):
            self._tick(stall=self._stalls if count > 1 else None)

    def _tick(self, stall: int | None) -> None:
        """One tick; `stall` numbers the stall it catches up on (None: a plain tick)."""
        state = self.state
        state.ticks += 1
        self.reads.tick()
        self.tenure.count_down()
        role = state.role
        if role is Role.LEADER:
            self._tick_leader(stall)
            return
        if role is Role.OBSERVER:
            self.elections.observer_tick()
        else:
            self.elections.tick()
        if state.role is Role.OBSERVER or state.ticks - self.elections.heard_leader_tick > \
                2 * self.options.election_timeout_max:
            self.puller.tick()

    def _tick_leader(self, stall: int | None) -> None:
        replication = self.replication
        replication.leader_tick()
        elections = self.elections
        if elections.check_quorum_due() and \
                not elections.defer_check_quorum(stall, 2 * self.options.heartbeat_interval):
            if not self.tracker.quorum_active():
                self.become_follower(self.state.term, None)
                return
            replication.drop_departed(silent_too=True)
            self.tracker.forget_activity()
        self.transfer.tick()
        replication.tick()
        self.reads.expire()
        self.membership.tick()

    # ====================================================================================
    # Messages in
    # ====================================================================================
    def step(self, msg: Message) -> None:
        """Process one message addressed to this node."""
        if msg.destination != self.id:
            raise RaftError(f"node {self.id} got a message for node {msg.destination}")
        self.replication.reconsider()
        if msg.TERM_RULES and not self._apply_term_rules(msg):
            return
        handler = self._handlers.get(type(msg))
        if handler is not None:
            handler(msg)
        elif type(msg) not in KNOWN:
            raise RaftError(f"no handler for {type(msg).__name__}")

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
        outbox = self.outbox
        for i in order:
            now, later = len(outbox.now), len(outbox.later)
            self.step(run[i])
            replies[i] = outbox.now[now:] + outbox.later[later:]
            del outbox.now[now:], outbox.later[later:]
        for i in range(len(run)):
            outbox.later.extend(replies[i])

    def _apply_term_rules(self, msg: Message) -> bool:
        """Raft's term rules; False when the message must be dropped (already answered)."""
        if msg.term > self.state.term:
            if isinstance(msg, RequestVote):
                if self.elections.in_lease() and not msg.leader_transfer:
                    return False        # a leader is alive: do not let this one disrupt
                if not msg.pre_vote:
                    self.become_follower(msg.term, None)
            elif isinstance(msg, RequestVoteResponse) and msg.pre_vote and msg.granted:
                pass                    # carries the term the pre-candidate would use
            else:
                leader = msg.source if isinstance(msg, _LEADER_MESSAGES) else None
                self.become_follower(msg.term, leader)
            return True
        if msg.term < self.state.term:
            self._answer_stale(msg)
            return False
        return True

    def _answer_stale(self, msg: Message) -> None:
        """Tell a sender from an older term about ours, so that it steps down."""
        later = self.outbox.later
        if isinstance(msg, AppendEntries):
            later.append(AppendEntriesResponse(
                term=self.state.term, source=self.id, destination=msg.source, success=False, next_index=self.log.last_index() + 1,
                log_index=msg.prev_log_index + 1, entry_count=len(msg.entries), ctx=msg.ctx))
        elif isinstance(msg, InstallSnapshot):
            later.append(InstallSnapshotResponse(
                term=self.state.term, source=self.id, destination=msg.source, success=False, next_offset=0, snapshot_index=msg.snapshot_index))
        elif isinstance(msg, RequestVote):
            later.append(RequestVoteResponse(
                term=self.state.term, source=self.id, destination=msg.source, granted=False, pre_vote=msg.pre_vote))

    # ====================================================================================
    # Role changes (the collaborators call them)
    # ====================================================================================
    def become_follower(self, term: int, leader: int | None) -> None:
        was_leader = self.state.role is Role.LEADER
        if term > self.state.term:
            self.state.term = term
            self.state.vote = None
        self.state.leader_id = leader
        self.set_role(Role.OBSERVER if self.state.role is Role.OBSERVER else Role.FOLLOWER)
        self.tracker.reset_votes()
        self.elections.reset_timer()
        if was_leader:
            self.tracker.reset_progress()
            self.transfer.cancel()
            self.membership.reset()
        self.reads.lost_leadership(was_leader)
        self._refresh_role()

    def become_leader(self) -> None:
        self.set_role(Role.LEADER)
        self.state.leader_id = self.id
        self.tracker.reset_votes()
        self.elections.start_leading()
        self.transfer.cancel()
        self.replication.start()
        self.replication.append(EntryType.NOOP, (b"",))

    def _refresh_role(self) -> None:
        """Observers and voters switch when their configuration says so. (A node that
        believes itself a voter on the strength of a stale or truncated configuration
        is not stuck: without a leader it pulls committed entries and finds out.)"""
        if self.id in self.log.configuration.members:
            self.tenure.note_member()
        if self.state.role is Role.LEADER:
            return
        voter = self.elections.still_voter()
        if self.state.role is Role.OBSERVER:
            if voter:
                self.set_role(Role.FOLLOWER)
                self.elections.reset_timer()
        elif not voter and (self.id in self.log.configuration.observers
                            or self.options.observer):
            self.set_role(Role.OBSERVER)
        if voter:
            self.tenure.caught_up()

    def after_log_change(self) -> None:
        """Configuration follows the log: re-read it after appends and truncations."""
        config = self.log.configuration
        if config is self._config:          # the commit index may have reached it
            self._refresh_role()
            self.tenure.update_removed()
            return
        self._config = config
        if self.state.role is Role.LEADER:
            self.replication.sync_progress()
        elif self.state.role in (Role.CANDIDATE, Role.PRE_CANDIDATE) and \
                not self.elections.promotable():
            self.become_follower(self.state.term, None)
        self._refresh_role()
        self.tenure.update_removed()

    def _on_leader_commit(self) -> None:
        """Replication's commit rule advanced the commit index: a configuration may have
        committed."""
        self.membership.on_commit()

    # ====================================================================================
    # Client requests
    # ====================================================================================
    def propose(self, data: bytes) -> int:
        """Append an APPLICATION entry; returns its index. It took effect iff the entry
        committed at that index carries the term this node had when proposing."""
        return self.propose_many((data,))

    def propose_many(self, datas: Iterable[bytes]) -> int:
        """Append several entries at once (one AppendEntries round for all); returns
        the index of the last."""
        self._check_leader()
        if self.transfer.target is not None:
            raise ProposalDropped(f"leadership is moving to node {self.transfer.target}: "
                                  "retry at the new leader")
        datas = datas if isinstance(datas, (list, tuple)) else list(datas)
        if self.log.last_index() + len(datas) - self.log.committed > \
                self.options.max_uncommitted_entries:
            raise ProposalDropped(f"more than {self.options.max_uncommitted_entries} entries "
                                  "await commit (RaftOptions.max_uncommitted_entries): retry "
                                  "when commits catch up")
        return self.replication.append(EntryType.APPLICATION, datas)

    def _check_leader(self) -> None:
        if self.state.role is not Role.LEADER:
            raise NotLeader(self.id, self.state.leader_id)

    def read_index(self, ctx: bytes, *, lease: bool = False) -> None:
        """Start a linearizable read; a `ReadState` with this `ctx` comes in a later Ready.
        With `lease`, the leader answers at once while JournalKeeper's lease holds.
        Followers forward to the leader. Raises NotLeader when no leader is known."""
        self.reads.read_index(ctx, lease)

    def lease_valid(self) -> bool:
        """JournalKeeper's leader validity check (read_index.py)."""
        return self.reads.lease_valid()

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

    def transfer_leader(self, target: int) -> None:
        """Hand leadership to `target` (JournalKeeper's leader transfer): new proposals
        are refused, the target is brought up to date, then told to campaign at once.
        Gives up after election_timeout_max ticks; the caller retries if another node won."""
        self._check_leader()
        if target != self.id:
            self.transfer.start(target)
            self.replication.reconsider()

    # -- membership (membership.py) -----------------------------------------------------------
    def change_voters(self, voters: Collection[int],
                      addresses: Mapping[int, str] | None = None) -> int:
        """JournalKeeper's updateVoters by joint consensus: appends C_old,new now (in
        force at once) and C_new automatically once C_old,new commits. Returns the index
        of C_old,new."""
        self._check_leader()
        return self.membership.change_voters(voters, addresses)

    def update_observers(self, add: Collection[int] = (), remove: Collection[int] = (),
                         addresses: Mapping[int, str] | None = None) -> int:
        """JournalKeeper's updateObservers. Observers count in no quorum, so one
        configuration entry suffices."""
        self._check_leader()
        return self.membership.update_observers(add, remove, addresses)

    def add_server(self, node_id: int, address: str = "") -> None:
        """JRaft's AddServer: invite, sync, then append C + {node_id}."""
        self._check_leader()
        self.membership.add_server(node_id, address)

    def remove_server(self, node_id: int) -> None:
        """JRaft's RemoveServer: LeaveClusterRequest, then append C - {node_id}."""
        self._check_leader()
        self.membership.remove_server(node_id)

    # ====================================================================================
    # Ready / advance
    # ====================================================================================
    def has_ready(self) -> bool:
        """Is there anything to persist, send, apply or report? A query: replication
        owed (proposals or a heartbeat not yet turned into messages) counts, and
        ready() turns it into messages (possibly none, when every window is full)."""
        # asked after every step and turn, mostly to hear "no": kept to few calls
        due, state = self.due, self.state
        log, outbox, prev = self.log, self.outbox, self._prev_hard
        return bool(outbox.now or outbox.later or outbox.read_states or log.unstable
                    or (state.role is Role.LEADER and (due.dirty or due.heartbeat_due))
                    or log.pending_snapshot is not None or log.has_next_committed()
                    or prev.commit != log.committed or prev.term != state.term
                    or prev.vote != state.vote or self._soft_changed())

    def _flush(self) -> None:
        due = self.due
        if self.state.role is Role.LEADER and (due.dirty or due.heartbeat_due):
            self.replication.flush()
            self.membership.send_joiner_snapshot()

    def _hard_changed(self) -> bool:
        prev, state = self._prev_hard, self.state
        return prev.commit != self.log.committed or prev.term != state.term or \
            prev.vote != state.vote

    def _soft_changed(self) -> bool:
        prev, state = self._prev_soft, self.state
        return prev is None or prev.leader_id != state.leader_id or prev.role is not state.role \
            or prev.term != state.term or prev.removed != self.tenure.removed \
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
        outbox = self.outbox
        rd.send_now, rd.send_after_persist, rd.read_states = \
            outbox.now, outbox.later, outbox.read_states
        outbox.now, outbox.later, outbox.read_states = [], [], []
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
            if self.state.role is Role.LEADER:
                self.replication.maybe_commit()
        if rd.committed_entries:
            log.applied_to(rd.committed_entries[-1].index)
