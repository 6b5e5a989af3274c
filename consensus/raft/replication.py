"""The leader's side of replication (Raft §5.3-5.4 with JournalKeeper's parallel
replication): a window of AppendEntries in flight per follower (progress.py), heartbeats,
snapshots for members behind the log's start, and the commit rule."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Callable, Iterable

from .entry import Entry, EntryType
from .errors import StorageStateError
from .log import RaftLog
from .messages import AppendEntries, AppendEntriesResponse, InstallSnapshot, InstallSnapshotResponse
from .options import RaftOptions
from .progress import Progress, ProgressState
from .ready import Outbox
from .state import NodeState
from .storage import Snapshot
from .tracker import ProgressTracker
from .transfer import Transfer

if TYPE_CHECKING:
    from .read_index import ReadIndex

log = logging.getLogger("garlicfarm.raft")


@dataclass(slots=True)
class ReplicationDue:
    """What the leader owes its followers, turned into messages at the next Ready (lazily,
    so that many proposals between two Readys share AppendEntries). Its own object
    because more than replication runs it up: any message, and a read that waits for a
    heartbeat round (`ReadIndex`); `RaftNode.has_ready` asks it."""

    dirty: bool = False             #: something to (re)consider sending
    heartbeat_due: bool = False     #: a heartbeat round
    notices_due: bool = False       #: a tick passed: a commit index alone may go out


class Replicator:
    def __init__(self, *, state: NodeState, log: RaftLog, tracker: ProgressTracker,
                 outbox: Outbox, options: RaftOptions, due: ReplicationDue,
                 reads: "ReadIndex", transfer: Transfer,
                 after_log_change: Callable[[], None], on_commit: Callable[[], None]) -> None:
        """The node's `after_log_change` follows a configuration entry; `on_commit` is
        told when the commit index advanced (membership may act on a configuration that
        committed)."""
        self.state = state
        self.log = log
        self.tracker = tracker
        self.outbox = outbox
        self.options = options
        self.due = due
        self.reads = reads
        self.transfer = transfer
        self.after_log_change = after_log_change
        self.on_commit = on_commit
        self.heartbeat_elapsed = 0

    def reconsider(self) -> None:
        """Something happened (a message, a proposal): look again at what to send."""
        self.due.dirty = True

    def leader_tick(self) -> None:
        """A tick passed: look again at what to send; a commit index alone may go out."""
        due = self.due
        due.dirty = True
        due.notices_due = True

    def start(self) -> None:
        """We lead now: replicate to every voter, heartbeats from now on."""
        self.heartbeat_elapsed = 0
        self.tracker.reset_progress()
        self.sync_progress()

    # -- time -------------------------------------------------------------------------------
    def tick(self) -> None:
        """The leader's tick: heartbeats when due, retries of unanswered requests."""
        self.heartbeat_elapsed += 1
        if self.heartbeat_elapsed >= self.options.heartbeat_interval:
            self.heartbeat_elapsed = 0
            self.due.heartbeat_due = True
        retry, ticks = self.options.retry, self.state.ticks
        for pr in self.tracker.progress.values():
            sent = pr.oldest_sent_tick()
            if sent is not None and ticks - sent >= retry:
                if pr.state is ProgressState.SNAPSHOT:
                    pr.snapshot_sent_tick = None        # resend the chunk
                else:
                    pr.become_probe(pr.rep_start)

    # -- whom to replicate to ---------------------------------------------------------------
    def sync_progress(self) -> None:
        """Track every voter of the configuration; peers that left stay tracked until
        they hold (and know committed) the configuration that removed them. (A server
        added by JRaft's flow comes with the progress membership made while syncing it.)"""
        state = self.state
        next_index = self.log.last_index() + 1
        progress = self.tracker.progress
        for peer in self.log.configuration.all_voters - {state.id}:
            if peer not in progress:
                progress[peer] = Progress(next_index, self.options.max_inflight, state.ticks)
        self.transfer.check_target()

    def drop_departed(self, silent_too: bool = False) -> None:
        """Stop replicating to peers that left the configuration once they hold the entry
        that removed them and know it committed (or, with `silent_too`, once they have
        not answered for a quorum-check period)."""
        log_ = self.log
        index = log_.configuration_index
        if index > log_.committed:
            return
        config = log_.configuration
        progress = self.tracker.progress
        for peer in [p for p in progress if not config.is_voter(p)]:
            pr = progress[peer]
            if (pr.match >= index and pr.sent_commit >= index) or \
                    (silent_too and not pr.recent_active):
                del progress[peer]

    # -- appending --------------------------------------------------------------------------
    def append(self, kind: EntryType, datas: Iterable[bytes]) -> int:
        """The leader appends new entries of its term; returns the last index."""
        first, term = self.log.last_index() + 1, self.state.term
        entries = [Entry(term, index, kind, data) for index, data in zip(count(first), datas)]
        if not entries:
            return first - 1
        index = entries[-1].index
        self.log.append(entries)
        self.due.dirty = True
        if kind is EntryType.CONFIGURATION:
            self.after_log_change()
        self.maybe_commit()
        return index

    # -- sending ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Turn the replication state into messages (lazily, so that many proposals
        between two Readys share AppendEntries). The caller checked that something is
        due."""
        due = self.due
        due.dirty = False
        heartbeat = due.heartbeat_due
        due.heartbeat_due = False
        # A commit index that nothing else carries goes out at most once per tick: the
        # next entries carry it anyway, and a notice per commit costs every follower a
        # message, a turn and an answer per write when writes come one at a time.
        notices = due.notices_due
        due.notices_due = False
        commit = self.log.committed
        for peer, pr in self.tracker.progress.items():
            if not self._send_append(peer, pr) and (
                    heartbeat or (notices and pr.commit_lags(commit))):
                self._send_heartbeat(peer, pr)

    def _send_append(self, peer: int, pr: Progress) -> bool:
        """Send what the window allows; True when at least one message went out."""
        ticks = self.state.ticks
        if pr.paused_until > ticks:
            return False            # it refused what it should take: see _hold_off
        if pr.state is ProgressState.SNAPSHOT:
            return self.send_snapshot_chunk(peer, pr)
        sent = False
        log_ = self.log
        last = log_.last_index()
        opts = self.options
        while pr.can_send():
            next_index = pr.next
            prev_term = log_.term(next_index - 1)
            if prev_term is None or next_index < log_.first_index():
                pr.become_snapshot(self.catch_up_snapshot())
                return self.send_snapshot_chunk(peer, pr) or sent
            if next_index > last:
                if pr.state is ProgressState.PROBE:     # empty probe: find the match point
                    self.emit_append(peer, pr, next_index - 1, prev_term, [])
                    pr.sent(next_index, 0, ticks)
                    sent = True
                break
            entries = log_.slice(next_index,
                                 min(last + 1, next_index + opts.max_entries_per_message),
                                 opts.max_bytes_per_message)
            self.emit_append(peer, pr, next_index - 1, prev_term, entries)
            pr.sent(next_index, len(entries), ticks)
            sent = True
        return sent

    def emit_append(self, peer: int, pr: Progress, prev: int, prev_term: int,
                    entries: list[Entry]) -> None:
        # The commit index goes no further than the entries this request vouches for
        # (etcd: min(match, committed) in heartbeats). Raft followers cap it anyway; a
        # JRaft follower trusts it when its log is empty (lastLogIndex 0) and would
        # raise its commit past its log, then refuse every snapshot.
        state = self.state
        commit = min(self.log.committed, prev + len(entries))
        pr.sent_commit = max(pr.sent_commit, commit)
        self.outbox.now.append(AppendEntries(term=state.term, source=state.id, destination=peer, prev_log_index=prev, prev_log_term=prev_term,
                                             entries=entries, commit=commit, ctx=self.reads.stamp()))

    def _send_heartbeat(self, peer: int, pr: Progress) -> None:
        """An empty AppendEntries at the follower's match point: it cannot fail on a
        follower that kept what it acknowledged, and it carries the commit index up to
        that point, the lease stamp and the ReadIndex round."""
        prev = pr.match
        prev_term = self.log.term(prev)
        if prev_term is None:
            prev, prev_term = 0, 0
        self.emit_append(peer, pr, prev, prev_term, [])

    def catch_up_snapshot(self) -> Snapshot:
        """What a member behind our log's start installs (Storage.catch_up_snapshot: not
        the latest, so that it gets the entries the application still needs below it)."""
        log_ = self.log
        snapshot = log_.storage.catch_up_snapshot()
        if snapshot is None:
            raise StorageStateError(f"the log starts at {log_.first_index()} but storage "
                                    "has no snapshot to send instead")
        return snapshot

    def send_snapshot_chunk(self, peer: int, pr: Progress) -> bool:
        if pr.snapshot_sent_tick is not None or pr.snapshot is None:
            return False
        state = self.state
        snap = pr.snapshot
        offset = min(pr.snapshot_offset, len(snap.data))
        chunk = snap.data[offset:offset + self.options.snapshot_chunk_bytes]
        done = offset + len(chunk) >= len(snap.data)
        self.outbox.now.append(InstallSnapshot(term=state.term, source=state.id, destination=peer, snapshot_index=snap.index, snapshot_term=snap.term,
                                               configuration=snap.configuration, offset=offset, data=chunk, done=done,
                                               commit=min(self.log.committed, snap.index)))
        pr.snapshot_sent_tick = state.ticks
        return True

    # -- answers ----------------------------------------------------------------------------
    def on_append_response(self, msg: AppendEntriesResponse) -> None:
        pr = self.tracker.progress.get(msg.source)
        if pr is None:
            return
        pr.recent_active = True
        pr.heard(self.state.ticks)
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
                self.maybe_commit()
            if msg.source not in self.log.configuration.all_voters:
                self.drop_departed()        # best effort: it was told, unless that was lost
            self.transfer.maybe_send_timeout_now(msg.source, pr)
        elif pr.is_refusal_at_start(msg.log_index) and \
                not pr.back_off(msg.log_index, msg.next_index):
            self.hold_off(msg.source, pr, f"refused entries from {msg.log_index} again "
                          f"(it asks for {msg.next_index}; we know it holds up to {pr.match})")
        self.reads.release()

    def hold_off(self, peer: int, pr: Progress, what: str) -> None:
        """A follower refuses what it should take (a JRaft node that raised its commit
        past its log, a disk that lost acknowledged entries): back off instead of
        resending at once, and say so (the first time, then at every doubling)."""
        pause = pr.hold_off(self.state.ticks, self.options.retry)
        if pr.refusals & (pr.refusals - 1) == 0:
            log.warning("node %d: follower %d %s; refusal %d in a row, resending in %d "
                        "ticks", self.state.id, peer, what, pr.refusals, pause)

    def on_install_snapshot_response(self, msg: InstallSnapshotResponse) -> None:
        """A follower's answer to a snapshot chunk (membership hands over those for the
        server it is adding)."""
        pr = self.tracker.progress.get(msg.source)
        if pr is None:
            return
        pr.recent_active = True
        pr.heard(self.state.ticks)
        if self.snapshot_answered(pr, msg):
            self.maybe_commit()

    def snapshot_answered(self, pr: Progress, msg: InstallSnapshotResponse) -> bool:
        """Move `pr`'s snapshot on by the answer; True when the whole snapshot is
        installed (its progress then probes the entries after it)."""
        snap = pr.snapshot
        if pr.state is not ProgressState.SNAPSHOT or snap is None or \
                msg.snapshot_index != snap.index:
            return False
        pr.snapshot_sent_tick = None
        if not msg.success:
            if msg.next_offset != pr.snapshot_offset and not pr.refusals:
                pr.refusals = 1         # it asks to resume elsewhere: once, at once
            else:
                self.hold_off(msg.source, pr, f"refused snapshot {snap.index} at offset "
                              f"{pr.snapshot_offset} (it asks for {msg.next_offset})")
        if msg.done and msg.success:
            pr.refusals = 0
            pr.match = max(pr.match, snap.index)
            pr.become_probe(snap.index + 1)
            return True
        pr.snapshot_offset = max(0, min(msg.next_offset, len(snap.data)))
        return False

    # -- commit -----------------------------------------------------------------------------
    def maybe_commit(self) -> None:
        """Commit what a quorum holds, if it is of our term (Raft §5.4.2); we count
        ourselves only with what our own disk holds."""
        log_ = self.log
        index = min(self.tracker.committed(log_.persisted), log_.last_index())
        if index > log_.committed and log_.term(index) == self.state.term:
            log_.commit_to(index)
            self.reads.on_commit()
            self.on_commit()
