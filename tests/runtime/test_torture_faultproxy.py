"""The fault-injecting proxy on real loopback sockets: forwarding, drops both ways and one
way, taint and reset at heal, delays, cuts, refused targets, the mesh's partitions, and
no leaked threads or sockets."""
from __future__ import annotations

import os
import random
import select
import socket
import threading
import time

import pytest

from consensus.torture.faultproxy import (Direction, FaultProxy, FaultProxyError, LinkFaults,
                                          ProxyNetwork, parse_endpoint)
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


class Target:
    """A listening socket on an ephemeral port; connections are accepted by the test."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(5)
        self.endpoint = "127.0.0.1:%d" % self.sock.getsockname()[1]

    def accept(self) -> socket.socket:
        conn, _ = self.sock.accept()
        conn.settimeout(5)
        return conn

    def pending(self) -> bool:
        """Is a connection waiting to be accepted right now?"""
        return bool(select.select([self.sock], [], [], 0)[0])

    def close(self) -> None:
        self.sock.close()


class EchoServer:
    """Echoes every byte back on its own thread (for the mesh and stream tests)."""

    def __init__(self) -> None:
        self.target = Target()
        self.endpoint = self.target.endpoint
        self.received = bytearray()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop = False
        self._thread.start()

    def _run(self) -> None:
        self.target.sock.settimeout(0.05)
        while not self._stop:
            try:
                conn, _ = self.target.sock.accept()
            except (socket.timeout, OSError):
                continue
            self._conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                self.received += data
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        for c in self._conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.target.close()


def connect(endpoint: str) -> socket.socket:
    s = socket.create_connection(parse_endpoint(endpoint), timeout=5)
    return s


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def is_reset(sock: socket.socket) -> bool:
    """The connection was reset (or closed) by the proxy: recv fails or returns EOF."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


@pytest.fixture(autouse=True)
def no_loop_errors(caplog):
    """The proxy's loop must never log an unhandled error (a task that died)."""
    yield
    errors = [r for r in caplog.records if r.name == "asyncio" and r.levelname == "ERROR"]
    assert not errors, [r.getMessage() for r in errors]


@pytest.fixture
def proxy():
    with FaultProxy() as p:
        yield p


@pytest.fixture
def target():
    t = Target()
    yield t
    t.close()


def test_forwards_both_ways_and_half_close(proxy, target):
    address = proxy.add_link("a", target.endpoint)
    assert address.startswith("127.0.0.1:") and address != target.endpoint
    with connect(address) as client:
        server = target.accept()
        client.sendall(b"hello")
        assert recv_exactly(server, 5) == b"hello"
        server.sendall(b"world!")
        assert recv_exactly(client, 6) == b"world!"
        client.shutdown(socket.SHUT_WR)           # half-close travels as EOF
        assert server.recv(10) == b""
        server.sendall(b"still")                  # the other direction stays open
        assert recv_exactly(client, 5) == b"still"
        server.close()
        assert client.recv(10) == b""
    stats = proxy.stats("a")
    assert stats.accepted == 1
    assert stats.forwarded == {Direction.FORWARD: 5, Direction.BACKWARD: 11}
    assert stats.dropped == {Direction.FORWARD: 0, Direction.BACKWARD: 0}
    wait_until(lambda: proxy.stats("a").open == 0, message="connection closed")


def test_forward_drop_is_one_way_and_heal_resets_tainted(proxy, target):
    address = proxy.add_link("a", target.endpoint)
    client = connect(address)
    server = target.accept()
    proxy.block("a", forward=True, backward=False)
    assert proxy.faults("a") == LinkFaults(drop_forward=True)
    client.sendall(b"x" * 1000)
    wait_until(lambda: proxy.stats("a").dropped[Direction.FORWARD] == 1000,
               message="the dropped bytes counted")
    server.sendall(b"answers pass")               # backward is open
    assert recv_exactly(client, 12) == b"answers pass"
    server.setblocking(False)
    with pytest.raises(BlockingIOError):           # nothing of the 1000 bytes arrived
        server.recv(1)
    server.setblocking(True)
    proxy.heal("a")
    # The connection lost bytes: both ends see it reset.
    assert is_reset(client)
    assert is_reset(server)
    assert proxy.stats("a").reset == 1
    # A new connection works normally.
    with connect(address) as again:
        fresh = target.accept()
        again.sendall(b"ok")
        assert recv_exactly(fresh, 2) == b"ok"
        fresh.close()
    client.close()
    server.close()


