"""The Garlic Farm handshake: HTTP/1.1 + Digest + a WebSocket-style upgrade, sans-I/O.

Before JRaft's binary messages (`jraft.py`) flow, the initiator proves who it is
(SPECS §1, seed 000):

1. request 1 ``GET /GarlicFarm/CLUSTER/VERSION/websocket`` with ``Connection: close``;
2. response 1: ``404`` for a wrong path, else ``401`` with a Digest challenge; both close;
3. request 2 on a **new** connection: same path, ``Connection: keep-alive, Upgrade``,
   ``Upgrade: websocket``, ``Authorization: Digest ...`` (qop=auth, nc, cnonce);
4. response 2: ``401`` for bad credentials, else ``101 Switching Protocols`` with
   ``Connection: Upgrade`` and ``Upgrade: websocket``; the binary stream starts right
   after its blank line (no WebSocket framing).

Both sides are state machines in the h11 style, over h11 itself (a well-kept parser with
size limits; nothing here parses HTTP by hand). Feed bytes with ``receive_data`` (``b""``
when the peer closed) and pull events with ``next_event``; an event that carries
``data`` wants those bytes sent. Time comes in as an argument and randomness from an
injected ``random(n) -> bytes``; no sockets, clocks or threads.

**Credentials are per cluster**: one username/password for all the servers of a cluster.
The initiator keeps each receiver's last challenge in a `CredentialCache` keyed by
``(host, cluster)`` for at least an hour, so a reconnect starts at request 2 with the next
nonce count. A 401 to a cached request 2 (``stale=true``, or a receiver that forgot the
nonce) drops the entry and answers the fresh challenge in that 401 on a new connection.

**Receivers** issue a nonce and opaque per challenge from a shared `NonceStore` (bounded,
expiring), offer SHA-256 and MD5 as two ``WWW-Authenticate`` headers (RFC 7616 §3.7 order:
preferred first), verify the response, realm, uri, opaque and algorithm, and require the
nonce count to grow for each nonce: a replayed nc is a 401. A right password with an
unknown or expired nonce gets a 401 with ``stale=true``. Basic is refused.

**Sec-WebSocket-***: a receiver that sees ``Sec-WebSocket-Key`` answers with the RFC 6455
``Sec-WebSocket-Accept``. It costs one SHA-1 and lets the WebSocket-aware HTTP proxies the
seed routes through (I2P) accept the upgrade. An initiator built with
``websocket_key=True`` sends a key and checks the accept value when one comes back
(plain Garlic Farm peers ignore Sec-WebSocket-* and send none, which is accepted).
"""
from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, Union

import h11

from consensus.wire.digest import (Challenge, DigestAlgorithm, DigestAuthorization, ha1,
                                   parse_authorization, parse_challenges)
from consensus.wire.errors import HandshakeError

PROTOCOL = "handshake"
DEFAULT_CLUSTER = "farm"
VERSION = "1"
_CLUSTER = re.compile(r"[A-Za-z0-9._~-]+")
_WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_REASONS = {101: b"Switching Protocols", 400: b"Bad Request", 401: b"Unauthorized",
            404: b"Not Found", 405: b"Method Not Allowed", 431:
            b"Request Header Fields Too Large"}

RandomSource = Callable[[int], bytes]
#: What the receiver's credential lookup returns for a username: the password, the HA1
#: hex per algorithm (so passwords need not be stored), or None for an unknown user.
StoredCredential = Union[str, Mapping[DigestAlgorithm, str], None]


def _error(field: str, reason: str) -> HandshakeError:
    return HandshakeError(field, reason, protocol=PROTOCOL)


def handshake_path(cluster: str = DEFAULT_CLUSTER, version: str = VERSION) -> str:
    """``/GarlicFarm/CLUSTER/VERSION/websocket``; a cluster name is one URL path segment."""
    for option, value in (("cluster", cluster), ("version", version)):
        if not isinstance(value, str) or not _CLUSTER.fullmatch(value):
            raise ValueError(f"{option} {value!r} must be letters, digits, '.', '_', '~' "
                             f"or '-' (it is a URL path segment)")
    return f"/GarlicFarm/{cluster}/{version}/websocket"


def websocket_accept(key: str) -> str:
    """RFC 6455 §4.2.2: base64(SHA-1(key + GUID))."""
    digest = hashlib.sha1((key + _WEBSOCKET_GUID).encode("utf-8")).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class HandshakeLimits:
    max_header_bytes: int = 8192    #: a request's or response's head (h11's buffer limit)
    max_attempts: int = 3           #: connections one initiator handshake may use


