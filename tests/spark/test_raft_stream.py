"""The raft kind end to end: stream into a farm through the exactly-once sink, stream it
back with the source, restart both from their checkpoints, and fail tasks on purpose."""
from __future__ import annotations

import datetime
import json
import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from tests.spark.helpers import file_stream, log_range, values, write_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS_PER_FILE = 50


def _chunks(first_file: int, files: int) -> list[list[str]]:
    return [[f"event-{f:02d}-{i:03d}" for i in range(ROWS_PER_FILE)]
            for f in range(first_file, first_file + files)]


def _sink(frame, farm, checkpoint, **options):
    return (frame.writeStream.format("garlicfarm").options(**farm.options).options(**options)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def _source_to_parquet(spark, farm, start, output, checkpoint):
    return (spark.readStream.format("garlicfarm").options(**farm.options)
            .option("startingOffsets", json.dumps({"index": start}))
            .option("maxOffsetsPerTrigger", 60)
            .load().select("index", "type", "value")
            .writeStream.format("parquet").option("path", str(output))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


@pytest.mark.timeout(240)
def test_round_trip_restart_and_row_limits(spark, farm, tmp_path, no_queries_left):
    client = farm.client()
    inbox, output = tmp_path / "in", tmp_path / "out"
    start = client.last_applied() + 1
    write_files(inbox, _chunks(0, 3))

    writer = _sink(file_stream(spark, inbox), farm, tmp_path / "chk-w")
    writer.awaitTermination(120)
    assert writer.exception() is None
    query_id = writer.id
    assert client.last_committed_batch(query_id) == 2          # one ledger commit per batch
    first = client.batch_status(query_id, 0)
    assert first is not None and len(first.metadata["rows"]) == len(first.staged)
    assert sum(first.metadata["rows"]) == ROWS_PER_FILE

    reader = _source_to_parquet(spark, farm, start, output, tmp_path / "chk-r")
    reader.awaitTermination(120)
    assert reader.exception() is None
    progress = [p for p in reader.recentProgress if p["numInputRows"]]
    # maxOffsetsPerTrigger=60 rows and commits of 50 rows: one committed batch per trigger.
    assert [p["numInputRows"] for p in progress] == [ROWS_PER_FILE] * 3
    source = progress[-1]["sources"][0]
    assert json.loads(source["latestOffset"])["index"] >= json.loads(source["endOffset"])["index"]
    assert values(spark.read.parquet(str(output))) == sorted(sum(_chunks(0, 3), []))

    # Restart both queries from their checkpoints after more input: no row lost or repeated.
    write_files(inbox, _chunks(3, 2), first=3)
    writer = _sink(file_stream(spark, inbox), farm, tmp_path / "chk-w")
    writer.awaitTermination(120)
    assert writer.exception() is None and writer.id == query_id
    assert client.last_committed_batch(query_id) == 4
    reader = _source_to_parquet(spark, farm, start, output, tmp_path / "chk-r")
    reader.awaitTermination(120)
    assert reader.exception() is None
    everything = sorted(sum(_chunks(0, 5), []))
    read_back = spark.read.parquet(str(output))
    assert values(read_back) == everything
    assert read_back.where("type != 'commit'").count() == 0
    # Each micro-batch of the writer is one commit entry: five distinct indexes.
    assert read_back.select("index").distinct().count() == 5

    # The batch view of the same range gives the same rows (replayable offsets).
    end = client.last_applied() + 1
    batch = log_range(spark, farm, start, end).select("index", "type", "value")
    assert_df_equality(batch, read_back, ignore_row_order=True, ignore_nullable=True)
    client.close()


@pytest.mark.timeout(240)
def test_failed_task_attempts_leave_exactly_the_input(spark, farm, tmp_path, no_queries_left):
    """A pipeline step fails the first attempt of each task near its end, after that
    attempt staged part of its output; Spark retries it; the log shows every input row
    once, and the losers' staged entries stay invisible."""
    client = farm.client()
    inbox = tmp_path / "in"
    # Enough bytes that the Python workers' 64 KiB output buffers flush before the failure.
    chunks = [[f"row-{f}-{i:04d}-" + "x" * 60 for i in range(3000)] for f in range(2)]
    write_files(inbox, chunks)
    start = client.last_applied() + 1

    options = dict(farm.options)
    markers = tmp_path / "injected"         # one file per task whose failure was injected
    markers.mkdir()

    @F.udf(StringType())
    def flaky(value):
        """Fails a first attempt at its row 2900, once the writer downstream has staged
        some of that attempt's output (seen in the farm's log, waited for with a deadline)."""
        from pyspark import TaskContext
        from pyspark_farm.connection import FarmClientOptions
        context = TaskContext.get()
        if context.attemptNumber() != 0 or "-2900-" not in value:
            return value
        deadline = time.monotonic() + 60
        with FarmClientOptions(options["endpoints"], username=options["username"],
                            password=options["password"]).client() as farm_client:
            while time.monotonic() < deadline:
                stop = farm_client.last_applied() + 1
                if any(e.type == "staged" and e.staged.attempt == 0
                       and e.staged.partition == context.partitionId()
                       for e in farm_client.read_entries(start, stop)):
                    break
                time.sleep(0.05)
            else:       # the condition never came: inject nothing (the test then fails)
                return value
        (markers / f"partition-{context.partitionId()}").touch()
        raise RuntimeError("injected failure of a first attempt")

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        frame = file_stream(spark, inbox).select(flaky("value").alias("value"))
        writer = _sink(frame, farm, tmp_path / "chk", stageBytes=16384)
        writer.awaitTermination(180)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert writer.exception() is None
    # a first attempt did fail, and only after it had staged output (not before, not never)
    assert [p.name for p in markers.iterdir()], "no failure was injected"
    end = client.last_applied() + 1

    assert values(log_range(spark, farm, start, end)) == sorted(sum(chunks, []))
    entries = [e for i in range(start, end, 500)
               for e in client.read_entries(i, min(end, i + 500))]
    staged = {e.index for e in entries if e.type == "staged"}
    committed = {i for e in entries if e.type == "commit" and e.commit.effective
                 for i in e.commit.staged}
    losers = staged - committed
    assert committed <= staged and losers, "the failed attempts had staged output"
    client.close()


@pytest.mark.timeout(180)
def test_batch_write_and_read_with_a_value_format(spark, farm):
    """Any columns go in with valueFormat (here msgpack) and come back decoded."""
    frame = spark.createDataFrame(
        [(1, "ana", datetime.datetime(2024, 5, 1, 12, 30)), (2, None, None),
         (3, "bo\u00e9", datetime.datetime(2025, 1, 2, 3, 4, 5))],
        "id long, name string, at timestamp")
    with farm.client() as client:
        start = client.last_applied() + 1
        frame.write.format("garlicfarm").options(**farm.options) \
            .option("valueFormat", "msgpack").mode("append").save()
        end = client.last_applied() + 1
    back = log_range(spark, farm, start, end, valueFormat="msgpack",
                     valueSchema="id long, name string, at timestamp")
    assert back.columns[-3:] == ["id", "name", "at"]
    assert_df_equality(back.select("id", "name", "at"), frame, ignore_row_order=True,
                       ignore_nullable=True)
    assert {r["type"] for r in back.select("type").collect()} == {"commit"}