def test_backward_drop_keeps_forward(proxy, target):
    address = proxy.add_link("a", target.endpoint)
    with connect(address) as client:
        server = target.accept()
        proxy.block("a", forward=False, backward=True)
        server.sendall(b"lost")
        wait_until(lambda: proxy.stats("a").dropped[Direction.BACKWARD] == 4,
                   message="backward bytes dropped")
        client.sendall(b"arrives")
        assert recv_exactly(server, 7) == b"arrives"
        server.close()


def test_connection_during_forward_drop_never_reaches_target(proxy, target):
    address = proxy.add_link("a", target.endpoint)
    proxy.block("a")
    with connect(address) as client:
        client.sendall(b"syn lost")
        wait_until(lambda: proxy.stats("a").dropped[Direction.FORWARD] == 8,
                   message="bytes dropped at the proxy")
        assert not target.pending()               # the proxy never connected upstream
        proxy.heal()
        assert is_reset(client)


def test_untainted_connection_survives_heal(proxy, target):
    address = proxy.add_link("a", target.endpoint)
    with connect(address) as client:
        server = target.accept()
        proxy.block("a")
        proxy.heal("a")                           # nothing crossed while blocked
        client.sendall(b"fine")
        assert recv_exactly(server, 4) == b"fine"
        assert proxy.stats("a").reset == 0
        server.close()


def test_delay_holds_each_direction_in_order(proxy):
    echo = EchoServer()
    try:
        address = proxy.add_link("a", echo.endpoint)
        delay = 0.2
        proxy.delay("a", delay)
        with connect(address) as client:
            start = time.monotonic()
            client.sendall(b"ping")
            assert recv_exactly(client, 4) == b"ping"
            elapsed = time.monotonic() - start
            # Both directions are delayed: the round trip takes at least twice the delay.
            assert elapsed >= 2 * delay
            # Many chunks keep their order (and are not delayed one after the other:
            # 50 chunks arrive in far less than 50 delays).
            payload = b"".join(b"%06d" % i for i in range(50))
            start = time.monotonic()
            for i in range(50):
                client.sendall(payload[i * 6:(i + 1) * 6])
            assert recv_exactly(client, len(payload)) == payload
            assert time.monotonic() - start < 10 * delay
    finally:
        echo.close()


def test_cut_resets_open_connections(proxy, target):
    address = proxy.add_link("a", target.endpoint)
    clients = [connect(address) for _ in range(3)]
    servers = [target.accept() for _ in range(3)]
    wait_until(lambda: proxy.stats("a").open == 3, message="3 connections open")
    assert proxy.cut("a") == 3
    for s in clients + servers:
        assert is_reset(s)
        s.close()
    wait_until(lambda: proxy.stats("a").open == 0, message="connections gone")


def test_refused_target_resets_the_client(proxy):
    dead = Target()
    endpoint = dead.endpoint
    dead.close()                                  # nothing listens there now
    address = proxy.add_link("a", endpoint)
    try:
        with connect(address) as client:   # the reset may come before connect returns
            assert is_reset(client)
    except ConnectionResetError:
        pass
    wait_until(lambda: proxy.stats("a").refused == 1, message="the refusal counted")


def test_random_stream_survives_intact(proxy):
    """Random chunk sizes through a delayed, then healthy link arrive byte for byte."""
    rng = random.Random(7)
    echo = EchoServer()
    try:
        address = proxy.add_link("a", echo.endpoint)
        proxy.delay("a", 0.01)
        with connect(address) as client:
            sent = bytearray()
            for i in range(200):
                chunk = rng.randbytes(rng.randint(1, 20000))
                client.sendall(chunk)
                sent += chunk
                if i == 100:
                    proxy.delay("a", 0)
            assert recv_exactly(client, len(sent)) == bytes(sent)
    finally:
        echo.close()


