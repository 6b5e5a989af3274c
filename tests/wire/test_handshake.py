"""The Garlic Farm handshake state machines: in memory byte for byte, over real loopback
sockets into the binary stream, and fuzzed."""
from __future__ import annotations

import itertools
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consensus.wire import jraft
from consensus.wire.digest import DigestAlgorithm, ha1, parse_authorization, parse_challenges
from consensus.wire.errors import HandshakeError
from consensus.wire.handshake import (Accepted, Challenged, CredentialCache, Established,
                                      HandshakeInitiator, HandshakeLimits, HandshakeReceiver,
                                      NeedData, NonceStore, Reconnect, Refused,
                                      handshake_path, websocket_accept)
from consensus.wire.jraft import JRaftDecoder, LogEntry, MessageType, RaftRequest, RaftResponse

pytestmark = pytest.mark.timeout(60)
HOST = "127.0.0.1:9001"
USERS = {"spark": "s3cret"}
PATH = handshake_path()


def counter_random() -> callable:
    counter = itertools.count(1)
    return lambda n: next(counter).to_bytes(n, "big")


class Farm:
    """One receiver (its nonce store and users) and one initiator-side cache."""

    def __init__(self, **receiver_options: object) -> None:
        self.random = counter_random()
        self.nonces = NonceStore(self.random)
        self.cache = CredentialCache()
        self.receiver_options = {"credentials": USERS.get, **receiver_options}
        self.log: list[object] = []          # receiver events, in order

    def initiator(self, password: str = "s3cret", **options: object) -> HandshakeInitiator:
        return HandshakeInitiator(host=HOST, username="spark", password=password,
                                  cache=self.cache, random=self.random, **options)

    def receiver(self) -> HandshakeReceiver:
        return HandshakeReceiver(nonces=self.nonces, **self.receiver_options)

    def answer(self, request: bytes, now: float) -> object:
        receiver = self.receiver()
        receiver.receive_data(request)
        event = receiver.next_event(now)
        self.log.append(event)
        return event

    def connect(self, initiator: HandshakeInitiator, now: float, after_101: bytes = b"") -> Established:
        """Run a handshake to the end, one receiver per connection."""
        request = initiator.start(now)
        while True:
            event = self.answer(request, now)
            assert not isinstance(event, NeedData)
            initiator.receive_data(event.data + (after_101 if isinstance(event, Accepted) else b""))
            result = initiator.next_event()
            if isinstance(result, Established):
                return result
            assert isinstance(result, Reconnect)
            request = result.request


def head(data: bytes) -> list[str]:
    return data.split(b"\r\n\r\n")[0].decode().split("\r\n")


# ----------------------------------------------------------------------- the exchange

def test_first_contact_is_request_1_challenge_request_2_upgrade() -> None:
    farm = Farm()
    initiator = farm.initiator()
    request_1 = initiator.start(0.0)
    assert head(request_1) == [f"GET {PATH} HTTP/1.1", f"Host: {HOST}",
                               "Cache-Control: no-cache", "Connection: close"]
    challenge = farm.answer(request_1, 0.0)
    assert isinstance(challenge, Challenged)
    lines = head(challenge.data)
    assert lines[0] == "HTTP/1.1 401 Unauthorized" and "Connection: close" in lines
    offered, _ = parse_challenges([l.split(": ", 1)[1] for l in lines
                                   if l.startswith("WWW-Authenticate")])
    assert [c.algorithm for c in offered] == ["SHA-256", "MD5"]
    assert all(c.qop == ("auth",) and c.opaque and c.realm == "GarlicFarm@farm" for c in offered)
    assert len({c.nonce for c in offered}) == 1

    initiator.receive_data(challenge.data)
    reconnect = initiator.next_event()
    assert isinstance(reconnect, Reconnect)
    lines = head(reconnect.request)
    assert lines[0] == f"GET {PATH} HTTP/1.1"
    assert "Connection: keep-alive, Upgrade" in lines and "Upgrade: websocket" in lines
    auth = parse_authorization(next(l for l in lines if l.startswith("Authorization")).split(": ", 1)[1])
    assert auth.algorithm is DigestAlgorithm.SHA_256 and auth.nc == 1 and auth.uri == PATH

    accepted = farm.answer(reconnect.request, 1.0)
    assert isinstance(accepted, Accepted) and accepted.username == "spark"
    assert head(accepted.data) == ["HTTP/1.1 101 Switching Protocols", "Connection: Upgrade",
                                   "Upgrade: websocket"]
    initiator.receive_data(accepted.data + b"\x02rest")
    established = initiator.next_event()
    assert established == Established(b"\x02rest", from_cache=False)


