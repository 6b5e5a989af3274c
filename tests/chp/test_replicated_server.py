"""Replicated CHP servers as processes next to a 3-node farm (LocalCluster) on 127.0.0.1:
failover of the serving node mid-stream, retransmissions, restart from a checkpoint,
malformed frames and records, option errors."""
from __future__ import annotations

import socket
import threading

import pytest
import zmq

from connectors.chp import cli, proto, resume
from connectors.chp.client import CloneClient
from connectors.chp.map_machine import RECORD_MAGIC, ReplicatedMap, encode_kvset
from connectors.chp.proto import Channel, Kvset
from consensus.torture import LocalCluster
from tests.chp.test_pair import hugz_sequence
from tests.runtime.test_tls_and_proxy import certificates  # noqa: F401 (a fixture)
from tests.support import wait_until

FAST = ("--hugz-interval", "0.2", "--farm-timeout", "2")
TTL_KEYS_EXPIRE = 0.3


def start_chp(servers, farm: LocalCluster, node: int, *args: str, name: str = ""):
    """A replicated server next to `node`, which it lists first; `name` its log's."""
    members = [farm.endpoint_of(node)] + [farm.endpoint_of(n) for n in farm.node_ids
                                          if n != node]
    return servers(name or f"chp-{node}", "--replicated", ",".join(members), "--farm-user",
                   farm.username, *FAST, *args)


def committed_updates(farm: LocalCluster, identity: bytes = b"farm/chp") -> ReplicatedMap:
    """The oracle: the whole committed log replayed into a fresh map."""
    oracle = ReplicatedMap("chp", identity)
    oracle.stream = []
    with farm.client() as client:
        last, index = client.last_applied(), 1
        while index <= last:
            for record in client.read_entries(index, last + 1):
                oracle.stream += oracle.apply_entry(record.index, record.timestamp_ms,
                                                    record.records or ())
                index = record.index + 1
    return oracle


def as_updates(items) -> list[tuple[int, bytes, bytes, bytes]]:
    return [(u.sequence, u.key, u.uuid, u.body) for u in items]


def drained(watch) -> list:
    seen = []
    while (entry := watch.get(timeout=0)) is not None:
        seen.append(entry)
    return seen


@pytest.mark.timeout(150)
def test_killing_the_serving_node_mid_stream_loses_and_repeats_nothing(servers, monkeypatch,
                                                                       tmp_path):
    with LocalCluster(3, data_dir=str(tmp_path / "farm"), status_interval=5.0) as farm:
        leader = farm.wait_for_leader(30)
        monkeypatch.setenv("GARLICFARM_PASSWORD", farm.password)
        chp = {n: start_chp(servers, farm, n, "--data-dir", str(tmp_path / f"chp-{n}"),
                            "--checkpoint-every", "20") for n in farm.node_ids}
        # the watcher is served by the leader's neighbour; the writer by another server
        order = [leader] + [n for n in farm.node_ids if n != leader]
        watcher = CloneClient([chp[n].address for n in order], server_timeout=1.0)
        writer = CloneClient([chp[n].address for n in reversed(order)], server_timeout=1.0)
        with watcher, writer:
            start = watcher.wait_synced(30)
            writer.wait_synced(30)
            watch = watcher.watch()
            killed = threading.Event()
            failovers_before_kill = [0]
            expected: dict[bytes, bytes | None] = {}
            sent: list[tuple[bytes, bytes, bytes]] = []   # (uuid, key, value)
            failures: list[BaseException] = []

            def write() -> None:
                """Confirmed writes (sets, deletes, short ttls) until the watcher has
                failed over after the kill, and 30 more: some land while it looks for a
                server."""
                try:
                    i = after = 0
                    while after < 30 and i < 2000:
                        key, value, ttl = b"/k/%d" % (i % 25), b"v%d" % i, None
                        if i % 9 == 8:
                            value = b""
                        elif i % 4 == 3:
                            ttl = TTL_KEYS_EXPIRE
                        receipt = writer.set(key, value, ttl=ttl, confirm=True, timeout=20)
                        sent.append((receipt.uuid, key, value))
                        expected[key] = value if value and ttl is None else None
                        i += 1
                        after += killed.is_set() and \
                            watcher.failovers > failovers_before_kill[0]
                except BaseException as exc:   # reported by the test thread
                    failures.append(exc)

            thread = threading.Thread(target=write)
            thread.start()
            try:
                wait_until(lambda: watcher.sequence >= start + 40 or failures, 30,
                           message="the watcher to see 40 updates")
                failovers_before_kill[0] = watcher.failovers
                chp[leader].kill()          # the serving CHP server and its farm node
                farm.kill(leader)
                killed.set()
            finally:
                thread.join(90)
            assert not failures and not thread.is_alive()
            assert watcher.failovers > failovers_before_kill[0]
            assert watcher.server.port != chp[leader].port

            # a client retransmits an update after the failover: it must not apply again
            uuid, key, value = sent[5]
            writer.set(key, value, uuid=uuid)
            marker = writer.set(b"/end", b"done", confirm=True, timeout=20)
            expected[b"/end"] = b"done"
            want = sorted((k, v) for k, v in expected.items() if v is not None)
            wait_until(lambda: watcher.items() == want, 20,
                       message="the watcher's map to reach the writer's final state")

            oracle = committed_updates(farm)
            wait_until(lambda: watcher.sequence >= oracle.sequence, 10)
            assert oracle.sequence == watcher.sequence >= marker.sequence
            # the change stream is exactly the committed one after the first sync
            assert as_updates(drained(watch)) == \
                [u for u in as_updates(oracle.stream) if u[0] > start]
            assert {e.key: e.body for e in oracle.map.entries()} == dict(want)
            # every KVSET applied exactly once (an expiry delete repeats a set's UUID)
            applied = [u for u in oracle.stream if u.body or u.get_property(b"ttl") is None]
            assert sorted(u.uuid for u in applied) == sorted([s[0] for s in sent] +
                                                             [marker.uuid])
            assert oracle.duplicates >= len(sent)   # every server proposed each KVSET
            survivors = [chp[n] for n in order[1:]]
            assert any("resumed a client from sequence" in s.log() for s in survivors)
            for server in survivors:
                assert hugz_sequence(server.port) == oracle.sequence

            # the killed pair comes back: the server starts from its checkpoint
            farm.restart(leader)
            chp[leader].start()
            wait_until(lambda: "caught up with the farm" in chp[leader].log(), 30,
                       message="the restarted server to catch up")
            assert "checkpoint at log index" in chp[leader].log()
            with CloneClient(chp[leader].address) as late:
                assert late.wait_synced(20) == oracle.sequence
                assert late.items() == want


