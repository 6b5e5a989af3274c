"""Consumers the farm can see, against real node processes: a reader's reported position
and its lag in entries and rows (journal records and committed sink batches) at the
leader, in `status --json`, the table and the Prometheus metrics; expiry after
--consumer-expiry; bad reports and settings refused naming what is wrong; a new leader
forgets what the old one was told."""
from __future__ import annotations

import io
import json

import pytest

from consensus.admin.admin import EXIT_OK, command_main
from consensus.client import FarmError
from consensus.runtime.cli import main as node_main
from consensus.torture import LocalCluster
from tests.operators import scrape
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(60)]


def status(cluster: LocalCluster, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    code = command_main("status", ["--endpoints", cluster.endpoints, "--cluster",
                                   cluster.cluster, "--user", cluster.username,
                                   f"--password={cluster.password}", *extra], out=out)
    return code, out.getvalue()


def consumers(cluster: LocalCluster) -> dict[str, dict]:
    code, out = status(cluster, "--json")
    assert code == EXIT_OK, out
    return {c["name"]: c for c in json.loads(out)["consumers"]}


def consumer_samples(cluster: LocalCluster, node_id: int) -> dict[str, float]:
    samples = scrape(f"http://127.0.0.1:{cluster.metrics_port(node_id)}/metrics")
    return {k: v for k, v in samples.items() if k.startswith("garlicfarm_consumer_")}


def test_position_and_lag_in_status_and_metrics():
    with LocalCluster(3, status_interval=60.0, metrics=True) as cluster:
        leader = cluster.wait_for_leader(timeout=30)
        with cluster.client() as client:
            start = client.last_applied() + 1
            client.append_many([[b"r"] * 4 for _ in range(5)])            # 20 rows
            staged = [client.stage("q", 0, p, 0, b"payload") for p in range(3)]
            client.commit_batch("q", 0, staged, metadata={"rows": [100, 200, 300]})
            client.append([b"last"])
            end = client.last_applied() + 1
            answer = client.report_consumer("orders to parquet", start)
            assert answer["position"] == start
            assert (answer["lag_entries"], answer["lag_rows"]) == (end - start, 621)
            client.report_consumer("caught up", end)
        shown = consumers(cluster)
        assert {n: (c["position"], c["lag_entries"], c["lag_rows"]) for n, c in shown.items()} \
            == {"orders to parquet": (start, end - start, 621), "caught up": (end, 0, 0)}
        code, table = status(cluster)
        assert code == EXIT_OK
        assert any(line.split()[:5] == ["orders", "to", "parquet", str(start), str(end - start)]
                   and line.split()[5] == "621" for line in table.splitlines()), table
        samples = wait_until(lambda: consumer_samples(cluster, leader), 10, 0.1,
                             "consumer series in the leader's metrics")
        assert {k: v for k, v in samples.items() if "last_seen" not in k} == {
            'garlicfarm_consumer_position{consumer="orders to parquet"}': start,
            'garlicfarm_consumer_lag_entries{consumer="orders to parquet"}': end - start,
            'garlicfarm_consumer_lag_rows{consumer="orders to parquet"}': 621,
            'garlicfarm_consumer_position{consumer="caught up"}': end,
            'garlicfarm_consumer_lag_entries{consumer="caught up"}': 0,
            'garlicfarm_consumer_lag_rows{consumer="caught up"}': 0}
        follower = next(i for i in cluster.node_ids if i != leader)
        assert consumer_samples(cluster, follower) == {}

        # a new leader was told nothing: the consumers show again at their next report
        with cluster.client() as client:
            client.transfer_leader(follower)
            assert consumers(cluster) == {}
            assert client.report_consumer("caught up", end)["lag_entries"] >= 0
        assert set(consumers(cluster)) == {"caught up"}
        wait_until(lambda: consumer_samples(cluster, leader) == {}, 10, 0.1,
                   "the old leader's consumer series gone")


def test_silent_consumers_expire():
    with LocalCluster(1, metrics=True, extra_args=["--consumer-expiry", "1"]) as cluster:
        cluster.wait_for_leader(timeout=30)
        with cluster.client() as client:
            client.report_consumer("gone soon", client.last_applied() + 1)
            assert set(consumers(cluster)) == {"gone soon"}
            wait_until(lambda: consumers(cluster) == {}, 10, 0.1, "the consumer expired")
            wait_until(lambda: consumer_samples(cluster, 1) == {}, 10, 0.1,
                       "its series gone from the metrics")


@pytest.mark.parametrize("name, position, fault", [
    ("", 5, "name: a consumer name is 1 to 200"),
    ("x" * 201, 5, "name: a consumer name is 1 to 200"),
    ("tab\there", 5, "name: a consumer name is 1 to 200"),
    ("q", 0, "position: a log index"),
    ("q", 1 << 63, "position: a log index"),
])
def test_bad_reports_are_refused(farm_of_one, name, position, fault):
    with farm_of_one.client() as client:
        with pytest.raises(FarmError, match=fault):
            client.report_consumer(name, position)
    assert consumers(farm_of_one) == {}


@pytest.fixture(scope="module")
def farm_of_one():
    with LocalCluster(1) as cluster:
        cluster.wait_for_leader(timeout=30)
        yield cluster


@pytest.mark.parametrize("value", ["0", "-5", "nan", "31622401"])
def test_consumer_expiry_is_checked(tmp_path, capsys, value):
    code = node_main(["--id", "1", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
                      "--consumer-expiry", value])
    assert code == 2
    assert "--consumer-expiry" in capsys.readouterr().err
