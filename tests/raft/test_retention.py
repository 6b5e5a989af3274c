"""retention.py: the snapshot that catches a member up and where compaction may stop."""
from __future__ import annotations

from hypothesis import given, strategies as st

from consensus.raft.retention import catch_up_index, compaction_point, snapshots_to_keep

indexes = st.sets(st.integers(1, 500), max_size=12)


def test_the_oldest_snapshot_at_or_above_the_log_base_catches_up():
    assert catch_up_index([10, 20, 30], 21) == 20       # base 20: that one
    assert catch_up_index([10, 20, 30], 22) == 30       # 20 is below the base 21
    assert catch_up_index([10, 20, 30], 32) is None
    assert catch_up_index([], 1) is None


def test_compaction_stops_after_the_newest_snapshot_below_what_is_needed():
    assert compaction_point([10, 20, 30], 25) == 21
    assert compaction_point([10, 20, 30], 21) == 21
    assert compaction_point([10, 20, 30], 20) == 11
    assert compaction_point([10, 20, 30], 10) is None


@given(indexes, st.integers(1, 600), st.integers(0, 40))
def test_a_compacted_log_can_always_be_caught_up_with(snapshots, needed_from, slack):
    """Wherever compaction stops (or a whole-segment cut before it), a kept snapshot lets
    a lagging member continue with the log's entries and get all that is needed."""
    point = compaction_point(snapshots, needed_from)
    if point is None:
        assert all(s >= needed_from for s in snapshots)
        return
    assert point <= needed_from and point - 1 in snapshots
    first = max(1, point - slack)           # segments are dropped whole: may start lower
    catch_up = catch_up_index(snapshots, first)
    assert catch_up is not None and first - 1 <= catch_up <= point - 1 < needed_from
    assert catch_up in snapshots_to_keep(snapshots, first, 1)
    assert max(snapshots) in snapshots_to_keep(snapshots, first, 1)