def test_the_binary_stream_starts_right_after_the_101() -> None:
    farm = Farm()
    vote = jraft.encode(RaftResponse(MessageType.REQUEST_VOTE_RESPONSE, 1, 2, 6, 0, True))
    established = farm.connect(farm.initiator(), 0.0, after_101=vote[:10])
    decoder = JRaftDecoder()
    assert decoder.feed(established.trailing_data) == []
    assert decoder.feed(vote[10:]) == [jraft.decode(vote)]


def test_bytes_the_initiator_pipelined_after_request_2_reach_the_receiver() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    initiator = farm.initiator()
    event = farm.answer(initiator.start(5.0) + b"\x05\x00", 5.0)
    assert isinstance(event, Accepted) and event.trailing_data == b"\x05\x00"


def test_receiver_takes_the_request_in_any_chunking() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    request = farm.initiator().start(1.0)
    receiver = farm.receiver()
    for i in range(len(request) - 1):
        receiver.receive_data(request[i:i + 1])
        assert receiver.next_event(1.0) == NeedData()
    receiver.receive_data(request[-1:])
    assert isinstance(receiver.next_event(1.0), Accepted)


# ---------------------------------------------------------------------- credential cache

def test_a_reconnect_within_the_hour_goes_straight_to_request_2() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    farm.log.clear()
    again = farm.connect(farm.initiator(), 3599.0)
    assert again.from_cache and len(farm.log) == 1 and isinstance(farm.log[0], Accepted)
    request = farm.initiator().start(3599.5)
    auth = parse_authorization(next(l for l in head(request)
                                    if l.startswith("Authorization")).split(": ", 1)[1])
    assert auth.nc == 3                       # the cache counts nonce uses


def test_the_cache_expires_after_its_ttl() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    assert head(farm.initiator().start(3600.0))[-1] == "Connection: close"      # request 1
    assert len(farm.cache) == 0
    with pytest.raises(ValueError, match="ttl"):
        CredentialCache(ttl=60)


def test_cache_is_per_host_and_cluster() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    other_host = HandshakeInitiator(host="127.0.0.1:9002", username="spark", password="s3cret",
                                    cache=farm.cache, random=farm.random)
    assert "Connection: close" in head(other_host.start(1.0))


def test_a_stale_nonce_falls_back_to_the_new_challenge() -> None:
    farm = Farm()
    farm.nonces.lifetime = 7200.0
    farm.cache = CredentialCache(ttl=4 * 3600.0)
    farm.connect(farm.initiator(), 0.0)
    farm.log.clear()
    again = farm.connect(farm.initiator(), 7300.0)
    assert not again.from_cache
    stale = farm.log[0]
    assert isinstance(stale, Challenged) and b"stale=true" in stale.data
    assert isinstance(farm.log[1], Accepted)


def test_a_receiver_that_forgot_the_nonce_asks_again_with_stale() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    farm.nonces = NonceStore(farm.random)                  # the receiver restarted
    farm.log.clear()
    assert farm.connect(farm.initiator(), 10.0).from_cache is False
    assert [type(e) for e in farm.log] == [Challenged, Accepted]


def test_wrong_password_is_a_401_and_an_error_naming_the_options() -> None:
    farm = Farm()
    with pytest.raises(HandshakeError) as caught:
        farm.connect(farm.initiator(password="wrong"), 0.0)
    assert caught.value.field == "password" and "username and password" in caught.value.reason
    refused = farm.log[-1]
    assert isinstance(refused, Refused) and refused.status == 401
    assert refused.error.field == "Authorization.response"
    assert b"WWW-Authenticate: Digest" in refused.data
    assert len(farm.cache) == 0


