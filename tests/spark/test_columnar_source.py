"""The JVM reader, `format("garlicfarm-columnar")`, against real farms: the same rows as
the Python source (`format("garlicfarm")`) for every kind of entry, with the columns a
query reads, split batches, streams with admission control, and the errors a user meets
(bad options, wrong credentials, entries compacted away)."""
from __future__ import annotations

import json
import time

import pytest
from pyspark.sql import functions as F

from pyspark_farm import LocalFarm
from tests.spark.helpers import log_range

pytestmark = [pytest.mark.spark]

COLUMNS = ["cluster", "index", "term", "type", "value", "timestamp"]


def columnar(spark, farm, start: int, stop: int | None = None, **options):
    return log_range(spark, farm, start, stop, fmt="garlicfarm-columnar", **options)


def rows(frame) -> list[tuple]:
    """Every row of every column, in log order (index, then the order within an entry is
    kept by a stable sort on index alone)."""
    collected = frame.select(*COLUMNS).collect()
    out = [(r.cluster, r["index"], r.term, r.type, bytes(r.value), r.timestamp)
           for r in collected]
    return sorted(out, key=lambda row: row[1])


def write_batch(spark, farm, count: int, partitions: int) -> None:
    """A committed sink batch of `count` rows staged by `partitions` tasks."""
    frame = spark.range(count, numPartitions=partitions).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).cast("binary").alias("value"))
    frame.write.format("garlicfarm").options(**farm.options).mode("append").save()


@pytest.fixture(scope="module")
def mixed_log(spark):
    """A farm whose log holds journal entries (one with an empty record, one with many),
    two committed sink batches (one of many payloads), and the farm's own entries: the
    range [first, end) every test reads."""
    with LocalFarm(nodes=3) as farm:
        client = farm.client()
        first = client.last_applied() + 1
        client.append([b"a", b"", b"ccc"])
        client.append([b"x" * 1000])
        write_batch(spark, farm, 5000, 4)
        client.append_many([[f"j{n}-{k}".encode() for k in range(n % 5 + 1)] for n in range(200)])
        write_batch(spark, farm, 30000, 8)
        client.append([b"last"])
        end = client.last_applied() + 1
        client.close()
        yield farm, first, end


def test_same_rows_as_the_python_source(spark, mixed_log):
    farm, first, end = mixed_log
    expected = rows(log_range(spark, farm, first, end))
    got = rows(columnar(spark, farm, first, end))
    assert {r[3] for r in expected} == {"journal", "commit"}
    assert len(expected) == 3 + 1 + 5000 + sum(n % 5 + 1 for n in range(200)) + 30000 + 1
    assert got == expected


def test_split_batches_read_whole_across_tasks(spark, mixed_log):
    """With minPartitions 8 the 8-payload batch is cut between tasks: each payload is
    read once, by one task."""
    farm, first, end = mixed_log
    frame = columnar(spark, farm, first, end, minPartitions="8")
    assert frame.rdd.getNumPartitions() >= 8
    assert rows(frame) == rows(log_range(spark, farm, first, end))


def test_pruned_columns_and_counts(spark, mixed_log):
    farm, first, end = mixed_log
    frame = columnar(spark, farm, first, end)
    expected = log_range(spark, farm, first, end)
    assert frame.count() == expected.count()
    assert sorted(bytes(r.value) for r in frame.select("value").collect()) == \
        sorted(bytes(r.value) for r in expected.select("value").collect())
    by_type = {r.type: r["count"] for r in frame.groupBy("type").count().collect()}
    assert by_type == {r.type: r["count"] for r in expected.groupBy("type").count().collect()}


def test_reads_at_followers(spark, mixed_log):
    farm, first, end = mixed_log
    frame = columnar(spark, farm, first, end, readFrom="followers", minPartitions="4")
    assert rows(frame) == rows(log_range(spark, farm, first, end))


