"""Quiescing in the simulator (`--quiesce`), by the runtime's rules
(consensus/runtime/quiesce.py, docs/runtime.md "Quiescing idle groups"), so that the
seeds check them under every fault the nemesis has:

- a leader whose core says it may (`RaftNode.can_quiesce`), with nothing to hand out or
  sync and a quorum of its voters' servers heard lately, sends each tracked peer a
  `QuiesceNotice` (through the faulty network, in the packets of its server pair) and
  stops ticking; a follower of that leader and term holding exactly that index,
  committed, stops too;
- a replica wakes on any message but answers to heartbeats and observers' pulls, on a
  client's or the nemesis's call (`SimHost.awake`), when its core can no longer
  quiesce, and when the server of its leader (or a quorum of its voters', for a
  leader) has not been heard for an election timeout; it then ticks the steps it
  missed at once (one catch-up, at least a heartbeat interval, capped), before the
  message or call is stepped: a lease is judged by a clock that never lags;
- each server sends every other one an empty packet (the NodeHeartbeat) every
  heartbeat interval; any packet delivered counts as hearing its source.

The runtime's leader waits two heartbeat intervals of idleness before it quiesces (a
trickle of writes would churn); the simulator quiesces at the first chance, the
harsher schedule for safety (more quiesces and wakes per seed). The checkers see
nothing new: a quiescing bug shows as a safety violation (a stale lease
read) or as a group that never converges in the calm phase.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from consensus.raft import RaftOptions, Role
from consensus.runtime.quiesce import QUIET_MESSAGES

from .network import Packet

if TYPE_CHECKING:
    from .cluster import SimCluster
    from .host import SimHost


@dataclass(frozen=True, slots=True)
class QuiesceNotice:
    """The leader `source` (in `term`) quiesced the group at `index` (the Quiesce frame)."""
    term: int
    source: int
    destination: int
    index: int


class SimQuiescer:
    """The runtime's quiescing policy over a simulated run's replicas."""

    def __init__(self, cluster: "SimCluster", options: RaftOptions) -> None:
        self.cluster = cluster
        self.timeout = options.election_timeout_min     #: steps of silence: a server is down
        self.interval = options.heartbeat_interval
        self.floor = options.heartbeat_interval
        self.cap = 2 * options.election_timeout_max + options.heartbeat_interval
        self.heard: dict[tuple[int, int], int] = {}     #: (from, to) -> step last delivered
        self.quiesces = self.wakes = 0
        for server in cluster.servers.values():
            for host in server.replicas.values():
                host.waker = self.wake_now

    # -- the wire ----------------------------------------------------------------------------
    def delivered(self, packet: Packet, step: int) -> None:
        self.heard[(packet.source, packet.destination)] = step

    def intercept(self, host: "SimHost", msg) -> bool:
        """Before `msg` is stepped at `host`: a notice is kept (True: not a core message);
        a waking message wakes a quiesced replica first."""
        if type(msg) is QuiesceNotice:
            if host.quiesced_at is None:
                host.notice = msg
            return True
        host.notice = None
        if host.quiesced_at is not None and type(msg) not in QUIET_MESSAGES:
            self.wake_now(host)
        return False

    def _alive(self, source: int, destination: int, step: int) -> bool:
        heard = self.heard.get((source, destination))
        return heard is not None and step - heard < self.timeout

    # -- once per step -------------------------------------------------------------------------
    def after_step(self, step: int) -> None:
        cluster = self.cluster
        if step % self.interval == 0:
            up = [s for s in cluster.servers.values() if s.up]
            for server in up:
                for other in cluster.servers:
                    if other != server.id:
                        cluster.network.send(Packet(server.id, other, []), step)
        for server in cluster.servers.values():
            for host in server.running():
                self._judge(host, step)

    def _judge(self, host: "SimHost", step: int) -> None:
        node = host.node
        busy = node.has_ready() or host.driver.syncing
        if host.quiesced_at is not None:
            if busy or not node.can_quiesce() or not self._live(host, step):
                self.wake(host, step)
            return
        notice, host.notice = host.notice, None
        if busy or not node.can_quiesce():
            return
        if notice is not None:
            if node.role is Role.FOLLOWER and node.term == notice.term \
                    and node.leader_id == notice.source and node.last_index == notice.index:
                self._quiesce(host, step)
            return
        if node.role is Role.LEADER and self._quorum_live(host, step):
            for peer in node.progress:
                self.cluster.post(host.group, QuiesceNotice(node.term, host.id, peer,
                                                            node.last_index))
            self._quiesce(host, step)

    def _live(self, host: "SimHost", step: int) -> bool:
        node = host.node
        if node.role is Role.LEADER:
            return self._quorum_live(host, step)
        return node.leader_id is not None and self._alive(node.leader_id, host.id, step)

    def _quorum_live(self, host: "SimHost", step: int) -> bool:
        voters = host.node.configuration.voters
        live = sum(1 for v in voters if v == host.id or self._alive(v, host.id, step))
        return live * 2 > len(voters)

    def _quiesce(self, host: "SimHost", step: int) -> None:
        host.quiesced_at = step
        self.quiesces += 1

    def wake(self, host: "SimHost", step: int | None = None) -> None:
        """Tick again from the next tick on, the missed steps first (one catch-up)."""
        if host.quiesced_at is None:
            return
        step = self.cluster.step_no if step is None else step
        host.owed = min(max(step - host.quiesced_at, self.floor), self.cap) - 1
        host.quiesced_at = None
        self.wakes += 1

    def wake_now(self, host: "SimHost") -> None:
        """Wake and tick at once (before a message or a call is stepped)."""
        if host.quiesced_at is not None:
            self.wake(host)
            host.tick()
