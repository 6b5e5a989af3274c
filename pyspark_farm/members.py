"""Which members of a farm still hold an entry, and reading a range from one that does.

Each member compacts its own log (its own snapshots and retention), so an entry gone at
one member may still be at another: a member restarted from a snapshot, a leader whose
log starts later than a follower's, a member with a shorter `--retain-entries`. Readers
and planners therefore ask every member before they call an entry lost
(docs/exactly-once.md). The leader's view (`get_servers`) tells each member's match index
but not where its log starts, so that is asked of each member (`log_bounds`), with a
client whose short timeout keeps a member that is down from stalling the question.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, TypeVar

from .errors import GarlicFarmSparkError, describe_firsts

if TYPE_CHECKING:
    from consensus.client import ClusterView, FarmClient

T = TypeVar("T")

PROBE_SECONDS = 2.0     # at most, per member asked (a down member costs that much)


class EntriesGone(GarlicFarmSparkError):
    """No member holds `index` any more: every member answered, each log starting after it."""

    def __init__(self, index: int, firsts: dict[int, int]) -> None:
        super().__init__(f"no member of the farm holds entry {index} any more (first "
                         f"indexes: {describe_firsts(firsts)})")
        self.index = index
        self.firsts = firsts

    @property
    def kept(self) -> int:
        """The lowest index some member still holds."""
        return min(self.firsts.values(), default=self.index + 1)


def farm_members(view: "ClusterView") -> dict[int, str]:
    """The endpoint of every member that keeps a log (voters, observers, voters leaving)."""
    return {node_id: endpoint
            for node_id, endpoint in {**view.outgoing, **view.observers, **view.voters}.items()
            if endpoint}


def member_firsts(probe: "FarmClient", members: dict[int, str]) -> dict[int, int | None]:
    """Each member's first log index (None: it did not answer)."""
    from consensus.client import FarmError
    firsts: dict[int, int | None] = {}
    for node_id, endpoint in sorted(members.items()):
        try:
            firsts[node_id] = probe.log_bounds(endpoint)[0]
        except FarmError:
            firsts[node_id] = None
    return firsts


def read_anywhere(client: "FarmClient", probe: "FarmClient", start: int, *,
                  deadline: float, ask: "Callable[[FarmClient, str], T]") -> tuple[str, T]:
    """`ask(member, endpoint)` (a read of entries from `start`) at a member that still
    holds `start`, and its endpoint: each member of the farm in turn (asked with
    `probe`), in rounds with backoff until `deadline`, since a member that is down or
    behind may answer later. EntriesGone when every member answered that its log starts
    after `start`; Unavailable when some never answered."""
    from consensus.client import FarmError, IndexUnderflow, Unavailable
    delay = 0.05
    while True:
        firsts: dict[int, int | None] = {}
        for node_id, endpoint in sorted(farm_members(client.get_servers()).items()):
            try:
                return endpoint, ask(probe, endpoint)
            except IndexUnderflow as exc:
                firsts[node_id] = exc.first_available
            except FarmError:
                firsts[node_id] = None          # down, or not that far yet
        if None not in firsts.values():
            raise EntriesGone(start, {i: f for i, f in firsts.items() if f is not None})
        if time.monotonic() + delay >= deadline:
            raise Unavailable(f"entry {start} is compacted away at some members of the farm "
                              f"and the others did not answer in time (first indexes: "
                              f"{describe_firsts(firsts)})")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
