"""The raft source over a farm of several partitions: a `partition` column, one
position per partition in the offsets, a subset by option, a shared row budget."""
from __future__ import annotations

import json

import pytest

from pyspark_farm import LocalFarm
from pyspark_farm.raft.partitioning import partition_for

from tests.spark.partitioned import append_entries

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 3


@pytest.fixture(scope="module")
def farm():
    with LocalFarm(nodes=3, partitions=PARTITIONS) as running:
        yield running


def _rows(frame) -> list[tuple[int, bytes]]:
    return [(r["partition"], bytes(r["value"]))
            for r in frame.select("partition", "index", "value").orderBy("partition", "index")
            .collect()]


@pytest.mark.timeout(120)
def test_batch_read_every_partition_with_its_column(spark, farm):
    written = [row for p in range(PARTITIONS) for row in append_entries(farm, p, 3 + p, "b")]
    frame = (spark.read.format("garlicfarm").options(**farm.options)
             .option("partitions", "all").load())
    assert frame.schema["partition"].dataType.simpleString() == "int"
    assert frame.columns[-1] == "partition"
    assert frame.rdd.getNumPartitions() >= PARTITIONS      # one task per farm partition
    rows = _rows(frame.where("value like 'b-%'"))
    assert rows == written          # each record once, in its partition, in write order
    subset = (spark.read.format("garlicfarm").options(**farm.options)
              .option("partitions", "0,2").load().where("value like 'b-%'"))
    assert _rows(subset) == [row for row in written if row[0] != 1]
    with pytest.raises(Exception, match="'partitions'.*do not exist"):
        (spark.read.format("garlicfarm").options(**farm.options)
         .option("partitions", "0,7").load().collect())
    plain = spark.read.format("garlicfarm").options(**farm.options).load()
    assert "partition" not in plain.columns     # the schema is the options' alone
    with pytest.raises(Exception, match="'partitions'.*has 3 partitions"):
        plain.collect()                         # never read in part
    with pytest.raises(Exception, match="startingOffsets"):
        (spark.read.format("garlicfarm").options(**farm.options).option("partitions", "all")
         .option("startingOffsets", '{"index": 1}').load().collect())


@pytest.mark.timeout(120)
def test_stream_offsets_name_each_partition(spark, farm, tmp_path):
    written = [row for p in range(PARTITIONS) for row in append_entries(farm, p, 4, "s")]
    query = (spark.readStream.format("garlicfarm").options(**farm.options)
             .option("partitions", "all").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "6")
             .load().where("value like 's-%'")
             .writeStream.format("memory").queryName("raft_partitions")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(60)
        assert query.exception() is None
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        ends = [json.loads(p["sources"][0]["endOffset"]) for p in progress]
    finally:
        query.stop()
    assert all(sorted(end) == [str(p) for p in range(PARTITIONS)] for end in ends)
    # the budget is shared: 6 rows a trigger over 3 partitions (2 each, one entry)
    assert len(progress) >= 4 and all(p["numInputRows"] <= 6 for p in progress)
    got = _rows(spark.table("raft_partitions"))
    assert got == written


@pytest.mark.timeout(120)
def test_keyed_write_reads_back_once_each_key_in_one_partition_in_order(spark, farm):
    keys = [f"key{k}" for k in range(12)]
    written = [(keys[i % len(keys)], f"w-{keys[i % len(keys)]}-{i:05d}") for i in range(600)]
    written += [(None, f"w-none-{i:05d}") for i in range(40)]
    frame = spark.createDataFrame(written, "key string, value string")
    assert frame.rdd.getNumPartitions() >= 2        # two tasks
    frame.write.format("garlicfarm").options(**farm.options).mode("append").save()
    read = (spark.read.format("garlicfarm").options(**farm.options)
            .option("partitions", "all").load()
            .where("value like 'w-%'").select("partition", "value").collect())
    got = [(r["partition"], bytes(r["value"]).decode()) for r in read]
    assert sorted(v for _, v in got) == sorted(v for _, v in written)     # each row once
    homes: dict[str, set[int]] = {}
    for partition, value in got:
        homes.setdefault(value.rsplit("-", 1)[0], set()).add(partition)
    keyed = {k: p for k, p in homes.items() if k != "w-none"}
    assert all(len(p) == 1 for p in keyed.values()), keyed        # a key stays in one
    # ... the one Kafka's default partitioner picks (murmur2; crc32 would differ)
    assert {k.removeprefix("w-"): min(p) for k, p in keyed.items()} == \
        {k: partition_for(k, PARTITIONS) for k in keys}
    assert len({min(p) for p in keyed.values()}) >= 2             # keys use the partitions
    assert len(homes["w-none"]) >= 2                              # keyless rows are spread
    for key in keyed:                                             # in write order
        order = [v for _, v in got if v.rsplit("-", 1)[0] == key]
        assert order == sorted(order), key


@pytest.mark.parametrize("key_type, width", [("bigint", 8), ("int", 4)])
def test_integer_keys_route_as_kafkas_number_serializers(spark, farm, key_type, width):
    """A long (int) key is hashed as the 8 (4) big-endian bytes Kafka's LongSerializer
    (IntegerSerializer) sends, so a Java producer keyed by the same numbers agrees."""
    keys = [-7, 0, 1, 2, 255, 65536, 2**31 - 1, -2**31]
    written = [(k, f"i{width}-{k}-{n}") for n in range(4) for k in keys]
    frame = spark.createDataFrame(written, f"key {key_type}, value string")
    frame.write.format("garlicfarm").options(**farm.options).mode("append").save()
    read = (spark.read.format("garlicfarm").options(**farm.options)
            .option("partitions", "all").load()
            .where(f"value like 'i{width}-%'").select("partition", "value").collect())
    got = {bytes(r["value"]).decode(): r["partition"] for r in read}
    assert sorted(got) == sorted(v for _, v in written)
    assert {v: got[v] for _, v in written} == \
        {v: partition_for(k, PARTITIONS, width=width) for k, v in written}
    assert len(set(got.values())) >= 2


def test_a_key_column_without_a_stable_encoding_is_refused_before_any_write(spark, farm):
    frame = spark.createDataFrame([(1.5, "f")], "key double, value string")
    with pytest.raises(Exception, match="strings, bytes or integers.*this one is double"):
        frame.write.format("garlicfarm").options(**farm.options).mode("append").save()
