"""The Garlic Farm handshake at a real node: nothing Raft-shaped before it succeeds;
404 for a wrong cluster, a 401 challenge, 401 for bad credentials or a replayed nonce
count, 101 then JRaft binary; credentials cached so a reconnect starts at request 2;
every refusal logged with its reason and peer."""
from __future__ import annotations

import socket

import pytest

import consensus.net.dial as dial_module
from consensus.client import AuthenticationError, ProtocolMismatch
from consensus.net.dial import dial
from consensus.net.security import Security
from consensus.torture import LocalCluster
from consensus.wire.digest import Challenge, DigestAlgorithm, DigestAuthorization, \
    parse_challenges
from consensus.wire.extensions import GARLICFARM_REGISTRY, Call, Hello, Reply, Welcome
from consensus.wire.jraft import JRaftDecoder, encode
from consensus.wire.marker import ConnectRequest
from consensus.wire.marker import encode as marker_encode
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)
PATH = "/GarlicFarm/farm/1/websocket"


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(1, username="farm", password="s3cret", status_interval=5.0) as cluster:
        cluster.wait_for_leader(30)
        yield cluster


def exchange(farm, request: bytes) -> bytes:
    """Send raw bytes; everything the node answers until it closes (or 3 s pass)."""
    host, port = farm.endpoint_of(1).split(":")
    with socket.create_connection((host, int(port)), timeout=3) as sock:
        sock.sendall(request)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
                if data.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in data:
                    break               # upgraded: the connection stays open
        except socket.timeout:
            pass
        return data


def request(path=PATH, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: farm", "Cache-Control: no-cache", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def challenge_of(answer: bytes) -> Challenge:
    head = answer.split(b"\r\n\r\n")[0].decode()
    values = [line.split(":", 1)[1].strip() for line in head.split("\r\n")[1:]
              if line.lower().startswith("www-authenticate:")]
    challenges, _ = parse_challenges(values)
    return next(c for c in challenges if c.algorithm == "SHA-256")


def request_2(challenge: Challenge, password: str, nc: int) -> bytes:
    auth = DigestAuthorization.answer(challenge, DigestAlgorithm.SHA_256, "farm", password,
                                      "GET", PATH, nc, "0a4f113b")
    return request(PATH, "Connection: keep-alive, Upgrade", "Upgrade: websocket",
                   f"Authorization: {auth.to_header()}")


def test_wrong_cluster_path_is_404(farm):
    assert exchange(farm, request("/GarlicFarm/other/1/websocket")).startswith(
        b"HTTP/1.1 404")
    assert exchange(farm, request("/GarlicFarm/farm/2/websocket")).startswith(b"HTTP/1.1 404")


def test_request_1_gets_a_digest_challenge_and_a_close(farm):
    answer = exchange(farm, request(PATH, "Connection: close"))
    assert answer.startswith(b"HTTP/1.1 401")
    assert answer.count(b"WWW-Authenticate: Digest") == 2       # SHA-256 and MD5
    assert challenge_of(answer).qop == ("auth",)


def test_bad_credentials_and_replayed_nonce_counts_are_401(farm):
    challenge = challenge_of(exchange(farm, request(PATH, "Connection: close")))
    assert exchange(farm, request_2(challenge, "wrong", 1)).startswith(b"HTTP/1.1 401")
    good = exchange(farm, request_2(challenge, "s3cret", 1))
    assert good.startswith(b"HTTP/1.1 101") and b"Upgrade: websocket" in good
    replay = exchange(farm, request_2(challenge, "s3cret", 1))
    assert replay.startswith(b"HTTP/1.1 401")
    assert exchange(farm, request_2(challenge, "s3cret", 2)).startswith(b"HTTP/1.1 101")
    wait_until(lambda: b"refused connection from 127.0.0.1" in
               open(farm.log_path(1), "rb").read(), 5, message="the refusal logged")


def test_after_101_jraft_binary_and_extensions_flow(farm):
    challenge = challenge_of(exchange(farm, request(PATH, "Connection: close")))
    host, port = farm.endpoint_of(1).split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(request_2(challenge, "s3cret", 7))
        sock.sendall(encode(Hello(0, 0, 0, b"raw", 1), GARLICFARM_REGISTRY) +
                     encode(Call(0, 0, 0, 1, "ping", {}), GARLICFARM_REGISTRY))
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        assert data.startswith(b"HTTP/1.1 101")
        decoder = JRaftDecoder(registry=GARLICFARM_REGISTRY)
        frames = decoder.feed(data.split(b"\r\n\r\n", 1)[1])
        while len(frames) < 2:
            frames += decoder.feed(sock.recv(65536))
        assert isinstance(frames[0], Welcome) and frames[0].node_id == 1
        assert isinstance(frames[1], Reply) and frames[1].result["role"] == "leader"


def test_no_raft_message_before_the_handshake(farm):
    vote = bytes([1]) + bytes(44)              # a JRaft RequestVoteRequest header
    assert exchange(farm, vote) == b""          # closed without an answer
    assert exchange(farm, marker_encode(ConnectRequest(2))) == b""
    for reason in (b"JRaft bytes without a handshake, but this node speaks --wire garlicfarm",
                   b"marker-wire ConnectRequest, but this node speaks --wire garlicfarm"):
        wait_until(lambda: reason in open(farm.log_path(1), "rb").read(), 5,
                   message=f"{reason!r} in the log")


def test_credentials_are_cached_so_a_reconnect_starts_at_request_2(farm, monkeypatch):
    opened = []
    real = dial_module.open_stream

    def counting(*args, **kw):
        opened.append(args[:2])
        return real(*args, **kw)

    monkeypatch.setattr(dial_module, "open_stream", counting)
    security = Security(username="farm", password="s3cret")
    dial(farm.endpoint_of(1), security).sock.close()
    assert len(opened) == 2                     # request 1, then request 2
    dial(farm.endpoint_of(1), security).sock.close()
    assert len(opened) == 3                     # straight to request 2
    assert len(security.cache) == 1


def test_clients_get_typed_errors(farm):
    with pytest.raises(AuthenticationError, match="password"):
        dial(farm.endpoint_of(1), Security(username="farm", password="nope"))
    with pytest.raises(ProtocolMismatch, match="cluster"):
        dial(farm.endpoint_of(1), Security(cluster="other", username="farm",
                                           password="s3cret"))