@pytest.mark.timeout(90)
def test_malformed_frames_and_records_are_survived(servers, monkeypatch):
    with LocalCluster(1) as farm:
        farm.wait_for_leader(30)
        monkeypatch.setenv("GARLICFARM_PASSWORD", farm.password)
        server = start_chp(servers, farm, 1)
        with farm.client() as client:   # records under our magic that are not ours to apply
            client.append([RECORD_MAGIC + b"\xc1",
                           encode_kvset("chp", Kvset(b"HUGZ", 0, bytes(16), b"", b"x")),
                           b"a record of another program"])
        ctx = zmq.Context()
        try:
            pub = ctx.socket(zmq.PUB)
            pub.linger = 0
            pub.connect(f"tcp://127.0.0.1:{server.port + 2}")
            dealer = ctx.socket(zmq.DEALER)
            dealer.linger = 0
            dealer.connect(f"tcp://127.0.0.1:{server.port}")
            with CloneClient(server.address, server_timeout=2.0) as client:
                client.wait_synced(30)

                def published(key: bytes, frames: list[bytes]) -> bool:
                    pub.send_multipart(frames)   # again until the PUB is connected
                    return client.get(key) is not None   # (same UUID: applied once)

                probe = proto.encode(Kvset(b"/probe", 0, bytes([1]) * 16, b"", b"1"))
                wait_until(lambda: published(b"/probe", probe), 20, message="the probe")
                for frames in ([b"k"], [b"k", bytes(7), b"", b"", b"v"],
                               [b"k", bytes(8), b"short", b"", b"v"],
                               [b"k", bytes(8), b"", b"noequals", b"v"],
                               [b"KTHXBAI", bytes(8), b"", b"", b"v"],
                               [b"k", bytes(8), b"", b"ttl=never\n", b"v"],
                               [b"k", bytes(8), b"", b"", b"v", b"extra"]):
                    pub.send_multipart(frames)
                after = proto.encode(Kvset(b"/after", 0, bytes([2]) * 16, b"", b"2"))
                wait_until(lambda: published(b"/after", after), 20, message="/after")
                for frames in ([b"GIMME", b""], [b"ICANHAZ?", b"", b""],
                               [b"ICANHAZ?", b"", b"noequals"], [b"ICANHAZ?"] * 4):
                    dealer.send_multipart(frames)
                for port in (server.port, server.port + 1, server.port + 2):
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                        raw.sendall(b"\xff" * 64 + b"GET / HTTP/1.1\r\n\r\n")
                # a resume request this server cannot honour: an ordinary snapshot
                dealer.send_multipart(proto.encode(proto.Icanhaz(
                    b"", properties=resume.request(10 ** 9, b"farm/chp"))))
                assert dealer.poll(20_000)
                reply = [proto.decode(dealer.recv_multipart(), Channel.SNAPSHOT_REPLY)
                         for _ in range(3)]
                assert [r.key for r in reply[:2]] == [b"/probe", b"/after"]
                assert resume.resumed_from(reply[2].properties) is None
                assert resume.identity_of(reply[2].properties) == b"farm/chp"

                receipt = client.set("/good", "value", confirm=True, timeout=20)
                assert receipt.sequence == 3   # nothing malformed took a sequence
                assert client.items() == [(b"/after", b"2"), (b"/good", b"value"),
                                          (b"/probe", b"1")]
        finally:
            ctx.destroy(linger=0)
        assert server.proc.poll() is None and server.stop() == 0
        # 7 on the collector (the bad ttl refused when applied), 4 snapshot requests,
        # 2 records in the log
        assert "3 published, 13 malformed messages dropped" in server.log()

        refused = start_chp(servers, farm, 1, "--farm-password", "wrong", name="refused")
        wait_until(lambda: refused.proc.poll() is not None, 30, message="a refused server")
        assert refused.proc.returncode == cli.EXIT_FARM
        assert "check --farm-user and --farm-password" in refused.log()


