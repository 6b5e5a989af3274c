"""Dafka wire codec, byte-compatible with the zeromq/dafka C implementation (sans-I/O).

What the real code puts on the wire (SPECS §4, tests/vectors/dafka/LAYOUT.md) differs
from RFC 46; this module follows the real code:

* Frame 0 = command id (ASCII ``M D F K H E G W L``) + topic bytes + ``0x00`` + version
  ``0x01`` + the fields of the command. RECORD and DIRECT-RECORD have a frame 1: the
  content. No signature bytes.
* ``string`` = 1-byte length + bytes; ``strings`` = u32 count + (u32 length + bytes)
  each; numbers are unsigned big-endian; addresses (node UUIDs) are 32 uppercase hex
  characters.
* What the topic in frame 0 holds depends on the command (see each message class);
  subscribers filter by the ZeroMQ prefix ``command id + topic`` (`subscription_prefix`).

Besides the nine RFC 46 commands, the codec speaks garlicfarm's bulk read extension
(docs/protocol.md, "Bulk read extension"): BULK-FETCH (``X``) and BULK-RECORDS (``Y``),
command ids the C code neither sends nor subscribes to, so a C peer never receives them.
It also speaks the heads extension (docs/protocol.md, "Heads extension"): BULK-GET-HEADS
(``Q``) to one store reader, answered by BULK-HEADS (``R``) messages that list every
matching (subject, partition, head) and say how many there are in all, so the asker
knows when the answer is complete (GET-HEADS has no end-of-answer marker).
Besides the commands, `decode` understands the discovery frames (node
`Beacon`, `TowerBeacon`, tower `Welcome`) and the subscription frames a verbose XPUB
receives (`Subscription`), so one inspector decodes everything seen on a Dafka wire.

API (docs/development.md): ``decode(frames, limits) -> Message``, ``encode(msg) ->
list[bytes]`` (`codec`), ``to_json(msg) -> dict``, ``from_json(obj) -> Message``
(`json_form`); the messages and limits are in `messages`, the extensions' frame 1 in
`bulk`; this package re-exports them, so callers write ``proto.X``. Every decoding
failure is a `consensus.wire.errors.ProtocolError` subclass naming the field; declared
sizes are checked against `DafkaLimits` before anything is sliced or allocated.

Messages are plain ``@dataclass(slots=True)`` rather than frozen ones on purpose: the
RECORD path decodes hundreds of thousands of messages a second and a frozen dataclass
costs ~3x more to construct (1.3 us vs 0.4 us measured on this machine).
"""
from __future__ import annotations

from consensus.wire.errors import ProtocolError

from .messages import (ADDRESS_LENGTH, DEFAULT_LIMITS, FETCH_BLOCK, HEAD_ENTRY_MAX, HEAD_ENTRY_MIN,
                       MAX_COUNT, MAX_SEQUENCE, MAX_SUBSCRIPTION_BYTES, MESSAGE_TYPES, PROTOCOL,
                       VERSION, Ack, Beacon,
                       BulkFetch, BulkGetHeads, BulkHeads, BulkRecords, Command, ConsumerHello,
                       DirectHead, DirectRecord, Fetch, fetch_count, frame0_prefix, GetHeads, Head,
                       is_address, DafkaLimits, Message, pack_sequence, ProtocolMessage, Record,
                       StoreHello, Subscription, subscription_prefix, TowerBeacon, Welcome)
from .bulk import (bulk_heads_frame0, bulk_lengths, bulk_offsets, bulk_records_frame0, pack_bulk,
                   pack_heads)
from .codec import Decoder, decode, encode, is_host
from .json_form import from_json, to_json

__all__ = ["ProtocolError", "ADDRESS_LENGTH", "DEFAULT_LIMITS", "FETCH_BLOCK", "HEAD_ENTRY_MAX",
           "HEAD_ENTRY_MIN", "MAX_COUNT", "MAX_SEQUENCE", "MAX_SUBSCRIPTION_BYTES",
           "MESSAGE_TYPES", "PROTOCOL", "VERSION", "Ack", "Beacon",
           "BulkFetch", "BulkGetHeads", "BulkHeads", "BulkRecords", "Command", "ConsumerHello",
           "DirectHead", "DirectRecord", "Fetch", "fetch_count", "frame0_prefix", "GetHeads",
           "Head", "is_address", "DafkaLimits", "Message", "pack_sequence", "ProtocolMessage",
           "Record",
           "StoreHello", "Subscription", "subscription_prefix", "TowerBeacon", "Welcome",
           "bulk_heads_frame0", "bulk_lengths", "bulk_offsets", "bulk_records_frame0", "pack_bulk",
           "pack_heads", "decode", "Decoder", "encode", "is_host", "from_json", "to_json"]