def test_a_cached_entry_with_a_changed_password_fails_after_one_fresh_try() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    farm.log.clear()
    with pytest.raises(HandshakeError) as caught:
        farm.connect(farm.initiator(password="changed"), 1.0)
    assert caught.value.field == "password"
    assert [type(e) for e in farm.log] == [Refused, Refused] and len(farm.cache) == 0


# -------------------------------------------------------------------- receiver checks

def test_wrong_cluster_is_a_404_and_an_error_naming_the_cluster_option() -> None:
    farm = Farm(cluster="orchard")
    with pytest.raises(HandshakeError) as caught:
        farm.connect(farm.initiator(), 0.0)
    assert caught.value.field == "cluster" and "'farm'" in caught.value.reason
    assert isinstance(farm.log[0], Refused) and farm.log[0].status == 404
    assert head(farm.log[0].data)[0] == "HTTP/1.1 404 Not Found"


def test_a_replayed_nonce_count_is_a_401() -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    request = farm.initiator().start(1.0)
    assert isinstance(farm.answer(request, 1.0), Accepted)
    replay = farm.answer(request, 2.0)
    assert isinstance(replay, Refused) and replay.status == 401
    assert replay.error.field == "Authorization.nc"


def request_2(farm: Farm, *, drop: str = "", add: tuple[str, ...] = (), now: float = 1.0) -> bytes:
    """A valid request 2 from a fresh challenge, with header lines dropped or added."""
    farm.connect(farm.initiator(), 0.0)
    lines = head(farm.initiator().start(now))
    lines = [l for l in lines if not (drop and l.startswith(drop))] + list(add)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def authorization(request: bytes) -> str:
    return next(l for l in head(request) if l.startswith("Authorization")).split(": ", 1)[1]


@pytest.mark.parametrize("edit, status, field", [
    (lambda r, a: r.replace(b"Upgrade: websocket\r\n", b""), 400, "Upgrade"),
    (lambda r, a: r.replace(b"keep-alive, Upgrade", b"keep-alive"), 400, "Upgrade"),
    (lambda r, a: r.replace(b"GET ", b"POST ", 1), 405, "method"),
    (lambda r, a: r.replace(a.encode(), b"Basic c3Bhcms6czNjcmV0"), 401, "Authorization"),
    (lambda r, a: r.replace(b'uri="', b'uri="/x'), 401, "Authorization.uri"),
    (lambda r, a: r.replace(b'realm="', b'realm="x'), 401, "Authorization.realm"),
    (lambda r, a: r.replace(b'opaque="', b'opaque="0'), 401, "Authorization.opaque"),
    (lambda r, a: r.replace(b'username="spark"', b'username="nobody"'), 401,
     "Authorization.response"),
    (lambda r, a: r.replace(b"qop=auth,", b"qop=auth-int,"), 401, "Authorization.qop"),
    (lambda r, a: r.replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\nabc"), 400,
     "request"),
    (lambda r, a: r.replace(b"\r\n\r\n", b"\r\nAuthorization: " + a.encode() + b"\r\n\r\n"),
     400, "Authorization"),
])
def test_request_2_refusals(edit, status: int, field: str) -> None:
    farm = Farm()
    request = request_2(farm)
    event = farm.answer(edit(request, authorization(request)), 1.0)
    assert isinstance(event, Refused), event
    assert (event.status, event.error.field) == (status, field)
    if status == 401:
        assert b"WWW-Authenticate: Digest" in event.data


def test_an_algorithm_the_receiver_does_not_offer_is_refused() -> None:
    farm = Farm()
    request = request_2(farm)
    md5_only = Farm(algorithms=(DigestAlgorithm.MD5,))
    md5_only.nonces = farm.nonces
    event = md5_only.answer(request, 1.0)
    assert isinstance(event, Refused) and event.error.field == "Authorization.algorithm"


