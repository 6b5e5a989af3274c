"""Hostile subscriptions and malformed ZMTP at every Dafka socket facing the network
(issue 26 items 6, 7, 10). The victims run as processes, so a crash is an exit code.

Found: libzmq 4.3.5 (pyzmq 27) removes a prefix from a SUB/XSUB trie by recursion, one
stack frame per byte; the tower forwarded a subscriber's 128 KiB prefix to its XSUB,
which crashed on the unsubscription when the subscriber left (SIGSEGV). Each prefix
byte also costs ~85 bytes of heap in the XPUB trie that holds it.
"""
from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
import textwrap

import pytest
import zmq

from connectors.dafka import Tower
from connectors.dafka.metrics import TowerCollector
from connectors.dafka.tower import TowerLimits
from tests.dafka.conftest import FAST
from tests.dafka.test_processes import read_line
from tests.support import free_port, wait_until
from tests.zmtp import RawPeer, probe, rss_mb

pytestmark = pytest.mark.timeout(60)
ENDPOINTS = re.compile(r" at (tcp://[^,\s]+)")
FAST_ARGS = ["--beacon-interval", str(FAST["beacon_interval"]),
             "--beacon-timeout", str(FAST["beacon_timeout"])]

LIBZMQ_XSUB_CRASH = textwrap.dedent("""
    import sys, zmq
    xsub = zmq.Context().socket(zmq.XSUB)
    xsub.bind("tcp://127.0.0.1:*")
    prefix = b"a" * int(sys.argv[1])
    xsub.send(b"\\x01" + prefix)
    xsub.send(b"\\x00" + prefix)   # trie_t::rm recurses once per byte
    print("survived", flush=True)
""")


@pytest.mark.parametrize("size, survives", [(64 << 10, True), (128 << 10, False)])
def test_minimal_reproduction_libzmq_xsub_unsubscribe_recursion(size, survives):
    """The cause, pinned: if a libzmq upgrade fixes it, this test says so (and the
    bounds stay, for memory)."""
    run = subprocess.run([sys.executable, "-c", LIBZMQ_XSUB_CRASH, str(size)],
                         capture_output=True, timeout=30)
    assert (run.returncode == 0) is survives, (zmq.zmq_version(), run.returncode)
    if not survives:
        assert run.returncode == -11 and b"survived" not in run.stdout


def test_no_input_kills_the_tower_or_a_store_and_memory_comes_back(procs, tmp_path):
    """Old code: the tower died of the first 128 KiB subscription once its subscriber
    left (exit -11), and each oversized prefix grew the processes by ~85x its size."""
    tower = procs.start("tower", "--sub", "tcp://127.0.0.1:*", "--pub", "tcp://127.0.0.1:*")
    words = read_line(tower).split()
    sub, pub = words[4].rstrip(","), words[-1]
    store = procs.start("store", "--sub", sub, "--pub", pub, "--data-dir",
                        str(tmp_path / "db"), *FAST_ARGS)
    writer, reader = ENDPOINTS.findall(read_line(store))
    before = {p.pid: rss_mb(p.pid) for p in (tower, store)}

    for endpoint in (pub, writer, reader):
        cut = probe(endpoint, subscriptions=1100)
        assert all(cut), (endpoint, cut)    # each oversized one and the flood: cut
    for garbage in (b"\x00" * 64, b"\xff" * 4096):  # the beacon XSUB: not ours to parse
        with RawPeer(sub, b"PUB") as peer:
            peer.send_raw(garbage)

    for proc in (tower, store):
        assert proc.poll() is None, (proc.args, proc.returncode, proc.stderr.read())
        wait_until(lambda: rss_mb(proc.pid) - before[proc.pid] < 20, 10,
                   message=f"RSS of {proc.args[3:5]} ({rss_mb(proc.pid):.0f} MB) back within 20 MB of "
                           f"{before[proc.pid]:.0f} MB")
    # and the tower still welcomes and relays
    ctx = zmq.Context()
    try:
        listener = ctx.socket(zmq.SUB)
        listener.setsockopt(zmq.LINGER, 0)
        listener.setsockopt(zmq.SUBSCRIBE, b"B")
        listener.connect(pub)
        assert listener.poll(10_000), "no beacon relayed after the probes"
    finally:
        ctx.destroy(0)


def test_the_tower_cuts_a_connection_over_its_subscription_count(caplog):
    limits = TowerLimits(max_per_connection=8)
    with Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", tower_limits=limits) as tower, \
            RawPeer(tower.pub_endpoint) as peer, \
            caplog.at_level(logging.WARNING, "garlicfarm.dafka.tower"):
        for i in range(20):
            peer.subscribe(b"B%d" % i)
        assert peer.closed_by_peer(5.0), tower.stats
        wait_until(lambda: tower.stats["connections_cut"] == 1, 5, message=f"{tower.stats} {tower._holders} {tower.guard._counts}")
        assert tower.stats["subscriptions_refused_many"] >= 1
        # at most the admitted ones went on to the XSUB: first subscription of each
        assert len(tower._holders) <= limits.max_per_connection
        metrics = {m.name: m.samples[0].value for m in TowerCollector(tower).collect()}
        assert metrics["garlicfarm_dafka_tower_subscriber_connections_cut"] == 1
    # one summary line per (reason, peer), not one per refusal
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and "over 8 on one connection" in lines[0], lines


def _free_pair() -> int:
    """A port P such that P and P+1 are free now."""
    for _ in range(20):
        port = free_port()
        with socket.socket() as probe_next:
            try:
                probe_next.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise AssertionError("no two free consecutive ports")


def test_store_bind_with_a_fixed_port(procs, config, tmp_path):
    """Old code: the writer and the reader both bound PORT, and the store exited with
    "Address already in use"."""
    port = _free_pair()
    store = procs.start("store", "--sub", config.tower_sub[0], "--pub", config.tower_pub[0],
                        "--bind", f"tcp://127.0.0.1:{port}", "--data-dir",
                        str(tmp_path / "db"), *FAST_ARGS)
    assert ENDPOINTS.findall(read_line(store)) == [f"tcp://127.0.0.1:{port}",
                                                   f"tcp://127.0.0.1:{port + 1}"]
    taken = procs.start("store", "--sub", config.tower_sub[0], "--pub", config.tower_pub[0],
                        "--bind", f"tcp://127.0.0.1:{port}", "--data-dir",
                        str(tmp_path / "db2"), *FAST_ARGS)
    _, err = taken.communicate(timeout=30)
    assert taken.returncode != 0 and f"127.0.0.1:{port}".encode() in err, err
