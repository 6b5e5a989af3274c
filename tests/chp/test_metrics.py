"""``garlicfarm chp server --metrics``: sequence, keys and subscriptions, scraped from the
endpoint while real clients set keys and watch."""
from __future__ import annotations

import subprocess

import pytest

from tests.chp.support import chp_command
from tests.operators import logged_url, scrape
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def test_server_metrics_follow_updates_and_subscribers(servers):
    server = servers("s", "--metrics", "127.0.0.1:0")
    url = logged_url(server.log_path, r"metrics on (http://\S+/metrics)")
    first = scrape(url)
    assert first["garlicfarm_chp_sequence"] == 0
    assert first["garlicfarm_chp_subscriptions"] == 0
    assert first['garlicfarm_chp_state{state="standalone"}'] == 1
    at = ("--server", server.address)
    for key in ("/m/a", "/m/b"):
        done = subprocess.run(chp_command("set", key, "v", *at), capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    after = scrape(url)
    assert after["garlicfarm_chp_sequence"] == 2
    assert after["garlicfarm_chp_keys"] == 2
    assert after["garlicfarm_chp_updates_published_total"] == 2
    watcher = subprocess.Popen(chp_command("watch", "--subtree", "/m/", "--snapshot", *at),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert watcher.stdout.readline().endswith("\t/m/a\tv\n")   # synced: subscribed
        # a watcher of a subtree subscribes to it and to HUGZ
        wait_until(lambda: scrape(url)["garlicfarm_chp_subscriptions"] == 2, 10, 0.05,
                   "the watcher's two subscriptions")
    finally:
        watcher.kill()
        watcher.wait(10)
        watcher.stdout.close()
    wait_until(lambda: scrape(url)["garlicfarm_chp_subscriptions"] == 0, 10, 0.05,
               "the subscriptions gone with the watcher")


def test_metrics_off_loopback_needs_a_replicated_server(tmp_path):
    done = subprocess.run(chp_command("server", "--port", "1", "--metrics", "0.0.0.0:0"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--metrics: 0.0.0.0:0 is not a loopback address" in done.stderr
    assert "--farm-credentials" in done.stderr
