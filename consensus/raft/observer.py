"""Observers pull committed entries (JournalKeeper's getServerEntries / getServerState)
from a randomly chosen member, and any member serves those pulls. A voter that has not
heard from a leader for two election timeouts pulls too, so that one stranded on a stale
configuration (no leader replicates to it) still catches up."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from .configuration import EMPTY
from .entry import Entry
from .log import RaftLog
from .receiver import Receiver, check_run
from .messages import (Message, PullEntries, PullEntriesResponse, PullSnapshot,
                       PullSnapshotResponse, PullStatus)
from .options import RaftOptions
from .ready import Outbox
from .state import NodeState
from .storage import Snapshot


@dataclass
class PullState:
    """An observer's pull loop: one request at a time to a randomly chosen parent."""

    parent: int | None = None
    sent_tick: int | None = None
    next_pull_tick: int = 0
    snapshot_index: int = 0         #: >0 while fetching a snapshot after an underflow
    snapshot_data: bytearray = field(default_factory=bytearray)
    fetching_snapshot: bool = False


class Puller:
    def __init__(self, *, state: NodeState, log: RaftLog, outbox: Outbox,
                 options: RaftOptions, rng: random.Random, receiver: Receiver,
                 after_log_change: Callable[[], None]) -> None:
        """A pulled snapshot is restored by the `receiver`, as a leader's would be."""
        self.state = state
        self.log = log
        self.outbox = outbox
        self.options = options
        self.rng = rng
        self.receiver = receiver
        self.after_log_change = after_log_change
        self.pull = PullState()

    # -- the pulling side -------------------------------------------------------------------
    def parents(self) -> list[int]:
        parents = self.options.observer_parents or tuple(self.log.configuration.members)
        return sorted(set(parents) - {self.state.id})

    def idle(self) -> bool:
        """No pull or snapshot fetch in flight (an observer may then quiesce)."""
        return self.pull.sent_tick is None and not self.pull.fetching_snapshot

    def tick(self) -> None:
        pull, ticks = self.pull, self.state.ticks
        if pull.sent_tick is not None:
            if ticks - pull.sent_tick < self.options.retry:
                return
            pull.sent_tick = None       # unanswered: try another parent
            pull.parent = None
            pull.fetching_snapshot = False
        if ticks >= pull.next_pull_tick:
            self.send()

    def send(self) -> None:
        pull, me = self.pull, self.state
        parents = self.parents()
        if not parents:
            return
        if pull.parent not in parents:      # JournalKeeper: a random parent per round
            pull.parent = self.rng.choice(parents)
        if pull.fetching_snapshot:
            msg: Message = PullSnapshot(term=me.term, source=me.id, destination=pull.parent, snapshot_index=pull.snapshot_index,
                                        offset=len(pull.snapshot_data))
        else:
            opts = self.options
            msg = PullEntries(term=me.term, source=me.id, destination=pull.parent, index=self.log.committed + 1,
                              max_entries=opts.observer_pull_max_entries, max_bytes=opts.max_bytes_per_message)
        self.outbox.now.append(msg)
        pull.sent_tick = me.ticks

    def on_entries(self, msg: PullEntriesResponse) -> None:
        """A parent's entries (not at a leader: it has what it needs)."""
        pull, log, ticks = self.pull, self.log, self.state.ticks
        if msg.source != pull.parent or msg.index != log.committed + 1:
            return
        check_run(msg.entries, msg.index, "entries")
        pull.sent_tick = None
        interval = self.options.observer_pull_interval
        if msg.status is PullStatus.SUCCESS and msg.entries:
            entries = msg.entries
            conflict = log.find_conflict(entries)
            if conflict:
                log.append(entries[conflict - entries[0].index:])
            log.commit_to(entries[-1].index)
            self.after_log_change()
            full = len(entries) >= self.options.observer_pull_max_entries
            pull.next_pull_tick = ticks if full else ticks + interval
            if full:
                self.send()
        elif msg.status is PullStatus.INDEX_UNDERFLOW:
            pull.fetching_snapshot = True
            pull.snapshot_index = 0
            pull.snapshot_data = bytearray()
            self.send()
        else:       # caught up with this parent: next round, pick one at random again
            pull.next_pull_tick = ticks + interval
            pull.parent = None

    def on_snapshot(self, msg: PullSnapshotResponse) -> None:
        """A chunk of a parent's snapshot (not at a leader)."""
        pull = self.pull
        if not pull.fetching_snapshot or msg.source != pull.parent:
            return
        pull.sent_tick = None
        if msg.snapshot_index == 0:         # the parent has no snapshot after all
            pull.fetching_snapshot = False
            pull.next_pull_tick = self.state.ticks + self.options.observer_pull_interval
            return
        if msg.snapshot_index != pull.snapshot_index or msg.offset == 0:
            pull.snapshot_index = msg.snapshot_index
            pull.snapshot_data = bytearray()
        if msg.offset != len(pull.snapshot_data):
            self.send()
            return
        pull.snapshot_data += msg.data
        if not msg.done:
            self.send()
            return
        pull.fetching_snapshot = False
        self.receiver.restore(Snapshot(msg.snapshot_index, msg.snapshot_term, msg.configuration,
                                       bytes(pull.snapshot_data)))
        pull.snapshot_data = bytearray()
        self.send()

    # -- the serving side (any member) ------------------------------------------------------
    def serve_entries(self, msg: PullEntries) -> None:
        log, me = self.log, self.state
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
        self.outbox.now.append(PullEntriesResponse(term=me.term, source=me.id, destination=msg.source, status=status,
                                                   index=msg.index, entries=entries, min_index=first, commit=commit))

    def serve_snapshot(self, msg: PullSnapshot) -> None:
        me, now = self.state, self.outbox.now
        snap = self.log.storage.catch_up_snapshot()
        if snap is None:
            now.append(PullSnapshotResponse(term=me.term, source=me.id, destination=msg.source, snapshot_index=0, snapshot_term=0,
                                            configuration=EMPTY, offset=0, data=b"", done=True))
            return
        offset = msg.offset if msg.snapshot_index == snap.index else 0
        chunk = snap.data[offset:offset + self.options.snapshot_chunk_bytes]
        now.append(PullSnapshotResponse(
            term=me.term, source=me.id, destination=msg.source, snapshot_index=snap.index, snapshot_term=snap.term, configuration=snap.configuration, offset=offset,
            data=chunk, done=offset + len(chunk) >= len(snap.data)))