@pytest.mark.timeout(90)
def test_a_new_server_starts_from_another_ones_state_once_the_log_is_compacted(
        servers, monkeypatch):
    compacting = ("--snapshot-interval", "20", "--retain-entries", "2", "--segment-bytes",
                  "2048")
    with LocalCluster(1, extra_args=compacting) as farm:
        farm.wait_for_leader(30)
        monkeypatch.setenv("GARLICFARM_PASSWORD", farm.password)
        first = start_chp(servers, farm, 1)
        with CloneClient(first.address, server_timeout=2.0) as client:
            client.wait_synced(30)
            for i in range(80):   # one log entry each
                client.set(b"/c/%d" % (i % 30), b"v%d" % i, confirm=True, timeout=20)
            with farm.client() as farm_client:
                wait_until(lambda: farm_client.log_bounds()[0] > 1, 20,
                           message="the farm to compact its log")
            lost = start_chp(servers, farm, 1, name="lost")
            wait_until(lambda: lost.proc.poll() is not None, 30, message="a server too late")
            assert lost.proc.returncode == cli.EXIT_FARM
            assert "compacted its log past entry 1" in lost.log()

            late = start_chp(servers, farm, 1, "--bootstrap", f"127.0.0.1:1,{first.address}",
                             name="late")
            wait_until(lambda: "caught up with the farm" in late.log(), 30,
                       message="the bootstrapped server to catch up")
            assert "from a bootstrap server" in late.log()
            assert "sent our state at log index" in first.log()
            receipt = client.set("/c/after", "x", confirm=True, timeout=20)
            with CloneClient(late.address, server_timeout=2.0) as other:
                other.wait_synced(20)
                wait_until(lambda: other.sequence == receipt.sequence, 20)
                assert other.items() == client.items() and len(other.items()) == 31


@pytest.mark.timeout(90)
def test_a_replicated_server_reaches_a_tls_farm(servers, monkeypatch, certificates):
    tls = ("--tls-cert", certificates["node.pem"], "--tls-key", certificates["node.key"],
           "--tls-ca", certificates["ca.pem"])
    with LocalCluster(1, extra_args=tls) as farm:
        monkeypatch.setenv("GARLICFARM_PASSWORD", farm.password)
        # the nodes' tls-ca requires a client certificate of the farm's CA
        server = start_chp(servers, farm, 1, "--farm-tls-ca", certificates["ca.pem"],
                           "--farm-tls-cert", certificates["node.pem"], "--farm-tls-key",
                           certificates["node.key"])
        with CloneClient(server.address, server_timeout=2.0) as client:
            client.wait_synced(30)
            assert client.set("/tls", "yes", confirm=True, timeout=20).sequence == 1
        plain = start_chp(servers, farm, 1, name="plain")   # no --farm-tls-ca: never serves
        wait_until(lambda: "cannot read the log" in plain.log(), 30,
                   message="the plain server to fail")
        assert "caught up" not in plain.log()


@pytest.mark.parametrize("args, option", [
    (["--replicated", "127.0.0.1:9"], "--farm-user"),
    (["--replicated", "127.0.0.1:9", "--farm-user", "u"], "--farm-password"),
    (["--farm-user", "u"], "--farm-user"),
    (["--replicated", "nonsense", "--farm-user", "u", "--farm-password", "p"], "--replicated"),
    (["--replicated", "127.0.0.1:9", "--farm-user", "u", "--farm-password", "p", "--map",
      "a/b"], "--map"),
    (["--replicated", "127.0.0.1:9", "--farm-user", "u", "--farm-password", "p",
      "--history", "-1"], "--history"),
    (["--replicated", "127.0.0.1:9", "--farm-user", "u", "--farm-password", "p",
      "--farm-tls-ca", "/nonexistent/ca.pem"], "--farm-tls-ca"),
    (["--farm-tls-ca", "ca.pem"], "--farm-tls-ca"),
])
def test_replicated_options_are_checked_and_named(args, option, capsys, monkeypatch):
    monkeypatch.delenv("GARLICFARM_PASSWORD", raising=False)
    assert cli.main(["server", "--port", "1", *args]) == cli.EXIT_USAGE
    assert option in capsys.readouterr().err


def test_replicated_excludes_a_binary_star_role(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["server", "--replicated", "127.0.0.1:9", "--primary", "127.0.0.1:5566"])
    assert exit_.value.code == 2 and "--replicated" in capsys.readouterr().err
