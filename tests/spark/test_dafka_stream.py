"""The dafka kind end to end on a real deployment (a tower, two store processes, a farm
holding the sink's ledger): stream into Dafka through the exactly-once sink and back,
restart from checkpoints, kill a store mid-stream, fail task attempts, replay a batch.
Every case checks that the output is exactly the input, with contiguous offsets."""
from __future__ import annotations

import json
import time
from collections import defaultdict

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from connectors.dafka import Producer
from pyspark_farm.dafka.index import index_key
from pyspark_farm.dafka.local import LocalDafka
from pyspark_farm.dafka.sink import DafkaSinkBackend, Spool, sink_partition
from pyspark_farm.sink import TaskTag
from tests.spark.helpers import file_stream, values, write_files
from tests.support import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 40


@pytest.fixture(scope="module")
def dafka(tmp_path_factory):
    with LocalDafka(stores=2, data_dir=tmp_path_factory.mktemp("dafka")) as running:
        yield running


def _chunks(first: int, files: int, tag: str = "e") -> list[list[str]]:
    return [[f"{tag}-{f:02d}-{i:03d}" for i in range(ROWS)] for f in range(first, first + files)]


def _options(dafka, farm, **extra) -> dict[str, str]:
    return {**dafka.options, **farm.options, **extra}