def test_stream_with_admission_control(spark, mixed_log, tmp_path, no_queries_left):
    """An availableNow stream with maxOffsetsPerTrigger reads the range in several
    micro-batches, every row once."""
    farm, first, end = mixed_log
    seen: list[tuple[int, int]] = []

    def collect(batch, batch_id):
        seen.append((batch_id, batch.count()))

    query = (spark.readStream.format("garlicfarm-columnar").options(**farm.options)
             .option("startingOffsets", json.dumps({"index": first}))
             .option("maxOffsetsPerTrigger", "10000").load()
             .where(F.col("index") < end)
             .writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(180), "the availableNow query did not end in 180 s"
    finally:
        query.stop()
    assert query.exception() is None
    total = log_range(spark, farm, first, end).count()
    assert sum(count for _, count in seen) == total
    assert len([c for _, c in seen if c]) >= 3          # admission control cut the range
    assert max(c for _, c in seen) <= 30000             # a batch goes over only by one entry


def test_bad_option_names_it(spark, mixed_log):
    farm, first, _ = mixed_log
    with pytest.raises(Exception) as failure:
        columnar(spark, farm, first, minPartitions="zero").collect()
    assert "minPartitions" in str(failure.value)


def test_value_format_is_refused_with_advice(spark, mixed_log):
    farm, first, _ = mixed_log
    with pytest.raises(Exception) as failure:
        columnar(spark, farm, first, valueFormat="json").collect()
    assert "valueFormat" in str(failure.value)
    assert 'format("garlicfarm")' in str(failure.value) or "format('garlicfarm')" in \
        str(failure.value)


def test_wrong_password_fails_naming_authentication(spark, mixed_log):
    farm, first, end = mixed_log
    options = {**farm.options, "password": "not-" + farm.options["password"]}
    with pytest.raises(Exception) as failure:
        (spark.read.format("garlicfarm-columnar").options(**options)
         .option("startingOffsets", json.dumps({"index": first})).load().collect())
    assert "authentication" in str(failure.value).lower()


def test_compacted_entries_fail_or_are_skipped(spark, tmp_path):
    """Entries compacted away at every member: DataLossError by default, naming
    failOnDataLoss; with failOnDataLoss false the read starts where the log does."""
    compacting = ("--snapshot-interval", "20", "--retain-entries", "10",
                  "--segment-bytes", "4096")
    with LocalFarm(nodes=1, extra_args=compacting) as farm:
        client = farm.client()
        first = client.last_applied() + 1
        for n in range(120):
            client.append([f"e{n}".encode()])
        deadline = time.monotonic() + 60
        while client.log_bounds()[0] <= first + 10:
            assert time.monotonic() < deadline, "the log was never compacted"
            client.append([b"more"])
        kept = client.log_bounds()[0]
        with pytest.raises(Exception) as failure:
            columnar(spark, farm, first).collect()
        assert "failOnDataLoss" in str(failure.value)
        skipped = columnar(spark, farm, first, failOnDataLoss="false")
        indexes = [r["index"] for r in skipped.select("index").collect()]
        assert indexes and min(indexes) >= kept
        assert sorted(indexes) == sorted(r["index"] for r in log_range(
            spark, farm, first, failOnDataLoss="false").select("index").collect())
        client.close()


def test_empty_range_reads_no_rows(spark):
    with LocalFarm(nodes=1) as farm:
        client = farm.client()
        start = client.last_applied() + 1
        client.close()
        frame = columnar(spark, farm, start, start)
        assert frame.count() == 0
        assert frame.select("value").collect() == []


def test_stream_restarts_from_its_checkpoint(spark, tmp_path, no_queries_left):
    """A second run of the query with the same checkpoint reads only what came after the
    first (the offsets the JVM stored and read back)."""
    with LocalFarm(nodes=1) as farm:
        client = farm.client()
        start = client.last_applied() + 1
        client.append_many([[f"first-{n}".encode()] for n in range(50)])
        seen: list[bytes] = []

        def run() -> None:
            query = (spark.readStream.format("garlicfarm-columnar").options(**farm.options)
                     .option("startingOffsets", json.dumps({"index": start})).load()
                     .where(F.col("type") == "journal").select("value")
                     .writeStream.foreachBatch(
                         lambda batch, _: seen.extend(bytes(r.value) for r in batch.collect()))
                     .option("checkpointLocation", str(tmp_path / "chk"))
                     .trigger(availableNow=True).start())
            try:
                assert query.awaitTermination(120), "the availableNow query did not end"
            finally:
                query.stop()
            assert query.exception() is None

        run()
        assert sorted(seen) == sorted(f"first-{n}".encode() for n in range(50))
        client.append_many([[f"second-{n}".encode()] for n in range(30)])
        seen.clear()
        run()
        assert sorted(seen) == sorted(f"second-{n}".encode() for n in range(30))
        client.close()


def test_tls_farm(spark):
    """A farm with TLS: the CA travels in the options as PEM text, to every task."""
    with LocalFarm(nodes=1, tls=True) as farm:
        assert "tls.ca" in farm.options
        client = farm.client()
        start = client.last_applied() + 1
        client.append([b"over", b"tls"])
        client.close()
        frame = columnar(spark, farm, start)
        assert sorted(bytes(r.value) for r in frame.select("value").collect()) == [b"over", b"tls"]


def test_index_filters_narrow_the_read(spark, mixed_log):
    """Filters on `index` are pushed to the planner (the plan shows them) and the rows are
    those the Python source gives for the same filters."""
    farm, first, end = mixed_log
    low, high = first + 3, end - 2
    frame = columnar(spark, farm, first, end).where((F.col("index") >= low) &
                                                    (F.col("index") < high))
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "PushedFilters" in plan and "GreaterThanOrEqual" in plan, plan
    expected = log_range(spark, farm, first, end).where((F.col("index") >= low) &
                                                        (F.col("index") < high))
    got = rows(frame)
    assert got and all(low <= r[1] < high for r in got)
    assert got == rows(expected)
    picked = [first, first + 2, end - 1]
    chosen = columnar(spark, farm, first, end).where(F.col("index").isin(picked))
    assert {r[1] for r in rows(chosen)} <= set(picked)
    assert rows(chosen) == rows(log_range(spark, farm, first, end)
                                .where(F.col("index").isin(picked)))
