"""The dafka kind's pure logic, without Spark or sockets: partition indexes (allocation,
fillers, decisions), offsets and subscriptions, admission control and task planning,
the sink's spool digest and partition names, option checks."""
from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pytest

from pyspark_farm.admission import SourceLimits
from pyspark_farm.dafka import kind
from pyspark_farm.dafka.index import (GapNotFillable, PartitionIndex, PartitionIndexError,
                                      PendingRange, commit_ranges, merge)
from pyspark_farm.dafka.offsets import OffsetsSpec, Subscription, offsets_json, \
    offsets_spec_parser, parse_offsets
from pyspark_farm.dafka.planning import batch_ends, plan_tasks, task_counts
from pyspark_farm.dafka.sink import Spool, sink_partition
from pyspark_farm.errors import OptionError
from pyspark_farm.options import UnknownOptionWarning
from tests.spark.helpers import dafka_source_schema

P1, P2 = "A" * 32, "B" * 32


# --- the partition index ---------------------------------------------------------------------

def test_allocation_is_idempotent_per_batch_and_output_and_fresh_otherwise():
    index = PartitionIndex("q", "t")
    index, first = index.allocate(0, "d0", 10)
    assert first == 0 and index.next == 10
    again, start = index.allocate(0, "d0", 10)          # a retry with the same output
    assert start == 0 and again == index
    index, other = index.allocate(0, "d1", 7)           # a retry whose output differs
    assert other == 10 and index.next == 17
    index, later = index.allocate(1, "d0", 3)           # same bytes, next batch: new range
    assert later == 17 and index.next == 20
    assert [(p.start, p.stop, p.batch) for p in index.pending] == [(0, 10, 0), (10, 17, 0),
                                                                  (17, 20, 1)]
    with pytest.raises(ValueError):
        index.allocate(2, "d", 0)


def test_fill_marks_the_hole_and_a_filled_range_is_never_reused_or_committed():
    index, _ = PartitionIndex("q", "t").allocate(0, "a", 10)   # attempt 0 died at 4
    index, start = index.allocate(0, "b", 5)                   # attempt 1, other output
    filled, fill_from = index.fill(start, stored_head=3)
    assert (start, fill_from) == (10, 4)
    assert [p.filled for p in filled.pending] == [True, False]
    # The first output again (a restart) must not reuse the range that holds fillers.
    filled, again = filled.allocate(0, "a", 10)
    assert again == 15
    # Commit names attempt 0's range: it holds fillers, so it does not become visible.
    decided = filled.decide(0, {0: (0, 10)})
    assert decided.committed == () and decided.pending == ()
    assert decided.visible(0, 25) == []
    # Stores already past the start: nothing to fill.
    assert index.fill(start, stored_head=12) == (index, 10)


def test_committed_data_missing_from_the_stores_is_never_filled():
    index, _ = PartitionIndex("q", "t").allocate(0, "a", 10)
    index = index.decide(0, {0: (0, 10)})
    index, start = index.allocate(1, "b", 5)
    assert index.covered_below(start)
    with pytest.raises(GapNotFillable, match=r"\[\(0, 10\)\]") as caught:
        index.fill(start, stored_head=6)
    assert caught.value.fill_from == 7


def test_decisions_frontier_and_visible_ranges():
    index = PartitionIndex("q", "t")
    for batch, digest, count in [(0, "x", 5), (0, "y", 5), (1, "z", 4), (2, "w", 6)]:
        index, _ = index.allocate(batch, digest, count)
    assert index.frontier == 0
    # Batch 0 committed the second attempt; batch 1 committed without this partition;
    # batch 2 is still running.
    decided = index.decide(1, {0: (5, 10), 1: None})
    assert decided.committed == ((5, 10),)
    assert [p.batch for p in decided.pending] == [2]
    assert decided.frontier == 14 and decided.undecided_batches == [2]
    assert decided.visible(0, 14) == [(5, 10)]
    assert decided.visible(7, 9) == [(7, 9)]
    done = decided.decide(2, {2: (14, 20)})
    assert done.committed == ((5, 10), (14, 20)) and done.frontier == done.next == 20
    # A replay of the last committed batch with the same output gets its range again;
    # other output gets a fresh one (garbage once decided).
    assert done.last == PendingRange(14, 20, 2, "w")
    assert done.allocate(2, "w", 6) == (done, 14)
    assert done.allocate(2, "other", 6)[1] == 20
    assert PartitionIndex.from_json(done.to_json(), "k") == done
    assert not done.covered_below(20)
    # Batches never committed below the last committed one are garbage.
    assert index.decide(5, {}).committed == () and index.decide(5, {}).frontier == 20


def test_index_json_round_trip_and_corrupt_values():
    index, _ = PartitionIndex("q", "t").allocate(3, "d", 4)
    index, _ = index.fill(4, -1)
    back = PartitionIndex.from_json(index.to_json(), "k")
    assert back == index and back.pending == (PendingRange(0, 4, 3, "d", True),)
    for bad in ("", "[]", '{"v": 2}', '{"v": 1, "query": "q"}', '{"v":1,"query":"q","topic":'
                '"t","next":1,"committed":[[0]],"pending":[]}'):
        with pytest.raises(PartitionIndexError, match="'k'"):
            PartitionIndex.from_json(bad, "k")


