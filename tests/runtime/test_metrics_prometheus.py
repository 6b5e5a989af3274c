"""A real Prometheus server scrapes a 3-node farm of real processes (``--metrics``); the
leader is killed, and the series Prometheus stored show it: the survivors saw a leader
change, know the new leader, and their commit index went on."""
from __future__ import annotations

import pytest

from consensus.torture.local import LocalCluster
from tests.operators import Prometheus, logged_url, scrape
from tests.runtime.test_tls_and_proxy import certificates  # noqa: F401 - a fixture
from tests.support import wait_until

pytestmark = pytest.mark.slow

METRICS_LINE = r"metrics on (http://\S+)/metrics"


@pytest.mark.timeout(90)
def test_prometheus_stores_a_leader_failover(tmp_path):
    with LocalCluster(3, extra_args=["--metrics", "127.0.0.1:0"],
                      status_interval=0.5) as farm:
        leader = farm.wait_for_leader()
        urls = {i: logged_url(farm.log_path(i), METRICS_LINE) for i in farm.node_ids}
        targets = [(url.split("//")[1], {"node": str(i)}) for i, url in urls.items()]
        with Prometheus(tmp_path / "prometheus", {"farm": targets}) as prom:
            wait_until(lambda: prom.values("up", "node") == {"1": 1, "2": 1, "3": 1}, 20,
                       0.1, "prometheus scraping the three nodes")
            wait_until(lambda: prom.values("garlicfarm_server_is_leader", "node").get(
                str(leader)) == 1, 10, 0.1, "the leader's is_leader stored")
            with farm.client() as client:
                client.append([b"before"] * 5)
            survivors = [i for i in farm.node_ids if i != leader]
            changes = prom.values("garlicfarm_server_leader_changes_seen_total", "node")
            commits = wait_until(lambda: (lambda v: v if len(v) == 3 else None)(
                prom.values("garlicfarm_server_proposals_committed_total", "node")), 10,
                0.1, "commit indexes")

            farm.kill(leader)
            new_leader = farm.wait_for_leader(20)
            assert new_leader != leader
            with farm.client() as client:
                client.append([b"after"] * 5)

            def moved_on() -> bool:
                has = prom.values("garlicfarm_server_has_leader", "node")
                named = prom.values("garlicfarm_server_leader_id", "node")
                seen = prom.values("garlicfarm_server_leader_changes_seen_total", "node")
                commit = prom.values("garlicfarm_server_proposals_committed_total", "node")
                return all(has.get(str(i)) == 1 and named.get(str(i)) == new_leader
                           and seen.get(str(i), 0) > changes[str(i)]
                           and commit.get(str(i), 0) > commits[str(i)] for i in survivors)
            wait_until(moved_on, 20, 0.2, "the survivors' series after the failover")
            assert prom.values("up", "node")[str(leader)] == 0
            # the dead leader's history is stored: it led, with followers it tracked
            was = prom.values(f'max_over_time(garlicfarm_server_is_leader{{node="{leader}"}}'
                              '[5m])', "node")
            assert was == {str(leader): 1}
            lags = prom.query(f'garlicfarm_server_follower_match_lag{{node="{new_leader}"}}')
            assert {r["metric"]["follower"] for r in lags} == \
                {str(i) for i in farm.node_ids if i != new_leader}
            fsyncs = prom.values("garlicfarm_disk_wal_fsync_duration_seconds_count", "node")
            assert all(fsyncs[str(i)] > 0 for i in survivors)
        # scraped directly too: what the node serves is what Prometheus stored
        samples = scrape(urls[new_leader] + "/metrics")
        assert samples["garlicfarm_server_is_leader"] == 1
        assert samples['garlicfarm_server_info{cluster="farm",id="%d",wire="garlicfarm"}'
                       % new_leader] == 1


@pytest.mark.timeout(60)
def test_prometheus_scrapes_over_https_with_basic_auth(tmp_path, certificates):  # noqa: F811
    """Off loopback the endpoint wants the farm's credentials; with a certificate they
    travel inside TLS: Prometheus verifies the node against the CA and logs in."""
    args = ["--metrics", "0.0.0.0:0", "--metrics-tls-cert", certificates["node.pem"],
            "--metrics-tls-key", certificates["node.key"]]
    with LocalCluster(1, extra_args=args, status_interval=0.5) as farm:
        farm.wait_for_leader()
        url = logged_url(farm.log_path(1), r"metrics on (https://\S+)/metrics")
        target = url.split("//")[1].replace("0.0.0.0", "127.0.0.1")
        scrape = {"scheme": "https", "tls_config": {"ca_file": certificates["ca.pem"]},
                  "basic_auth": {"username": farm.username, "password": farm.password}}
        with Prometheus(tmp_path / "prometheus", {"farm": [(target, {"node": "1"})]},
                        scrape) as prom:
            wait_until(lambda: prom.values("garlicfarm_server_is_leader", "node") ==
                       {"1": 1}, 20, 0.1, "prometheus storing the node's series over https")
            assert prom.values("up", "node") == {"1": 1}