def _web_server(response: h11.Response | h11.InformationalResponse) -> str | None:
    """What gives a 404 away as another web server's (a Garlic Farm receiver's refusal
    holds nothing but ``Content-Length: 0`` and ``Connection: close``), or None."""
    extra = [(name, value) for name, value in response.headers
             if name not in (b"content-length", b"connection")]
    length = [v for n, v in response.headers if n == b"content-length"]
    if not extra and length in ([], [b"0"]):
        return None
    shown = dict(extra)
    for name in (b"server", b"content-type"):
        if name in shown:
            return f"{name.decode().title()}: {shown[name].decode('latin-1')[:60]}"
    return f"a {length[0].decode('latin-1')[:12]}-byte body" if length else "its headers"


def _header(event: h11.Request | h11.Response | h11.InformationalResponse,
            name: bytes) -> list[str]:
    values = []
    for key, value in event.headers:
        if key == name:
            try:
                values.append(value.decode("utf-8"))
            except UnicodeDecodeError:
                raise _error(name.decode(), "is not UTF-8") from None
    return values


def _utf8(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """Header values as UTF-8 (h11 would encode str as ASCII; user names need not be)."""
    return [(name.encode("ascii"), value.encode("utf-8")) for name, value in headers]


def _has_token(values: list[str], token: str) -> bool:
    return any(token == part.strip().lower() for value in values for part in value.split(","))


#: The header a node sends when it dials a peer (``X-GarlicFarm-Node: 2``): a claim the
#: receiver's gate uses to give the connection a peer's handshake slot; the digest still
#: decides whether it gets in.
NODE_HEADER = "X-GarlicFarm-Node"
#: What a receiver at its limit of client connections answers instead of the 101.
BUSY_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                 b"Content-Length: 0\r\nConnection: close\r\n\r\n")


# ---------------------------------------------------------------------------------------
# Events.

