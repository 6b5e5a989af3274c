"""Poison values against real server processes (issue 13 item 3): an out-of-range ttl
from the CLI or straight on the wire is refused, and every kind of server (standalone,
a Binary Star pair, replicated) answers afterwards; a replicated server replays a
committed poison entry after a restart; a client facing a zguide server that relays
``ttl=1e308`` keeps working, and a client whose thread died says why."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
import zmq

from connectors.chp import proto
from connectors.chp.client import CloneClient
from connectors.chp.map_machine import encode_kvset
from connectors.chp.proto import Hugz, Kthxbai, Kvpub, Kvset, Kvsync
from consensus.torture import LocalCluster
from tests.chp.support import free_port_span
from tests.chp.test_cli import chp
from tests.chp.test_pair import start_pair
from tests.chp.test_replicated_server import committed_updates, start_chp
from tests.support import wait_until

POISON_TTLS = (b"2e305", b"-2e305", b"1e308", b"1e+308", b"9" * 400, b"1" + b"0" * 300)


def poison(ttl: bytes, n: int) -> list[bytes]:
    return proto.encode(Kvset(b"/poison/%d" % n, 0, bytes([n + 1]) * 16,
                              b"ttl=" + ttl + b"\n", b"v"))


def marker(key: bytes, n: int) -> list[bytes]:
    return proto.encode(Kvset(key, 0, bytes([200 + n]) * 16, b"", b"m"))


class Collector:
    """A raw sender to a server's collector (P+2) through an XPUB, which says when the
    server's SUB has subscribed: what is sent afterwards arrives, in order."""

    def __init__(self, port: int) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.XPUB)
        self.sock.linger = 0
        self.sock.connect(f"tcp://127.0.0.1:{port + 2}")
        assert self.sock.poll(20_000), "the collector never subscribed"
        self.sock.recv()

    def send(self, *messages: list[bytes]) -> None:
        for frames in messages:
            self.sock.send_multipart(frames)

    def close(self) -> None:
        self.ctx.destroy(linger=0)


def poison_all(port: int, *after: list[bytes]) -> None:
    """Every poison KVSET to the collector at `port`, then the messages `after`."""
    collector = Collector(port)
    try:
        collector.send(*(poison(ttl, n) for n, ttl in enumerate(POISON_TTLS)), *after)
    finally:
        collector.close()


@pytest.mark.timeout(90)
def test_an_out_of_range_ttl_is_refused_by_the_cli_and_survived_by_the_server(servers):
    server = servers("s")
    at = ("--server", server.address)
    refused = chp("set", "/k", "v", "--ttl", "2e305", *at)
    assert refused.returncode == 2, refused
    assert "--ttl" in refused.stderr and "at most" in refused.stderr
    for bad in ("inf", "nan", "-1", "0"):
        assert chp("set", "/k", "v", "--ttl", bad, *at).returncode == 2

    poison_all(server.port, marker(b"/after", 0))
    got = chp("get", "/after", *at)
    assert got.returncode == 0 and got.stdout == "m\n", got
    assert chp("set", "/k", "v", "--ttl", "3600", *at).stdout == "sequence 2\n"
    assert server.proc.poll() is None
    assert server.stop() == 0
    assert f"{len(POISON_TTLS)} malformed messages dropped" in server.log()


@pytest.mark.timeout(120)
def test_a_binary_star_pair_survives_a_poison_ttl_and_its_pending_list(servers):
    primary, backup = start_pair(servers)
    pair = [primary.address, backup.address]
    with CloneClient(pair, server_timeout=1.0) as client:
        client.wait_synced(10)
        poison_all(primary.port)
        # the backup holds the poison KVSETs (the primary never publishes them), then
        # a marker sent only to it, which it applies when it takes over
        poison_all(backup.port, marker(b"/held", 1))
        assert client.set("/before", "1", confirm=True, timeout=10).sequence == 1
        assert primary.proc.poll() is None

        primary.kill()
        receipt = client.set("/after", "2", confirm=True, timeout=20)
        assert client.server.port == backup.port
        assert backup.proc.poll() is None
        assert "applied 2 pending updates" in backup.log()   # /held and /after
        assert receipt.sequence == 3
        assert client.items() == [(b"/after", b"2"), (b"/before", b"1"), (b"/held", b"m")]