def test_user_names_and_realms_beyond_ascii_travel_as_utf8() -> None:
    farm = Farm(realm="Fårm ü", credentials={"Jäsøn Doe": "Secret, or not?"}.get)
    initiator = HandshakeInitiator(host=HOST, username="Jäsøn Doe", password="Secret, or not?",
                                   cache=farm.cache, random=farm.random)
    assert isinstance(farm.connect(initiator, 0.0), Established)
    assert farm.log[-1].username == "Jäsøn Doe"


def test_md5_only_receiver_and_stored_ha1() -> None:
    stored = {DigestAlgorithm.MD5: ha1(DigestAlgorithm.MD5, "spark", "GarlicFarm@farm", "s3cret")}
    farm = Farm(algorithms=(DigestAlgorithm.MD5,),
                credentials=lambda user: stored if user == "spark" else None)
    farm.connect(farm.initiator(), 0.0)
    assert b"algorithm=MD5" in authorization(farm.initiator().start(1.0)).encode()


def test_the_initiator_refuses_a_receiver_that_offers_only_basic() -> None:
    initiator = Farm().initiator()
    initiator.start(0.0)
    initiator.receive_data(b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="x"\r\n'
                           b"Content-Length: 0\r\n\r\n")
    with pytest.raises(HandshakeError) as caught:
        initiator.next_event()
    assert caught.value.field == "WWW-Authenticate" and "Basic" in caught.value.reason


@pytest.mark.parametrize("response, field", [
    (b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n", "Upgrade"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: close\r\n\r\n",
     "Connection"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "status"),
    (b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
     b"Sec-WebSocket-Accept: AAAA\r\n\r\n", "Sec-WebSocket-Accept"),
    (b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", "WWW-Authenticate"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "response"),
    (b"", "response"),
])
def test_initiator_refuses_bad_responses_to_request_2(response: bytes, field: str) -> None:
    farm = Farm()
    farm.connect(farm.initiator(), 0.0)
    initiator = farm.initiator(websocket_key=True)
    initiator.start(1.0)
    initiator.receive_data(response)
    if not response:
        initiator.receive_data(b"")
    with pytest.raises(HandshakeError) as caught:
        initiator.next_event()
    assert caught.value.field == field


def test_sec_websocket_key_is_answered_per_rfc_6455() -> None:
    assert websocket_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    farm = Farm()
    established = farm.connect(farm.initiator(websocket_key=True), 0.0)
    assert isinstance(established, Established)
    assert b"Sec-WebSocket-Accept: " in farm.log[-1].data


def test_header_limits_both_ways() -> None:
    farm = Farm()
    receiver = farm.receiver()
    receiver.receive_data(f"GET {PATH} HTTP/1.1\r\nHost: a\r\nX: ".encode() + b"a" * 9000)
    event = receiver.next_event(0.0)
    assert isinstance(event, Refused) and event.status == 431
    initiator = farm.initiator(limits=HandshakeLimits(max_header_bytes=1024))
    initiator.start(0.0)
    initiator.receive_data(b"HTTP/1.1 401 Unauthorized\r\nX: " + b"a" * 2000)
    with pytest.raises(HandshakeError) as caught:
        initiator.next_event()
    assert caught.value.field == "response"


def test_receiver_sees_a_close_before_the_request_ends() -> None:
    receiver = Farm().receiver()
    receiver.receive_data(b"GET /Garl")
    assert receiver.next_event(0.0) == NeedData()
    receiver.receive_data(b"")
    event = receiver.next_event(0.0)
    assert isinstance(event, Refused) and event.data == b"" and event.error.field == "request"


def test_nonce_store_is_bounded() -> None:
    store = NonceStore(counter_random(), capacity=3)
    issued = [store.issue(float(i)) for i in range(5)]
    assert len(store) == 3
    assert store.use(issued[0][0], issued[0][1], 1, 5.0).name == "UNKNOWN"
    assert store.use(issued[4][0], issued[4][1], 1, 5.0).name == "OK"


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="cluster"):
        handshake_path("a/b")
    with pytest.raises(ValueError, match="username"):
        Farm().initiator().__class__(host=HOST, username="", password="p",
                                     cache=CredentialCache(), random=counter_random())


# ------------------------------------------------------------------------------- fuzz