@dataclass(frozen=True, slots=True)
class NeedData:
    """Feed more bytes (or ``b""`` at end of stream) with ``receive_data``."""


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Initiator: close this connection, open a new one to the same host, send `request`."""
    request: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Established:
    """Initiator: the 101 came; the binary stream begins with `trailing_data`."""
    trailing_data: bytes
    from_cache: bool


@dataclass(frozen=True, slots=True)
class Challenged:
    """Receiver: send `data` (a 401 with a fresh challenge), then close. Not an error:
    a request 1, or a request 2 whose nonce went stale."""
    data: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """Receiver: send `data` (may be empty), then close; `error` says what was wrong."""
    data: bytes
    error: HandshakeError
    status: int


@dataclass(frozen=True, slots=True)
class Accepted:
    """Receiver: send `data` (the 101); the binary stream follows, starting with
    `trailing_data` already received. `username` is the authenticated user."""
    data: bytes
    username: str
    trailing_data: bytes


InitiatorEvent = Union[NeedData, Reconnect, Established]
ReceiverEvent = Union[NeedData, Challenged, Refused, Accepted]


class Phase(enum.Enum):
    REQUEST_1 = "request 1 sent"
    REQUEST_2 = "request 2 sent"
    DONE = "done"
    FAILED = "failed"


# ---------------------------------------------------------------------------------------
# The initiator.

@dataclass(slots=True)
class CachedChallenge:
    """What a reconnect needs to go straight to request 2."""
    challenge: Challenge
    algorithm: DigestAlgorithm
    next_nc: int
    expires_at: float


class CredentialCache:
    """Challenges per ``(host, cluster)``, kept `ttl` seconds (at least an hour, as the
    seed asks). Shared by the initiators of one process; not thread-safe."""

    MIN_TTL = 3600.0

    def __init__(self, ttl: float = MIN_TTL) -> None:
        if ttl < self.MIN_TTL:
            raise ValueError(f"credential cache ttl {ttl}s is below the protocol's minimum "
                             f"of {self.MIN_TTL:.0f}s")
        self.ttl = ttl
        self._entries: dict[tuple[str, str], CachedChallenge] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, host: str, cluster: str, now: float) -> CachedChallenge | None:
        entry = self._entries.get((host, cluster))
        if entry is not None and now >= entry.expires_at:
            del self._entries[(host, cluster)]
            return None
        return entry

    def store(self, host: str, cluster: str, challenge: Challenge, algorithm: DigestAlgorithm,
              now: float) -> CachedChallenge:
        entry = CachedChallenge(challenge, algorithm, 1, now + self.ttl)
        self._entries[(host, cluster)] = entry
        return entry

    def drop(self, host: str, cluster: str) -> None:
        self._entries.pop((host, cluster), None)


def choose_challenge(challenges: Sequence[Challenge], others: Sequence[str]
                     ) -> tuple[Challenge, DigestAlgorithm]:
    """The strongest usable challenge: qop=auth, SHA-256 before MD5."""
    usable = [(c, DigestAlgorithm.named(c.algorithm)) for c in challenges if "auth" in c.qop]
    for preferred in (DigestAlgorithm.SHA_256, DigestAlgorithm.MD5):
        for challenge, algorithm in usable:
            if algorithm is preferred:
                return challenge, algorithm
    if challenges:
        offered = ", ".join(f"algorithm={c.algorithm} qop={','.join(c.qop) or 'none'}"
                            for c in challenges)
        raise _error("WWW-Authenticate", f"no usable Digest challenge (need qop=auth with "
                     f"MD5 or SHA-256; offered {offered})")
    if others:
        raise _error("WWW-Authenticate", f"the receiver offers only {', '.join(others)}; "
                     f"Garlic Farm authenticates with Digest only")
    raise _error("WWW-Authenticate", "missing from the 401")


class HandshakeInitiator:
    """The connecting side of one handshake (one or more connections to one receiver).

    ::

        sock.sendall(initiator.start(now))
        while not isinstance(event := initiator.next_event(), Established):
            if isinstance(event, NeedData):
                initiator.receive_data(sock.recv(65536))
            else:                                   # Reconnect
                sock.close(); sock = connect(); sock.sendall(event.request)
        stream_start = event.trailing_data

    Failures raise `HandshakeError` naming the option at fault (cluster, username or
    password) or the part of the response that was wrong.
    """

    def __init__(self, *, host: str, username: str, password: str, cache: CredentialCache,
                 random: RandomSource, cluster: str = DEFAULT_CLUSTER, version: str = VERSION,
                 websocket_key: bool = False, limits: HandshakeLimits = HandshakeLimits(),
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        if not username or any(ord(c) < 32 or ord(c) == 127 for c in username):
            raise ValueError(f"username {username!r} must be non-empty, without control "
                             f"characters")
        if not host or any(c in host for c in "\r\n /"):
            raise ValueError(f"host {host!r} must be host:port")
        self.host, self.cluster = host, cluster
        self.path = handshake_path(cluster, version)
        self.username, self._password = username, password
        self.cache, self._random, self.limits = cache, random, limits
        self._websocket_key = websocket_key
        self._extra = list(headers)     #: sent after Host (a node names itself: NODE_HEADER)
        self.phase: Phase | None = None
        self._from_cache = False
        self._attempts = 0
        self._key: str | None = None
        self._now = 0.0
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=limits.max_header_bytes)

    def start(self, now: float) -> bytes:
        """The bytes for the first connection: request 2 when the cache has a live
        challenge for this receiver, else request 1."""
        if self.phase is not None:
            raise RuntimeError("start() is called once per handshake")
        self._now = now
        cached = self.cache.get(self.host, self.cluster, now)
        if cached is not None:
            self._from_cache = True
            return self._new_connection(self._request_2(cached))
        return self._new_connection(self._request_1())

    def receive_data(self, data: bytes) -> None:
        self._conn.receive_data(data)

    def next_event(self) -> InitiatorEvent:
        if self.phase in (Phase.DONE, Phase.FAILED, None):
            raise RuntimeError(f"no handshake in progress ({self.phase})")
        try:
            event = self._next_response()
            if event is None:
                return NeedData()
            return self._on_response(event)
        except HandshakeError:
            self.phase = Phase.FAILED
            raise

    # -- requests -----------------------------------------------------------------------

    def _new_connection(self, request: tuple[Phase, list[tuple[str, str]]]) -> bytes:
        self._attempts += 1
        if self._attempts > self.limits.max_attempts:
            raise _error("attempts", f"no 101 after {self.limits.max_attempts} connections")
        self.phase, headers = request
        self._conn = h11.Connection(h11.CLIENT,
                                    max_incomplete_event_size=self.limits.max_header_bytes)
        return (self._conn.send(h11.Request(method="GET", target=self.path,
                                            headers=_utf8(headers)))
                + self._conn.send(h11.EndOfMessage()))

    def _request_1(self) -> tuple[Phase, list[tuple[str, str]]]:
        return Phase.REQUEST_1, [("Host", self.host), *self._extra,
                                 ("Cache-Control", "no-cache"), ("Connection", "close")]

    def _request_2(self, cached: CachedChallenge) -> tuple[Phase, list[tuple[str, str]]]:
        nc, cached.next_nc = cached.next_nc, cached.next_nc + 1
        cnonce = self._random(16).hex()
        authorization = DigestAuthorization.answer(
            cached.challenge, cached.algorithm, self.username, self._password, "GET",
            self.path, nc, cnonce)
        headers = [("Host", self.host), *self._extra, ("Cache-Control", "no-cache"),
                   ("Connection", "keep-alive, Upgrade"), ("Upgrade", "websocket"),
                   ("Authorization", authorization.to_header())]
        self._key = None
        if self._websocket_key:
            self._key = base64.b64encode(self._random(16)).decode("ascii")
            headers += [("Sec-WebSocket-Key", self._key), ("Sec-WebSocket-Version", "13")]
        return Phase.REQUEST_2, headers

    # -- responses ----------------------------------------------------------------------

    def _next_response(self) -> h11.Response | h11.InformationalResponse | None:
        try:
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _error("response", f"not a valid HTTP/1.1 response ({exc})") from None
        if event is h11.NEED_DATA:
            return None
        if isinstance(event, h11.InformationalResponse) and event.status_code != 101:
            return self._next_response()        # 100 Continue and the like say nothing
        if isinstance(event, (h11.Response, h11.InformationalResponse)):
            return event
        raise _error("response", "the receiver closed the connection without answering")

    def _on_response(self, response: h11.Response | h11.InformationalResponse) -> InitiatorEvent:
        status = response.status_code
        if status == 404:
            web = _web_server(response)
            if web is not None:
                raise _error("endpoint", f"the receiver answered 404 Not Found as a web server "
                             f"({web}), not as a Garlic Farm node: check that the endpoint "
                             f"is a farm member's port, not a status page or metrics port")
            raise _error("cluster", f"the receiver has no {self.path} (404 Not Found): check "
                         f"the cluster option ({self.cluster!r}) and the protocol version")
        if status == 101 and self.phase is Phase.REQUEST_2:
            return self._established(response)
        if status == 503:
            raise _error("busy", "the receiver is at its limit of client connections (503 "
                         "Service Unavailable): retry later, or at another member")
        if status != 401:
            raise _error("status", f"unexpected answer {status} "
                         f"{response.reason.decode('latin-1')} to {self.phase.value}")
        challenge, algorithm = choose_challenge(
            *parse_challenges(_header(response, b"www-authenticate")))
        if self.phase is Phase.REQUEST_2 and not (self._from_cache or challenge.stale):
            self.cache.drop(self.host, self.cluster)
            raise _error("password", f"the receiver refused user {self.username!r} for "
                         f"cluster {self.cluster!r} (401): check the username and password "
                         f"options")
        reason = {Phase.REQUEST_1: "answering the challenge",
                  Phase.REQUEST_2: "the cached or stale nonce was refused; answering the "
                                   "new challenge"}[self.phase]
        self._from_cache = False
        cached = self.cache.store(self.host, self.cluster, challenge, algorithm, self._now)
        return Reconnect(self._new_connection(self._request_2(cached)), reason)

    def _established(self, response: h11.InformationalResponse) -> Established:
        if not _has_token(_header(response, b"upgrade"), "websocket"):
            raise _error("Upgrade", "the 101 does not say Upgrade: websocket")
        if not _has_token(_header(response, b"connection"), "upgrade"):
            raise _error("Connection", "the 101 does not say Connection: Upgrade")
        accept = _header(response, b"sec-websocket-accept")
        if self._key is not None and accept and accept != [websocket_accept(self._key)]:
            raise _error("Sec-WebSocket-Accept", "does not match the key we sent")
        self.phase = Phase.DONE
        trailing, _closed = self._conn.trailing_data
        return Established(bytes(trailing), self._from_cache)


# ---------------------------------------------------------------------------------------
# The receiver.

@dataclass(slots=True)
class _Nonce:
    issued_at: float
    opaque: str
    last_nc: int = 0


class NonceCheck(enum.Enum):
    OK = "ok"
    UNKNOWN = "unknown nonce"
    EXPIRED = "expired nonce"
    REPLAYED = "nonce count not above the last one"
    WRONG_OPAQUE = "opaque does not belong to the nonce"


class NonceStore:
    """The nonces a receiver has issued: at most `capacity` (oldest dropped first), each
    valid `lifetime` seconds, each remembering the highest nonce count used with it.
    Shared by all connections of one receiver; not thread-safe."""

    def __init__(self, random: RandomSource, lifetime: float = 6 * 3600.0,
                 capacity: int = 4096) -> None:
        self._random, self.lifetime, self.capacity = random, lifetime, capacity
        self._nonces: OrderedDict[str, _Nonce] = OrderedDict()

    def __len__(self) -> int:
        return len(self._nonces)

    def issue(self, now: float) -> tuple[str, str]:
        """A fresh (nonce, opaque)."""
        while self._nonces and (len(self._nonces) >= self.capacity or
                                now - next(iter(self._nonces.values())).issued_at >= self.lifetime):
            self._nonces.popitem(last=False)
        nonce, opaque = self._random(16).hex(), self._random(16).hex()
        self._nonces[nonce] = _Nonce(now, opaque)
        return nonce, opaque

    def use(self, nonce: str, opaque: str | None, nc: int, now: float) -> NonceCheck:
        """Check a request's nonce, opaque and count; on OK, remember the count."""
        record = self._nonces.get(nonce)
        if record is None:
            return NonceCheck.UNKNOWN
        if now - record.issued_at >= self.lifetime:
            return NonceCheck.EXPIRED
        if opaque is None or not hmac.compare_digest(opaque, record.opaque):
            return NonceCheck.WRONG_OPAQUE
        if nc <= record.last_nc:
            return NonceCheck.REPLAYED
        record.last_nc = nc
        return NonceCheck.OK


