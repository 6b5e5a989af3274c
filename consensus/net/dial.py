"""Opening a connection to a node, blocking (clients; node dialer threads).

`dial(endpoint, security, wire=...)` returns a connected socket ready for the wire's
binary messages, and any bytes that already arrived after the handshake:

1. TCP to the endpoint, or through an HTTP CONNECT proxy (``--proxy``: the I2P case);
2. TLS when the security settings have a CA or certificate;
3. the wire's opening: Garlic Farm's HTTP digest handshake (`consensus.wire.handshake`,
   which may take two connections, or one with a cached challenge), the marker wire's
   ConnectRequest, or nothing for plain JRaft.

Failures raise `AuthenticationError` (credentials refused), `ProtocolMismatch` (wrong
cluster name, not a garlicfarm node) or `Unavailable` (cannot connect in time).
"""
from __future__ import annotations

import os
import socket
import ssl
import time
from dataclasses import dataclass

import h11

from consensus.common.errors import (AuthenticationError, ConfigError, NotAFarm,
                                     ProtocolMismatch, Unavailable)
from consensus.net.security import Security, split_endpoint
from consensus.wire import marker
from consensus.wire.errors import HandshakeError, ProtocolError
from consensus.wire.handshake import (NODE_HEADER, Established, HandshakeInitiator,
                                      NeedData, Reconnect)

WIRES = ("garlicfarm", "marker", "jraft")


@dataclass
class Dialed:
    sock: socket.socket
    initial: bytes          #: stream bytes received with the end of the handshake


def _remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Unavailable(f"timed out {what}")
    return left


# TLS alerts a node sends when it refuses our client certificate (TLS 1.3 reports them
# after the handshake, at our first read; TLS 1.2 during it)
_CLIENT_CERT_ALERTS = ("CERTIFICATE_REQUIRED", "UNKNOWN_CA", "BAD_CERTIFICATE",
                       "CERTIFICATE_UNKNOWN", "UNSUPPORTED_CERTIFICATE",
                       "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED", "ACCESS_DENIED")


def tls_refusal(exc: OSError, target: str, security: Security | None) -> Exception | None:
    """What a TLS failure means, as the error to raise (None: not a TLS refusal).

    The node refused our client certificate (or our lack of one): AuthenticationError,
    like refused credentials. The node's certificate did not verify on our side:
    ProtocolMismatch naming how we verified and the options that change it."""
    if not isinstance(exc, ssl.SSLError):
        return None
    reason = str(getattr(exc, "reason", "") or "")
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = f"certificate verify failed: {exc.verify_message or exc}"
        if security is not None and security.tls_ca is not None:
            return ProtocolMismatch(
                f"TLS with {target}: the node's certificate did not verify against --tls-ca "
                f"{security.tls_ca} ({why}): give the CA that signed the nodes' "
                f"certificates (tls.ca)")
        return ProtocolMismatch(
            f"TLS with {target}: the node's certificate did not verify against the system "
            f"trust store and the host name {target.rsplit(':', 1)[0]} ({why}; no --tls-ca "
            f"given): give --tls-ca with the CA that signed the nodes' certificates (a "
            f"farm's own CA is usual), or, knowing that anyone between us and the node could "
            f"then pose as it, --insecure-skip-tls-verify")
    if "ALERT" in reason and any(alert in reason for alert in _CLIENT_CERT_ALERTS):
        mine = "presented none" if security is None or security.tls_cert is None else \
            f"presented {security.tls_cert}"
        return AuthenticationError(
            f"{target} refused our TLS client certificate ({reason}; we {mine}): the "
            f"node's tls-ca requires a client certificate signed by the farm's CA: give "
            f"--tls-cert and --tls-key (tls.cert / tls.key) with one")
    return None