def _sink(frame, dafka, farm, checkpoint, topic):
    return (frame.writeStream.format("garlicfarm").options(**_options(dafka, farm, topic=topic))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def _finish(query, timeout: float = 120) -> None:
    try:
        query.awaitTermination(timeout)
        assert query.exception() is None
    finally:
        query.stop()


def _read(spark, dafka, farm, topic, **extra):
    return (spark.read.format("garlicfarm")
            .options(**_options(dafka, farm, subscribe=topic, **extra)).load())


def _assert_contiguous(rows) -> dict[str, list[int]]:
    """Offsets per partition, checked to run 0, 1, 2... with no gap or repeat."""
    offsets: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        offsets[row.partition].append(row.offset)
    for partition, found in offsets.items():
        assert sorted(found) == list(range(len(found))), partition
    return offsets


@pytest.mark.timeout(300)
def test_round_trip_restarts_and_a_store_killed_mid_stream(spark, farm, dafka, tmp_path,
                                                           no_queries_left):
    topic = "events"
    inbox, out = tmp_path / "in", tmp_path / "out"
    write_files(inbox, _chunks(0, 3))
    writer = _sink(file_stream(spark, inbox), dafka, farm, tmp_path / "chk-w", topic)
    _finish(writer)
    query_id = writer.id
    client = farm.client()
    assert client.last_committed_batch(query_id) == 2          # one ledger commit per batch
    meta = client.batch_status(query_id, 0).metadata
    assert meta["dafka"]["topic"] == topic and sum(meta["rows"]) == ROWS
    partitions = {sink_partition(query_id, topic, p) for p in range(2)}
    assert set(meta["dafka"]["partitions"]) <= partitions

    reader = (spark.readStream.format("garlicfarm")
              .options(**_options(dafka, farm, subscribe=topic, startingOffsets="earliest",
                                  maxOffsetsPerTrigger="50"))
              .load().writeStream.format("parquet").option("path", str(out))
              .option("checkpointLocation", str(tmp_path / "chk-r"))
              .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: any(p["numInputRows"] for p in reader.recentProgress), 120,
                   message="the reader's first rows")
        dafka.kill(0)                         # store 0 dies while the stream reads
        write_files(inbox, _chunks(3, 2), first=3)
        writer = _sink(file_stream(spark, inbox), dafka, farm, tmp_path / "chk-w", topic)
        _finish(writer)                       # the sink restarts from its checkpoint
        assert writer.id == query_id and client.last_committed_batch(query_id) == 4
        reader.processAllAvailable()
        assert reader.exception() is None
    finally:
        reader.stop()
    sizes = [p["numInputRows"] for p in reader.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 50 and sum(sizes) == 5 * ROWS

    # Store 0 back (it catches up from store 1); the reader restarts from its checkpoint.
    dafka.restart(0)
    write_files(inbox, _chunks(5, 1), first=5)
    _finish(_sink(file_stream(spark, inbox), dafka, farm, tmp_path / "chk-w", topic))
    reader = (spark.readStream.format("garlicfarm")
              .options(**_options(dafka, farm, subscribe=topic))
              .load().writeStream.format("parquet").option("path", str(out))
              .option("checkpointLocation", str(tmp_path / "chk-r"))
              .trigger(availableNow=True).start())
    _finish(reader)
    everything = sorted(sum(_chunks(0, 6), []))
    read_back = spark.read.parquet(str(out))
    assert values(read_back) == everything
    offsets = _assert_contiguous(read_back.collect())
    assert set(offsets) <= partitions
    # Every committed range is in the partition indexes, nothing is pending.
    for partition in offsets:
        index = json.loads(client.kv_get(index_key(topic, partition)))
        assert index["committed"] == [[0, len(offsets[partition])]] and index["pending"] == []
    # The batch view of the topic equals the stream's output (replayable offsets).
    batch = _read(spark, dafka, farm, topic).select("topic", "partition", "offset", "value",
                                                     "timestamp")
    assert_df_equality(batch, read_back, ignore_row_order=True, ignore_nullable=True)
    client.close()


@pytest.mark.timeout(300)
def test_failed_task_attempts_leave_exactly_the_input(spark, farm, dafka, tmp_path,
                                                      no_queries_left):
    """The first attempt of every task fails near its end; Spark retries it."""
    topic = "flaky"
    inbox = tmp_path / "in"
    chunks = _chunks(0, 2, "f")
    write_files(inbox, chunks)

    failures = tmp_path / "failures"
    failures.mkdir()

    @F.udf(StringType())
    def flaky(value):
        from pyspark import TaskContext
        context = TaskContext.get()
        if context.attemptNumber() == 0 and value.endswith("-035"):
            (failures / f"{context.stageId()}-{context.partitionId()}").touch()
            raise RuntimeError("injected failure of a first attempt")
        return value

    frame = file_stream(spark, inbox).select(flaky("value").alias("value"))
    writer = _sink(frame, dafka, farm, tmp_path / "chk", topic)
    _finish(writer, 180)
    assert len(list(failures.iterdir())) == len(chunks)      # one failed attempt per batch
    back = _read(spark, dafka, farm, topic).collect()
    assert sorted(bytes(r.value).decode() for r in back) == sorted(sum(chunks, []))
    _assert_contiguous(back)


def _stage(backend, query_id, batch, attempt, rows):
    return backend.stage(TaskTag(query_id, batch, 0, attempt),
                         iter([pa.array([r.encode() for r in rows], pa.binary())]))


@pytest.mark.timeout(240)
def test_an_attempt_dying_mid_publish_and_a_replayed_batch(spark, farm, dafka):
    """Below Spark: attempt 0 publishes part of its range and dies; attempt 1, with other
    output, fills the hole and commits; a replay of the committed batch republishes the
    same records at the same offsets and its commit is ignored. readCommitted shows
    exactly the committed rows; readCommitted=false shows what any Dafka consumer sees."""
    from pyspark_farm.connection import FarmClientOptions
    topic, query_id = "replay", f"q-{time.time_ns()}"
    connection = FarmClientOptions(farm.endpoints, username=farm.username,
                                password=farm.password)
    backend = DafkaSinkBackend(connection, dafka.config, topic, ack_timeout=60)
    address = sink_partition(query_id, topic, 0)

    dying = [f"a0-{i}" for i in range(10)]
    spool = Spool()
    spool.add(pa.array([r.encode() for r in dying], pa.binary()))
    start, fill_from = backend._allocate(TaskTag(query_id, 0, 0, 0), address, spool)
    assert (start, fill_from) == (0, 0)
    with Producer(dafka.config, topic, address=address) as producer:   # publishes 4, dies
        producer.publish_many(r.encode() for r in dying[:4])
        assert producer.flush(30)
    spool.close()

    won = [f"a1-{i}" for i in range(6)]
    output = _stage(backend, query_id, 0, 1, won)
    assert output.refs == (10, 16)                 # a fresh range after attempt 0's
    first = backend.commit(query_id, 0, [output])
    assert first.committed and not first.duplicate

    replay = _stage(backend, query_id, 0, 0, won)  # the batch re-run after a restart
    assert replay.refs == output.refs
    again = backend.commit(query_id, 0, [replay])
    assert again.duplicate and again.position == first.position

    committed = _read(spark, dafka, farm, topic).collect()
    assert [(r.offset, bytes(r.value).decode()) for r in committed] == \
        [(10 + i, v) for i, v in enumerate(won)]
    raw = _read(spark, dafka, farm, topic, readCommitted="false").orderBy("offset").collect()
    assert [bytes(r.value).decode() for r in raw] == dying[:4] + [""] * 6 + won
    assert [r.offset for r in raw] == list(range(16))
    with farm.client() as client:
        index = json.loads(client.kv_get(index_key(topic, address)))
    assert index["committed"] == [[10, 16]] and index["pending"] == [] and index["next"] == 16