class HandshakeReceiver:
    """The accepting side of one connection.

    ::

        while True:
            event = receiver.next_event(now())
            if isinstance(event, NeedData):
                receiver.receive_data(sock.recv(65536)); continue
            sock.sendall(event.data)
            if isinstance(event, Accepted):
                break                       # binary stream: event.trailing_data first
            sock.close(); break             # Challenged or Refused

    `credentials(username)` gives the password, a {algorithm: HA1 hex} mapping, or None.
    """

    def __init__(self, *, credentials: Callable[[str], StoredCredential], nonces: NonceStore,
                 cluster: str = DEFAULT_CLUSTER, version: str = VERSION,
                 realm: str | None = None,
                 algorithms: Sequence[DigestAlgorithm] = (DigestAlgorithm.SHA_256,
                                                          DigestAlgorithm.MD5),
                 limits: HandshakeLimits = HandshakeLimits()) -> None:
        if not algorithms:
            raise ValueError("algorithms: offer at least one of MD5 and SHA-256")
        self.path = handshake_path(cluster, version)
        self.realm = realm if realm is not None else f"GarlicFarm@{cluster}"
        self.algorithms = tuple(algorithms)
        self._credentials, self._nonces = credentials, nonces
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self._request: h11.Request | None = None
        self._peer_closed = False
        self.finished = False
        self.username: str | None = None    #: the user a request 2 named (right or wrong)

    def receive_data(self, data: bytes) -> None:
        self._peer_closed = self._peer_closed or not data
        self._conn.receive_data(data)

    def next_event(self, now: float) -> ReceiverEvent:
        if self.finished:
            raise RuntimeError("the handshake on this connection is over")
        complete = False
        try:
            while not complete:
                event = self._conn.next_event()
                if event is h11.NEED_DATA:
                    return NeedData()
                if isinstance(event, h11.Request):
                    self._request = event
                if isinstance(event, h11.Data):
                    return self._refuse(400, _error("request", "a handshake request has no body"))
                complete = isinstance(event, h11.EndOfMessage)
                if isinstance(event, h11.ConnectionClosed):
                    break
        except h11.RemoteProtocolError as exc:
            if not self._peer_closed:
                return self._refuse(exc.error_status_hint,
                                    _error("request", f"not a valid HTTP/1.1 request ({exc})"))
        if not complete or self._request is None:
            return self._refuse(0, _error("request", "the initiator closed the connection "
                                          "before its request ended"))
        try:
            return self._answer(self._request, now)
        except HandshakeError as exc:
            return self._refuse(400, exc)

    def header(self, name: bytes) -> list[str]:
        """The values of header `name` (lower case) in the request received so far."""
        return [] if self._request is None else _header(self._request, name)

    # -- decisions ----------------------------------------------------------------------

    def _answer(self, request: h11.Request, now: float) -> ReceiverEvent:
        if request.method != b"GET":
            return self._refuse(405, _error("method", f"{request.method.decode('latin-1')} "
                                            f"is not GET"))
        target = request.target.decode("latin-1")
        if target != self.path:
            return self._refuse(404, _error("path", f"{target!r} is not {self.path!r}"))
        authorization = _header(request, b"authorization")
        if not authorization:
            return self._challenge(now)
        if not (_has_token(_header(request, b"upgrade"), "websocket")
                and _has_token(_header(request, b"connection"), "upgrade")):
            return self._refuse(400, _error("Upgrade", "a request with credentials must ask "
                                            "for Upgrade: websocket with Connection: Upgrade"))
        if len(authorization) != 1:
            return self._refuse(400, _error("Authorization", "given more than once"))
        try:
            auth = parse_authorization(authorization[0])
        except HandshakeError as exc:
            return self._refuse(401, exc, now)
        self.username = auth.username
        problem = self._authenticate(auth, target)
        if problem is not None:
            return self._refuse(401, problem, now)
        check = self._nonces.use(auth.nonce, auth.opaque, auth.nc, now)
        if check in (NonceCheck.UNKNOWN, NonceCheck.EXPIRED):
            return self._challenge(now, stale=True)
        if check is not NonceCheck.OK:
            field = "nc" if check is NonceCheck.REPLAYED else "opaque"
            return self._refuse(401, _error(f"Authorization.{field}", check.value), now)
        return self._accept(request, auth.username)

    def _authenticate(self, auth: DigestAuthorization, target: str) -> HandshakeError | None:
        """None when the digest proves the password; else what is wrong."""
        if auth.realm != self.realm:
            return _error("Authorization.realm", f"{auth.realm!r} is not {self.realm!r}")
        if auth.algorithm not in self.algorithms:
            return _error("Authorization.algorithm", f"{auth.algorithm.value} is not offered")
        if auth.uri != target:
            return _error("Authorization.uri", f"{auth.uri!r} is not the request target")
        stored = self._credentials(auth.username)
        if isinstance(stored, str):
            ha1_hex: str | None = ha1(auth.algorithm, auth.username, self.realm, stored)
        else:
            ha1_hex = stored.get(auth.algorithm) if stored is not None else None
        expected = auth.expected_response(ha1_hex or "", "GET")
        if ha1_hex is None or not hmac.compare_digest(expected, auth.response):
            return _error("Authorization.response", f"wrong credentials for user "
                          f"{auth.username!r}")
        return None

    # -- responses ----------------------------------------------------------------------

    def _respond(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        headers = _utf8(headers)
        try:
            if status == 101:
                return self._conn.send(h11.InformationalResponse(
                    status_code=101, headers=headers, reason=_REASONS[101]))
            headers = headers + [(b"Content-Length", b"0"), (b"Connection", b"close")]
            return (self._conn.send(h11.Response(status_code=status, headers=headers,
                                                 reason=_REASONS.get(status, b"")))
                    + self._conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:
            return b""          # the request was too broken to answer in HTTP

    def _challenge_headers(self, now: float, stale: bool = False) -> list[tuple[str, str]]:
        nonce, opaque = self._nonces.issue(now)
        return [("WWW-Authenticate", Challenge(self.realm, nonce, algorithm.value, ("auth",),
                                               opaque, stale).to_header())
                for algorithm in self.algorithms]

    def _challenge(self, now: float, stale: bool = False) -> Challenged:
        self.finished = True
        return Challenged(self._respond(401, self._challenge_headers(now, stale)))

    def _refuse(self, status: int, problem: HandshakeError, now: float | None = None) -> Refused:
        """Refuse with ``status``; a 401 (``now`` given) carries a fresh challenge."""
        self.finished = True
        headers = self._challenge_headers(now) if now is not None else []
        data = self._respond(status, headers) if status else b""
        return Refused(data, problem, status)

    def _accept(self, request: h11.Request, username: str) -> Accepted:
        self.finished = True
        headers = [("Connection", "Upgrade"), ("Upgrade", "websocket")]
        key = _header(request, b"sec-websocket-key")
        if len(key) == 1:
            headers.append(("Sec-WebSocket-Accept", websocket_accept(key[0].strip())))
        data = self._respond(101, headers)
        trailing, _closed = self._conn.trailing_data
        return Accepted(data, username, bytes(trailing))
