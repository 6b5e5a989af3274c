"""The Dafka partition index against hostile committed values (issue 13 item 3): what a
reader applies - the index value of the farm's kv map and the metadata of the ledger's
batch commits - is refused with a `PartitionIndexError` naming the key, or ignored the
same way by every reader, never a stray exception that would stop every task reading
the partition on every retry; an index that is accepted keeps its invariants."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from pyspark_farm.dafka.index import (MAX_NEXT, GapNotFillable, PartitionIndex,
                                      PartitionIndexError, commit_ranges)

PROPERTIES = settings(max_examples=300, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])
P1 = "A" * 32

numbers = st.one_of(st.integers(min_value=-5, max_value=40),
                    st.sampled_from([MAX_NEXT, MAX_NEXT + 1, -(1 << 70), 10 ** 30]),
                    st.floats(), st.booleans(), st.none(), st.text(max_size=3))
json_values = st.recursive(numbers, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=15)
ranges = st.lists(st.one_of(st.lists(numbers, min_size=2, max_size=2), json_values),
                  max_size=4)
pendings = st.lists(st.one_of(
    st.tuples(numbers, numbers, numbers, st.text(max_size=3), numbers).map(list),
    json_values), max_size=4)
documents = st.fixed_dictionaries(
    {"v": st.one_of(st.just(1), numbers), "query": st.one_of(st.just("q"), numbers),
     "topic": st.one_of(st.just("t"), numbers), "next": numbers, "committed": ranges,
     "pending": pendings, "last": st.one_of(st.none(), st.tuples(
         numbers, numbers, numbers, st.text(max_size=3)).map(list), json_values)})


def valid_index():
    index = PartitionIndex("q", "t")
    index, _ = index.allocate(1, "a", 5)
    index, _ = index.allocate(2, "b", 3)
    return index.decide(1, {1: (0, 5)})


def texts():
    good = valid_index().to_json()
    mutated = st.tuples(st.integers(min_value=0, max_value=len(good) - 1),
                        st.sampled_from('0123456789-.,:[]{}"eEI9 ')).map(
        lambda t: good[:t[0]] + t[1] + good[t[0] + 1:])
    return st.one_of(documents.map(json.dumps), mutated, st.text(max_size=30))


@PROPERTIES
@given(texts())
@example('{"v":1,"query":"q","topic":"t","next":Infinity,"committed":[],"pending":[]}')
@example('{"v":1,"query":"q","topic":"t","next":5,"committed":[],"pending":'
         + "[" * 3000 + "]" * 3000 + "}")
@example('{"v":1,"query":"q","topic":"t","next":-3,"committed":[],"pending":[]}')
@example('{"v":1,"query":"q","topic":"t","next":2,"committed":[[4,1]],"pending":[]}')
@example('{"v":1,"query":"q","topic":"t","next":2,"committed":[],'
         '"pending":[[0,9,1,"d",0]]}')
def test_a_kv_value_is_an_index_or_refused_naming_the_key(text):
    try:
        index = PartitionIndex.from_json(text, "garlicfarm/dafka/t/p")
    except PartitionIndexError as exc:
        assert "'garlicfarm/dafka/t/p'" in str(exc)
        return
    assert 0 <= index.next <= MAX_NEXT
    for start, stop in index.committed + tuple((p.start, p.stop) for p in index.pending):
        assert 0 <= start <= stop <= index.next
    assert PartitionIndex.from_json(index.to_json(), "k") == index
    index.frontier, index.undecided_batches, index.visible(0, index.next)
    index.decide(None, {}), index.decide(3, {b: (0, 1) for b in index.undecided_batches})
    try:
        index.allocate(9, "z", 2)
        index.fill(index.next, -1)
    except (GapNotFillable, PartitionIndexError):
        pass


metadata = st.one_of(
    st.none(), json_values,
    st.fixed_dictionaries({"dafka": st.one_of(json_values, st.fixed_dictionaries(
        {"topic": st.one_of(st.just("t"), numbers),
         "partitions": st.one_of(json_values, st.dictionaries(
             st.one_of(st.just(P1), st.text(max_size=3)),
             st.one_of(st.lists(numbers, max_size=4), json_values), max_size=3))}))}))


@PROPERTIES
@given(metadata)
@example({"dafka": {"topic": "t", "partitions": {P1: [1]}}})            # IndexError
@example({"dafka": {"topic": "t", "partitions": [P1]}})                # AttributeError
@example({"dafka": {"topic": "t", "partitions": {P1: [float("inf"), 2]}}})
@example({"dafka": {"topic": "t", "partitions": {P1: [5, 2, "d"]}}})   # backwards
def test_a_batch_commit_is_read_the_same_way_by_every_reader(meta):
    """Committed metadata is in the ledger for good: whatever it holds, every reader
    gets the same ranges (a malformed partition counts as not in the commit)."""
    first, second = commit_ranges(meta, "t"), commit_ranges(meta, "t")
    assert first == second
    if first is not None:
        for partition, (start, stop) in first.items():
            assert type(start) is int and 0 <= start <= stop <= MAX_NEXT
        valid_index().decide(2, {2: first.get(P1)})


def test_refusals_name_the_key_and_what_to_do():
    with pytest.raises(PartitionIndexError, match="another program"):
        PartitionIndex.from_json('{"v":1,"query":"q","topic":"t","next":Infinity,'
                                 '"committed":[],"pending":[]}', "garlicfarm/dafka/t/p")
