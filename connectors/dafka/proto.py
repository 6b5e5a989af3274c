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
list[bytes]``, ``to_json(msg) -> dict``, ``from_json(obj) -> Message``. Every decoding
failure is a `consensus.wire.errors.ProtocolError` subclass naming the field; declared
sizes are checked against `Limits` before anything is sliced or allocated.

Messages are plain ``@dataclass(slots=True)`` rather than frozen ones on purpose: the
RECORD path decodes hundreds of thousands of messages a second and a frozen dataclass
costs ~3x more to construct (1.3 us vs 0.4 us measured on this machine).
"""
from __future__ import annotations

import enum
import re
import struct
import sys
from array import array
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Sequence, Union

import numpy as np

from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)

PROTOCOL = "dafka"
VERSION = 1
ADDRESS_LENGTH = 32
FETCH_BLOCK = 100_000          # a FETCH asks for the rest of the current 100000-block
MAX_SEQUENCE = (1 << 64) - 1   # sequences are u64; 2^64-1 doubles as "before 0"
MAX_COUNT = (1 << 32) - 1

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_U64_PACK = _U64.pack
_U64_UNPACK_FROM = _U64.unpack_from
_U32_PACK = _U32.pack
_U32_UNPACK_FROM = _U32.unpack_from
_HEX_UPPER = b"0123456789ABCDEF"


class Command(enum.IntEnum):
    """The command id: the first byte of frame 0."""
    RECORD = ord("M")
    DIRECT_RECORD = ord("D")
    FETCH = ord("F")
    ACK = ord("K")
    HEAD = ord("H")
    DIRECT_HEAD = ord("E")
    GET_HEADS = ord("G")
    CONSUMER_HELLO = ord("W")
    STORE_HELLO = ord("L")
    # garlicfarm's bulk read extension (not RFC 46, unknown to the C code)
    BULK_FETCH = ord("X")
    BULK_RECORDS = ord("Y")
    # garlicfarm's heads extension (not RFC 46 either)
    BULK_GET_HEADS = ord("Q")
    BULK_HEADS = ord("R")

    @property
    def wire_name(self) -> str:
        """The name used by the C code and the vectors: ``DIRECT-RECORD``."""
        return self.name.replace("_", "-")


@dataclass(frozen=True)
class Limits:
    """Bounds a decoder checks before it slices anything out of a frame.

    The C code accepts topics of any length, but a topic is also sent as the 1-byte
    length ``subject`` string, so nothing longer than 255 bytes can round-trip.
    """
    max_frame_bytes: int = 1 << 20        # frame 0 (header + fields)
    max_content_bytes: int = 16 << 20     # frame 1 of RECORD / DIRECT-RECORD
    max_topic_bytes: int = 255
    max_subjects: int = 4096              # CONSUMER-HELLO subjects count
    max_endpoint_bytes: int = 1024        # tower beacon endpoint
    max_bulk_records: int = 1 << 20       # BULK-RECORDS: records in one message
    max_bulk_bytes: int = 128 << 20       # BULK-RECORDS: frame 1 (< 2^31: int32 offsets)
    max_bulk_heads: int = 1 << 16         # BULK-HEADS: (subject, partition, head) entries
    strict_addresses: bool = True         # addresses must be 32 uppercase hex chars


DEFAULT_LIMITS = Limits()


# --------------------------------------------------------------------------- messages
@dataclass(slots=True)
class _Addressed:
    """The fields every command below shares: the topic of frame 0 and an address."""
    topic: str
    address: str


@dataclass(slots=True)
class _Positioned(_Addressed):
    subject: str
    sequence: int


@dataclass(slots=True)
class _Carrying(_Positioned):
    content: bytes = b""


class Record(_Carrying):
    """RECORD (``M``): producer -> consumers and store writers. topic = the dafka topic,
    address = the producer (the partition), content = frame 1."""
    __slots__ = ()
    COMMAND: ClassVar[Command] = Command.RECORD


class DirectRecord(_Carrying):
    """DIRECT-RECORD (``D``): a producer or store reader answering a FETCH. topic = the
    requester's address, address = the partition (producer) address."""
    __slots__ = ()
    COMMAND: ClassVar[Command] = Command.DIRECT_RECORD


@dataclass(slots=True)
class Fetch(_Positioned):
    """FETCH (``F``): ask for records from `sequence` on. topic = the partition
    (producer) address, address = the requester's address. A store answers records
    sequence..sequence+count inclusive, a producer `count` records."""
    COMMAND: ClassVar[Command] = Command.FETCH
    count: int


@dataclass(slots=True)
class Ack:
    """ACK (``K``): store writer -> producer, cumulative. topic = the producer's
    address; there is no address field (the C code has none)."""
    COMMAND: ClassVar[Command] = Command.ACK
    topic: str
    subject: str
    sequence: int


class Head(_Positioned):
    """HEAD (``H``): the last sequence a producer published. topic = the dafka topic."""
    __slots__ = ()
    COMMAND: ClassVar[Command] = Command.HEAD


class DirectHead(_Positioned):
    """DIRECT-HEAD (``E``): store reader -> consumer, the last stored sequence of one
    partition. topic = the consumer's address, address = the partition address."""
    __slots__ = ()
    COMMAND: ClassVar[Command] = Command.DIRECT_HEAD


class GetHeads(_Addressed):
    """GET-HEADS (``G``): consumer -> store readers. topic = the dafka topic (stores
    answer every partition whose subject starts with it), address = the consumer."""
    __slots__ = ()
    COMMAND: ClassVar[Command] = Command.GET_HEADS


