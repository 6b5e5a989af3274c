"""The chp kind end to end: rows into a CHP server through the KVSET sink (with failed
task attempts and a re-run of a committed batch), the map's changelog out through the
capture and the farm journal, both restarted from their checkpoints. Every time, the
changelog folds to exactly the server's map, and its sequences have no gap."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from connectors.chp.client import CloneClient, Update
from pyspark_farm import LocalFarm
from pyspark_farm.chp.changelog import RESYNC_PROPERTY
from pyspark_farm.chp.sink import MARKER_PREFIX, marker_batch
from tests.support import wait_until

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def small_farm():
    with LocalFarm(nodes=1) as running:
        yield running


def write_rows(folder: Path, number: int, rows: list[tuple[str, str | None]]) -> None:
    """File `number` of the input; its modification time orders it (the file source
    takes files in that order, and two files written in one second would tie)."""
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".{number}.json"
    staging.write_text("".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in rows))
    stamp = 1_700_000_000 + number * 10
    os.utime(staging, (stamp, stamp))
    staging.rename(folder / f"{number:04d}.json")


def server_map(address: str) -> tuple[int, dict[bytes, bytes]]:
    with CloneClient([address]) as chp:
        chp.wait_synced(30)
        snap = chp.snapshot()
        return snap.sequence, {k: e.body for k, e in snap.entries.items()}


def changelog_state(spark, output: Path) -> tuple[dict[bytes, bytes], list]:
    """The changelog read back (in sequence order) folded into a map, and its rows."""
    if not list(output.glob("*.parquet")):
        return {}, []
    rows = spark.read.parquet(str(output)).collect()
    rows.sort(key=lambda r: (r.sequence, r.deleted))
    state: dict[bytes, bytes] = {}
    for row in rows:
        if row.deleted:
            state.pop(row.key.encode(), None)
        else:
            state[row.key.encode()] = bytes(row.value)
    return state, rows


def covered(rows) -> set[int]:
    """The sequences the changelog accounts for: live rows one by one, resync rows for
    the range A:S they stand for."""
    seen: set[int] = set()
    for row in rows:
        span = dict(row.properties or {}).get(RESYNC_PROPERTY)
        if span is None:
            seen.add(row.sequence)
        else:
            after, through = map(int, span.split(":"))
            seen.update(range(after + 1, through + 1))
    return seen


def reader(spark, farm, server, output: Path, checkpoint: Path):
    return (spark.readStream.format("garlicfarm").option("kind", "chp").options(**farm.options)
            .option("endpoint", server.address).option("serverTimeout", "1s")
            .option("startingOffsets", "snapshot").load()
            .writeStream.format("parquet").option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="300 milliseconds").start())


def writer(spark, server, inbox: Path, checkpoint: Path, options: dict):
    @F.udf(StringType())
    def flaky(key):
        """Fails the first attempt of a task at /k/45, after it sent earlier rows."""
        from pyspark import TaskContext
        if key == "/k/45" and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("injected failure of a first attempt")
        return key

    frame = (spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1)
             .json(str(inbox)).select(flaky("key").alias("key"), "value"))
    return (frame.writeStream.format("garlicfarm").option("kind", "chp")
            .option("endpoint", server.address).option("serverTimeout", "1s")
            .options(**options).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


@pytest.mark.timeout(240)
def test_sink_and_changelog_round_trip_with_failures_and_restarts(spark, small_farm, chp_server,
                                                                  tmp_path, no_queries_left):
    with CloneClient([chp_server.address]) as chp:
        chp.wait_synced(30)
        chp.set_many([Update(f"/pre/{n}", f"before-{n}") for n in range(5)], timeout=30)
    output, inbox = tmp_path / "out", tmp_path / "in"
    read = reader(spark, small_farm, chp_server, output, tmp_path / "chk-r")
    try:
        wait_until(lambda: read.lastProgress is not None or read.exception() is not None, 120,
                   interval=0.2, message="the changelog query's first trigger")
        assert read.exception() is None
        # Batch 0 sets /k/0..59; batch 1 changes some, deletes some (null values).
        write_rows(inbox, 0, [(f"/k/{n}", f"v{n}") for n in range(60)])
        write_rows(inbox, 1, [(f"/k/{n}", f"w{n}") for n in range(0, 60, 3)]
                   + [(f"/k/{n}", None) for n in range(1, 60, 10)])
        previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
        try:
            write = writer(spark, chp_server, inbox, tmp_path / "chk-w", {})
            assert write.awaitTermination(180)
        finally:
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
        assert write.exception() is None
        query_id = write.id

        expected = {f"/pre/{n}".encode(): f"before-{n}".encode() for n in range(5)}
        expected.update({f"/k/{n}".encode(): f"v{n}".encode() for n in range(60)})
        expected.update({f"/k/{n}".encode(): f"w{n}".encode() for n in range(0, 60, 3)})
        for n in range(1, 60, 10):
            expected.pop(f"/k/{n}".encode())
        sequence, found = server_map(chp_server.address)
        marker = found.pop(f"{MARKER_PREFIX}{query_id}".encode())
        assert found == expected
        assert marker_batch(marker) == 1 and json.loads(marker)["rows"] == 20 + 6   # batch 1's rows

        # The crash window: the marker of batch 1 is set but Spark did not record the batch.
        for name in ("1", ".1.crc"):
            (tmp_path / "chk-w" / "commits" / name).unlink(missing_ok=True)
        again = writer(spark, chp_server, inbox, tmp_path / "chk-w", {})
        assert again.awaitTermination(180)
        assert again.exception() is None and again.id == query_id
        assert server_map(chp_server.address)[0] == sequence      # nothing was re-sent

        def caught_up():
            state, rows = changelog_state(spark, output)
            return rows if state == {**expected, f"{MARKER_PREFIX}{query_id}".encode(): marker} \
                and max(r.sequence for r in rows) == sequence else None
        rows = wait_until(caught_up, 90, interval=0.5, message="the changelog to reach the map")
        assert read.exception() is None
        snapshot_rows = [r for r in rows if (r.properties or {}).get(RESYNC_PROPERTY)]
        assert {r.key for r in snapshot_rows} == {f"/pre/{n}" for n in range(5)}
        assert covered(rows) == set(range(1, sequence + 1))       # no gap
        live = sorted(r.sequence for r in rows if r not in snapshot_rows)
        assert len(live) == len(set(live))                        # no repeat
    finally:
        read.stop()

    # While the reader is down: more updates, then a restart from its checkpoint.
    with CloneClient([chp_server.address]) as chp:
        chp.wait_synced(30)
        chp.set_many([Update("/k/0", "later"), Update("/k/2", ""), Update("/new", "x"),
                      Update("/new", "y")], timeout=30)
    sequence, found = server_map(chp_server.address)
    read = reader(spark, small_farm, chp_server, output, tmp_path / "chk-r")
    try:
        def restarted():
            state, rows = changelog_state(spark, output)
            return rows if state == found and max(r.sequence for r in rows) == sequence else None
        rows = wait_until(restarted, 90, interval=0.5, message="the restarted changelog")
        assert read.exception() is None
        resynced = [r for r in rows if (r.properties or {}).get(RESYNC_PROPERTY, "").endswith(
            f":{sequence}")]
        # The four updates made while away come as three differences (/new collapsed).
        assert sorted((r.key, r.deleted) for r in resynced) == [
            ("/k/0", False), ("/k/2", True), ("/new", False)]
        assert covered(rows) == set(range(1, sequence + 1))
    finally:
        read.stop()
    # Batch read of the map, with a pushed-down prefix.
    frame = (spark.read.format("garlicfarm").option("kind", "chp")
             .option("endpoint", chp_server.address).load().where(F.col("key").startswith("/k/")))
    assert {r.key.encode(): bytes(r.value) for r in frame.collect()} == {
        k: v for k, v in found.items() if k.startswith(b"/k/")}


def test_a_refused_chunk_stops_the_capture_at_once(small_farm, caplog):
    """Only an unavailable farm is worth retrying for RETRY_FOR seconds; a refusal (here
    the credentials) fails the chunk's write at once, naming the cause."""
    import logging

    from consensus.common.errors import AuthenticationError
    from pyspark_farm.chp.capture import Capture, CaptureSettings
    from pyspark_farm.chp.changelog import Change
    from pyspark_farm.connection import FarmClientOptions

    connection = FarmClientOptions(small_farm.endpoints, username=small_farm.username,
                                password="not-the-password")
    settings = CaptureSettings(connection, ("tcp://127.0.0.1:9",), b"", 1.0, True)
    capture = Capture(settings, "refused-capture", 0)
    change = Change(b"/k", 1, b"u" * 16, b"", b"v", False)
    with connection.client() as farm, caplog.at_level(logging.WARNING, "pyspark_farm.chp"):
        with pytest.raises(AuthenticationError):
            capture._write(farm, capture.capture_id, 0, [change], 1, "tcp://127.0.0.1:9")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    assert capture.chunks_written == 0
