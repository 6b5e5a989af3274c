"""The JVM reader (`format("garlicfarm-columnar")`) over a farm of several partitions:
the `partitions` option, the `partition` column and the per-partition offsets of the
Python source (tests/spark/test_raft_partitions.py), read over links that select their
partition (GroupSelect) - and checkpoints either reader can continue."""
from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import functions as F

from pyspark_farm import LocalFarm
from pyspark_farm.raft.partitioning import partition_for

from tests.spark.partitioned import append_entries

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 3
COLUMNS = ["cluster", "index", "term", "type", "value", "timestamp", "partition"]


@pytest.fixture(scope="module")
def farm():
    with LocalFarm(nodes=3, partitions=PARTITIONS) as running:
        yield running


def _load(spark, farm, fmt: str = "garlicfarm-columnar", **options):
    return spark.read.format(fmt).options(**farm.options).options(**options).load()


def _full(frame) -> list[tuple]:
    """Every column of every row, in (partition, index, value) order."""
    return [(r.cluster, r["index"], r.term, r.type, bytes(r.value), r.timestamp, r["partition"])
            for r in frame.select(*COLUMNS).orderBy("partition", "index", "value").collect()]


def _pairs(frame) -> list[tuple[int, bytes]]:
    return [(r["partition"], bytes(r["value"]))
            for r in frame.select("partition", "index", "value")
            .orderBy("partition", "index", "value").collect()]


@pytest.mark.timeout(150)
def test_batch_reads_every_partition_as_the_python_source(spark, farm):
    written = [row for p in range(PARTITIONS)
               for row in append_entries(farm, p, 3 + p, "b", records=3)]
    keyed = [(f"key{i % 9}", f"c-key{i % 9}-{i:05d}") for i in range(600)]
    # a committed sink batch routed by key: read as staged payloads, not journal entries
    spark.range(600, numPartitions=2).select(
        F.concat(F.lit("key"), (F.col("id") % 9).cast("string")).alias("key"),
        F.format_string("c-key%d-%05d", F.col("id") % 9, F.col("id")).alias("value")) \
        .write.format("garlicfarm").options(**farm.options).mode("append").save()

    frame = _load(spark, farm, partitions="all")
    assert frame.columns == COLUMNS
    assert frame.schema["partition"].dataType.simpleString() == "int"
    assert frame.rdd.getNumPartitions() >= PARTITIONS      # a task per farm partition at least
    ours = "value like 'b-%' or value like 'c-%'"
    got = _full(frame.where(ours))
    # every column the same as the Python source's, row for row
    assert got == _full(_load(spark, farm, "garlicfarm", partitions="all").where(ours))
    journal = [(row[-1], row[4]) for row in got if row[4].startswith(b"b-")]
    assert journal == written       # each record once, in its partition, in order
    committed = [(row[-1], row[4].decode()) for row in got if row[4].startswith(b"c-")]
    assert sorted(v for _, v in committed) == sorted(v for _, v in keyed)
    assert set(committed) == {(partition_for(k, PARTITIONS), v) for k, v in keyed}
    assert {row[3] for row in got} == {"journal", "commit"}

    subset = _load(spark, farm, partitions="0,2").where("value like 'b-%'")
    assert _pairs(subset) == [row for row in written if row[0] != 1]
    with pytest.raises(Exception, match="'partitions'.*do not exist"):
        _load(spark, farm, partitions="0,7").collect()
    with pytest.raises(Exception, match="'partitions'.*comma-separated"):
        _load(spark, farm, partitions="0,x").collect()
    plain = _load(spark, farm)
    assert "partition" not in plain.columns         # the schema is the options' alone
    with pytest.raises(Exception, match="'partitions'.*has 3 partitions"):
        plain.collect()                             # never read in part


def _stream(spark, farm, fmt: str, checkpoint, sink, since_ms: int):
    return (spark.readStream.format(fmt).options(**farm.options)
            .option("partitions", "all").option("startingTimestamp", str(since_ms))
            .option("maxOffsetsPerTrigger", "9")
            .load().where("value like 's%'")
            .writeStream.format("parquet").option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def _run(query) -> list[dict]:
    try:
        assert query.awaitTermination(90)
        assert query.exception() is None
        return [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()


@pytest.mark.timeout(200)
def test_stream_restarts_from_its_checkpoint_and_the_python_source_continues_it(
        spark, farm, tmp_path, no_queries_left):
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    since_ms = int(time.time() * 1000)      # the entries of this test only (rows read count)
    first = [row for p in range(PARTITIONS)
             for row in append_entries(farm, p, 2, "s1", records=3)]
    progress = _run(_stream(spark, farm, "garlicfarm-columnar", checkpoint, sink, since_ms))
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in progress]
    assert ends and all(sorted(end) == [str(p) for p in range(PARTITIONS)] for end in ends)
    # the budget is shared: 9 rows a trigger over 3 partitions (3 each: one entry each)
    assert len(progress) >= 2 and all(p["numInputRows"] <= 9 for p in progress)
    assert _pairs(spark.read.parquet(str(sink))) == first

    second = [row for p in range(PARTITIONS)

              for row in append_entries(farm, p, 1, "s2", records=3)]
    progress = _run(_stream(spark, farm, "garlicfarm-columnar", checkpoint, sink, since_ms))
    assert sum(p["numInputRows"] for p in progress) == len(second)    # only the new ones
    third = [row for p in range(PARTITIONS)
             for row in append_entries(farm, p, 1, "s3", records=3)]
    # the same checkpoint means the same in the Python source: it reads on from there
    progress = _run(_stream(spark, farm, "garlicfarm", checkpoint, sink, since_ms))
    assert sum(p["numInputRows"] for p in progress) == len(third)
    got = _pairs(spark.read.parquet(str(sink)))
    assert sorted(got) == sorted(first + second + third)    # every record exactly once
    assert len(got) == len(set(got))
