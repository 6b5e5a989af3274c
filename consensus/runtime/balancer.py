"""Leaders spread over the nodes: a node that leads more than its share of its groups
hands the extra leaderships to the live nodes that lead the fewest, with the core's
leader transfer (sans-I/O: it reads the cores and calls `transfer_leader`).

The share is ceil(groups / live voters), the farm's groups (with --replicas a node hosts
only some; it counts the leaders of those it hosts). Every node runs the same rule on its own view:
only a node above its share acts, and only towards a node that stays within the share
after the move, so moves never chase each other; when a node comes back the share
shrinks and the nodes above it shed leaderships to it. Live: ourselves and the followers
that answered us lately in a group we lead (a node that leads nothing moves nothing,
so it needs no view).

Drained nodes (Kafka's controlled shutdown, `garlicfarm transfer-leader --from N`): the
ids listed in partition 0's key `DRAINED_KEY` (replicated, so every node reads the same
list and it survives restarts) are never targets and count for no share; a drained node
that leads hands every leadership away. The list is read at every look.
"""
from __future__ import annotations

import logging
import math
from typing import Callable, Protocol, Sequence

from consensus.raft import FollowerContact, Role
from consensus.common.partitions import DRAINED_KEY, parse_drained
from consensus.raft.errors import RaftError

log = logging.getLogger("garlicfarm.balancer")

INTERVAL = 0.5      #: seconds between looks at the leaders
SETTLE = 2.0        #: seconds after a round of transfers before the next (they finish)
class BalancedCore(Protocol):
    """What the balancer reads of a group's core (RaftNode implements it)."""

    @property
    def role(self) -> Role: ...
    @property
    def leader_id(self) -> int | None: ...
    @property
    def last_index(self) -> int: ...
    @property
    def transferring_to(self) -> int | None: ...
    @property
    def configuration(self): ...
    @property
    def progress(self): ...

    def follower_contact(self) -> dict[int, FollowerContact]: ...
    def transfer_leader(self, target: int) -> None: ...


class Balancer:
    """See the module docstring; `tick(now)` from the node's loop."""

    def __init__(self, node_id: int, cores: Sequence[BalancedCore],
                 drained: Callable[[], frozenset[int]] = frozenset,
                 alive: Callable[[int], bool] = lambda peer: True, *,
                 groups: int | None = None) -> None:
        self.id, self.cores, self.drained = node_id, list(cores), drained
        #: the farm's groups (with --replicas a node hosts fewer: the share is the farm's)
        self.groups = len(self.cores) if groups is None else groups
        self.alive = alive      #: the node's liveness of a peer (a quiesced core's is stale)
        self._next = 0.0
        self.moves = 0          #: transfers started (tests, logs)

    def leaders(self) -> dict[int, int]:
        """Groups led per voter, as this node sees them."""
        counts: dict[int, int] = {}
        for core in self.cores:
            for voter in core.configuration.voters:
                counts.setdefault(voter, 0)
            if core.leader_id is not None:
                counts[core.leader_id] = counts.get(core.leader_id, 0) + 1
        return counts

    def tick(self, now: float) -> int:
        """Start the transfers this node owes now; how many it started."""
        if now < self._next:
            return 0
        self._next = now + INTERVAL
        mine = [core for core in self.cores if core.role is Role.LEADER]
        if not mine or any(core.transferring_to is not None for core in mine):
            return 0
        live = {self.id}
        for core in mine:
            live |= {peer for peer, contact in core.follower_contact().items()
                     if contact.reachable and peer in core.configuration.voters
                     and self.alive(peer)}
        drained = self.drained()
        live -= drained
        if not live:
            return 0
        share = math.ceil(self.groups / len(live))
        mine_at_most = 0 if self.id in drained else share
        counts = self.leaders()
        started = 0
        for core in mine:
            if counts.get(self.id, 0) <= mine_at_most:
                break
            target = self._target(core, live, counts, share)
            if target is None:
                continue
            try:
                core.transfer_leader(target)
            except RaftError as exc:
                log.info("node %d: no leader transfer to node %d: %s", self.id, target, exc)
                continue
            counts[self.id] -= 1
            counts[target] = counts.get(target, 0) + 1
            started += 1
        if started:
            self.moves += started
            self._next = now + SETTLE
            log.info("node %d: leads more than its share of %d groups (%d live nodes); "
                     "transferring %d leadership(s)", self.id, share, len(live), started)
        return started

    def _target(self, core: BalancedCore, live: set[int], counts: dict[int, int],
                share: int) -> int | None:
        """The live, caught-up voter of `core`'s group that leads the fewest groups and
        stays within the share with one more (lowest id on ties)."""
        last, progress = core.last_index, core.progress
        fits = [peer for peer in core.configuration.voters
                if peer != self.id and peer in live and counts.get(peer, 0) + 1 <= share
                and peer in progress and progress[peer].match >= last]
        return min(fits, key=lambda peer: (counts.get(peer, 0), peer)) if fits else None