@dataclass(slots=True)
class ConsumerHello(_Addressed):
    """CONSUMER-HELLO (``W``): consumer -> one store reader. topic = the store reader's
    address, address = the consumer; `subjects` may be empty (the C consumer sends none
    in `latest` mode)."""
    COMMAND: ClassVar[Command] = Command.CONSUMER_HELLO
    subjects: list[str] = field(default_factory=list)


class StoreHello(_Addressed):
    """STORE-HELLO (``L``): store reader -> consumer. topic = the consumer's address,
    address = the store reader's address."""
    __slots__ = ()
    COMMAND: ClassVar[Command] = Command.STORE_HELLO


@dataclass(slots=True)
class BulkFetch:
    """BULK-FETCH (``X``, garlicfarm extension): requester -> ONE store reader. Asks for
    offsets [sequence, sequence + count) of (subject, partition), at most `max_bytes`
    payload bytes (the store sends at least one record). topic = the store reader's
    address (only that reader subscribes to it), address = the requester."""
    COMMAND: ClassVar[Command] = Command.BULK_FETCH
    topic: str
    address: str
    partition: str
    subject: str
    sequence: int
    count: int
    max_bytes: int


@dataclass(slots=True)
class BulkRecords:
    """BULK-RECORDS (``Y``, garlicfarm extension): a store reader's answer to a
    BULK-FETCH, one slice of it: records sequence..sequence+count-1, in frame 1 as
    ``count`` little-endian u32 lengths then the records concatenated (`pack_bulk`,
    `bulk_offsets`). topic = the requester, address = the store reader. `last`: the
    answer ends with this slice (count 0 and last: the store does not hold
    `sequence`)."""
    COMMAND: ClassVar[Command] = Command.BULK_RECORDS
    topic: str
    address: str
    partition: str
    subject: str
    sequence: int
    count: int
    last: bool
    content: bytes = b""


@dataclass(slots=True)
class BulkGetHeads:
    """BULK-GET-HEADS (``Q``, garlicfarm heads extension): requester -> ONE store
    reader. Asks for the head of every stored partition whose subject starts with
    `prefix` ("" = all). topic = the store reader's address (only that reader
    subscribes to it), address = the requester; `request` is echoed in the answer so
    answers to an earlier request are told apart."""
    COMMAND: ClassVar[Command] = Command.BULK_GET_HEADS
    topic: str
    address: str
    request: int
    prefix: str


@dataclass(slots=True)
class BulkHeads:
    """BULK-HEADS (``R``, garlicfarm heads extension): one slice of a store reader's
    answer to a BULK-GET-HEADS: entries `first` .. `first + len(heads) - 1` of an answer
    of `total` entries, each (subject, partition address, last stored sequence); frame
    1 holds them (`pack_heads`). The answer is complete when `total` entries arrived:
    that explicit end is what GET-HEADS lacks. topic = the requester, address = the
    store reader."""
    COMMAND: ClassVar[Command] = Command.BULK_HEADS
    topic: str
    address: str
    request: int
    first: int
    total: int
    heads: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass(slots=True)
class Beacon:
    """A node's beacon to the tower XSUB: ``B | sender | host | port``. host is empty
    by default (the tower fills in the connection's peer address)."""
    sender: str
    host: str
    port: int


@dataclass(slots=True)
class TowerBeacon:
    """A beacon as the tower XPUB forwards it: ``B | sender | tcp://host:port``."""
    sender: str
    endpoint: str


@dataclass(slots=True)
class Welcome:
    """The tower XPUB's welcome message, one frame ``W``, sent to every new subscriber."""


@dataclass(slots=True)
class Subscription:
    """A (un)subscription frame as a verbose XPUB receives it: ``0x01``/``0x00`` +
    command id + topic prefix. `command` is None for the empty (match-all) prefix."""
    subscribe: bool
    command: Command | None
    topic: str = ""


ProtocolMessage = Union[Record, DirectRecord, Fetch, Ack, Head, DirectHead, GetHeads,
                        ConsumerHello, StoreHello, BulkFetch, BulkRecords, BulkGetHeads,
                        BulkHeads]
Message = Union[ProtocolMessage, Beacon, TowerBeacon, Welcome, Subscription]

MESSAGE_TYPES: dict[Command, type] = {cls.COMMAND: cls for cls in (
    Record, DirectRecord, Fetch, Ack, Head, DirectHead, GetHeads, ConsumerHello,
    StoreHello, BulkFetch, BulkRecords, BulkGetHeads, BulkHeads)}
_TOPIC_IS_ADDRESS = frozenset({Command.DIRECT_RECORD, Command.FETCH, Command.ACK,
                               Command.DIRECT_HEAD, Command.CONSUMER_HELLO,
                               Command.STORE_HELLO, Command.BULK_FETCH,
                               Command.BULK_RECORDS, Command.BULK_GET_HEADS,
                               Command.BULK_HEADS})
_WITH_CONTENT = frozenset({Command.RECORD, Command.DIRECT_RECORD})
_TWO_FRAMES = _WITH_CONTENT | {Command.BULK_RECORDS, Command.BULK_HEADS}
# A BULK-HEADS entry: subject string (1 + 0..255 bytes), partition string (1 + 32), u64.
HEAD_ENTRY_MIN = 1 + 1 + ADDRESS_LENGTH + 8
HEAD_ENTRY_MAX = 1 + 255 + 1 + ADDRESS_LENGTH + 8
_LAST = 1            # BULK-RECORDS flags: the answer ends here; other bits must be 0
_LE_U32 = np.dtype("<u4")
_SEQUENCED = frozenset({Record, DirectRecord, Head, DirectHead})


