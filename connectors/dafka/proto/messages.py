"""Dafka's messages: the commands, their fields, the limits a decoder checks, and
the frame-0 layout both directions share (docs in the package docstring)."""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import ClassVar, Union

import numpy as np

from consensus.wire.errors import InvalidField


PROTOCOL = "dafka"
VERSION = 1
ADDRESS_LENGTH = 32
FETCH_BLOCK = 100_000          # a FETCH asks for the rest of the current 100000-block
MAX_SEQUENCE = (1 << 64) - 1   # sequences are u64; 2^64-1 doubles as "before 0"
MAX_COUNT = (1 << 32) - 1
# The longest ZeroMQ subscription Dafka uses: a command id and a whole topic (a topic is
# also sent as a 1-byte-length string, so it has at most 255 bytes).
MAX_SUBSCRIPTION_BYTES = 1 + 255

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
class DafkaLimits:
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
    max_subscription_bytes: int = MAX_SUBSCRIPTION_BYTES   # a prefix on our publishers
    max_subscriptions: int = 1024         # prefixes one connection holds on a publisher


DEFAULT_LIMITS = DafkaLimits()


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