def test_errors_name_the_link(proxy, target):
    with pytest.raises(FaultProxyError, match="no link named 'b'"):
        proxy.block("b")
    proxy.add_link("a", target.endpoint)
    with pytest.raises(FaultProxyError, match="exists already"):
        proxy.add_link("a", target.endpoint)
    with pytest.raises(ValueError, match="HOST:PORT"):
        proxy.add_link("c", "localhost")
    with pytest.raises(ValueError, match=">= 0"):
        proxy.delay("a", -1)
    proxy.close()
    with pytest.raises(FaultProxyError, match="closed"):
        proxy.cut("a")


def test_mesh_partition_and_one_way_drop():
    servers = {n: EchoServer() for n in (1, 2, 3)}
    try:
        with ProxyNetwork.full({n: s.endpoint for n, s in servers.items()}) as net:
            assert set(net.peer_addresses(1)) == {2, 3}
            net.partition([1, 2], [3])
            blocked = LinkFaults(drop_forward=True, drop_backward=True)
            assert net.faulty_links() == {(1, 3): blocked, (3, 1): blocked,
                                          (2, 3): blocked, (3, 2): blocked}
            with connect(net.address(1, 2)) as ok, connect(net.address(1, 3)) as cut_off:
                ok.sendall(b"same side")
                assert recv_exactly(ok, 9) == b"same side"
                cut_off.sendall(b"other side")
                wait_until(lambda: net.proxy.stats((1, 3)).dropped[Direction.FORWARD] == 10,
                           message="dropped across the partition")
                assert bytes(servers[3].received) == b""
            net.heal()
            assert net.faulty_links() == {}

            # One way: nothing 1 sends reaches 2, neither on 1's own connections to 2
            # (forward on (1, 2)) nor as 1's answers on 2's connections (backward on
            # (2, 1)); 2 -> 1 still flows.
            net.drop(1, 2)
            assert net.faulty_links() == {(1, 2): LinkFaults(drop_forward=True),
                                          (2, 1): LinkFaults(drop_backward=True)}
            with connect(net.address(2, 1)) as from2:
                from2.sendall(b"2 speaks")        # reaches 1, whose echo is dropped
                wait_until(lambda: bytes(servers[1].received) == b"2 speaks",
                           message="2's bytes at 1")
                wait_until(lambda: net.proxy.stats((2, 1)).dropped[Direction.BACKWARD] == 8,
                           message="1's echo dropped")
            net.isolate(3)
            assert {link for link in net.faulty_links() if 3 in link} == {
                (1, 3), (3, 1), (2, 3), (3, 2)}
            with pytest.raises(ValueError, match="not in this network"):
                net.partition([1, 9])
            # Links are idempotent, and refuse to change their target.
            assert net.link(1, 2, servers[2].endpoint) == net.address(1, 2)
            with pytest.raises(FaultProxyError, match="already leads to"):
                net.link(1, 2, servers[3].endpoint)
            with pytest.raises(ValueError, match="no link"):
                net.link(1, 1, servers[1].endpoint)
    finally:
        for s in servers.values():
            s.close()


def _sockets_on(ports: set[int]) -> set[int]:
    """Inodes of this process's TCP sockets with an end on one of `ports`: other tests'
    leftover threads may open or close descriptors meanwhile, never on these ports."""
    mine = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:                      # closed between listdir and readlink
            continue
        if link.startswith("socket:["):
            mine.add(int(link[8:-1]))
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                local, remote, inode = fields[1], fields[2], int(fields[9])
                if inode in mine and ({int(local.rsplit(":", 1)[1], 16),
                                       int(remote.rsplit(":", 1)[1], 16)} & ports):
                    found.add(inode)
    return found


def _proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "faultproxy"]


def test_no_thread_or_socket_leak(target):
    ports = {parse_endpoint(target.endpoint)[1]}
    before, threads = _sockets_on(ports), _proxy_threads()
    for _ in range(3):
        with FaultProxy() as proxy:
            address = proxy.add_link("a", target.endpoint)
            ports |= {parse_endpoint(address)[1],
                      parse_endpoint(proxy.add_link("b", target.endpoint))[1]}
            clients = [connect(address) for _ in range(4)]
            servers = [target.accept() for _ in range(4)]
            assert len(_sockets_on(ports) - before) >= 16   # what the check would see
            proxy.block("a")
            clients[0].sendall(b"x")
            proxy.delay("b", 0.05)
        for s in clients + servers:
            s.close()
    assert _proxy_threads() == threads
    assert _sockets_on(ports) - before == set()