# --------------------------------------------------------------------------- helpers
def subscription_prefix(command: Command, topic: str = "") -> bytes:
    """The ZeroMQ subscription a Dafka subscriber sets: command id + topic, with no
    terminator, so ``hello`` also matches ``hello2`` (filter on the decoded topic)."""
    return bytes((command,)) + topic.encode()


def fetch_count(sequence: int) -> int:
    """The FETCH window of the reference consumer and store: from `sequence` to the end
    of its 100000-aligned block (seq 0 -> 100000, seq 1 -> 99999)."""
    return FETCH_BLOCK * (sequence // FETCH_BLOCK + 1) - sequence


def is_address(text: str) -> bool:
    """True for a node address as the C code writes it: 32 uppercase hex characters."""
    return len(text) == ADDRESS_LENGTH and not text.encode("ascii", "replace").translate(
        None, _HEX_UPPER)


def frame0_prefix(command: Command, topic: str, address: str, subject: str) -> bytes:
    """Frame 0 of M/D/H/E up to (not including) the sequence: a node that sends many
    messages of one partition appends ``u64(sequence)`` to this instead of encoding
    each message afresh (the RECORD hot path)."""
    return b"".join((_header(command, topic), _string(address, "address"),
                     _string(subject, "subject")))


# u64 big-endian, the last field of M/D/H/E frames after `frame0_prefix`: struct's own
# pack, so mapping it over sequences makes no Python call per record.
pack_sequence = _U64_PACK


def pack_bulk(lengths: Sequence[int] | Any, data: bytes | bytearray | memoryview
              ) -> bytes:
    """Frame 1 of BULK-RECORDS: the lengths as little-endian u32, then `data` (the
    records concatenated). `lengths` is an array('I') (as `SegmentedLog.read_joined`
    gives it), a numpy array or any int sequence; one copy of `data`, no step per
    record."""
    if isinstance(lengths, np.ndarray):
        packed = lengths.astype(_LE_U32, copy=False).tobytes()
    else:
        arr = lengths if getattr(lengths, "typecode", None) == "I" else array("I", lengths)
        if sys.byteorder == "big":
            arr = array("I", arr)
            arr.byteswap()
        packed = arr.tobytes()
    return b"".join((packed, data))


def bulk_records_frame0(topic: str, address: str, partition: str, subject: str,
                        sequence: int, count: int, last: bool) -> bytes:
    """Frame 0 of BULK-RECORDS; a store sends it with frame 1 from `pack_bulk` (which
    it built itself, so nothing needs checking again as `encode` does)."""
    return b"".join((
        _header(Command.BULK_RECORDS, topic), _string(address, "address"),
        _string(partition, "partition"), _string(subject, "subject"),
        _U64_PACK(_number(sequence, "sequence", MAX_SEQUENCE)),
        _U32_PACK(_number(count, "count", MAX_COUNT)), bytes((_LAST if last else 0,))))


def pack_heads(heads: Sequence[tuple[str, str, int]]) -> bytes:
    """Frame 1 of BULK-HEADS: per entry the subject and the partition as strings (1-byte
    length + bytes) and the head as u64, big-endian like the rest of Dafka."""
    parts: list[bytes] = []
    for subject, partition, head in heads:
        parts += (_string(subject, "subject"), _string(partition, "partition"),
                  _U64_PACK(_number(head, "head", MAX_SEQUENCE)))
    return b"".join(parts)


def bulk_heads_frame0(topic: str, address: str, request: int, first: int, count: int,
                      total: int) -> bytes:
    """Frame 0 of BULK-HEADS: requester, store reader, request, first, count, total."""
    if first + count > total:
        raise InvalidField("total", f"{total} < first {first} + count {count}",
                           protocol=PROTOCOL)
    return b"".join((
        _header(Command.BULK_HEADS, topic), _string(address, "address"),
        _U32_PACK(_number(request, "request", MAX_COUNT)),
        _U32_PACK(_number(first, "first", MAX_COUNT)),
        _U32_PACK(_number(count, "count", MAX_COUNT)),
        _U32_PACK(_number(total, "total", MAX_COUNT))))


def bulk_lengths(msg: BulkRecords) -> np.ndarray:
    """The record lengths of a decoded BULK-RECORDS (a read-only uint32 view)."""
    return np.frombuffer(msg.content, _LE_U32, msg.count)


def bulk_offsets(msg: BulkRecords) -> np.ndarray:
    """The int32 Arrow offsets (count + 1 of them) of the records of a decoded
    BULK-RECORDS, relative to its data (frame 1 from byte 4 * count on): a numpy
    cumsum, no step per record. `decode` checked that the lengths add up to the data,
    and `max_bulk_bytes` < 2^31 keeps them in int32."""
    offsets = np.zeros(msg.count + 1, np.int32)
    np.cumsum(bulk_lengths(msg), out=offsets[1:], dtype=np.int32)
    return offsets


def _check_bulk(content: bytes | bytearray | memoryview, count: int, limits: Limits,
                name: str = "content") -> None:
    """Frame 1 of BULK-RECORDS holds exactly `count` lengths and their records."""
    if count > limits.max_bulk_records:
        raise LimitExceeded("count", f"{count} records, limit {limits.max_bulk_records}",
                            protocol=PROTOCOL)
    if len(content) > limits.max_bulk_bytes:
        raise LimitExceeded(name, f"{len(content)} bytes, limit {limits.max_bulk_bytes}",
                            protocol=PROTOCOL)
    if 4 * count > len(content):
        raise Truncated(name, f"{count} lengths need {4 * count} bytes, "
                        f"{len(content)} present", protocol=PROTOCOL)
    total = int(np.frombuffer(content, _LE_U32, count).sum(dtype=np.uint64))
    if total != len(content) - 4 * count:
        raise InvalidField(name, f"the lengths add up to {total} bytes, "
                           f"{len(content) - 4 * count} follow them", protocol=PROTOCOL)


# --------------------------------------------------------------------------- encode
def _header(command: Command, topic: str) -> bytes:
    data = topic.encode()
    if b"\x00" in data:
        raise InvalidField("topic", "must not contain a NUL byte", protocol=PROTOCOL)
    return bytes((command,)) + data + b"\x00\x01"


def _string(text: str, name: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise InvalidField(name, f"{len(data)} bytes, a string holds at most 255",
                           protocol=PROTOCOL)
    return bytes((len(data),)) + data


def _number(value: int, name: str, maximum: int) -> int:
    if not isinstance(value, int) or not 0 <= value <= maximum:
        raise InvalidField(name, f"{value!r} is not in 0..{maximum}", protocol=PROTOCOL)
    return value


def encode(msg: Message) -> list[bytes]:
    """The frames of `msg`, byte-identical to what libdafka sends."""
    if isinstance(msg, (Record, DirectRecord, Head, DirectHead)):
        seq = _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE))
        frame0 = frame0_prefix(msg.COMMAND, msg.topic, msg.address, msg.subject) + seq
        if msg.COMMAND in _WITH_CONTENT:
            return [frame0, bytes(msg.content)]
        return [frame0]
    if isinstance(msg, Fetch):
        tail = _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE)) + _U32_PACK(
            _number(msg.count, "count", MAX_COUNT))
        return [frame0_prefix(msg.COMMAND, msg.topic, msg.address, msg.subject) + tail]
    if isinstance(msg, BulkFetch):
        return [b"".join((
            _header(msg.COMMAND, msg.topic), _string(msg.address, "address"),
            _string(msg.partition, "partition"), _string(msg.subject, "subject"),
            _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE)),
            _U32_PACK(_number(msg.count, "count", MAX_COUNT)),
            _U32_PACK(_number(msg.max_bytes, "max_bytes", MAX_COUNT))))]
    if isinstance(msg, BulkRecords):
        _check_bulk(msg.content, _number(msg.count, "count", MAX_COUNT),
                    Limits(max_bulk_records=MAX_COUNT, max_bulk_bytes=1 << 62))
        return [bulk_records_frame0(msg.topic, msg.address, msg.partition, msg.subject,
                                    msg.sequence, msg.count, msg.last), bytes(msg.content)]
    if isinstance(msg, BulkGetHeads):
        return [b"".join((_header(msg.COMMAND, msg.topic), _string(msg.address, "address"),
                          _U32_PACK(_number(msg.request, "request", MAX_COUNT)),
                          _string(msg.prefix, "prefix")))]
    if isinstance(msg, BulkHeads):
        return [bulk_heads_frame0(msg.topic, msg.address, msg.request, msg.first,
                                  len(msg.heads), msg.total), pack_heads(msg.heads)]
    if isinstance(msg, Ack):
        return [_header(msg.COMMAND, msg.topic) + _string(msg.subject, "subject")
                + _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE))]
    if isinstance(msg, (GetHeads, StoreHello)):
        return [_header(msg.COMMAND, msg.topic) + _string(msg.address, "address")]
    if isinstance(msg, ConsumerHello):
        parts = [_header(msg.COMMAND, msg.topic), _string(msg.address, "address"),
                 _U32_PACK(_number(len(msg.subjects), "subjects", MAX_COUNT))]
        for subject in msg.subjects:
            data = subject.encode()
            parts += (_U32_PACK(len(data)), data)
        return [b"".join(parts)]
    if isinstance(msg, Beacon):
        return [b"B", msg.sender.encode(), msg.host.encode(),
                str(_number(msg.port, "port", 65535)).encode()]
    if isinstance(msg, TowerBeacon):
        return [b"B", msg.sender.encode(), msg.endpoint.encode()]
    if isinstance(msg, Welcome):
        return [b"W"]
    if isinstance(msg, Subscription):
        prefix = b"" if msg.command is None else subscription_prefix(msg.command, msg.topic)
        return [(b"\x01" if msg.subscribe else b"\x00") + prefix]
    raise TypeError(f"not a Dafka message: {type(msg).__name__}")