def test_merge_and_commit_metadata():
    assert merge([(5, 7), (0, 2), (2, 5), (9, 9), (8, 10)]) == ((0, 7), (8, 10))
    meta = {"dafka": {"topic": "t", "partitions": {P1: [0, 5, "d"]}}}
    assert commit_ranges(meta, "t") == {P1: (0, 5)}
    assert commit_ranges(meta, "other") is None and commit_ranges(None, "t") is None


# --- offsets and subscriptions -----------------------------------------------------------------

def test_offsets_json_and_specs():
    offsets = {("t", P2): 5, ("t", P1): 0, ("a", P1): 9}
    as_json = offsets_json(offsets)
    assert list(as_json) == ["a", "t"] and list(as_json["t"]) == [P1, P2]
    assert parse_offsets(json.loads(json.dumps(as_json))) == offsets
    for bad in ({"t": {P1: -1}}, {"t": {"x": 1}}, {"t": 3}, [1], {"t": {P1: True}}):
        with pytest.raises(ValueError, match="checkpoint"):
            parse_offsets(bad)
    parse = offsets_spec_parser("startingOffsets")
    assert parse(" Earliest ").resolve(("t", P1), 40) == 0
    assert parse("latest").resolve(("t", P1), 40) == 40
    spec = parse(json.dumps({"t": {P1: 7, P2: -1}}))
    assert spec.resolve(("t", P1), 40) == 7 and spec.resolve(("t", P2), 40) == 40
    assert spec.resolve(("u", P1), 40) == 0          # not named: appeared later, earliest
    assert OffsetsSpec("json", {("t", P1): -2}).resolve(("t", P1), 3) == 0
    for bad, reason in (("soon", "expected earliest"), ('{"t": {"%s": -3}}' % P1, "-2"),
                        ('{"t": {"p": 1}}', "address")):
        with pytest.raises(OptionError, match=reason):
            parse(bad)


def test_subscriptions():
    topics = Subscription.from_options("a, b", None, None)
    assert topics.topic_queries == ("a", "b") and topics.wants(("a", P1))
    assert not topics.wants(("ab", P1))               # prefix matches are filtered out
    pattern = Subscription.from_options(None, "or.*", None)
    assert pattern.topic_queries == ("",) and pattern.wants(("orders", P1))
    assert not pattern.wants(("xorders", P1))
    assigned = Subscription.from_options(None, None, json.dumps({"t": [P1]}))
    assert assigned.topic_queries == ("t",)
    assert assigned.wants(("t", P1)) and not assigned.wants(("t", P2))
    for args, reason in (((None, None, None), "exactly one"), (("a", "b", None), "exactly one"),
                         ((" , ", None, None), "one or more"), ((None, "(", None), "regular"),
                         ((None, None, '{"t": ["x"]}'), "addresses"),
                         ((None, None, "[1]"), "expected")):
        with pytest.raises(OptionError, match=reason):
            Subscription.from_options(*args)


# --- admission and planning --------------------------------------------------------------------

def test_max_offsets_are_split_across_partitions_by_volume():
    a, b, c = ("t", P1), ("t", P2), ("u", P1)
    starts = {a: 10, b: 0}
    latest = {a: 110, b: 300, c: 100}                 # c is new: it starts at 0
    assert batch_ends(starts, latest, SourceLimits()) == latest
    ends = batch_ends(starts, latest, SourceLimits(max_rows=50))
    taken = {k: ends[k] - starts.get(k, 0) for k in ends}
    assert sum(taken.values()) == 50
    assert taken == {a: 10, b: 30, c: 10}             # 100 : 300 : 100
    small = batch_ends(starts, latest, SourceLimits(max_rows=1))
    assert sum(small[k] - starts.get(k, 0) for k in small) == 1
    # A partition the stores no longer list keeps its offset.
    assert batch_ends({a: 10}, {}, SourceLimits(max_rows=5)) == {a: 10}


def test_min_offsets_wait_for_rows_or_the_delay():
    a = ("t", P1)
    limits = SourceLimits(min_rows=100, max_trigger_delay=5.0)
    assert batch_ends({a: 0}, {a: 40}, limits, waited=1.0) == {a: 0}
    assert batch_ends({a: 0}, {a: 40}, limits, waited=6.0) == {a: 40}
    assert batch_ends({a: 0}, {a: 40}, limits, available_now=True) == {a: 40}
    assert batch_ends({a: 0}, {a: 150}, limits) == {a: 150}


def test_tasks_cover_the_ranges_in_order_with_bounded_size():
    tasks = plan_tasks(("t", P1), [(0, 5), (8, 20), (30, 31)], per_task=6)
    assert [t.ranges for t in tasks] == [((0, 5), (8, 9)), ((9, 15),), ((15, 20), (30, 31))]
    assert all(t.topic == "t" and t.partition == P1 for t in tasks)
    assert sum(t.offsets for t in tasks) == 5 + 12 + 1
    assert plan_tasks(("t", P1), [], per_task=6) == []


