"""What a leader knows about each voter it replicates to (JournalKeeper's parallel
replication on top of etcd's probe/replicate/snapshot states).

Per follower the leader keeps `next` (the next index to send), `match` (the highest
index known replicated) and, from JournalKeeper, `rep_start`: the smallest log position
among the requests in flight (the `next` when none is). Several AppendEntries may be in
flight at once (up to a window). A successful response is applied only when its
`log_index` reaches `rep_start`; a success for a later request is held until the ones
before it are answered. A refusal of the request at `rep_start` means the follower is
behind: the leader backs off and probes; refusals of later requests are ignored (they
failed because an earlier one had not arrived yet).
"""
from __future__ import annotations

import enum
from collections import deque

from .storage import Snapshot


class ProgressState(enum.Enum):
    PROBE = "probe"             #: one request at a time until the match point is found
    REPLICATE = "replicate"     #: pipelined: up to the window in flight
    SNAPSHOT = "snapshot"       #: sending the snapshot in chunks


class InFlight:
    """One AppendEntries awaiting its response."""

    __slots__ = ("log_index", "count", "sent_tick")

    def __init__(self, log_index: int, count: int, sent_tick: int) -> None:
        self.log_index = log_index
        self.count = count
        self.sent_tick = sent_tick


class Progress:
    __slots__ = ("match", "next", "state", "inflight", "held", "recent_active", "ack_ctx",
                 "sent_commit", "snapshot", "snapshot_offset", "snapshot_sent_tick", "window",
                 "refusals", "paused_until", "since_tick", "acked_tick")

    def __init__(self, next_index: int, window: int, tick: int = 0) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.inflight: deque[InFlight] = deque()
        self.held: dict[int, int] = {}      # log_index -> last index, successes held back
        self.recent_active = False          # answered since the last quorum check
        self.ack_ctx = 0                    # highest `ctx` echoed in this term
        self.sent_commit = 0                # the commit index the follower can know of
        self.snapshot: Snapshot | None = None
        self.snapshot_offset = 0
        self.snapshot_sent_tick: int | None = None   # None: no chunk awaiting its answer
        self.window = window
        self.refusals = 0                   # refusals in a row that moved nothing back
        self.paused_until = 0               # tick: nothing but heartbeats before it
        self.since_tick = tick              # when the leader began tracking the follower
        self.acked_tick: int | None = None  # its last answer (None: none since then)

    @property
    def rep_start(self) -> int:
        return self.inflight[0].log_index if self.inflight else self.next

    def can_send(self) -> bool:
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) < self.window
        return self.state is ProgressState.PROBE and not self.inflight

    def sent(self, log_index: int, count: int, tick: int) -> None:
        self.inflight.append(InFlight(log_index, count, tick))
        self.next = log_index + count

    def commit_lags(self, commit: int) -> bool:
        """Could the follower learn a higher commit index than we told it?"""
        return min(commit, self.match) > self.sent_commit

    def oldest_sent_tick(self) -> int | None:
        if self.state is ProgressState.SNAPSHOT:
            return self.snapshot_sent_tick
        return self.inflight[0].sent_tick if self.inflight else None

    def heard(self, tick: int) -> None:
        """The follower answered (any answer proves it alive and reachable)."""
        self.acked_tick = tick

    def silent_ticks(self, now: int) -> int:
        """Ticks since the follower's last answer, or since tracking began if none came."""
        return now - (self.since_tick if self.acked_tick is None else self.acked_tick)

    # -- state changes --------------------------------------------------------------------
    def become_probe(self, next_index: int) -> None:
        self.state = ProgressState.PROBE
        self.next = max(next_index, self.match + 1)
        self.inflight.clear()
        self.held.clear()
        self.snapshot = None

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.inflight.clear()
        self.held.clear()

    def become_snapshot(self, snapshot: Snapshot) -> None:
        self.state = ProgressState.SNAPSHOT
        self.inflight.clear()
        self.held.clear()
        self.snapshot = snapshot
        self.snapshot_offset = 0
        self.snapshot_sent_tick = None

    # -- responses --------------------------------------------------------------------------
    def on_success(self, log_index: int, last: int) -> bool:
        """A request [log_index, last] succeeded; True when `match` moved forward."""
        if self.state is ProgressState.PROBE:
            advanced = last > self.match
            self.match = max(self.match, last)
            self.become_replicate()
            return advanced
        if self.state is ProgressState.SNAPSHOT:
            advanced = last > self.match
            self.match = max(self.match, last)
            return advanced
        if log_index > self.rep_start:
            if any(f.log_index == log_index for f in self.inflight):
                self.held[log_index] = max(last, self.held.get(log_index, 0))
            return False
        advanced = self._ack(last)
        while self.held:
            ready = [k for k in self.held if k <= self.rep_start]
            if not ready:
                break
            for key in ready:
                advanced |= self._ack(self.held.pop(key))
        return advanced

    def _ack(self, last: int) -> bool:
        advanced = last > self.match
        if advanced:
            self.match = last
        inflight = self.inflight
        while inflight and inflight[0].log_index + inflight[0].count - 1 <= last:
            inflight.popleft()
        if inflight and inflight[0].log_index <= last:     # partly covered by a resend
            head = inflight[0]
            head.count -= last + 1 - head.log_index
            head.log_index = last + 1
        if self.next <= last:
            self.next = last + 1
        return advanced

    def is_refusal_at_start(self, log_index: int) -> bool:
        """Does a refusal of the request starting at `log_index` mean we must back off?"""
        if self.state is ProgressState.SNAPSHOT:
            return False
        return log_index == self.rep_start

    def back_off(self, log_index: int, hint: int) -> bool:
        """The follower refused the request at rep_start: resume at its hint, never
        after the refused request's prev index nor at or below `match`. False when that
        resumes where the refused request started (a follower refusing what it
        acknowledged before): resending at once would only be refused again."""
        self.become_probe(min(hint, log_index - 1))
        return self.next < log_index

    def hold_off(self, tick: int, retry: int) -> int:
        """Another refusal that moved nothing: pause replication (heartbeats go on) for
        `retry` ticks, doubling with each refusal in a row up to 8x; the pause."""
        self.refusals += 1
        pause = retry << min(self.refusals - 1, 3)
        self.paused_until = tick + pause
        return pause
