"""Binary Star pairs as processes: failover by client vote, pending updates, fail back."""
from __future__ import annotations

import signal

import pytest
import zmq

from connectors.chp import proto
from connectors.chp.client import CloneClient
from connectors.chp.proto import Channel
from tests.chp.support import PortsTaken, free_port_span, on_fresh_ports
from tests.chp.test_server import drain
from tests.support import free_port, wait_until

FAST = ("--hugz-interval", "0.2", "--bstar-heartbeat", "0.2", "--peer-timeout", "0.6")


def start_pair(servers, timers=FAST, primary_args=(), backup_args=()):
    """A Binary Star pair, synced. `servers(name, *args, port=P)` starts one server."""
    def start():
        p, q = free_port_span(), free_port_span()
        b1, b2 = free_port(), free_port()
        primary = servers("primary", "--primary", f"127.0.0.1:{q}", "--bstar-port", str(b1),
                          "--peer-bstar-port", str(b2), *timers, *primary_args, port=p)
        try:
            backup = servers("backup", "--backup", f"127.0.0.1:{p}", "--bstar-port", str(b2),
                             "--peer-bstar-port", str(b1), *timers, *backup_args, port=q)
        except PortsTaken:
            primary.kill()
            raise
        return primary, backup

    primary, backup = on_fresh_ports(start)
    wait_until(lambda: "ACTIVE" in primary.log(), 30, message="the primary to go active")
    wait_until(lambda: "synced with" in backup.log(), 30, message="the backup to sync")
    return primary, backup


def hugz_sequence(port: int, timeout: float = 10.0) -> int:
    """The sequence a server announces in its HUGZ (a passive server's is the one it
    followed the active to)."""
    ctx = zmq.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.subscribe(b"HUGZ")
        sub.connect(f"tcp://127.0.0.1:{port + 1}")
        assert sub.poll(timeout * 1000), "no HUGZ"
        return proto.decode(sub.recv_multipart(), Channel.PUBLISHER).sequence
    finally:
        ctx.destroy(linger=0)


@pytest.mark.timeout(90)
def test_failover_by_vote_applies_pending_updates_and_fails_back(servers):
    primary, backup = start_pair(servers)
    pair = [primary.address, backup.address]
    with CloneClient(pair, server_timeout=1.0) as client, \
            CloneClient(pair, subtree="/f/", server_timeout=1.0) as watcher:
        client.wait_synced(10)
        watcher.wait_synced(10)
        watch = watcher.watch()
        assert client.set("/f/1", "one", confirm=True).sequence == 1
        assert client.set("/f/2", "two", confirm=True).sequence == 2
        wait_until(lambda: hugz_sequence(backup.port) == 2, 10, message="backup at 2")

        # The primary freezes: the KVSET sent now reaches only the backup's pending list.
        primary.proc.send_signal(signal.SIGSTOP)
        receipt = client.set("/f/3", "while frozen", confirm=True, timeout=15)
        primary.kill()
        # The clients voted for the backup by failing over; it applied its pending list.
        assert receipt.sequence == 3
        assert client.server.port == backup.port and client.failovers >= 1
        assert client.items() == [(b"/f/1", b"one"), (b"/f/2", b"two"),
                                  (b"/f/3", b"while frozen")]
        assert client.set("/f/4", "four", confirm=True).sequence == 4
        assert "ACTIVE (a client voted for us" in backup.log()
        assert "applied 1 pending updates" in backup.log()

        # The primary comes back empty, sees an active peer, follows it.
        primary.start()
        wait_until(lambda: "synced with" in primary.log(), 15, message="primary to sync")
        wait_until(lambda: hugz_sequence(primary.port) == 4, 10, message="primary at 4")
        backup.kill()
        assert client.set("/f/5", "five", confirm=True, timeout=15).sequence == 5
        assert client.server.port == primary.port
        assert [k for k, _ in client.items()] == [b"/f/%d" % n for n in range(1, 6)]

        changes = drain(watch, 5, timeout=15)
        assert [(e.key, e.sequence) for e in changes] == [
            (b"/f/%d" % n, n) for n in range(1, 6)]
        assert watcher.items() == client.items()


@pytest.mark.timeout(90)
def test_failover_at_the_reference_timers(servers, tmp_path):
    """HUGZ and bstar every 1 s, peer dead after 2 s, clients fail over after 5 s; the
    backup keeps its own --data-dir."""
    primary, backup = start_pair(servers, timers=(),
                                 backup_args=("--data-dir", str(tmp_path / "backup")))
    pair = [primary.address, backup.address]
    with CloneClient(pair) as client:
        client.wait_synced(10)
        client.set("/d/1", "one", confirm=True)
        wait_until(lambda: hugz_sequence(backup.port) == 1, 10, message="backup at 1")
        primary.kill()
        assert client.set("/d/2", "two", confirm=True, timeout=20).sequence == 2
        assert client.server.port == backup.port
        assert client.items() == [(b"/d/1", b"one"), (b"/d/2", b"two")]
    backup.kill()
    backup.start()   # the backup's own data survives too (it is alone: primary state)
    assert "sequence 2, 2 keys" in backup.log()


@pytest.mark.timeout(60)
def test_two_active_servers_stop_with_a_clear_reason(servers):
    """Split brain: Q never hears P (wrong state port), so a client's vote makes it active
    while P is active too; P hears Q and stops, as the reference servers do."""
    def start():
        p, q = free_port_span(), free_port_span()
        b1, b2, nowhere = free_port(), free_port(), free_port()
        first = servers("p", "--primary", f"127.0.0.1:{q}", "--bstar-port", str(b1),
                        "--peer-bstar-port", str(b2), *FAST, port=p)
        return first, (p, q, b2, nowhere)

    first, (p, q, b2, nowhere) = on_fresh_ports(start)
    with CloneClient(first.address, server_timeout=1.0) as client:
        client.wait_synced(10)    # its vote made P active (no peer yet)
    second = servers("q", "--primary", f"127.0.0.1:{p}", "--bstar-port", str(b2),
                     "--peer-bstar-port", str(nowhere), *FAST, port=q)
    with CloneClient(second.address, server_timeout=1.0) as client:
        client.wait_synced(10)
    assert first.proc.wait(10) == 3
    assert "both servers are ACTIVE" in first.log()
