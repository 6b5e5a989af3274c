"""A stream the farm can see: the raft source reports its committed position at each
micro-batch, and the farm's leader shows the query's lag (entries and rows) under its
`consumerName` in its Prometheus metrics and in `garlicfarm status --json`; the columnar
stream's progress carries Kafka's offsetsBehindLatest metrics."""
from __future__ import annotations

import io
import json
import threading

import pytest

from consensus.admin.admin import command_main
from pyspark_farm import LocalFarm
from tests.operators import scrape
from tests.support import wait_until

pytestmark = [pytest.mark.spark]

NAME = "orders-lag"


def farm_status(farm) -> dict:
    out = io.StringIO()
    code = command_main("status", ["--endpoints", farm.endpoints, "--cluster",
                                   farm.cluster_name, "--username", farm.username,
                                   "--password", farm.password, "--json"], out)
    assert code == 0, out.getvalue()
    return json.loads(out.getvalue())


def consumer_in_status(farm, name: str) -> dict | None:
    return next((c for c in farm_status(farm).get("consumers", []) if c["name"] == name),
                None)


def consumer_metrics(farm, name: str) -> dict[str, float]:
    samples = scrape(f"http://127.0.0.1:{farm.metrics_port(farm.wait_for_leader())}/metrics")
    label = f'{{consumer="{name}"}}'
    return {key[len("garlicfarm_consumer_"):-len(label)]: value
            for key, value in samples.items()
            if key.startswith("garlicfarm_consumer_") and key.endswith(label)}


@pytest.mark.timeout(120)
def test_running_stream_lag_shows_and_goes_to_zero(spark, tmp_path, no_queries_left):
    """Batch 1 waits on a gate: batch 0 is done and reported by then (Spark plans batch
    1 from batch 0's end), and the position cannot pass it, so the farm shows the query
    exactly 70 rows and 7 journal entries behind; released, the query catches up and both
    lags go to 0. No status entries: nothing but the test's entries moves the log's end."""
    with LocalFarm(nodes=1, extra_args=("--status-entries", "off")) as farm:
        client = farm.client()
        first = client.last_applied() + 1
        client.append_many([[f"r{e}-{k}".encode() for k in range(10)] for e in range(10)])
        end = client.last_applied() + 1
        gate, batches = threading.Event(), []

        def sink(frame, batch_id: int) -> None:
            batches.append(frame.count())
            if batch_id == 1:
                gate.wait(60)

        query = (spark.readStream.format("garlicfarm").options(**farm.options)
                 .option("consumerName", NAME)
                 .option("startingOffsets", json.dumps({"index": first}))
                 .option("maxOffsetsPerTrigger", 30).load()
                 .writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / "chk")).start())
        try:
            def past_start() -> dict | None:
                found = consumer_in_status(farm, NAME)
                return found if found is not None and found["position"] > first else None
            behind = wait_until(past_start, 60, 0.1, f"{NAME} past batch 0 in status --json")
            assert behind["position"] == first + 3
            assert (behind["lag_entries"], behind["lag_rows"]) == (end - first - 3, 70)
            metrics = wait_until(lambda: consumer_metrics(farm, NAME), 10, 0.1,
                                 f"{NAME} in the leader's metrics")
            assert metrics == {"position": first + 3, "lag_entries": end - first - 3,
                               "lag_rows": 70, "last_seen_seconds": pytest.approx(
                                   metrics["last_seen_seconds"])}
            gate.set()
            wait_until(lambda: consumer_metrics(farm, NAME).get("lag_rows") == 0, 60, 0.1,
                       f"{NAME}'s rows lag at 0 in the metrics")
            caught_up = consumer_in_status(farm, NAME)
            assert (caught_up["position"], caught_up["lag_entries"],
                    caught_up["lag_rows"]) == (end, 0, 0)
            assert consumer_metrics(farm, NAME)["lag_entries"] == 0
            assert sum(batches) == 100
        finally:
            gate.set()
            query.stop()


@pytest.mark.timeout(120)
def test_columnar_stream_progress_has_offsets_behind_latest(spark, tmp_path,
                                                            no_queries_left):
    """Each micro-batch's progress states Kafka's metrics, in entries: the latest offset
    Spark saw minus the batch's end; more than 0 while a backlog is read in slices of 30
    rows, 0 for the last batch."""
    with LocalFarm(nodes=1, extra_args=("--status-entries", "off")) as farm:
        client = farm.client()
        first = client.last_applied() + 1
        client.append_many([[f"r{e}-{k}".encode() for k in range(10)] for e in range(10)])
        query = (spark.readStream.format("garlicfarm-columnar").options(**farm.options)
                 .option("startingOffsets", json.dumps({"index": first}))
                 .option("maxOffsetsPerTrigger", 30).load()
                 .writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "chk")).start())
        try:
            query.awaitTermination(90)
        finally:
            query.stop()
        sources = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
        assert len(sources) == 4
        for source in sources:
            behind = json.loads(source["latestOffset"])["index"] - \
                json.loads(source["endOffset"])["index"]
            assert source["metrics"] == {"avgOffsetsBehindLatest": str(float(behind)),
                                         "maxOffsetsBehindLatest": str(behind),
                                         "minOffsetsBehindLatest": str(behind)}
        assert int(sources[0]["metrics"]["maxOffsetsBehindLatest"]) > 0
        assert sources[-1]["metrics"]["maxOffsetsBehindLatest"] == "0"
