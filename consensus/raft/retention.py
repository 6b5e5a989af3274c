"""Which snapshot catches a lagging member up, and how far the log may be compacted.

The application may need entries *below* its latest snapshot: the farm's sink ledger
reads the staged entries of open batches, and of committed batches within retention,
from the log (docs/exactly-once.md). The leader keeps them, but if it caught a lagging
member up with its latest snapshot, that member's log would start after the snapshot and
miss them for good. So (docs/raft-core.md, "Retention"):

* a member that lags behind the log's start installs the **oldest** kept snapshot at or
  above the log's base (`first_index - 1`); the leader then sends it every entry after
  that snapshot, so its log ends up covering what the leader's covers;
* the log is compacted only up to a kept snapshot: it starts just after the newest
  snapshot at or below the first index still needed, so such a snapshot always exists;
* pruning keeps that snapshot besides the newest few.

Pure functions over snapshot indexes, shared by the runtime's disk storage and the
simulator's, so the simulator checks the rule the nodes run.
"""
from __future__ import annotations

import bisect
from typing import Sequence


def catch_up_index(snapshot_indexes: Sequence[int], first_index: int) -> int | None:
    """The snapshot a member behind `first_index` installs: the oldest at or above the
    log's base (`first_index - 1`), so every entry after it is in the log. None when
    there is none (the log was never compacted past a snapshot)."""
    ordered = sorted(snapshot_indexes)
    at = bisect.bisect_left(ordered, first_index - 1)
    return ordered[at] if at < len(ordered) else None


def compaction_point(snapshot_indexes: Sequence[int], needed_from: int) -> int | None:
    """Where the log may start when entries from `needed_from` on are still needed: just
    after the newest snapshot at or below `needed_from - 1` (that snapshot then catches
    lagging members up, see `catch_up_index`). None: no snapshot is old enough, keep
    the log as it is."""
    ordered = sorted(snapshot_indexes)
    at = bisect.bisect_right(ordered, needed_from - 1)
    return ordered[at - 1] + 1 if at else None


def snapshots_to_keep(snapshot_indexes: Sequence[int], first_index: int, newest: int
                      ) -> set[int]:
    """The newest `newest` snapshots, plus the one that catches members up to a log that
    starts at `first_index`."""
    ordered = sorted(snapshot_indexes)
    keep = set(ordered[len(ordered) - newest:]) if newest > 0 else set()
    catch_up = catch_up_index(ordered, first_index)
    if catch_up is not None:
        keep.add(catch_up)
    return keep
