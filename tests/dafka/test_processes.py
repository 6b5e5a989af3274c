"""Dafka as separate processes: the CLI, a store killed and restarted mid-stream, two
stores, config files. Everything on 127.0.0.1."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from connectors.dafka import Consumer, Producer, Store, StoreClient
from tests.dafka.conftest import FAST, with_config
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)
FAST_ARGS = ["--beacon-interval", str(FAST["beacon_interval"]),
             "--beacon-timeout", str(FAST["beacon_timeout"])]


def read_line(proc: subprocess.Popen, timeout: float = 15.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"no output from {proc.args} within {timeout}s")
    line = proc.stdout.readline().decode()
    if not line:
        raise AssertionError(f"{proc.args} exited: {proc.stderr.read().decode()}")
    return line


def tower_args(config) -> list[str]:
    return ["--sub", config.tower_sub[0], "--pub", config.tower_pub[0]]


def start_store(procs, config, data_dir) -> subprocess.Popen:
    proc = procs.start("store", *tower_args(config), "--data-dir", str(data_dir),
                       *FAST_ARGS)
    assert read_line(proc).startswith("dafka store: writer ")
    return proc


def test_cli_produce_then_consume_after_the_producer_exited(procs, tmp_path):
    tower = procs.start("tower", "--sub", "tcp://127.0.0.1:*", "--pub", "tcp://127.0.0.1:*")
    words = read_line(tower).split()
    sub, pub = words[4].rstrip(","), words[-1]
    towers = ["--sub", sub, "--pub", pub, *FAST_ARGS]
    store = procs.start("store", *towers, "--data-dir", str(tmp_path / "db"))
    assert read_line(store).startswith("dafka store:")
    lines = [f"line {i}" for i in range(300)] + ["", "ünïcode"]
    producer = procs.start("produce", "orders", *towers, "--ack-timeout", "20",
                           stdin=subprocess.PIPE)
    _, err = producer.communicate(("\n".join(lines) + "\n").encode(), timeout=60)
    assert producer.returncode == 0, err.decode()
    consumer = procs.start("consume", "orders", "--from-beginning", "--json", *towers,
                           "--count", str(len(lines)), "--idle-timeout", "20")
    out, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err.decode()
    records = [json.loads(line) for line in out.decode().splitlines()]
    assert [r["value"] for r in records] == lines
    assert [r["offset"] for r in records] == list(range(len(lines)))
    assert {r["topic"] for r in records} == {"orders"} and len({r["partition"]
                                                                for r in records}) == 1
    plain = procs.start("consume", "orders", "--from-beginning", *towers, "--count", "2")
    out, _ = plain.communicate(timeout=60)
    assert out.decode().splitlines() == lines[:2]


def test_cli_reports_bad_options_and_missing_stores(procs, config):
    bad = procs.start("consume", "t", "--tower", "localhost")
    _, err = bad.communicate(timeout=30)
    assert bad.returncode == 2 and b"--tower 'localhost'" in err
    alone = procs.start("produce", "t", *tower_args(config), *FAST_ARGS, "--ack-timeout",
                        "0.5", stdin=subprocess.PIPE)
    _, err = alone.communicate(b"a\nb\n", timeout=30)
    assert alone.returncode == 1 and b"2 record(s) of t" in err and b"--ack-timeout" in err


def test_config_file_drives_a_node(procs, config, tmp_path):
    zpl = tmp_path / "dafka.cfg"
    zpl.write_text(
        "# as the C tools read it\n"
        "beacon\n"
        f"    sub_address = \"{config.tower_sub[0]}\"\n"
        f"    pub_address = {config.tower_pub[0]}\n"
        "    interval = 50\n"
        "    timeout = 600\n"
        "store\n"
        f"    db = {tmp_path / 'from-config'}\n")
    store = procs.start("store", "-c", str(zpl))
    line = read_line(store)
    assert line.rstrip().endswith(f"data in {tmp_path / 'from-config'}")
    producer = Producer(config, "cfg").start()
    try:
        producer.publish(b"x")
        assert producer.flush(15)    # the configured store got it
    finally:
        producer.stop()


def test_store_killed_and_restarted_mid_stream_loses_nothing_it_acked(procs, config,
                                                                      tmp_path):
    data = tmp_path / "db"
    store = start_store(procs, config, data)
    producer = Producer(config, "durable").start()
    total = 20_000
    published = threading.Event()

    def publish():
        for i in range(total):
            producer.publish(b"r%06d" % i)
            if i % 500 == 0:
                time.sleep(0.01)   # a steady stream rather than one burst
        published.set()

    writer = threading.Thread(target=publish)
    try:
        writer.start()
        wait_until(lambda: producer.acked >= 3000, timeout=30, message="ACKs flowing")
        store.send_signal(signal.SIGKILL)
        store.wait(10)
        acked_at_kill = producer.acked
        # The producer has dropped everything acked: only the store's disk has it now.
        assert producer.unacked.first > acked_at_kill >= 3000
        restarted = start_store(procs, config, data)
        assert published.wait(60)
        assert producer.flush(30), "the restarted store caught up and ACKed everything"
        with StoreClient(config) as client:
            assert client.heads("durable") == {("durable", producer.address): total - 1}
            values = [r.value for r in client.read_range("durable", producer.address,
                                                         0, total)]
        assert values == [b"r%06d" % i for i in range(total)]
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(15) == 0
    finally:
        writer.join(60)
        producer.stop()


def test_two_stores_each_keep_everything(config, nodes, tmp_path):
    first = nodes(Store(config, tmp_path / "a"))
    second = nodes(Store(config, tmp_path / "b"))
    producer = nodes(Producer(config, "twice"))
    producer.publish_many(b"%d" % i for i in range(500))
    assert producer.flush(15)
    key = ("twice", producer.address)
    wait_until(lambda: first.partitions.head(key) == second.partitions.head(key) == 499,
               message="both stores complete")
    with StoreClient(config) as client:
        assert client.wait_for_stores(2) == {first.reader.address, second.reader.address}
    producer.stop()
    first.stop()
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["twice"]))
    got: list = []
    wait_until(lambda: got.extend(consumer.poll(0.1)) or len(got) >= 500,
               message="everything from the remaining store")
    assert [r.offset for r in got] == list(range(500))


def _gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_store_exits_when_the_parent_that_started_it_dies(procs, config, tmp_path):
    # A parent that starts a store with --exit-with-parent, prints its pid, then waits.
    launcher = (
        "import os, subprocess, sys\n"
        "store = subprocess.Popen([sys.executable, '-m', 'garlicfarm', 'dafka', "
        "'store', *sys.argv[1:], '--exit-with-parent', str(os.getpid())], "
        "stdout=subprocess.DEVNULL, start_new_session=True)\n"
        "print(store.pid, flush=True)\n"
        "sys.stdin.read()\n")
    parent = subprocess.Popen(
        [sys.executable, "-c", launcher, *tower_args(config), *FAST_ARGS,
         "--data-dir", str(tmp_path / "db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    procs.procs.append(parent)
    store_pid = int(read_line(parent))
    try:
        with StoreClient(config) as client:
            client.wait_for_stores(1, timeout=20)     # it runs while its parent lives
        assert not _gone(store_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: _gone(store_pid), timeout=15, message="the orphaned store exits")
    finally:
        if not _gone(store_pid):
            os.kill(store_pid, signal.SIGKILL)