@pytest.mark.timeout(150)
def test_a_replicated_map_refuses_a_committed_poison_entry_and_replays_it(servers,
                                                                           monkeypatch):
    with LocalCluster(1) as farm:
        farm.wait_for_leader(30)
        monkeypatch.setenv("GARLICFARM_PASSWORD", farm.password)
        with farm.client() as client:   # committed before any server runs: replayed
            client.append([encode_kvset("chp", Kvset(b"/committed", 0, bytes(16),
                                                     b"ttl=2e305\n", b"x"))])
        server = start_chp(servers, farm, 1)
        wait_until(lambda: "caught up with the farm" in server.log()
                   or server.proc.poll() is not None, 30, message="the server to catch up")
        assert server.proc.poll() is None, server.log()
        poison_all(server.port)
        with CloneClient(server.address, server_timeout=2.0) as clone:
            clone.wait_synced(30)
            assert clone.set("/after", "1", confirm=True, timeout=20).sequence == 1
        assert server.proc.poll() is None, server.log()

        oracle = committed_updates(farm)   # the collector refused the poison: not logged
        assert oracle.rejected == 1
        assert [(e.key, e.body) for e in oracle.map.entries()] == [(b"/after", b"1")]

        for stop in (server.stop, server.kill):   # every restart replays the poison
            stop()
            server.start()
            wait_until(lambda: "caught up with the farm" in server.log()
                       or server.proc.poll() is not None, 30,
                       message="the restarted server to catch up")
            assert server.proc.poll() is None, server.log()
            with CloneClient(server.address, server_timeout=2.0) as clone:
                assert clone.wait_synced(30) == 1
                assert clone.items() == [(b"/after", b"1")]


class ZguideServer:
    """What a zguide clone server (clonesrv5/6, Python) sends when a client set
    ``ttl=1e308``: a KVSYNC with the absolute ttl it stored (``time.time() + 1e308``
    printed by Python: ``1e+308``), then the client's KVSET relayed as a KVPUB, ttl
    verbatim. HUGZ every 0.1 s. Real sockets, run on a thread."""

    def __init__(self) -> None:
        self.port = free_port_span()
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.linger = 0
        self.router.bind(f"tcp://127.0.0.1:{self.port}")
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.linger = 0
        self.pub.bind(f"tcp://127.0.0.1:{self.port + 1}")
        self.stop = threading.Event()
        self.snapshots = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        sequence = 1
        next_hugz = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_hugz:
                self.pub.send_multipart(proto.encode(Hugz(sequence)))
                next_hugz = now + 0.1
            if self.router.poll(50):
                identity, *_ = self.router.recv_multipart()
                self.router.send_multipart([identity, *proto.encode(Kvsync(
                    b"/z/sync", 1, bytes(16), b"ttl=1e+308\n", b"s"))])
                self.router.send_multipart([identity, *proto.encode(Kthxbai(1, b"", b"",
                                                                            b""))])
                self.snapshots += 1
                if sequence == 1:
                    sequence = 2
                    self.pub.send_multipart(proto.encode(Kvpub(
                        b"/z/pub", 2, bytes(range(16)), b"ttl=1e308\n", b"p")))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.ctx.destroy(linger=0)


@pytest.mark.timeout(60)
def test_a_client_keeps_entries_a_zguide_server_relays_with_ttl_1e308():
    server = ZguideServer()
    try:
        with CloneClient(f"127.0.0.1:{server.port}", server_timeout=2.0) as client:
            client.wait_synced(20)
            wait_until(lambda: client.get("/z/pub") is not None, 20,
                       message="the relayed KVPUB")
            assert client.items() == [(b"/z/pub", b"p"), (b"/z/sync", b"s")]
            # kept as the server sent them, with no expiry of ours
            assert client.entry("/z/pub").properties == b"ttl=1e308\n"
            assert client.entry("/z/sync").expires_ms is None
            assert client.synced and server.snapshots == 1
    finally:
        server.close()


EXHAUST_FILES = textwrap.dedent("""
    import resource, sys, time
    from connectors.chp.client import CloneClient
    from connectors.chp.errors import ChpError
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    client = CloneClient(sys.argv[1], server_timeout=0.05)   # a server that is not there
    files = []
    try:
        while True:
            files.append(open("/dev/null"))
    except OSError:
        pass   # every descriptor is taken: the client's next failover cannot open a socket
    started = time.monotonic()
    try:
        client.wait_synced(20)
    except ChpError as exc:
        print(type(exc).__name__, round(time.monotonic() - started), exc, flush=True)
""")


@pytest.mark.timeout(60)
def test_a_client_whose_thread_died_says_why_on_the_next_call():
    nobody = f"127.0.0.1:{free_port_span()}"
    done = subprocess.run([sys.executable, "-c", EXHAUST_FILES, nobody],
                          capture_output=True, text=True, timeout=50)
    out = done.stdout
    assert out.startswith("ClientFailed 0 "), (out, done.stderr)
    assert "background thread failed" in out and "Too many open files" in out