# --------------------------------------------------------------------------- decode
def _text(data: bytes, name: str, offset: int) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InvalidField(name, "is not valid UTF-8", protocol=PROTOCOL,
                           offset=offset) from None


def _check_address(data: bytes, name: str, offset: int, limits: Limits) -> str:
    if limits.strict_addresses and (len(data) != ADDRESS_LENGTH
                                    or data.translate(None, _HEX_UPPER)):
        raise InvalidField(name, "must be 32 uppercase hex characters",
                           protocol=PROTOCOL, offset=offset)
    return _text(data, name, offset)


class Decoder:
    """Decodes frames under one set of `Limits`, fast on the RECORD path.

    M/D/H/E frames of one partition differ only in their last 8 bytes (the sequence),
    so the decoder remembers each header (frame 0 minus the sequence) it has fully
    validated and decodes the next message of that partition with one dict lookup.
    The memory is bounded (`cache_size` headers) and holds only validated headers, so
    the result is exactly that of the full decode.
    """

    __slots__ = ("limits", "_headers", "_cache_size")

    def __init__(self, limits: Limits = DEFAULT_LIMITS, cache_size: int = 4096) -> None:
        self.limits = limits
        self._headers: dict[bytes, tuple] = {}
        self._cache_size = cache_size

    def decode(self, frames: Sequence[bytes]) -> Message:
        """See the module-level `decode`."""
        frame0 = frames[0] if frames else None
        if type(frame0) is bytes:
            head = self._headers.get(frame0[:-8])
            if head is not None and head[4] == len(frames):
                sequence = _U64_UNPACK_FROM(frame0, len(frame0) - 8)[0]
                if head[4] == 1:
                    return head[0](head[1], head[2], head[3], sequence)
                content = frames[1]
                if type(content) is bytes and len(content) <= self.limits.max_content_bytes:
                    return head[0](head[1], head[2], head[3], sequence, content)
        msg = _decode(frames, self.limits)
        if type(msg) in _SEQUENCED:
            if len(self._headers) >= self._cache_size:
                self._headers.clear()
            self._headers[frames[0][:-8]] = (type(msg), msg.topic, msg.address,
                                             msg.subject, len(frames))
        return msg