@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=200) | st.lists(st.sampled_from([
    b"GET ", PATH.encode(), b" HTTP/1.1\r\n", b"Host: a\r\n", b"Authorization: Digest ",
    b'username="spark", ', b"nc=00000001, ", b'nonce="x", ', b"Upgrade: websocket\r\n",
    b"Connection: Upgrade\r\n", b"\r\n", b"\x00", b"\xff"]), max_size=12).map(b"".join))
def test_receiver_fuzz_gives_only_events(data: bytes) -> None:
    receiver = Farm().receiver()
    receiver.receive_data(data)
    receiver.receive_data(b"")
    assert isinstance(receiver.next_event(0.0), (Challenged, Refused, Accepted))


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=200) | st.lists(st.sampled_from([
    b"HTTP/1.1 ", b"401", b"101", b" x\r\n", b"WWW-Authenticate: ", b'Digest realm="r", ',
    b'nonce="n", ', b"qop=auth, ", b"algorithm=SHA-256", b"Upgrade: websocket\r\n",
    b"Connection: Upgrade\r\n", b"Content-Length: 0\r\n", b"\r\n", b"\x00"]),
    max_size=12).map(b"".join), second=st.booleans())
def test_initiator_fuzz_raises_only_handshake_errors(data: bytes, second: bool) -> None:
    farm = Farm()
    if second:
        farm.connect(farm.initiator(), 0.0)
    initiator = farm.initiator()
    initiator.start(1.0)
    initiator.receive_data(data)
    initiator.receive_data(b"")
    try:
        assert isinstance(initiator.next_event(), (Reconnect, Established))
    except HandshakeError:
        pass


# ------------------------------------------------------------------ real loopback sockets

def serve(listener: socket.socket, farm: Farm, connections: int, done: list) -> None:
    """A receiver edge: handshake each connection; after a 101, answer one JRaft request."""
    for _ in range(connections):
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            receiver = farm.receiver()
            while isinstance(event := receiver.next_event(1.0), NeedData):
                receiver.receive_data(conn.recv(4096))
            conn.sendall(event.data)
            if not isinstance(event, Accepted):
                continue
            decoder = JRaftDecoder()
            messages = decoder.feed(event.trailing_data)
            while not messages:
                messages = decoder.feed(conn.recv(4096))
            request = messages[0]
            done.append(request)
            conn.sendall(jraft.encode(RaftResponse(
                MessageType.APPEND_ENTRIES_RESPONSE, request.destination, request.source,
                request.term, request.last_log_index + len(request.entries) + 1, True)))


def dial(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def test_over_real_loopback_sockets_into_the_binary_stream() -> None:
    farm = Farm()
    received: list = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(10)                            # the server thread cannot hang
        port = listener.getsockname()[1]
        server = threading.Thread(target=serve, args=(listener, farm, 3, received), daemon=True)
        server.start()
        append = RaftRequest(MessageType.APPEND_ENTRIES_REQUEST, 1, 2, 5, 4, 42, 40,
                             (LogEntry.of(5, b"set k=v"),))
        replies, connections = [], 0
        for now in (0.0, 60.0):                            # first contact, then from cache
            initiator = HandshakeInitiator(host=f"127.0.0.1:{port}", username="spark",
                                           password="s3cret", cache=farm.cache,
                                           random=farm.random)
            sock = dial(port)
            connections += 1
            sock.sendall(initiator.start(now))
            while not isinstance(event := initiator.next_event(), Established):
                if isinstance(event, NeedData):
                    initiator.receive_data(sock.recv(4096))
                else:
                    sock.close()
                    sock = dial(port)
                    connections += 1
                    sock.sendall(event.request)
            with sock:
                sock.sendall(jraft.encode(append))
                decoder = JRaftDecoder()
                messages = decoder.feed(event.trailing_data)
                while not messages:
                    messages = decoder.feed(sock.recv(4096))
                replies.append(messages[0])
        server.join(10)
    assert not server.is_alive() and connections == 3
    assert received == [append, append]
    assert replies == [RaftResponse(MessageType.APPEND_ENTRIES_RESPONSE, 2, 1, 5, 44, True)] * 2
