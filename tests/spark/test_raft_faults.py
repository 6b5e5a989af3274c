"""Exactly-once under failures: the farm's leader killed during a streaming write, and
the Spark driver SIGKILLed between the sink's commit and Spark's commit log."""
from __future__ import annotations

import pytest

from pyspark_farm import LocalFarm
from tests.spark.helpers import (crash_after_commit, file_stream, log_range, values,
                                 write_files)
from tests.support import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _chunks(files: int, rows: int = 40) -> list[list[str]]:
    return [[f"f{f}-r{i:03d}" for i in range(rows)] for f in range(files)]


@pytest.mark.timeout(240)
def test_leader_killed_during_a_streaming_write(spark, tmp_path, no_queries_left):
    chunks = _chunks(6)
    inbox = tmp_path / "in"
    with LocalFarm(nodes=3) as farm, farm.client() as client:
        start = client.last_applied() + 1
        write_files(inbox, chunks[:2])
        query = (file_stream(spark, inbox).writeStream.format("garlicfarm")
                 .options(**farm.options).option("checkpointLocation", str(tmp_path / "chk"))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            wait_until(lambda: (client.last_committed_batch(query.id) or -1) >= 0, 120,
                       message="the first batch committed")
            leader = client.get_servers().leader_id
            farm.kill(leader)
            write_files(inbox, chunks[2:], first=2)
            query.processAllAvailable()
            assert query.exception() is None
            new_leader = farm.wait_for_leader()
            assert new_leader != leader
            assert client.last_committed_batch(query.id) == len(chunks) - 1
        finally:
            query.stop()
        farm.restart(leader)
        end = client.last_applied() + 1
        at_leader = log_range(spark, farm, start, end, readFrom="leader")
        assert values(at_leader) == sorted(sum(chunks, []))
        # The restarted member catches up; followers serve the same rows in the same order.
        wait_until(lambda: client.log_bounds(farm.endpoint_of(leader))[1] >= end - 1, 60,
                   message="the restarted node catching up")
        at_followers = log_range(spark, farm, start, end, readFrom="followers")
        assert at_followers.collect() == at_leader.collect()


@pytest.mark.timeout(300)
def test_driver_killed_after_the_sink_commit_restarts_exactly_once(spark, farm, tmp_path,
                                                                   no_queries_left):
    chunks = _chunks(4)
    inbox, checkpoint = tmp_path / "in", tmp_path / "chk"
    write_files(inbox, chunks)
    with farm.client() as client:
        start = client.last_applied() + 1
        query_id = crash_after_commit(farm.options, inbox, checkpoint, 1)
        # Batch 1 is visible in the farm, but Spark never recorded it as done.
        assert client.last_committed_batch(query_id) == 1
        first_commit = client.batch_status(query_id, 1)

        # Restart from the checkpoint (in this test's session: the same query id).
        rerun = (file_stream(spark, inbox).writeStream.format("garlicfarm")
                 .options(**farm.options).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        try:
            assert rerun.id == query_id
            rerun.awaitTermination(120)
            assert rerun.exception() is None
        finally:
            rerun.stop()
        # The re-run of batch 1 was a duplicate commit: ignored, the first one stands.
        assert client.batch_status(query_id, 1).index == first_commit.index
        assert client.last_committed_batch(query_id) == len(chunks) - 1
        end = client.last_applied() + 1
    assert values(log_range(spark, farm, start, end)) == sorted(sum(chunks, []))
