"""``garlicfarm dafka store|tower --metrics``: the endpoints, scraped directly while a
producer writes through a store process."""
from __future__ import annotations

import re
import subprocess

import pytest

from connectors.dafka import Producer
from tests.dafka.test_processes import FAST_ARGS, read_line, tower_args
from tests.operators import scrape
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)


def _metrics_url(proc: subprocess.Popen) -> str:
    for _ in range(3):
        found = re.search(r"metrics on (http://\S+/metrics)", read_line(proc))
        if found:
            return found.group(1)
    raise AssertionError(f"{proc.args} printed no metrics address")


def test_store_metrics_count_records_and_bytes(procs, config, tmp_path):
    store = procs.start("store", *tower_args(config), "--data-dir", str(tmp_path / "db"),
                        "--metrics", "127.0.0.1:0", *FAST_ARGS)
    url = _metrics_url(store)
    before = scrape(url)
    assert before["garlicfarm_dafka_store_records_stored_total"] == 0
    assert before["garlicfarm_dafka_store_partitions"] == 0
    producer = Producer(config, "orders").start()
    try:
        for i in range(250):
            producer.publish(b"record %03d" % i)
        assert producer.flush(30), "the store ACKed every record"
    finally:
        producer.stop()
    after = wait_until(lambda: (lambda s: s if s["garlicfarm_dafka_store_records_stored_total"]
                                == 250 else None)(scrape(url)), 10, 0.05, "250 stored")
    assert after['garlicfarm_dafka_store_records{subject="orders"}'] == 250
    assert after["garlicfarm_dafka_store_partitions"] == 1
    assert after["garlicfarm_dafka_store_commits_total"] >= 1
    assert after["garlicfarm_dafka_store_bytes"] >= 250 * len(b"record 000")


def test_tower_metrics_count_beacons(procs):
    tower = procs.start("tower", "--sub", "tcp://127.0.0.1:*", "--pub", "tcp://127.0.0.1:*",
                        "--metrics", "127.0.0.1:0")
    words = read_line(tower).split()
    sub, pub = words[4].rstrip(","), words[-1]
    url = _metrics_url(tower)
    assert scrape(url)["garlicfarm_dafka_tower_beacons_relayed_total"] == 0
    store = procs.start("store", "--sub", sub, "--pub", pub, *FAST_ARGS)
    assert read_line(store).startswith("dafka store:")
    wait_until(lambda: scrape(url)["garlicfarm_dafka_tower_beacons_relayed_total"] >= 2, 10,
               0.05, "the store's beacons relayed")


def test_metrics_off_loopback_is_refused(procs, config, tmp_path):
    store = procs.start("store", *tower_args(config), "--data-dir", str(tmp_path / "db"),
                        "--metrics", "0.0.0.0:9")
    _, err = store.communicate(timeout=30)
    assert store.returncode == 2
    assert "--metrics: 0.0.0.0:9 is not a loopback address" in err.decode()
    assert "--credentials" not in err.decode()     # Dafka has none to offer
