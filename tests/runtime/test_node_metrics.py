"""A node's ``--metrics`` endpoint scraped directly: snapshot sends to a follower that
fell behind a compacted log, refused handshakes, the sink ledger's batches."""
from __future__ import annotations

import pytest

from consensus.common.errors import FarmError
from consensus.torture.local import LocalCluster
from tests.operators import logged_url, scrape
from tests.support import wait_until

pytestmark = pytest.mark.slow

METRICS_LINE = r"metrics on (http://\S+)/metrics"
COMPACTING = ["--snapshot-interval", "20", "--retain-entries", "1", "--segment-bytes", "2048"]


@pytest.mark.timeout(90)
def test_snapshot_sends_auth_failures_and_the_ledger_are_counted():
    with LocalCluster(3, fsync="never", status_interval=5.0,
                      extra_args=["--metrics", "127.0.0.1:0", *COMPACTING]) as farm:
        leader = farm.wait_for_leader(30)
        url = logged_url(farm.log_path(leader), METRICS_LINE) + "/metrics"
        behind = next(i for i in farm.node_ids if i != leader)
        assert f'garlicfarm_network_snapshot_sends_total{{to="{behind}"}}' not in scrape(url)
        reachable = f'garlicfarm_server_follower_reachable{{follower="{behind}"}}'
        assert wait_until(lambda: scrape(url).get(reachable) == 1, 10, 0.05, "reachable")
        farm.kill(behind)
        wait_until(lambda: scrape(url).get(reachable) == 0, 10, 0.05,
                   f"node {behind} unreachable in the leader's metrics")
        assert scrape(url)[f'garlicfarm_server_follower_last_ack_seconds{{follower='
                           f'"{behind}"}}'] > 0.3          # the election timeout
        with farm.client(timeout=10) as client:
            for _ in range(8):
                client.append_many([[b"pad"]] * 20)
            first, _, _ = client.log_bounds()
        assert first > 1, "the leader's log was not compacted"
        farm.restart(behind)
        key = f'garlicfarm_network_snapshot_sends_total{{to="{behind}"}}'
        wait_until(lambda: scrape(url).get(key, 0) >= 1, 30, 0.1,
                   f"an InstallSnapshot to node {behind}")
        wait_until(lambda: scrape(url).get(
            f'garlicfarm_server_follower_match_lag{{follower="{behind}"}}') == 0, 30, 0.1,
            "the follower caught up")
        assert scrape(url)[reachable] == 1

        refused = 'garlicfarm_network_connections_refused_total{reason="auth"}'
        before = scrape(url).get(refused, 0)
        with pytest.raises(FarmError):
            with farm.client(password="not-the-password", timeout=2,
                             endpoints=farm.endpoint_of(leader)) as intruder:
                intruder.last_applied()
        assert wait_until(lambda: scrape(url).get(refused, 0) > before, 10, 0.05,
                          "the refused handshake counted")
        # the sink's ledger: two batches committed (one twice: still two), one staged
        with farm.client(timeout=10) as client:
            for batch in (0, 1):
                staged = client.stage("q-1", batch, 0, 0, b"rows")
                client.commit_batch("q-1", batch, [staged])
            client.commit_batch("q-1", 1, [staged])
            client.stage("q-1", 2, 0, 0, b"rows")
        samples = wait_until(lambda: (lambda s: s if s.get(
            'garlicfarm_sink_committed_batches{query="q-1"}') == 2 else None)(scrape(url)),
            10, 0.05, "the ledger's batches")
        assert samples["garlicfarm_sink_staged_entries"] == 1
        assert samples["garlicfarm_network_incoming_connections"] >= 1
        assert samples["garlicfarm_disk_wal_append_duration_seconds_count"] > 0
        assert samples["garlicfarm_server_proposals_failed_total"] == 0
