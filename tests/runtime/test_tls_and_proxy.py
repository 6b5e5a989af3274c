"""TLS on every connection, and peers dialing through an HTTP CONNECT proxy (the I2P
case), with real certificates (openssl) and a real proxy on loopback."""
from __future__ import annotations

import shutil
import socket
import subprocess
import threading

import pytest

from consensus.client import FarmClient, ProtocolMismatch, Unavailable
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make test certificates")
    d = tmp_path_factory.mktemp("tls")
    run = lambda *args: subprocess.run(["openssl", *args], cwd=d, check=True,  # noqa: E731
                                       capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=farm-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
        "node.key", "-out", "node.csr")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "node.pem")
    return {name: str(d / f"{name}") for name in ("ca.pem", "node.pem", "node.key")}


def test_a_tls_farm(certificates):
    args = ["--tls-cert", certificates["node.pem"], "--tls-key", certificates["node.key"],
            "--tls-ca", certificates["ca.pem"]]
    with LocalCluster(3, extra_args=args, status_interval=5.0) as farm:
        with farm.client(tls_ca=certificates["ca.pem"], tls_cert=certificates["node.pem"],
                         tls_key=certificates["node.key"], timeout=20) as client:
            wait_until(lambda: _leader(client), 30, message="a leader over TLS")
            index, _ = client.append([b"over tls"])
            for node_id in farm.node_ids:
                endpoint = farm.endpoint_of(node_id)
                wait_until(lambda: client.log_bounds(endpoint)[1] >= index, 20)
        with farm.client(timeout=2) as plain:
            with pytest.raises(ProtocolMismatch, match="plain TCP: a node that requires TLS"):
                plain.append([b"no tls"])
        wait_until(lambda: b"plain TCP to a node that requires TLS" in
                   open(farm.log_path(1), "rb").read(), 5)
        with pytest.raises((ProtocolMismatch, Unavailable)):
            with FarmClient(farm.endpoints, username=farm.username, password=farm.password,
                            tls_ca=certificates["node.pem"], timeout=2) as wrong_ca:
                wrong_ca.ping()


def _leader(client):
    try:
        return client.ping()["leader"]
    except Exception:
        return None


class ConnectProxy(threading.Thread):
    """A minimal HTTP CONNECT proxy that remembers the targets it was asked for."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.targets: list[str] = []
        self.sockets: list[socket.socket] = []

    def run(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        method, target, _ = head.split(b"\r\n")[0].decode().split(" ")
        if method != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.targets.append(target)
        host, port = target.rsplit(":", 1)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        upstream.settimeout(None)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.sockets += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()
        for s in self.sockets:
            s.close()


def test_peers_and_clients_through_an_http_connect_proxy():
    proxy = ConnectProxy()
    proxy.start()
    try:
        with LocalCluster(3, extra_args=["--proxy", f"http://{proxy.address}"],
                          status_interval=5.0) as farm:
            farm.wait_for_leader(30)
            peer_endpoints = {farm.endpoint_of(i) for i in farm.node_ids}
            wait_until(lambda: len(set(proxy.targets) & peer_endpoints) >= 2, 20,
                       message="peers dialing through the proxy")
            before = len(proxy.targets)
            with farm.client(proxy=f"http://{proxy.address}", timeout=20) as client:
                client.append([b"through the proxy"])
            assert len(proxy.targets) > before       # the client came through it too
    finally:
        proxy.close()
