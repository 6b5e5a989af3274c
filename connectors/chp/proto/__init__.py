"""CHP (the clone pattern, ZeroMQ RFC 12) wire codec, as the zguide clone servers speak it.

Sans-I/O: frames in, typed messages out, and back. What the real peers send differs
from RFC 12 in places; this module accepts everything either peer sends and emits what
both accept (SPECS §3, tests/vectors/chp/LAYOUT.md):

* Every message but two is a five-frame *kvmsg*: key, sequence (8 bytes, big-endian,
  signed), UUID (16 bytes or empty), properties (``name=value\\n`` lines), body (an
  empty body means "delete"). KVSET, KVPUB and KVSYNC are kvmsgs with ordinary keys;
  HUGZ and KTHXBAI are kvmsgs whose key is the command.
* ICANHAZ is two frames, ``ICANHAZ?`` and the subtree; without the subtree frame it
  means an empty subtree (the Python peer exits on it, the C peer stalls: we do neither).
  A third frame of properties is garlicfarm's resume request (`resume`).
* A Binary Star state message is one frame: the state as one ASCII digit.
* KVBULK (garlicfarm's bulk snapshot, docs/protocol.md "CHP bulk snapshot") is eight
  frames holding many snapshot entries as columns: ``KVBULK``, a header (version,
  count), the sequences, the lengths, then the keys, UUIDs, properties and bodies each
  concatenated. Only our servers send it, and only to a DEALER whose routing id says it
  understands it (`BULK_ROUTING_PREFIX`); `decode_bulk` checks every declared count and
  length against `ChpLimits` and the frames before building anything.

The same five frames are a KVSET on the collector, a KVPUB on the publisher and a
KVSYNC on the snapshot socket: pass `channel` to `decode` to say where they came from.
Without it a kvmsg with sequence 0 decodes as KVSET and any other as KVPUB.

The raw properties bytes are kept in every message, so a decoded message re-encodes to
exactly the bytes received. `parse_properties` gives the pairs (values may contain
``=``; an unterminated last line counts). The ttl property comes in two forms: relative
seconds in a KVSET and in the KVPUB that republishes it, absolute in stored state,
KVSYNC and expiry deletes (`parse_relative_ttl`, `parse_absolute_ttl`; we emit absolute
ttls as integer epoch milliseconds, `format_absolute_ttl`).

API (docs/development.md): ``decode(frames, channel=None, limits=DEFAULT_LIMITS) ->
Message``, ``encode(msg) -> list[bytes]`` (`codec`), ``to_json(msg) -> dict``,
``from_json(obj) -> Message`` (`json_form`); the messages are in `messages`, the bounds in
`limits`, the properties and ttls in `properties`, KVBULK in `bulk`; this package
re-exports them, so callers write ``proto.X``. Every decoding failure is a
`ProtocolError` subclass naming the field; frame sizes and the property count are
checked against `ChpLimits` before anything is split.

Messages are plain ``@dataclass(slots=True)`` rather than frozen ones on purpose: a
client decodes every update it receives and a frozen dataclass costs several times
more to construct (see the dafka codec for the measurement).
"""
from __future__ import annotations

from consensus.wire.errors import ProtocolError

from .bulk import bulk_column_bytes, decode_bulk, encode_bulk
from .codec import decode, encode
from .json_form import from_json, to_json
from .limits import DEFAULT_LIMITS, PROTOCOL, ChpLimits
from .messages import (BULK_FRAMES, BULK_ROUTING_PREFIX, BULK_VERSION, HUGZ, ICANHAZ, KTHXBAI,
                       KVBULK, KVMSG_FRAMES, MAX_SEQUENCE, MESSAGE_TYPES, MIN_SEQUENCE,
                       RESERVED_KEYS, UUID_LENGTH, BstarState, BstarStatus, Channel, EntryLike,
                       Hugz, Icanhaz, Kthxbai, KvBulk, KvMsg, Kvpub, Kvset, Kvsync, Message,
                       pack_sequence)
from .properties import (MAX_EPOCH_MS, MAX_TTL_SECONDS, MIN_EPOCH_MS, MIN_EXPIRY_MS, TTL,
                         format_absolute_ttl, format_properties, parse_absolute_ttl,
                         parse_properties, parse_relative_ttl, replace_property)


__all__ = [
    "BULK_FRAMES", "BULK_ROUTING_PREFIX", "BULK_VERSION", "BstarState", "BstarStatus",
    "Channel", "DEFAULT_LIMITS", "HUGZ", "ICANHAZ", "Icanhaz", "KTHXBAI", "KVBULK",
    "KVMSG_FRAMES", "KvBulk", "KvMsg", "Kthxbai", "Kvpub", "Kvset", "Kvsync", "Hugz",
    "ChpLimits", "MAX_EPOCH_MS", "MAX_SEQUENCE", "MAX_TTL_SECONDS", "MESSAGE_TYPES",
    "MIN_EPOCH_MS", "MIN_EXPIRY_MS", "MIN_SEQUENCE", "Message", "PROTOCOL", "ProtocolError",
    "RESERVED_KEYS", "TTL", "UUID_LENGTH", "EntryLike", "bulk_column_bytes", "decode",
    "decode_bulk", "encode", "encode_bulk",
    "format_absolute_ttl",
    "format_properties", "from_json", "pack_sequence", "parse_absolute_ttl",
    "parse_properties", "parse_relative_ttl", "replace_property", "to_json",
]