_DEFAULT_DECODER = Decoder()


def decode(frames: Sequence[bytes], limits: Limits = DEFAULT_LIMITS) -> Message:
    """Decode one ZeroMQ message (its frames) into a message object.

    Raises a `ProtocolError` subclass naming the field for anything malformed: too few
    or too many frames, a frame shorter than its fields, a declared size over `limits`,
    a version other than 1, bad UTF-8, a malformed address, trailing bytes. Nodes keep
    a `Decoder` of their own; this function uses a shared one for the default limits.
    """
    if limits is DEFAULT_LIMITS:
        return _DEFAULT_DECODER.decode(frames)
    return _decode(frames, limits)


def _decode(frames: Sequence[bytes], limits: Limits) -> Message:
    if not frames:
        raise Truncated("frames", "no frame at all", protocol=PROTOCOL)
    frame0 = frames[0]
    if not isinstance(frame0, bytes):
        frames = [bytes(f) for f in frames]
        frame0 = frames[0]
    if not frame0:
        raise Truncated("command", "frame 0 is empty", protocol=PROTOCOL, offset=0)
    if len(frame0) > limits.max_frame_bytes:
        raise LimitExceeded("frame0", f"{len(frame0)} bytes, limit "
                            f"{limits.max_frame_bytes}", protocol=PROTOCOL)
    first = frame0[0]
    if first <= 1 and len(frames) == 1:
        return _decode_subscription(frame0, limits)
    if first == 0x42:  # 'B'
        return _decode_beacon(frames, limits)
    if first == 0x57 and len(frame0) == 1 and len(frames) == 1:  # 'W' alone
        return Welcome()
    if first not in _DECODERS:
        raise UnknownMessageType("command", f"unknown command id 0x{first:02x}",
                                 protocol=PROTOCOL, offset=0)
    expected = 2 if first in _TWO_FRAMES else 1
    if len(frames) != expected:
        raise InvalidField("frames", f"{Command(first).wire_name} has {expected} "
                           f"frame(s), got {len(frames)}", protocol=PROTOCOL)
    nul = frame0.find(0, 1)
    if nul < 0:
        raise Truncated("topic", "no NUL terminator", protocol=PROTOCOL, offset=1)
    if nul - 1 > limits.max_topic_bytes:
        raise LimitExceeded("topic", f"{nul - 1} bytes, limit {limits.max_topic_bytes}",
                            protocol=PROTOCOL, offset=1)
    if nul + 1 >= len(frame0):
        raise Truncated("version", "frame 0 ends after the topic", protocol=PROTOCOL,
                        offset=nul + 1)
    if frame0[nul + 1] != VERSION:
        raise InvalidField("version", f"{frame0[nul + 1]}, only 1 is spoken",
                           protocol=PROTOCOL, offset=nul + 1)
    topic_bytes = frame0[1:nul]
    if first in _TOPIC_IS_ADDRESS:
        topic = _check_address(topic_bytes, "topic", 1, limits)
    else:
        topic = _text(topic_bytes, "topic", 1)
    return _DECODERS[first](frames, frame0, topic, nul + 2, limits)


def _take_string(frame0: bytes, pos: int, name: str) -> tuple[bytes, int]:
    if pos >= len(frame0):
        raise Truncated(name, "missing length byte", protocol=PROTOCOL, offset=pos)
    end = pos + 1 + frame0[pos]
    if end > len(frame0):
        raise Truncated(name, f"declares {frame0[pos]} bytes, "
                        f"{len(frame0) - pos - 1} left", protocol=PROTOCOL, offset=pos)
    return frame0[pos + 1:end], end


def _take_number(frame0: bytes, pos: int, size: int, name: str) -> int:
    if pos + size > len(frame0):
        raise Truncated(name, f"needs {size} bytes, {len(frame0) - pos} left",
                        protocol=PROTOCOL, offset=pos)
    return (_U64_UNPACK_FROM if size == 8 else _U32_UNPACK_FROM)(frame0, pos)[0]


