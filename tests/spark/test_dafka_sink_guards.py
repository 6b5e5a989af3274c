"""The dafka sink refuses what would break its exactly-once promise, and says why (issue 18):
spark.speculation on (docs/exactly-once.md: it must stay off), and stores it cannot
reach, counted as the deployment has them (it said "0 of 1 Dafka store(s) reachable" of
a deployment of 2: the 1 was the count it asked for)."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from connectors.dafka import DafkaConfig, StoreClient, Tower
from pyspark_farm.connection import FarmClientOptions
from pyspark_farm.dafka.local import LocalDafka
from pyspark_farm.dafka.sink import DafkaSinkBackend
from pyspark_farm.errors import GarlicFarmSparkError
from tests.spark.helpers import write_files

pytestmark = [pytest.mark.spark]

SPECULATIVE_DRIVER = Path(__file__).with_name("speculative_driver.py")


def farm_entries(client, start: int, stop: int) -> list:
    """Headers of the farm's entries [start, stop)."""
    found, cursor = [], start
    while cursor < stop:
        page = client.read_entries(cursor, stop, payloads=False)
        if not page:
            break
        found += page
        cursor = page[-1].index + 1
    return found


@pytest.mark.timeout(300)
def test_the_dafka_sink_refuses_to_write_with_spark_speculation(farm, tmp_path):
    topic = "speculative"
    inbox = tmp_path / "in"
    write_files(inbox, [["d", "e"]])
    with LocalDafka(stores=1, data_dir=tmp_path / "dafka") as dafka, \
            farm.client() as client:
        start = client.last_applied() + 1
        options = {**dafka.options, **farm.options, "topic": topic}
        run = subprocess.run(
            [sys.executable, str(SPECULATIVE_DRIVER), json.dumps(options), str(inbox),
             str(tmp_path / "chk")], capture_output=True, text=True, timeout=240,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
            cwd=str(SPECULATIVE_DRIVER.parents[2]))
        assert run.returncode == 0, run.stderr[-3000:]
        outcome = json.loads(run.stdout.strip().splitlines()[-1])
        for write in ("batch", "stream"):
            error = outcome[write]
            assert error is not None, f"the {write} write ran with spark.speculation=true"
            assert "the dafka sink does not write with spark.speculation=true" in error
            assert "Start the Spark session with spark.speculation=false" in error
        # Refused before anything was published or allocated, and nothing committed.
        with StoreClient(dafka.config) as stores:
            assert stores.heads(topic) == {}
        touched = [e for e in farm_entries(client, start, client.last_applied() + 1)
                   if e.type in ("kv", "staged", "commit")]
        assert touched == []


# --- stores the sink cannot reach --------------------------------------------------------------

FAST = dict(beacon_interval=0.05, beacon_timeout=0.6, bind="tcp://127.0.0.1:*")


@pytest.fixture
def tower() -> Iterator[Tower]:
    with Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as running:
        yield running


def start_store(tower: Tower, data_dir: Path, *extra: str) -> subprocess.Popen:
    """`garlicfarm dafka store`, once it reported its nodes."""
    store = subprocess.Popen(
        [sys.executable, "-m", "garlicfarm", "dafka", "store", "--sub", tower.sub_endpoint,
         "--pub", tower.pub_endpoint, "--data-dir", str(data_dir),
         "--beacon-interval", str(FAST["beacon_interval"]),
         "--beacon-timeout", str(FAST["beacon_timeout"]), "--bind", FAST["bind"], *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    ready, _, _ = select.select([store.stdout], [], [], 30)
    line = store.stdout.readline().decode() if ready else ""
    if not line.startswith("dafka store:"):
        store.kill()
        store.wait()
        raise AssertionError(f"the store did not start: {line!r}")
    return store


def stop_all(stores: list[subprocess.Popen]) -> None:
    for store in stores:
        store.kill()
        store.wait(30)
        store.stdout.close()


@pytest.mark.timeout(120)
def test_stores_the_sink_cannot_reach_are_counted_and_named(tower, tmp_path):
    """Two store processes that announce 127.0.0.2, where nothing listens (their
    publishers are bound to 127.0.0.1): they answer the sink's beacon and subscribe to
    it, but the sink cannot reach them. Its error (filling a failed attempt's hole needs
    every store's head) counts the 2 stores, names each one's announced endpoint and
    what to check, and the sink's options; with no store running, it says none answered."""
    config = DafkaConfig(tower_sub=(tower.sub_endpoint,), tower_pub=(tower.pub_endpoint,),
                         **FAST)
    sink = DafkaSinkBackend(FarmClientOptions("127.0.0.1:1"), config, "orders", ack_timeout=3)
    stores = [start_store(tower, tmp_path / f"store-{n}", "--beacon-address", "127.0.0.2")
              for n in range(2)]
    try:
        with pytest.raises(GarlicFarmSparkError) as caught:
            sink._stored_head("P1")
    finally:
        stop_all(stores)
    message = str(caught.value)
    assert "0 of the 2 Dafka store(s) that answered through the towers" in message
    assert message.count("subscribed to us, but its publisher at tcp://127.0.0.2:") == 2
    assert "--beacon-address" in message
    assert "option tower" in message and "ackTimeout (3 s)" in message

    with pytest.raises(GarlicFarmSparkError) as caught:
        sink._stored_head("P1")
    assert "no Dafka store reachable via the towers" in str(caught.value)
    assert "none answered our beacon (1 needed)" in str(caught.value)