# --- the sink's pieces -------------------------------------------------------------------------

def _spool(*chunks) -> Spool:
    spool = Spool()
    for chunk in chunks:
        spool.add(pa.array(chunk, pa.binary()))
    return spool


def test_spool_digest_ignores_chunking_and_sees_order_and_boundaries():
    whole = _spool([b"ab", b"c", None, b""])
    cut = _spool([b"ab"], [], [b"c", None], [b""])
    try:
        assert whole.digest == cut.digest and whole.rows == 4 and whole.nbytes == 3
        assert list(cut.records()) == [b"ab", b"c", b"", b""]
        for other in ([b"c", b"ab", None, b""], [b"a", b"bc", None, b""]):
            different = _spool(other)
            assert different.digest != whole.digest
            different.close()
    finally:
        whole.close()
        cut.close()


def test_sink_partitions_are_deterministic_addresses():
    first = sink_partition("query-1", "orders", 0)
    assert first == sink_partition("query-1", "orders", 0)
    assert len(first) == 32 and first == first.upper()
    assert len({first, sink_partition("query-1", "orders", 1),
                sink_partition("query-2", "orders", 0),
                sink_partition("query-1", "other", 0)}) == 4


# --- options -----------------------------------------------------------------------------------

def test_options_name_what_is_wrong():
    base = {"kind": "dafka", "tower": "tcp://127.0.0.1:5556", "subscribe": "t",
            "endpoints": "127.0.0.1:9000"}
    assert kind.schema(base).startswith("topic string, partition string, offset long")
    with pytest.raises(OptionError, match="readCommitted"):
        kind.schema({k: v for k, v in base.items() if k != "endpoints"})
    kind.schema({**{k: v for k, v in base.items() if k != "endpoints"},
                 "readCommitted": "false"})
    with pytest.raises(OptionError, match="'tower'"):
        kind.schema({**base, "tower": "localhost"})
    with pytest.raises(OptionError, match="minOffsetsPerTrigger"):
        kind.schema({**base, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOptionWarning)
        kind.schema({**base, "dafka.beacon/interval": "100"})   # passed through, not unknown
    with pytest.warns(UnknownOptionWarning, match="startingoffset"):
        kind.schema({**base, "startingOffset": "earliest"})
    config = kind.dafka_config(("tcp://127.0.0.1:7000",), {"dafka.beacon/interval": "250",
                                                           "dafka.beacon/pub_address":
                                                           "tcp://127.0.0.1:7100"})
    assert config.beacon_interval == 0.25 and config.tower_pub == ("tcp://127.0.0.1:7100",)
    with pytest.raises(OptionError, match="dafka"):
        kind.dafka_config(("tcp://127.0.0.1:7000",), {"dafka.beacon/interval": "soon"})


def test_min_partitions_splits_ranges_evenly_in_proportion_to_size():
    big, small = ("t", P1), ("t", P2)
    # Enough tasks already (one per 100 offsets): minPartitions changes nothing.
    assert task_counts({big: 1000, small: 50}, 3, per_task=100) == {}
    # 2 tasks by size, 10 asked: shared 1000:200 -> 8.33:1.67 -> 8 and 2.
    assert task_counts({big: 1000, small: 200}, 10, per_task=1000) == {big: 8, small: 2}
    # Each partition keeps one task (here on top of the 4 shared out: at least 4);
    # none gets more tasks than offsets.
    assert task_counts({big: 1000, small: 1}, 4, per_task=1000) == {big: 4}
    assert task_counts({big: 3, small: 0}, 10, per_task=1000) == {big: 3}
    assert task_counts({}, 10, per_task=100) == {}
    # Even sizes (differ by one at most), across the visible ranges, in order.
    tasks = plan_tasks(big, [(0, 5), (8, 20), (30, 31)], per_task=1000, parts=4)
    assert [t.ranges for t in tasks] == [((0, 5),), ((8, 13),), ((13, 17),),
                                         ((17, 20), (30, 31))]
    assert [t.offsets for t in tasks] == [5, 5, 4, 4]
    tasks = plan_tasks(big, [(10, 17)], per_task=1000, parts=3)
    assert [t.ranges for t in tasks] == [((10, 13),), ((13, 15),), ((15, 17),)]
    assert len(plan_tasks(big, [(0, 2)], per_task=1000, parts=5)) == 2


def test_min_partitions_option():
    base = {"kind": "dafka", "tower": "tcp://127.0.0.1:5556", "subscribe": "t",
            "readCommitted": "false"}
    schema_ = dafka_source_schema()
    assert kind.batch_reader(base, schema_).settings.min_partitions == 1
    assert kind.batch_reader({**base, "minPartitions": "8"}, schema_
                             ).settings.min_partitions == 8
    for bad in ("0", "-1", "two"):
        with pytest.raises(OptionError, match="minPartitions"):
            kind.batch_reader({**base, "minPartitions": bad}, schema_)
