"""The dafka and chp sinks when the Spark driver is SIGKILLed right after the kind's commit
of a batch, before Spark's commit log records it; the query then restarts from its
checkpoint and re-runs that batch. (The raft kind's case is in test_raft_faults.)

dafka: the re-run republishes the batch's records under the same producer address at the
same offsets, and its ledger commit is a duplicate: committed readers *and* a plain Dafka
consumer (readCommitted=false) see every input row exactly once, offsets contiguous.
chp: the batch's commit marker is already set, so the re-run sends none of its KVSETs: the
server's map is exactly the input's, and its sequence counts each row's KVSET once."""
from __future__ import annotations

import pytest

from pyspark_farm.chp.sink import MARKER_PREFIX, marker_batch
from pyspark_farm.dafka.local import LocalDafka
from tests.chp.support import ServerProcess
from tests.spark.helpers import crash_after_commit, write_files
from tests.spark.test_chp_stream import server_map, write_rows
from tests.spark.test_dafka_stream import _assert_contiguous

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CRASHED_BATCH = 1


def _restart(spark, options: dict[str, str], schema: str, inbox, checkpoint) -> str:
    """The query again from its checkpoint, in this test's session; its id."""
    query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(inbox))
             .writeStream.format("garlicfarm").options(**options)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()
    return query.id


def _dafka_values(spark, options: dict[str, str], topic: str, **extra: str):
    rows = (spark.read.format("garlicfarm").options(**options)
            .option("subscribe", topic).options(**extra).load().collect())
    return sorted(bytes(r.value).decode() for r in rows), rows


@pytest.mark.timeout(300)
def test_dafka_driver_killed_after_the_sink_commit(spark, farm, tmp_path, no_queries_left):
    topic = "crashed"
    chunks = [[f"d{f}-{i:03d}" for i in range(40)] for f in range(4)]
    inbox, checkpoint = tmp_path / "in", tmp_path / "chk"
    write_files(inbox, chunks)
    with LocalDafka(stores=2, data_dir=tmp_path / "dafka") as dafka:
        options = {**dafka.options, **farm.options, "topic": topic}
        query_id = crash_after_commit(options, inbox, checkpoint, CRASHED_BATCH)
        before, _ = _dafka_values(spark, options, topic)
        assert before == sorted(sum(chunks[:CRASHED_BATCH + 1], []))  # committed, then killed

        assert _restart(spark, options, "value string", inbox, checkpoint) == query_id
        expected = sorted(sum(chunks, []))
        committed, rows = _dafka_values(spark, options, topic)
        assert committed == expected
        _assert_contiguous(rows)
        # What any Dafka consumer sees: the re-run's records were the stored ones again.
        raw, raw_rows = _dafka_values(spark, options, topic, readCommitted="false")
        assert raw == expected
        _assert_contiguous(raw_rows)


@pytest.mark.timeout(300)
def test_chp_driver_killed_after_the_commit_marker(spark, tmp_path, no_queries_left):
    server = ServerProcess(tmp_path, "chp").start()
    try:
        inbox, checkpoint = tmp_path / "in", tmp_path / "chk"
        files = [[(f"/crash/{f}/{i:02d}", f"v{f}-{i}") for i in range(30)]
                 + [("/crash/shared", f"from-{f}")] for f in range(4)]
        for number, rows in enumerate(files):
            write_rows(inbox, number, rows)
        options = {"kind": "chp", "endpoint": server.address, "serverTimeout": "1s"}
        query_id = crash_after_commit(options, inbox, checkpoint, CRASHED_BATCH,
                                      "--schema", "key string, value string")
        marker = f"{MARKER_PREFIX}{query_id}".encode()
        _, before = server_map(server.address)
        assert marker_batch(before[marker]) == CRASHED_BATCH
        assert before[b"/crash/shared"] == f"from-{CRASHED_BATCH}".encode()

        assert _restart(spark, options, "key string, value string", inbox,
                        checkpoint) == query_id
        sequence, after = server_map(server.address)
        expected = {k.encode(): v.encode() for rows in files for k, v in rows}
        assert marker_batch(after.pop(marker)) == len(files) - 1
        assert after == expected
        # One KVSET per input row and one marker per batch: nothing of the crashed batch
        # was sent twice (a re-sent row would have taken a sequence number of its own).
        assert sequence == sum(map(len, files)) + len(files)
    finally:
        server.kill()