def _end(frame0: bytes, pos: int) -> None:
    if pos != len(frame0):
        raise InvalidField("frame0", f"{len(frame0) - pos} trailing bytes",
                           protocol=PROTOCOL, offset=pos)


def _address_subject(frame0: bytes, pos: int, limits: Limits) -> tuple[str, str, int]:
    raw, end = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    raw, end2 = _take_string(frame0, end, "subject")
    return address, _text(raw, "subject", end), end2


def _content(frames: Sequence[bytes], limits: Limits) -> bytes:
    content = frames[1]
    if len(content) > limits.max_content_bytes:
        raise LimitExceeded("content", f"{len(content)} bytes, limit "
                            f"{limits.max_content_bytes}", protocol=PROTOCOL)
    return content if isinstance(content, bytes) else bytes(content)


def _decode_sequenced(cls: type, with_content: bool):
    """Decoder of the address/subject/sequence layout (M, D, H, E)."""
    def decode_sequenced(frames, frame0, topic, pos, limits):
        address, subject, pos = _address_subject(frame0, pos, limits)
        sequence = _take_number(frame0, pos, 8, "sequence")
        _end(frame0, pos + 8)
        if with_content:
            return cls(topic, address, subject, sequence, _content(frames, limits))
        return cls(topic, address, subject, sequence)
    return decode_sequenced


def _decode_fetch(frames, frame0, topic, pos, limits):
    address, subject, pos = _address_subject(frame0, pos, limits)
    sequence = _take_number(frame0, pos, 8, "sequence")
    count = _take_number(frame0, pos + 8, 4, "count")
    _end(frame0, pos + 12)
    return Fetch(topic, address, subject, sequence, count)


def _decode_ack(frames, frame0, topic, pos, limits):
    raw, pos2 = _take_string(frame0, pos, "subject")
    subject = _text(raw, "subject", pos)
    sequence = _take_number(frame0, pos2, 8, "sequence")
    _end(frame0, pos2 + 8)
    return Ack(topic, subject, sequence)


def _decode_address_only(cls):
    def decode_address_only(frames, frame0, topic, pos, limits):
        raw, end = _take_string(frame0, pos, "address")
        address = _check_address(raw, "address", pos, limits)
        _end(frame0, end)
        return cls(topic, address)
    return decode_address_only


def _decode_consumer_hello(frames, frame0, topic, pos, limits):
    raw, pos = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos - len(raw) - 1, limits)
    count = _take_number(frame0, pos, 4, "subjects")
    pos += 4
    if count > limits.max_subjects:
        raise LimitExceeded("subjects", f"count {count}, limit {limits.max_subjects}",
                            protocol=PROTOCOL, offset=pos - 4)
    if count * 4 > len(frame0) - pos:
        raise Truncated("subjects", f"count {count} cannot fit in "
                        f"{len(frame0) - pos} bytes", protocol=PROTOCOL, offset=pos - 4)
    subjects = []
    for _ in range(count):
        size = _take_number(frame0, pos, 4, "subjects")
        if size > limits.max_topic_bytes:
            raise LimitExceeded("subjects", f"item of {size} bytes, limit "
                                f"{limits.max_topic_bytes}", protocol=PROTOCOL, offset=pos)
        if pos + 4 + size > len(frame0):
            raise Truncated("subjects", f"item declares {size} bytes, "
                            f"{len(frame0) - pos - 4} left", protocol=PROTOCOL, offset=pos)
        subjects.append(_text(frame0[pos + 4:pos + 4 + size], "subjects", pos + 4))
        pos += 4 + size
    _end(frame0, pos)
    return ConsumerHello(topic, address, subjects)


def _decode_bulk_fetch(frames, frame0, topic, pos, limits):
    address, partition, subject, pos = _bulk_names(frame0, pos, limits)
    sequence = _take_number(frame0, pos, 8, "sequence")
    count = _take_number(frame0, pos + 8, 4, "count")
    max_bytes = _take_number(frame0, pos + 12, 4, "max_bytes")
    _end(frame0, pos + 16)
    return BulkFetch(topic, address, partition, subject, sequence, count, max_bytes)


def _decode_bulk_records(frames, frame0, topic, pos, limits):
    address, partition, subject, pos = _bulk_names(frame0, pos, limits)
    sequence = _take_number(frame0, pos, 8, "sequence")
    count = _take_number(frame0, pos + 8, 4, "count")
    if pos + 12 >= len(frame0):
        raise Truncated("flags", "missing", protocol=PROTOCOL, offset=pos + 12)
    flags = frame0[pos + 12]
    if flags & ~_LAST:
        raise InvalidField("flags", f"0x{flags:02x}: only bit 0 (last) is defined",
                           protocol=PROTOCOL, offset=pos + 12)
    _end(frame0, pos + 13)
    content = frames[1]
    _check_bulk(content, count, limits)
    return BulkRecords(topic, address, partition, subject, sequence, count,
                       bool(flags & _LAST),
                       content if isinstance(content, bytes) else bytes(content))


def _decode_bulk_get_heads(frames, frame0, topic, pos, limits):
    raw, pos2 = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    request = _take_number(frame0, pos2, 4, "request")
    raw, end = _take_string(frame0, pos2 + 4, "prefix")
    if len(raw) > limits.max_topic_bytes:
        raise LimitExceeded("prefix", f"{len(raw)} bytes, limit {limits.max_topic_bytes}",
                            protocol=PROTOCOL, offset=pos2 + 4)
    _end(frame0, end)
    return BulkGetHeads(topic, address, request, _text(raw, "prefix", pos2 + 5))


