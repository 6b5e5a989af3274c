"""The operators' HTTP server keeps its bounds against real sockets on loopback: slow
request heads time out, a connection cap closes the least recently active, oversized
heads, methods and bodies are refused, keep-alive and pipelining work, and TLS is
HTTPS only."""
from __future__ import annotations

import http.client
import socket
import ssl
import time

import pytest

from consensus.common.errors import ConfigError
from consensus.runtime.http_endpoint import HttpEndpoint, HttpLimits, Response, tls_context
from consensus.runtime.http_server import EVICTED, PLAIN_TO_TLS, TIMED_OUT
from tests.runtime.test_tls_and_proxy import certificates  # noqa: F401 - a fixture
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

ROUTES = {"/": lambda: Response(b"hello\n")}


def _closed(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes `sock` before `deadline` (reads what it sends)."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def _get(sock: socket.socket, path: str = "/") -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while not data.endswith(b"hello\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_a_slow_request_head_times_out_however_it_trickles():
    limits = HttpLimits(timeout=0.5)
    with HttpEndpoint("127.0.0.1:0", "--metrics", ROUTES, limits=limits) as endpoint:
        slow = socket.create_connection(("127.0.0.1", endpoint.port))
        silent = socket.create_connection(("127.0.0.1", endpoint.port))
        start = time.monotonic()
        slow.sendall(b"GET / HTTP/1.1\r\n")
        closed = False
        for byte in b"Host: a-very-slow-client\r\n":       # a byte each 50 ms: 1.3 s
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.05)
        closed = closed or _closed(slow, start + 3)
        assert closed and time.monotonic() - start < 2.5, "slowloris was not cut off"
        assert _closed(silent, start + 3), "an idle connection was kept"
        wait_until(lambda: endpoint.server.stats.get(TIMED_OUT) == 2, 2)
        # a prompt client is served all the while
        with socket.create_connection(("127.0.0.1", endpoint.port)) as prompt:
            assert _get(prompt).endswith(b"hello\n")
        slow.close()
        silent.close()


def test_keep_alive_and_pipelined_requests_are_answered_in_order():
    routes = {"/a": lambda: Response(b"A"), "/b": lambda: Response(b"BB")}
    with HttpEndpoint("127.0.0.1:0", "--metrics", routes) as endpoint:
        conn = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=5)
        for path, body in (("/a", b"A"), ("/b", b"BB"), ("/a", b"A")):
            conn.request("GET", path)
            answer = conn.getresponse()
            assert (answer.status, answer.read()) == (200, body)
        conn.close()
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as sock:
            sock.sendall(b"".join(b"GET /%s HTTP/1.1\r\nHost: x\r\n\r\n" % p
                                  for p in (b"b", b"a", b"b")) +
                         b"HEAD /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        answers = data.split(b"HTTP/1.1 ")[1:]
        assert [a.rsplit(b"\r\n\r\n", 1)[1] for a in answers] == [b"BB", b"A", b"BB", b""]
        assert b"Content-Length: 1" in answers[3]


def test_oversized_heads_other_methods_and_bodies_are_refused():
    with HttpEndpoint("127.0.0.1:0", "--metrics", ROUTES,
                      limits=HttpLimits(max_head_bytes=4096)) as endpoint:
        def status(request: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as sock:
                sock.sendall(request)
                return sock.recv(4096).split(b"\r\n", 1)[0]
        huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 8192 + b"\r\n\r\n"
        assert status(huge) == b"HTTP/1.1 431 "
        assert status(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi") == \
            b"HTTP/1.1 405 "
        assert status(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi") == \
            b"HTTP/1.1 413 "
        assert status(b"NONSENSE\r\n\r\n") == b"HTTP/1.1 400 "
        assert endpoint.server.stats == {"bad request": 4}


def test_over_the_cap_the_least_recently_active_connection_goes():
    with HttpEndpoint("127.0.0.1:0", "--metrics", ROUTES,
                      limits=HttpLimits(max_connections=4)) as endpoint:
        idle = [socket.create_connection(("127.0.0.1", endpoint.port)) for _ in range(4)]
        wait_until(lambda: endpoint.server.open_connections == 4, 5)
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as fresh:
            assert _get(fresh).endswith(b"hello\n")
            assert _closed(idle[0], time.monotonic() + 3)       # the oldest made room
            assert endpoint.server.open_connections == 4
            assert endpoint.server.stats == {EVICTED: 1}
        for sock in idle:
            sock.close()


def test_tls_serves_https_to_the_ca_and_refuses_plain_http(certificates):  # noqa: F811
    context = tls_context(certificates["node.pem"], certificates["node.key"], "--serve-tls")
    with HttpEndpoint("127.0.0.1:0", "--serve", ROUTES, tls=context) as endpoint:
        assert endpoint.url.startswith("https://127.0.0.1:")
        client = ssl.create_default_context(cafile=certificates["ca.pem"])
        conn = http.client.HTTPSConnection("127.0.0.1", endpoint.port, context=client,
                                           timeout=5)
        for _ in range(2):                  # keep-alive over TLS
            conn.request("GET", "/")
            answer = conn.getresponse()
            assert (answer.status, answer.read()) == (200, b"hello\n")
        conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=5)
        plain.request("GET", "/")
        answer = plain.getresponse()
        assert answer.status == 400 and b"HTTPS only" in answer.read()
        plain.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as sock:
                ssl.create_default_context().wrap_socket(sock, server_hostname="127.0.0.1")
        assert endpoint.server.stats.get(PLAIN_TO_TLS) == 1


def test_tls_options_are_checked(tmp_path, certificates):  # noqa: F811
    with pytest.raises(ConfigError, match="--metrics-tls-key: --metrics-tls-cert and "):
        tls_context(certificates["node.pem"], None, "--metrics-tls")
    with pytest.raises(ConfigError, match="--metrics-tls-cert: .* is not a readable file"):
        tls_context(str(tmp_path / "nope.pem"), certificates["node.key"], "--metrics-tls")
    with pytest.raises(ConfigError, match="--metrics-tls-cert: cannot load"):
        tls_context(certificates["ca.pem"], certificates["node.key"], "--metrics-tls")
