"""The receiving side of a new connection, blocking (one short-lived thread each).

A node listens on one port for everything. The first bytes say what comes:

* ``0x16`` - a TLS ClientHello: required when the node has a certificate, then sniffed
  again inside;
* ``GET `` - the Garlic Farm handshake (`consensus.wire.handshake`): clients always,
  peers on ``--wire garlicfarm``. Request 1 is answered with a 401 challenge and the
  connection closes (not a refusal); a wrong path gets 404, bad credentials or a
  replayed nonce count 401, and a good request 2 gets 101 - then JRaft's binary
  messages (and our extensions) follow;
* ``C`` - a marker-wire ConnectRequest (only on ``--wire marker``);
* a JRaft type byte (1..17) - plain JRaft (only on ``--wire jraft``: it is not
  authenticated).

Anything else is refused with `Refusal` naming the reason; the node logs it with the
peer's address.
"""
from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass

from consensus.runtime.security import Security
from consensus.wire.handshake import Accepted as HandshakeAccepted
from consensus.wire.handshake import Challenged, HandshakeReceiver, NeedData, Refused
from consensus.wire.marker import Marker

TLS_RECORD = 0x16


class Refusal(Exception):
    """A connection refused before any Raft message: `reason` says why."""


@dataclass
class AcceptedStream:
    sock: socket.socket
    kind: str               #: "garlicfarm", "marker" or "jraft"
    initial: bytes          #: bytes of the stream already read
    username: str | None


def _read(sock: socket.socket, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Refusal("timed out before the connection said what it is")
    sock.settimeout(left)
    try:
        return sock.recv(65536)
    except socket.timeout:
        raise Refusal("timed out before the connection said what it is") from None


def accept_stream(sock: socket.socket, security: Security, wire: str,
                  timeout: float = 5.0) -> AcceptedStream | None:
    """Identify and authenticate a freshly accepted connection. Returns None when the
    connection was answered and closed normally (a handshake's challenge round)."""
    deadline = time.monotonic() + timeout
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    context = security.server_context()
    if context is not None:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except socket.timeout:
            raise Refusal("timed out before the TLS handshake") from None
        if first[:1] != bytes([TLS_RECORD]):
            raise Refusal("plain TCP to a node that requires TLS (it has --tls-cert)")
        try:
            sock = context.wrap_socket(sock, server_side=True)
        except OSError as exc:
            raise Refusal(_tls_failure(exc)) from None
    data = b""
    while len(data) < 4:
        chunk = _read(sock, deadline)
        if not chunk:
            if not data:
                return None         # connected and left (a port probe)
            raise Refusal(f"closed after {len(data)} bytes")
        data += chunk
        if data[0] != ord("G"):
            break
    if data.startswith(b"GET "):
        return _handshake(sock, data, security, deadline)
    if data[0] == Marker.CONNECT_REQUEST and wire == "marker":
        return AcceptedStream(sock, "marker", data, None)
    if 1 <= data[0] <= 17 and wire == "jraft":
        return AcceptedStream(sock, "jraft", data, None)
    what = {Marker.CONNECT_REQUEST: "a marker-wire ConnectRequest"}.get(
        data[0], "JRaft bytes without a handshake" if 1 <= data[0] <= 17
        else f"unknown first byte 0x{data[0]:02x}")
    raise Refusal(f"{what}, but this node speaks --wire {wire} (clients must use the Garlic "
                  f"Farm handshake)")


def _tls_failure(exc: OSError) -> str:
    text = str(exc)
    if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in text.upper().replace(" ", "_"):
        return ("TLS handshake refused: the client presented no TLS client certificate, and "
                "this node requires one signed by its --tls-ca (give the client --tls-cert "
                f"and --tls-key, or run the node with --tls-client-cert optional): {exc}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS handshake refused: the client's certificate does not verify against "
                f"this node's --tls-ca ({exc.verify_message or exc})")
    return f"TLS handshake failed: {exc}"


def _handshake(sock: socket.socket, data: bytes, security: Security,
               deadline: float) -> AcceptedStream | None:
    receiver = HandshakeReceiver(credentials=security.password_of, nonces=security.nonces,
                                 cluster=security.cluster)
    receiver.receive_data(data)
    while True:
        with security.nonce_lock:
            event = receiver.next_event(time.monotonic())
        if isinstance(event, NeedData):
            receiver.receive_data(_read(sock, deadline))
            continue
        if event.data:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                sock.sendall(event.data)
            except OSError:
                pass
        if isinstance(event, HandshakeAccepted):
            return AcceptedStream(sock, "garlicfarm", event.trailing_data, event.username)
        if isinstance(event, Challenged):
            return None
        assert isinstance(event, Refused)
        raise Refusal(f"handshake refused ({event.status or 'closed'}): {event.error}")
