"""The Spark smoke suite: for each kind (raft, dafka, chp), an exactly-once stream write
through a failed task, a stream read, and batch reads with and without a filter, with
pushdown on and off. It runs on whatever PySpark the interpreter has: in the whole suite on
the newest, and on the oldest supported one (4.0) in a venv of its own
(tests/compat/test_oldest_pyspark.py), so each behaviour that differs between versions is
asserted for the version at hand (docs/compatibility.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from pyspark_farm import LocalFarm
from pyspark_farm.compat import HAS_ADMISSION_CONTROL, HAS_FILTER_PUSHDOWN
from pyspark_farm.session import PUSHDOWN_CONF
from tests.spark.helpers import file_stream, log_range, values, write_files
from tests.support import wait_until

pytestmark = [pytest.mark.spark]

ROWS = 30        # per input file; 3 files, one micro-batch each
LIMIT = 40       # maxOffsetsPerTrigger of the stream reads: at most one committed batch


@pytest.fixture(scope="module")
def small_farm():
    with LocalFarm(nodes=1) as running:
        yield running


def _chunks(tag: str) -> list[list[str]]:
    return [[f"{tag}-{f}-{i:03d}" for i in range(ROWS)] for f in range(3)]


def _failing_once(marker: Path, poison: str):
    """A column step that fails the first attempt of the task that meets `poison` (after
    the rows before it went to the writer) and leaves `marker` to show it did."""
    @F.udf(StringType())
    def step(value):
        from pyspark import TaskContext
        if value == poison and TaskContext.get().attemptNumber() == 0:
            marker.write_text("failed")
            raise RuntimeError("injected failure of a first attempt")
        return value
    return step


def _write_stream(spark, frame, options: dict, checkpoint: Path):
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
    try:
        query = (frame.writeStream.format("garlicfarm").options(**options)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
                 .start())
        assert query.awaitTermination(180), "the sink query did not finish in 180 s"
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert query.exception() is None, query.exception()
    return query


def _read_available_now(spark, options: dict, output: Path, checkpoint: Path) -> list[int]:
    """availableNow reads of the source with maxOffsetsPerTrigger=LIMIT into parquet, until
    a run reads nothing (4.2+ reads everything in one run; before 4.2 each run is one
    micro-batch); the row counts of the micro-batches."""
    batches: list[int] = []
    for _ in range(10):
        query = (spark.readStream.format("garlicfarm").options(**options)
                 .option("maxOffsetsPerTrigger", str(LIMIT)).load()
                 .writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
                 .start())
        assert query.awaitTermination(120), "the availableNow read did not finish in 120 s"
        assert query.exception() is None, query.exception()
        run = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        if not run:
            return batches
        if not HAS_ADMISSION_CONTROL:
            assert len(run) == 1, f"before 4.2 availableNow is one micro-batch: {run}"
        batches += run
    raise AssertionError(f"the availableNow reads did not drain in 10 runs: {batches}")


def _batch_reads(spark, read, wanted: str, expected_all: list, expected_some: list, to_list,
                 *, pushed_text: str | None = None):
    """A batch read without a filter and with the filter `wanted`, pushdown off and on.
    `pushed_text`: what stays in Spark's Filter unless the source took the condition (it
    leaves the plan only where the version pushes and the setting is on)."""
    previous = spark.conf.get(PUSHDOWN_CONF)
    try:
        for pushdown in ("false", "true"):
            spark.conf.set(PUSHDOWN_CONF, pushdown)
            assert to_list(read()) == expected_all
            filtered = read().where(wanted)
            assert to_list(filtered) == expected_some, pushdown
            if pushed_text is not None:
                plan = filtered._jdf.queryExecution().executedPlan().toString()
                pushed = pushdown == "true" and HAS_FILTER_PUSHDOWN
                assert (pushed_text not in plan) == pushed, plan
    finally:
        spark.conf.set(PUSHDOWN_CONF, previous)


# --- raft -----------------------------------------------------------------------------------

@pytest.mark.timeout(300)
def test_raft(spark, small_farm, tmp_path, no_queries_left):
    chunks = _chunks("raft")
    write_files(tmp_path / "in", chunks)
    with small_farm.client() as client:
        start = client.last_applied() + 1
    marker = tmp_path / "failed"
    frame = file_stream(spark, tmp_path / "in").select(
        _failing_once(marker, "raft-1-020")("value").alias("value"))
    sink = _write_stream(spark, frame, small_farm.options, tmp_path / "chk-w")
    assert marker.exists(), "no task attempt failed"
    with small_farm.client() as client:
        assert client.last_committed_batch(sink.id) == 2
        end = client.last_applied() + 1
    everything = sorted(sum(chunks, []))
    assert values(log_range(spark, small_farm, start, end)) == everything
    chosen = log_range(spark, small_farm, start, end, columns="value,index")
    assert chosen.columns == ["value", "index"] and values(chosen) == everything

    options = {**small_farm.options, "startingOffsets": json.dumps({"index": start})}
    batches = _read_available_now(spark, options, tmp_path / "out", tmp_path / "chk-r")
    assert batches == [ROWS] * 3           # whole commits, each under the limit
    read_back = spark.read.parquet(str(tmp_path / "out"))
    assert values(read_back) == everything

    with small_farm.client() as client:
        second = client.batch_status(sink.id, 1).index    # where batch 1's rows show
    _batch_reads(spark, lambda: log_range(spark, small_farm, start, end), f"index = {second}",
                 everything, sorted(chunks[1]), values, pushed_text=f"= {second})")


# --- dafka ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dafka(tmp_path_factory):
    from pyspark_farm.dafka.local import LocalDafka
    with LocalDafka(stores=2, data_dir=tmp_path_factory.mktemp("dafka")) as running:
        yield running


@pytest.mark.timeout(300)
def test_dafka(spark, small_farm, dafka, tmp_path, no_queries_left):
    topic = f"smoke-{os.getpid()}"
    chunks = _chunks("dafka")
    write_files(tmp_path / "in", chunks)
    marker = tmp_path / "failed"
    frame = file_stream(spark, tmp_path / "in").select(
        _failing_once(marker, "dafka-1-020")("value").alias("value"))
    options = {**dafka.options, **small_farm.options}
    _write_stream(spark, frame, {**options, "topic": topic}, tmp_path / "chk-w")
    assert marker.exists(), "no task attempt failed"
    everything = sorted(sum(chunks, []))

    def read():
        return (spark.read.format("garlicfarm")
                .options(**options, subscribe=topic).load())
    rows = read().collect()
    assert sorted(bytes(r.value).decode() for r in rows) == everything
    for partition in {r.partition for r in rows}:   # contiguous offsets: no hole, no repeat
        found = sorted(r.offset for r in rows if r.partition == partition)
        assert found == list(range(len(found))), partition
    chosen = (spark.read.format("garlicfarm").options(**options, subscribe=topic)
              .option("columns", "offset, value").load().where("offset < 5"))
    assert chosen.columns == ["offset", "value"]
    assert sorted((r.offset, bytes(r.value)) for r in chosen.collect()) == sorted(
        (r.offset, bytes(r.value)) for r in rows if r.offset < 5)

    batches = _read_available_now(spark, {**options, "subscribe": topic,
                                          "startingOffsets": "earliest"},
                                  tmp_path / "out", tmp_path / "chk-r")
    assert sum(batches) == len(everything) and max(batches) <= LIMIT, batches
    assert len(batches) >= -(-len(everything) // LIMIT), batches
    assert values(spark.read.parquet(str(tmp_path / "out"))) == everything
    # No pushdown in this kind: a filter is Spark's, with the setting off or on.
    previous = spark.conf.get(PUSHDOWN_CONF)
    try:
        for pushdown in ("false", "true"):
            spark.conf.set(PUSHDOWN_CONF, pushdown)
            assert values(read().where("offset < 5")) == sorted(
                bytes(r.value).decode() for r in rows if r.offset < 5)
    finally:
        spark.conf.set(PUSHDOWN_CONF, previous)


# --- chp ------------------------------------------------------------------------------------

def _server_map(address: str) -> dict[str, bytes]:
    from connectors.chp.client import CloneClient
    with CloneClient([address]) as chp:
        chp.wait_synced(30)
        return {k.decode(): e.body for k, e in chp.snapshot().entries.items()}


@pytest.mark.timeout(300)
def test_chp(spark, small_farm, chp_server, tmp_path, no_queries_left):
    from pyspark_farm.chp.sink import MARKER_PREFIX
    server = {"kind": "chp", "endpoint": chp_server.address, "serverTimeout": "1s"}
    changelog = (spark.readStream.format("garlicfarm").options(**server, **small_farm.options)
                 .option("startingOffsets", "snapshot").load().writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "chk-r"))
                 .trigger(processingTime="300 milliseconds").start())
    try:
        wait_until(lambda: changelog.lastProgress is not None or changelog.exception(), 120,
                   interval=0.2, message="the changelog query's first trigger")
        assert changelog.exception() is None
        rows = [[(f"/s/{f}/{i:03d}", f"v{f}-{i}") for i in range(ROWS)] for f in range(3)]
        inbox = tmp_path / "in"
        inbox.mkdir()
        for number, chunk in enumerate(rows):
            staging = tmp_path / f".{number}.json"
            staging.write_text("".join(json.dumps({"key": k, "value": v}) + "\n"
                                       for k, v in chunk))
            os.utime(staging, (1_700_000_000 + number * 10,) * 2)
            staging.rename(inbox / f"{number:04d}.json")
        marker = tmp_path / "failed"
        frame = (spark.readStream.schema("key string, value string")
                 .option("maxFilesPerTrigger", 1).json(str(inbox))
                 .select(_failing_once(marker, "/s/1/020")("key").alias("key"), "value"))
        sink = _write_stream(spark, frame, server, tmp_path / "chk-w")
        assert marker.exists(), "no task attempt failed"
        expected = {k: v.encode() for chunk in rows for k, v in chunk}
        found = _server_map(chp_server.address)
        assert json.loads(found.pop(f"{MARKER_PREFIX}{sink.id}"))["batch"] == 2
        assert found == expected

        def changelog_rows():
            if not list((tmp_path / "out").glob("*.parquet")):
                return None
            got = spark.read.parquet(str(tmp_path / "out")).where("key like '/s/%'").collect()
            return got if len(got) >= len(expected) else None
        got = wait_until(changelog_rows, 120, interval=0.5, message="the changelog")
        assert changelog.exception() is None
        assert sorted((r.key, bytes(r.value)) for r in got) == sorted(expected.items())
    finally:
        changelog.stop()

    def read():
        return spark.read.format("garlicfarm").options(**server).load().where(
            "key like '/s/%'")

    def to_list(frame):
        return sorted((r.key, bytes(r.value)) for r in frame.collect())
    # The chp reader narrows its snapshot by the key conditions and hands them all back
    # to Spark, so the plan is the same either way: the rows are what is checked.
    _batch_reads(spark, read, "key = '/s/2/007'", sorted(expected.items()),
                 [("/s/2/007", b"v2-7")], to_list)
    chosen = (spark.read.format("garlicfarm").options(**server).option("columns", "value,key")
              .load().where("key like '/s/%'"))
    assert chosen.columns == ["value", "key"]
    assert sorted((r.key, bytes(r.value)) for r in chosen.collect()) == sorted(expected.items())