def _recv(sock: socket.socket, deadline: float, what: str, target: str = "",
          security: Security | None = None) -> bytes:
    sock.settimeout(_remaining(deadline, what))
    try:
        return sock.recv(65536)
    except socket.timeout:
        raise Unavailable(f"timed out {what}") from None
    except OSError as exc:
        refusal = tls_refusal(exc, target, security)
        if refusal is not None:
            raise refusal from None
        raise _Broke(f"the connection broke while {what}: {exc}") from None


class _Broke(Unavailable):
    """The connection was reset or broke (not a timeout)."""


def _send(sock: socket.socket, data: bytes, target: str) -> None:
    try:
        sock.sendall(data)
    except OSError as exc:
        raise Unavailable(f"the connection to {target} broke: {exc}") from None


def _proxy_connect(sock: socket.socket, target: str, deadline: float) -> bytes:
    """HTTP CONNECT through the proxy on `sock`; the tunnel's first bytes, if any."""
    conn = h11.Connection(h11.CLIENT)
    sock.sendall(conn.send(h11.Request(method="CONNECT", target=target,
                                       headers=[("Host", target)])))
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(_recv(sock, deadline, f"waiting for the proxy to reach {target}"))
            continue
        if isinstance(event, h11.Response):
            if not 200 <= event.status_code < 300:
                raise Unavailable(f"the proxy refused CONNECT {target}: {event.status_code} "
                                  f"{event.reason.decode('latin-1')} (check --proxy)")
            return bytes(conn.trailing_data[0])
        if isinstance(event, h11.ConnectionClosed):
            raise Unavailable(f"the proxy closed the connection instead of reaching {target}")


