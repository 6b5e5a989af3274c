"""Key -> partition (pyspark_farm/raft/partitioning.py): Kafka's murmur2 test vectors, the
column path against a plain one-key-at-a-time murmur2, the key encodings (no Spark, no
farm)."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pyspark_farm.raft.partitioning import (NO_PARTITION, KeyTypeError, key_partitions,
                                            murmur2, partition_for, to_positive)

#: Kafka's own expected values (clients' UtilsTest.testMurmur2): key bytes -> murmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def reference_murmur2(data: bytes) -> int:
    """MurmurHash2 as Kafka runs it, one byte string at a time in plain Python: the
    oracle for the vectorised column path."""
    mask, m = 0xFFFFFFFF, 0x5BD1E995
    h = (0x9747B28C ^ len(data)) & mask
    full = len(data) - len(data) % 4
    for at in range(0, full, 4):
        k = int.from_bytes(data[at:at + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[full:]
    if tail:
        for shift, byte in zip((0, 8, 16), tail):
            h ^= byte << shift
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize("key,expected", sorted(KAFKA_VECTORS.items()))
def test_murmur2_is_kafkas(key, expected):
    assert reference_murmur2(key) == expected
    assert murmur2(key) == expected


def test_a_string_column_lands_where_kafka_puts_its_keys():
    keys = [k.decode() for k in KAFKA_VECTORS]
    for partitions in (1, 3, 6, 1000, 2**31 - 1):
        expected = [to_positive(h) % partitions for h in KAFKA_VECTORS.values()]
        assert key_partitions(pa.array(keys), partitions).tolist() == expected
        assert key_partitions(pa.array(keys, pa.large_string()), partitions).tolist() == expected
        assert [partition_for(k, partitions) for k in keys] == expected


def test_to_positive_clears_the_sign_bit_as_kafka_does():
    # not abs(): abs(-2**31) would overflow in Java, and -1 maps to 2**31 - 1
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(-2**31) == 0
    assert to_positive(5) == 5


def test_keys_of_every_length_match_the_one_at_a_time_hash():
    """Mixed lengths (0 to 41 bytes: every tail of 0-3 bytes, up to 10 blocks) take the
    sorted-by-length path; a slice and a chunked column read their buffers at an offset."""
    chooser = random.Random(28)
    keys = [bytes(chooser.randrange(256) for _ in range(chooser.randrange(42)))
            for _ in range(3000)]
    expected = [to_positive(reference_murmur2(k)) % 7 for k in keys]
    column = pa.array(keys, pa.binary())
    assert key_partitions(column, 7).tolist() == expected
    assert key_partitions(column.slice(1001, 999), 7).tolist() == expected[1001:2000]
    chunked = pa.chunked_array([column.slice(0, 10), column.slice(10)])
    assert key_partitions(chunked, 7).tolist() == expected
    assert key_partitions(pa.array(keys, pa.large_binary()), 7).tolist() == expected


def test_fixed_width_keys_and_numbers_hash_their_bytes():
    uuids = [bytes(random.Random(i).randrange(256) for _ in range(16)) for i in range(50)]
    fixed = pa.array(uuids, pa.binary(16)).slice(3)
    assert key_partitions(fixed, 11).tolist() == \
        [to_positive(reference_murmur2(u)) % 11 for u in uuids[3:]]
    numbers = [0, 1, -1, 2**40, -(2**62), 123456789]
    for arrow_type, width in ((pa.int64(), 8), (pa.int32(), 4), (pa.int16(), 2), (pa.int8(), 1)):
        values = [n for n in numbers if -(1 << (8 * width - 1)) <= n < 1 << (8 * width - 1)]
        encoded = [n.to_bytes(width, "big", signed=True) for n in values]   # Kafka's serializers
        assert key_partitions(pa.array(values, arrow_type), 13).tolist() == \
            [to_positive(reference_murmur2(e)) % 13 for e in encoded], arrow_type
    assert partition_for(2**40, 13) == to_positive(reference_murmur2((2**40).to_bytes(8, "big"))) % 13
    assert partition_for(7, 13, width=4) == to_positive(reference_murmur2(b"\0\0\0\x07")) % 13


def test_null_keys_have_no_partition():
    found = key_partitions(pa.array(["21", None, "abc", None]), 5)
    assert found.dtype == np.int32
    assert found.tolist() == [to_positive(KAFKA_VECTORS[b"21"]) % 5, NO_PARTITION,
                              to_positive(KAFKA_VECTORS[b"abc"]) % 5, NO_PARTITION]
    assert key_partitions(pa.array([None, 3], pa.int64()), 5)[0] == NO_PARTITION
    assert key_partitions(pa.array([], pa.string()), 5).tolist() == []


@pytest.mark.parametrize("column", [pa.array([1.5]), pa.array([True]),
                                    pa.array([1], pa.timestamp("us"))])
def test_types_without_a_stable_encoding_are_refused_by_name(column):
    with pytest.raises(KeyTypeError, match=r"'user_id'.*cast it to string or binary"):
        key_partitions(column, 3, name="user_id")


@pytest.mark.parametrize("partitions", [0, -1, 2**31, True, 2.0, "3"])
def test_partition_counts_are_checked(partitions):
    with pytest.raises(ValueError, match="partitions must be an int from 1"):
        key_partitions(pa.array(["a"]), partitions)
    with pytest.raises(ValueError, match="partitions must be an int from 1"):
        partition_for("a", partitions)


def test_a_key_of_no_known_kind_is_refused():
    with pytest.raises(KeyTypeError, match="must be str, bytes or int"):
        partition_for(1.5, 3)  # type: ignore[arg-type]


class _Partition:
    """What `consistent_ends` asks of a partition's client (its answers, fixed)."""

    def __init__(self, applied: int, waiting=(), resolved=(), decisions=None) -> None:
        self.applied, self.waiting, self.resolved = applied, list(waiting), list(resolved)
        self.decisions = decisions or {}

    def last_applied(self, *, stable: bool = False) -> int:
        return self.applied

    def prepared_commits(self, decided_from: int = 0):
        return self.applied, self.waiting, self.resolved

    def batch_status(self, query: str, batch: int):
        index = self.decisions.get((query, batch))
        return None if index is None else \
            type("Decision", (), {"index": index, "aborted": False})()


def test_the_cut_holds_each_batch_whole_at_partition_0s_end():
    """Partition 0 is read first (end 100: decisions below 100 are in the cut); each other
    partition stops before a batch decided at or after 100, or not yet, whether it is
    still prepared there or already rolled forward."""
    from pyspark_farm.raft.partitions import consistent_ends
    zero = _Partition(99, decisions={("q", 1): 40, ("q", 2): 120})
    ends = consistent_ends(zero, {
        0: zero,
        1: _Partition(80, waiting=[(50, "q", 1), (60, "q", 2)]),   # 1 decided, 2 after end
        2: _Partition(80, waiting=[(30, "q", 3)]),                 # never decided
        3: _Partition(80, resolved=[(20, 40), (70, 120)]),         # rolled forward late
        4: _Partition(80, waiting=[(90, "q", 1)]),                 # past its applied end
        5: _Partition(80)})
    assert ends == {0: 100, 1: 60, 2: 30, 3: 70, 4: 81, 5: 81}
