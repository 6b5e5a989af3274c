"""What a new connection at a node's listener is, from its first bytes (sans-I/O; the
gate, `gate.py`, reads the bytes and acts).

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

Anything else is refused with a reason the node logs (rate-limited) with the peer's
address.
"""
from __future__ import annotations

import enum
import re
import socket
import ssl
from dataclasses import dataclass

from consensus.wire.handshake import NODE_HEADER
from consensus.wire.marker import Marker

TLS_RECORD = 0x16
_GET = b"GET "
_NODE_CLAIM = re.compile(rb"\r\n" + NODE_HEADER.lower().encode() + rb":[ \t]*([0-9]{1,9})\r\n")


class Opening(enum.Enum):
    HANDSHAKE = "garlicfarm"
    MARKER = "marker"
    JRAFT = "jraft"


@dataclass
class AcceptedStream:
    """A connection the gate let in, for the loop."""
    sock: socket.socket
    kind: str               #: "garlicfarm", "marker" or "jraft"
    initial: bytes          #: bytes of the stream already read
    username: str | None
    peer: bool              #: counted as a peer (not against max-connections)
    label: str              #: "HOST:PORT" of the other end


class WrongOpening(Exception):
    """The first bytes are not something this node accepts: the reason."""


def sniff(data: bytes, wire: str) -> Opening | None:
    """What the first bytes announce (None: too few bytes yet). Raises WrongOpening."""
    if not data or (len(data) < len(_GET) and _GET.startswith(data)):
        return None
    if data.startswith(_GET):
        return Opening.HANDSHAKE
    if data[0] == Marker.CONNECT_REQUEST and wire == "marker":
        return Opening.MARKER
    if 1 <= data[0] <= 17 and wire == "jraft":
        return Opening.JRAFT
    what = {Marker.CONNECT_REQUEST: "a marker-wire ConnectRequest"}.get(
        data[0], "JRaft bytes without a handshake" if 1 <= data[0] <= 17
        else f"unknown first byte 0x{data[0]:02x}")
    raise WrongOpening(f"{what}, but this node speaks --wire {wire} (clients must use the "
                       f"Garlic Farm handshake)")


def claimed_node(head: bytes) -> int | None:
    """The node id an ``X-GarlicFarm-Node`` header of a (partial) request head names;
    found as soon as its line has arrived, before the head is complete."""
    match = _NODE_CLAIM.search(head.lower())
    return int(match.group(1)) if match else None


def tls_failure(exc: OSError) -> str:
    text = str(exc)
    if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in text.upper().replace(" ", "_"):
        return ("TLS handshake refused: the client presented no TLS client certificate, and "
                "this node requires one signed by its --tls-ca (give the client --tls-cert "
                f"and --tls-key, or run the node with --tls-client-cert optional): {text}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS handshake refused: the client's certificate does not verify against "
                f"this node's --tls-ca ({exc.verify_message or exc})")
    return f"TLS handshake failed: {exc}"