def _decode_bulk_heads(frames, frame0, topic, pos, limits):
    raw, pos2 = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    request = _take_number(frame0, pos2, 4, "request")
    first = _take_number(frame0, pos2 + 4, 4, "first")
    count = _take_number(frame0, pos2 + 8, 4, "count")
    total = _take_number(frame0, pos2 + 12, 4, "total")
    _end(frame0, pos2 + 16)
    # Sizes before anything is sliced: the count, then frame 1 against what `count`
    # entries can occupy at least and at most.
    if count > limits.max_bulk_heads:
        raise LimitExceeded("count", f"{count} heads, limit {limits.max_bulk_heads}",
                            protocol=PROTOCOL, offset=pos2 + 8)
    if first + count > total:
        raise InvalidField("total", f"{total} < first {first} + count {count}",
                           protocol=PROTOCOL, offset=pos2 + 12)
    data = frames[1]
    if not isinstance(data, bytes):
        data = bytes(data)
    if len(data) > count * HEAD_ENTRY_MAX:
        raise LimitExceeded("heads", f"{len(data)} bytes for {count} heads, at most "
                            f"{count * HEAD_ENTRY_MAX}", protocol=PROTOCOL)
    if len(data) < count * HEAD_ENTRY_MIN:
        raise Truncated("heads", f"{len(data)} bytes for {count} heads, at least "
                        f"{count * HEAD_ENTRY_MIN}", protocol=PROTOCOL)
    heads: list[tuple[str, str, int]] = []
    at = 0
    for _ in range(count):
        raw, at2 = _take_string(data, at, "heads")
        if len(raw) > limits.max_topic_bytes:
            raise LimitExceeded("heads", f"subject of {len(raw)} bytes, limit "
                                f"{limits.max_topic_bytes}", protocol=PROTOCOL, offset=at)
        subject = _text(raw, "heads", at)
        raw, at3 = _take_string(data, at2, "heads")
        partition = _check_address(raw, "heads", at2, limits)
        heads.append((subject, partition, _take_number(data, at3, 8, "heads")))
        at = at3 + 8
    if at != len(data):
        raise InvalidField("heads", f"{len(data) - at} trailing bytes", protocol=PROTOCOL,
                           offset=at)
    return BulkHeads(topic, address, request, first, total, heads)


def _bulk_names(frame0: bytes, pos: int, limits: Limits) -> tuple[str, str, str, int]:
    """address, partition (both node addresses) and subject of X / Y frames."""
    raw, end = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    raw, end2 = _take_string(frame0, end, "partition")
    partition = _check_address(raw, "partition", end, limits)
    raw, end3 = _take_string(frame0, end2, "subject")
    return address, partition, _text(raw, "subject", end2), end3


_DECODERS = {
    Command.RECORD: _decode_sequenced(Record, True),
    Command.DIRECT_RECORD: _decode_sequenced(DirectRecord, True),
    Command.FETCH: _decode_fetch,
    Command.ACK: _decode_ack,
    Command.HEAD: _decode_sequenced(Head, False),
    Command.DIRECT_HEAD: _decode_sequenced(DirectHead, False),
    Command.GET_HEADS: _decode_address_only(GetHeads),
    Command.CONSUMER_HELLO: _decode_consumer_hello,
    Command.STORE_HELLO: _decode_address_only(StoreHello),
    Command.BULK_FETCH: _decode_bulk_fetch,
    Command.BULK_RECORDS: _decode_bulk_records,
    Command.BULK_GET_HEADS: _decode_bulk_get_heads,
    Command.BULK_HEADS: _decode_bulk_heads,
}


def _decode_subscription(frame0: bytes, limits: Limits) -> Subscription:
    subscribe = frame0[0] == 1
    if len(frame0) == 1:
        return Subscription(subscribe, None)
    try:
        command = Command(frame0[1])
    except ValueError:
        raise UnknownMessageType("command", f"subscription to unknown command id "
                                 f"0x{frame0[1]:02x}", protocol=PROTOCOL, offset=1) from None
    if len(frame0) - 2 > limits.max_topic_bytes:
        raise LimitExceeded("topic", f"{len(frame0) - 2} bytes, limit "
                            f"{limits.max_topic_bytes}", protocol=PROTOCOL, offset=2)
    return Subscription(subscribe, command, _text(frame0[2:], "topic", 2))


def _decode_beacon(frames: Sequence[bytes], limits: Limits) -> Beacon | TowerBeacon:
    if frames[0] != b"B":
        raise InvalidField("beacon", "frame 0 must be exactly 'B'", protocol=PROTOCOL)
    if len(frames) not in (3, 4):
        raise InvalidField("frames", f"a beacon has 3 (tower) or 4 (node) frames, got "
                           f"{len(frames)}", protocol=PROTOCOL)
    sender = _check_address(frames[1], "sender", 0, limits)
    if len(frames) == 3:
        if len(frames[2]) > limits.max_endpoint_bytes:
            raise LimitExceeded("endpoint", f"{len(frames[2])} bytes, limit "
                                f"{limits.max_endpoint_bytes}", protocol=PROTOCOL)
        endpoint = _text(frames[2], "endpoint", 0)
        found = _TOWER_ENDPOINT.fullmatch(endpoint)
        if found is None or not 0 < int(found.group(2)) <= 65535:
            # every node connects to it: one a SUB refuses must not reach them
            raise InvalidField("endpoint", f"{endpoint[:64]!r} is not tcp://HOST:PORT with a "
                               "host name or address and a port 1..65535", protocol=PROTOCOL)
        return TowerBeacon(sender, endpoint)
    if len(frames[2]) > 255:
        raise LimitExceeded("host", f"{len(frames[2])} bytes, limit 255", protocol=PROTOCOL)
    host = _text(frames[2], "host", 0)
    if host and not is_host(host):
        raise InvalidField("host", f"{host[:64]!r} is not a host name or address (the tower "
                           "announces tcp://HOST:PORT)", protocol=PROTOCOL)
    port = frames[3]
    if not port.isdigit() or len(port) > 5 or not 0 < int(port) <= 65535:
        raise InvalidField("port", f"{port[:16]!r} is not a decimal port 1..65535",
                           protocol=PROTOCOL)
    return Beacon(sender, host, int(port))