def open_stream(host: str, port: int, security: Security, deadline: float) -> socket.socket:
    """TCP (through the proxy when configured), TCP_NODELAY, then TLS when configured."""
    target = f"{host}:{port}"
    try:
        if security.proxy is not None:
            proxy_host, proxy_port = split_endpoint(security.proxy, "--proxy")
            sock = socket.create_connection((proxy_host, proxy_port),
                                            timeout=_remaining(deadline, f"reaching {target}"))
            leftover = _proxy_connect(sock, target, deadline)
            if leftover:
                sock.close()
                raise ProtocolMismatch(f"{target} spoke before we did, through the proxy")
        else:
            sock = socket.create_connection((host, port),
                                            timeout=_remaining(deadline, f"reaching {target}"))
    except OSError as exc:
        raise Unavailable(f"cannot connect to {target}: {exc.strerror or exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    context = security.client_context()
    if context is not None:
        sock.settimeout(_remaining(deadline, f"the TLS handshake with {target}"))
        try:
            sock = context.wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            sock.close()
            refusal = tls_refusal(exc, target, security)
            if refusal is not None:
                raise refusal from None
            if isinstance(exc, (TimeoutError, ssl.SSLEOFError, ssl.SSLZeroReturnError)) or \
                    not isinstance(exc, ssl.SSLError):
                # slow or gone (a loaded or stopping node), not a node that speaks no TLS
                raise Unavailable(f"the TLS handshake with {target} did not finish "
                                  f"({exc or type(exc).__name__}): the node is slow or "
                                  f"stopping, or it has no --tls-cert (a node without TLS "
                                  f"closes TLS connections)") from None
            raise ProtocolMismatch(f"TLS with {target} failed: {exc} (check that the node "
                                   f"has --tls-cert, and --tls-ca)") from None
    return sock


def dial(endpoint: str, security: Security, *, wire: str = "garlicfarm",
         timeout: float = 5.0, node_id: int | None = None) -> Dialed:
    """A connection to `endpoint` ready for `wire`'s messages (see the module docstring).
    `node_id` is our id, announced on the marker wire and in the garlicfarm
    handshake (`X-GarlicFarm-Node`: the receiver gives us a peer's slot)."""
    if wire not in WIRES:
        raise ConfigError("--wire", f"{wire!r} is not one of {', '.join(WIRES)}")
    deadline = time.monotonic() + timeout
    host, port = split_endpoint(endpoint)
    if wire == "garlicfarm":
        return _garlicfarm(host, port, security, deadline, node_id)
    sock = open_stream(host, port, security, deadline)
    try:
        if wire == "marker":
            return Dialed(sock, _marker_connect(sock, node_id or 0, endpoint, deadline))
        return Dialed(sock, b"")
    except BaseException:
        sock.close()
        raise


def _marker_connect(sock: socket.socket, node_id: int, endpoint: str, deadline: float) -> bytes:
    _send(sock, marker.encode(marker.ConnectRequest(node_id)), endpoint)
    decoder = marker.MarkerDecoder()
    while True:
        data = _recv(sock, deadline, f"waiting for {endpoint} to accept the marker connection",
                     endpoint)
        if not data:
            raise ProtocolMismatch(f"{endpoint} closed the marker connection: it refused "
                                   f"node id {node_id} (check --id and --peers)")
        try:
            events = decoder.feed(data)
        except ProtocolError as exc:
            raise ProtocolMismatch(f"{endpoint} does not speak the marker wire: {exc}") from None
        if events:
            reply = events[0]
            if not isinstance(reply, marker.ConnectResponse) or not reply.success:
                raise ProtocolMismatch(f"{endpoint} refused the marker connection of node "
                                       f"{node_id}")
            if len(events) > 1 or decoder.buffered:   # only we send requests on it
                raise ProtocolMismatch(f"{endpoint} sent packets it was not asked for")
            return b""


def _garlicfarm(host: str, port: int, security: Security, deadline: float,
                node_id: int | None) -> Dialed:
    if security.username is None or security.password is None:
        raise ConfigError("username", "the garlicfarm wire authenticates every connection: "
                          "give a username and password (or a credentials file)")
    target = f"{host}:{port}"
    initiator = HandshakeInitiator(host=target, username=security.username,
                                   password=security.password, cache=security.cache,
                                   random=os.urandom, cluster=security.cluster,
                                   headers=[(NODE_HEADER, str(node_id))] if node_id else ())
    with security.cache_lock:
        request = initiator.start(time.monotonic())
    sock = open_stream(host, port, security, deadline)
    answered = False            # a byte of the answer came (then a reset is a failure)
    try:
        _send(sock, request, target)
        while True:
            try:
                with security.cache_lock:
                    event = initiator.next_event()
            except HandshakeError as exc:
                if exc.field in ("password", "username"):
                    raise AuthenticationError(f"{target}: {exc.reason}") from None
                if exc.field == "busy":
                    raise Unavailable(f"{target}: {exc.reason}") from None
                if exc.field in ("endpoint", "cluster"):
                    raise NotAFarm(f"{target}: {exc.reason}") from None
                raise ProtocolMismatch(f"{target}: {exc.reason}") from None
            if isinstance(event, NeedData):
                try:
                    data = _recv(sock, deadline, f"handshaking with {target}", target,
                                 security)
                except _Broke as exc:
                    if answered:
                        raise
                    raise ProtocolMismatch(
                        f"{target} reset the connection instead of answering the Garlic "
                        f"Farm handshake{'' if security.tls else ' in plain TCP'}: a node "
                        f"that requires TLS{'' if security.tls else ' (give the TLS options)'}"
                        f", a JRaft node of a mixed cluster, or another service ({exc})"
                    ) from None
                answered = answered or bool(data)
                initiator.receive_data(data)
            elif isinstance(event, Reconnect):
                sock.close()
                sock = open_stream(host, port, security, deadline)
                _send(sock, event.request, target)
            elif isinstance(event, Established):
                return Dialed(sock, event.trailing_data)
    except BaseException:
        sock.close()
        raise


def close_quietly(sock: socket.socket) -> None:
    """Close a socket whose peer may already be gone."""
    try:
        sock.close()
    except OSError:
        pass
