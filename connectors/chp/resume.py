"""Resuming a replica after failover without a gap: garlicfarm's extension of ICANHAZ.

RFC 12 lets a client that fails over only ask for a whole snapshot: the updates made
while it was looking for a new server reach it collapsed into one difference per key.
Servers of one replicated map (`replicated_server`) share a single sequence numbering, so a
new server can instead send exactly the updates the client missed. Three properties
(in frames that RFC 12 already has, or that only our servers are sent) carry it:

* HUGZ and KTHXBAI of a replicated server carry ``map=<identity>`` (the farm's cluster
  and the map's name). Reference clients ignore HUGZ and KTHXBAI properties.
* A client that was synchronised with a map and now subscribes to a server announcing
  the same identity adds a third frame to ICANHAZ: ``since=<its sequence>`` and
  ``map=<identity>``. Only such servers are sent it (the Python reference server exits
  on an ICANHAZ that is not two frames).
* The server answers with the updates after ``since`` as KVSYNCs in sequence order (a
  delete as an empty body), then KTHXBAI with ``resumed=<since>``; without
  ``resumed`` the KVSYNCs are an ordinary snapshot (the server's history did not reach
  back far enough, or the identities differ).

Pure helpers; `mirror.Mirror` (client side) and `map_machine.ReplicatedMap`
(server side) use them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from consensus.wire.errors import ProtocolError

from .proto import format_properties, parse_properties

MAP = b"map"
SINCE = b"since"
RESUMED = b"resumed"


@dataclass(frozen=True, slots=True)
class ResumeRequest:
    """What a client asks for: the updates of map `identity` after `since`."""
    since: int
    identity: bytes


def announce(identity: bytes) -> bytes:
    """The properties of a replicated server's HUGZ."""
    return format_properties([(MAP, identity)])


def request(since: int, identity: bytes) -> bytes:
    """The third ICANHAZ frame of a client resuming from `since`."""
    return format_properties([(SINCE, b"%d" % since), (MAP, identity)])


def answer(identity: bytes, since: int | None) -> bytes:
    """KTHXBAI's properties: the identity, and `resumed` when the KVSYNCs were updates."""
    pairs = [(MAP, identity)]
    if since is not None:
        pairs.append((RESUMED, b"%d" % since))
    return format_properties(pairs)


def _properties(raw: bytes) -> dict[bytes, bytes]:
    if not raw:
        return {}
    try:
        return dict(parse_properties(raw))
    except ProtocolError:
        return {}


_SEQUENCE = re.compile(rb"-?[0-9]{1,19}")


def _integer(value: bytes | None) -> int | None:
    """A sequence as decimal text (``--1`` or 30 digits are none)."""
    if value is None or not _SEQUENCE.fullmatch(value):
        return None
    return int(value)


def identity_of(properties: bytes) -> bytes | None:
    """The map identity a HUGZ or KTHXBAI announces, or None (not a replicated server)."""
    return _properties(properties).get(MAP) or None


def parse_request(properties: bytes) -> ResumeRequest | None:
    """The resume request in an ICANHAZ's third frame, or None when it asks for none
    (or is not readable: the client then gets an ordinary snapshot)."""
    found = _properties(properties)
    since, identity = _integer(found.get(SINCE)), found.get(MAP)
    if since is None or since < 0 or not identity:
        return None
    return ResumeRequest(since, identity)


def resumed_from(properties: bytes) -> int | None:
    """The `since` a KTHXBAI says its KVSYNCs follow, or None for a whole snapshot."""
    return _integer(_properties(properties).get(RESUMED))


__all__ = ["MAP", "RESUMED", "ResumeRequest", "SINCE", "announce", "answer", "identity_of",
           "parse_request", "request", "resumed_from"]