# A host as ZeroMQ connects to it: a name or IPv4 address (first character a letter or
# digit, as libzmq requires), or an IPv6 address in brackets with an optional zone.
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9._-]+)?\]")
_TOWER_ENDPOINT = re.compile(rf"tcp://({_HOST.pattern}):([0-9]{{1,5}})")


def is_host(text: str) -> bool:
    """Whether a tower may announce ``tcp://text:PORT`` (and every node connect to it)."""
    return len(text) <= 255 and _HOST.fullmatch(text) is not None


# --------------------------------------------------------------------------- JSON
_NAMES: dict[str, type] = {cls.COMMAND.wire_name: cls for cls in MESSAGE_TYPES.values()}
_NAMES.update({"BEACON": Beacon, "TOWER-BEACON": TowerBeacon, "WELCOME": Welcome,
               "SUBSCRIPTION": Subscription})
_CLASS_NAMES = {cls: name for name, cls in _NAMES.items()}


def to_json(msg: Message) -> dict[str, Any]:
    """``{"message": NAME, field: value...}``; content as lowercase hex, command by name."""
    out: dict[str, Any] = {"message": _CLASS_NAMES[type(msg)]}
    for f in fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).hex()
        elif isinstance(value, Command):
            value = value.wire_name
        elif isinstance(value, list):
            value = list(value)
        out[f.name] = value
    return out


def from_json(obj: dict[str, Any]) -> Message:
    """Inverse of `to_json`; raises `ProtocolError` naming the bad key."""
    if not isinstance(obj, dict):
        raise InvalidField("message", "a JSON object is expected", protocol=PROTOCOL)
    cls = _NAMES.get(obj.get("message"))  # type: ignore[arg-type]
    if cls is None:
        raise UnknownMessageType("message", f"unknown message {obj.get('message')!r}; "
                                 f"one of {', '.join(_NAMES)}", protocol=PROTOCOL)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in obj:
            if f.default is not MISSING or f.default_factory is not MISSING:
                continue  # optional: the dataclass default applies
            raise InvalidField(f.name, "missing", protocol=PROTOCOL)
        kwargs[f.name] = _json_value(cls, f.name, obj[f.name])
    return cls(**kwargs)


def _json_value(cls: type, name: str, value: Any) -> Any:
    if name == "content":
        try:
            return bytes.fromhex(value)
        except (TypeError, ValueError):
            raise InvalidField(name, "must be a hex string", protocol=PROTOCOL) from None
    if name == "command":
        if value is None:
            return None
        try:
            return Command[str(value).replace("-", "_")]
        except KeyError:
            raise InvalidField(name, f"unknown command {value!r}", protocol=PROTOCOL) from None
    if name in ("subscribe", "last"):
        if not isinstance(value, bool):
            raise InvalidField(name, "must be true or false", protocol=PROTOCOL)
        return value
    if name == "heads":
        if not isinstance(value, list) or not all(
                isinstance(h, (list, tuple)) and len(h) == 3 and isinstance(h[0], str)
                and isinstance(h[1], str) and isinstance(h[2], int)
                and not isinstance(h[2], bool) and h[2] >= 0 for h in value):
            raise InvalidField(name, "must be a list of [subject, partition, head]",
                               protocol=PROTOCOL)
        return [tuple(h) for h in value]
    if name in ("sequence", "count", "port", "max_bytes", "request", "first", "total"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidField(name, "must be a non-negative integer", protocol=PROTOCOL)
        return value
    if name == "subjects":
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise InvalidField(name, "must be a list of strings", protocol=PROTOCOL)
        return list(value)
    if not isinstance(value, str):
        raise InvalidField(name, "must be a string", protocol=PROTOCOL)
    return value


__all__ = [
    "ADDRESS_LENGTH", "Ack", "Beacon", "BulkFetch", "BulkGetHeads", "BulkHeads",
    "BulkRecords", "Command", "ConsumerHello", "DEFAULT_LIMITS", "Decoder",
    "DirectHead", "DirectRecord", "FETCH_BLOCK", "Fetch", "GetHeads", "Head", "Limits",
    "MAX_SEQUENCE", "MESSAGE_TYPES", "Message", "ProtocolError", "ProtocolMessage",
    "Record", "StoreHello", "Subscription", "TowerBeacon", "VERSION", "Welcome", "decode",
    "bulk_heads_frame0", "bulk_lengths", "bulk_offsets", "bulk_records_frame0",
    "pack_heads", "encode", "fetch_count", "frame0_prefix", "from_json",
    "is_address", "is_host", "pack_bulk", "pack_sequence",
    "subscription_prefix", "to_json",
]
