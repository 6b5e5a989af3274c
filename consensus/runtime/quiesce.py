"""Quiescing idle groups (as CockroachDB does) and the node-level liveness it relies on.

A node of hundreds of groups cannot tick and heartbeat each of them (an idle group cost
~1.7 ms of CPU a second). So an idle group stops ticking: its leader, once the core says
it may (`RaftNode.can_quiesce`, a pure query: everything committed, held and known
committed by every tracked peer, nothing waiting for time) at its ticks for two heartbeat
intervals (`LINGER_HEARTBEATS`: a trickle of writes would otherwise quiesce and wake the
group between every two of them), sends each follower a Quiesce frame (its term and last index) and stops ticking the group; a follower of that
leader and term that holds exactly that much, committed, stops too. A quiesced group
costs nothing until one of these wakes it: a message of the group that asks for
something (anything but a leader's own heartbeat answers and observers' pulls, which
stepping answers), a client's call, a leadership transfer, a core that can no longer
quiesce after a step. On waking it gets the ticks it missed at once, as one catch-up
(capped; at least a heartbeat interval): a leader then heartbeats at once and its lease,
which the silent clock kept, is over (lease reads of a woken leader ask a quorum again).

Liveness is per node, not per group: every node sends each peer a NodeHeartbeat every
heartbeat interval and counts any bytes read from a peer as heard (`Transport.heard`).
A quiesced follower whose leader's node has been silent for an election timeout wakes
(and campaigns after its own timeout, as usual); a quiesced leader wakes when its live
voters are no longer a quorum (CheckQuorum then steps it down); a leader quiesces only
while a quorum of its voters is live.

Observers (which pull, and hear from no leader) quiesce too: a member whose group is
quiesced answers an observer's pull at its end ("nothing new") and then sends it a
Quiesce (its term and commit index) on the same connection, and remembers it; an
observer that holds exactly that index, committed, with no pull in flight, stops
ticking (and pulling). The member *parks* the pull: when its group wakes it answers it
again, which wakes the observer (a message of its group), and the observer pulls at
once. The observer also wakes when that member's node goes silent for an election
timeout or a connection with it closes (a member restarted in time forgot the pulls it
parked).

A group that removed this node (`--partition P` remove-server: the node stays in the
farm, not in that partition) has no leader to follow and may not campaign, yet it ticked
on and, as a stranded voter, pulled from the members: it is *dormant*, quiesced for
good, until a message of its group (the leader adding it back) wakes it.

Only groups 1.. of a multi-partition node quiesce (`--partitions` > 1, hence the Garlic
Farm wire): group 0 carries the status entries (every status interval, so it would
rarely stay quiet), and a single-group farm - the JRaft and marker wires, which cannot
express the frames - keeps its bytes of before.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable

from consensus.raft import (AppendEntriesResponse, PullEntries, PullEntriesResponse,
                            PullSnapshot, PullStatus, Role)

if TYPE_CHECKING:
    from consensus.wire.extensions import Quiesce
    from consensus.runtime.group import Group, TurnTicks
    from consensus.runtime.transport import Transport

#: heartbeat intervals a leader stays idle before it quiesces its group
LINGER_HEARTBEATS = 2
#: messages a quiesced group steps without waking: answers to heartbeats it sent before
#: quiescing and observers' pulls (if the step changes anything, `can_quiesce` says so)
QUIET_MESSAGES = frozenset({AppendEntriesResponse, PullEntries, PullSnapshot})


class GroupClock:
    """One group's clock for its Ready driver: the turn's ticks while it runs, none
    while it is quiesced, and the ticks it missed as one catch-up when it wakes."""

    __slots__ = ("turn", "quiesced_at", "owed")

    def __init__(self, turn: "TurnTicks") -> None:
        self.turn = turn
        self.quiesced_at: float | None = None   #: monotonic time it quiesced (None: runs)
        self.owed = 0                           #: catch-up ticks for its next turn

    def due(self) -> int:
        if self.quiesced_at is not None:
            return 0
        owed, self.owed = self.owed, 0
        return self.turn.now + owed


class Quiescer:
    """The node's quiescing policy over its groups (see the module docstring); the node
    calls `before_turn` / `after_turn` around a group's turn and `tick` every turn."""

    def __init__(self, node_id: int, transport: "Transport", *, tick: float,
                 election_ticks: int, heartbeat_ticks: int,
                 peers: Callable[[], Iterable[int]]) -> None:
        self.id, self.transport, self.tick_s, self.peers = node_id, transport, tick, peers
        self.timeout = election_ticks * tick        #: silent this long: a node is down
        self.interval = heartbeat_ticks * tick      #: NodeHeartbeats and liveness checks
        self.floor = heartbeat_ticks                #: a woken leader heartbeats at once
        #: a leader quiesces once idle this long: under a steady trickle of writes an
        #: idle tick between two of them quiesced and woke the group again and again
        self.linger = LINGER_HEARTBEATS * heartbeat_ticks * tick
        self.cap = 2 * election_ticks + heartbeat_ticks     #: past any lease and timeout
        self.quiesced: set["Group"] = set()
        self.dormant: set["Group"] = set()     #: quiesced because they removed this node
        self._next = 0.0
        self.wakes = 0          #: groups woken (metrics, tests)

    # -- liveness ---------------------------------------------------------------------------
    def alive(self, peer: int, now: float) -> bool:
        heard = self.transport.heard.get(peer)
        return heard is not None and now - heard < self.timeout

    def tick(self, now: float) -> None:
        """Every heartbeat interval: a NodeHeartbeat to each peer, and wake the quiesced
        groups whose leader's node went silent (or, led here, whose quorum did)."""
        if now < self._next:
            return
        self._next = now + self.interval
        for peer in self.peers():
            if peer != self.id:
                self.transport.send_node_heartbeat(peer)
        for group in [g for g in self.quiesced - self.dormant if not self._live(g, now)]:
            self.wake(group, now)

    def _live(self, group: "Group", now: float) -> bool:
        raft = group.raft
        if raft.role is Role.LEADER:
            return self._quorum_live(group, now)
        leader = group.quiet_parent if raft.role is Role.OBSERVER else raft.leader_id
        return leader is not None and self.alive(leader, now)

    def _quorum_live(self, group: "Group", now: float) -> bool:
        voters = group.raft.configuration.voters
        live = sum(1 for v in voters if v == self.id or self.alive(v, now))
        return live * 2 > len(voters)

    # -- the groups' turns ------------------------------------------------------------------
    def before_turn(self, group: "Group", now: float) -> None:
        """Wake a quiesced group that has work: a waking message, a client's call."""
        if group.clock.quiesced_at is not None and (
                group.wake_due or group.client_inbox or group.service.has_pending):
            self.wake(group, now)

    def after_turn(self, group: "Group", now: float, ticked: bool) -> None:
        """A quiesced group that can no longer be wakes; a follower takes its leader's
        Quiesce; a leader idle at a tick quiesces."""
        raft = group.raft
        pulls, group.quiet_pulls = group.quiet_pulls, []
        if group.clock.quiesced_at is not None:
            group.notice = None
            if group in self.dormant:
                if not raft.removed or group.driver.busy():
                    self.wake(group, now)           # added back
            elif not raft.can_quiesce() or group.driver.busy():
                self.wake(group, now)
            elif pulls:
                self._park(group, pulls)
            return
        if raft.removed and self._idle(group):
            self._quiesce(group, now)
            self.dormant.add(group)
            return
        notice = group.notice
        if notice is not None:
            if group.driver.busy():
                return              # judged once its Ready is done
            group.notice = None
            if raft.role is Role.FOLLOWER:
                heeded = raft.term == notice.term and raft.leader_id == notice.source
            else:   # an observer: the word of a member it pulls from
                heeded = raft.role is Role.OBSERVER and \
                    notice.source in raft.configuration.members
            if heeded and raft.last_index == notice.index and self._idle(group) \
                    and raft.can_quiesce():
                self._quiesce(group, now)
                group.quiet_parent = notice.source
            return
        if not (raft.role is Role.LEADER and self._idle(group) and raft.can_quiesce()):
            group.idle_since = None
        elif ticked and self._quorum_live(group, now):
            if group.idle_since is None:
                group.idle_since = now
            if now - group.idle_since < self.linger:
                return              # idle a moment between writes: not worth a Quiesce
            term, index, send = raft.term, raft.last_index, self.transport.send_quiesce
            for peer in raft.progress:
                send(peer, group.group, term, index)
            self._quiesce(group, now)

    def on_quiesce(self, group: "Group", msg: Quiesce) -> None:
        """A leader's Quiesce arrived, or a member's answering an observer's pull
        (judged after the group's next turn)."""
        if group.clock.quiesced_at is None:
            group.notice = msg

    def _park(self, group: "Group", pulls: list[tuple[int, int]]) -> None:
        """Observers that pulled from this quiesced group and hold all of it: after our
        answer, a Quiesce; their pulls are answered again when the group wakes."""
        raft = group.raft
        commit, observers = raft.commit_index, raft.configuration.observers
        for source, index in pulls:
            if index == commit + 1 and source in observers:
                self.transport.send_quiesce(source, group.group, raft.term, commit,
                                            answer=True)
                group.quiet_observers.add(source)

    def _unpark(self, group: "Group") -> None:
        """The group woke: answer the observers' parked pulls again (which wakes them)."""
        raft = group.raft
        commit, first = raft.commit_index, raft.log_view.first_index()
        for observer in sorted(group.quiet_observers):
            self.transport.send(PullEntriesResponse(
                term=raft.term, source=self.id, destination=observer,
                status=PullStatus.INDEX_OVERFLOW, index=commit + 1, entries=[],
                min_index=first, commit=commit), group.group)
        group.quiet_observers.clear()

    def peer_closed(self, peer: int, now: float) -> None:
        """A connection with `peer` closed: the quiesced observer groups it told to be
        quiet wake (it may have restarted and forgotten their parked pulls)."""
        for group in [g for g in self.quiesced if g.quiet_parent == peer]:
            self.wake(group, now)

    @staticmethod
    def _idle(group: "Group") -> bool:
        return not (group.inbox or group.client_inbox or group.service.waits_for_time
                    or group.driver.busy())

    def _quiesce(self, group: "Group", now: float) -> None:
        group.clock.quiesced_at = now
        group.idle_since = None
        group.wake_due = False
        self.quiesced.add(group)

    def wake(self, group: "Group", now: float) -> None:
        """Tick the group again, starting with the ticks it missed (one catch-up)."""
        clock = group.clock
        if clock.quiesced_at is None:
            return
        missed = math.ceil((now - clock.quiesced_at) / self.tick_s)
        clock.owed = min(max(missed, self.floor), self.cap)
        clock.quiesced_at = None
        group.wake_due = False
        group.quiet_parent = None
        if group.quiet_observers:
            self._unpark(group)
        self.quiesced.discard(group)
        self.dormant.discard(group)
        self.wakes += 1
