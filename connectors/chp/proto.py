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
  length against `Limits` and the frames before building anything.

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
Message``, ``encode(msg) -> list[bytes]``, ``to_json(msg) -> dict``, ``from_json(obj) ->
Message``. Every decoding failure is a `ProtocolError` subclass naming the field; frame
sizes and the property count are checked against `Limits` before anything is split.

Messages are plain ``@dataclass(slots=True)`` rather than frozen ones on purpose: a
client decodes every update it receives and a frozen dataclass costs several times
more to construct (see the dafka codec for the measurement).
"""
from __future__ import annotations

import enum
import math
import re
import struct
import sys
from array import array
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, ClassVar, Iterator, Protocol, Sequence, Union

import numpy as np

from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)

PROTOCOL = "chp"

HUGZ = b"HUGZ"
KTHXBAI = b"KTHXBAI"
ICANHAZ = b"ICANHAZ?"
TTL = b"ttl"
UUID_LENGTH = 16
KVMSG_FRAMES = 5
KVBULK = b"KVBULK"
RESERVED_KEYS = frozenset({HUGZ, KTHXBAI, ICANHAZ})
#: A snapshot DEALER whose ZeroMQ routing id starts with this asks for KVBULK answers.
BULK_ROUTING_PREFIX = b"gf-kvbulk/1:"
BULK_VERSION = 1
BULK_FRAMES = 8
_BULK_HEADER = struct.Struct(">BxxxI")     # version, 3 reserved zero bytes, entry count

_SEQUENCE = struct.Struct(">q")
pack_sequence = _SEQUENCE.pack
_unpack_sequence = _SEQUENCE.unpack
MAX_SEQUENCE = (1 << 63) - 1
MIN_SEQUENCE = -(1 << 63)
# An absolute ttl at or above this is epoch milliseconds (C peer), below it epoch
# seconds (Python peer): 1e11 s is the year 5138, 1e11 ms is 1973.
_MS_THRESHOLD = 10 ** 11
#: The longest ttl a KVSET may ask for, either way (about 31,700 years): its expiry,
#: counted from any clock of this era, then fits the signed 64-bit epoch milliseconds
#: we store and emit, as the C peer reads them.
MAX_TTL_SECONDS = 10 ** 12
#: The range of an absolute ttl (epoch milliseconds, a signed 64-bit integer).
MIN_EPOCH_MS, MAX_EPOCH_MS = -(1 << 63), (1 << 63) - 1
#: The earliest expiry whose stored form (integer ms) reads back as milliseconds.
MIN_EXPIRY_MS = _MS_THRESHOLD
_DECIMAL = re.compile(rb"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


class Channel(enum.Enum):
    """Where frames were read, which decides what a plain kvmsg means."""
    COLLECTOR = "collector"                # client PUB -> server SUB: KVSET
    PUBLISHER = "publisher"                # server PUB -> client SUB: KVPUB, HUGZ
    SNAPSHOT_REQUEST = "snapshot-request"  # client DEALER -> server ROUTER: ICANHAZ
    SNAPSHOT_REPLY = "snapshot-reply"      # server ROUTER -> client DEALER: KVSYNC, KTHXBAI
    BSTAR = "bstar"                        # Binary Star state PUB -> peer SUB


class BstarState(enum.IntEnum):
    """The Binary Star states, as sent in state messages (one ASCII digit)."""
    PRIMARY = 1   # primary, waiting for its peer
    BACKUP = 2    # backup, waiting for its peer
    ACTIVE = 3    # serving clients
    PASSIVE = 4   # following the active peer


@dataclass(frozen=True)
class Limits:
    """Bounds checked before a frame is parsed. The C peer keys its map by the first
    255 bytes of a key only; we keep whole keys up to `max_key_bytes`."""
    max_key_bytes: int = 64 << 10
    max_properties_bytes: int = 64 << 10
    max_properties: int = 1024        # property lines
    max_body_bytes: int = 16 << 20
    max_bulk_entries: int = 65536     # entries in one KVBULK
    max_bulk_bytes: int = 16 << 20    # one KVBULK column frame (keys, values...); < 2 GiB
    max_subtree_bytes: int = 4096     # a subscription (subtree prefix) on a publisher
    max_subscriptions: int = 64       # prefixes one connection holds (a client: 2)

    def __post_init__(self) -> None:
        """Checked here, not where a socket option or an Arrow offset overflows later."""
        for f in fields(self):
            value = getattr(self, f.name)
            if type(value) is not int or not 1 <= value < 1 << 31:
                raise ValueError(f"Limits.{f.name}: {value!r} is not an integer in "
                                 f"1..{(1 << 31) - 1}")

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame any message may hold (for ZMQ_MAXMSGSIZE on sockets)."""
        return max(self.max_key_bytes, self.max_properties_bytes, self.max_body_bytes)

    @property
    def max_snapshot_frame_bytes(self) -> int:
        """The largest frame of a snapshot answer, KVBULK included (a client DEALER's
        ZMQ_MAXMSGSIZE)."""
        return max(self.max_frame_bytes, self.max_bulk_bytes)


DEFAULT_LIMITS = Limits()


# --------------------------------------------------------------------------- messages
@dataclass(slots=True)
class _KvMsg:
    """The five-frame kvmsg. `properties` holds the raw frame, byte for byte."""
    key: bytes
    sequence: int = 0
    uuid: bytes = b""
    properties: bytes = b""
    body: bytes = b""
    NAME: ClassVar[str] = ""

    @property
    def deleted(self) -> bool:
        """An empty body deletes the key."""
        return not self.body

    def get_property(self, name: bytes) -> bytes | None:
        """The value of property `name` (the last one when repeated), or None."""
        if not self.properties:
            return None
        return dict(parse_properties(self.properties)).get(name)


@dataclass(slots=True)
class Kvset(_KvMsg):
    """KVSET: a client's update, sent to every server's collector. Sequence is ignored
    (the peers send 0); ttl, when present, is relative seconds."""
    NAME: ClassVar[str] = "KVSET"


@dataclass(slots=True)
class Kvpub(_KvMsg):
    """KVPUB: an update the server publishes, with its sequence. Republished KVSETs
    keep the client's properties verbatim; expiry deletes carry an absolute ttl."""
    NAME: ClassVar[str] = "KVPUB"


@dataclass(slots=True)
class Kvsync(_KvMsg):
    """KVSYNC: one stored entry in a snapshot reply, with the sequence of its last
    update, the client's UUID and the stored properties (absolute ttl)."""
    NAME: ClassVar[str] = "KVSYNC"


@dataclass(slots=True)
class _Command:
    """A kvmsg whose key is the command itself (`KEY`)."""
    NAME: ClassVar[str] = ""
    KEY: ClassVar[bytes] = b""
    sequence: int = 0
    uuid: bytes = b""
    properties: bytes = b""
    body: bytes = b""


@dataclass(slots=True)
class Hugz(_Command):
    """HUGZ: the server's heartbeat on the publisher, with its current sequence (never
    an update). The Python peer fills the UUID with random bytes."""
    NAME: ClassVar[str] = "HUGZ"
    KEY: ClassVar[bytes] = HUGZ


@dataclass(slots=True)
class Kthxbai(_Command):
    """KTHXBAI: the end of a snapshot, with the server's current sequence; the body is
    the subtree asked for (RFC, Python peer) or empty (C peer)."""
    NAME: ClassVar[str] = "KTHXBAI"
    KEY: ClassVar[bytes] = KTHXBAI

    @property
    def subtree(self) -> bytes:
        return self.body


@dataclass(slots=True)
class Icanhaz:
    """ICANHAZ?: ask for a snapshot of the keys starting with `subtree`.
    `subtree_frame` False is the one-frame form some senders emit. `properties`, when
    not empty, is a third frame of ``name=value`` lines: garlicfarm's resume request
    (`resume`), sent only to servers that announce they understand it."""
    NAME: ClassVar[str] = "ICANHAZ"
    subtree: bytes = b""
    subtree_frame: bool = True
    properties: bytes = b""


@dataclass(slots=True)
class BstarStatus:
    """A Binary Star state message, sent by each server to its peer every heartbeat."""
    NAME: ClassVar[str] = "BSTAR"
    state: BstarState


class EntryLike(Protocol):
    """What a KVBULK is encoded from: `kvmap.Entry`, `Kvsync`."""
    key: bytes
    sequence: int
    uuid: bytes
    properties: bytes
    body: bytes


@dataclass(slots=True, eq=False)
class KvBulk:
    """KVBULK: `count` snapshot entries as columns (garlicfarm's bulk snapshot; never
    sent to or by zguide peers). Each entry is what a KVSYNC would carry. Variable
    columns are Arrow-style: ``keys[key_offsets[i]:key_offsets[i + 1]]`` is key i
    (offsets int32, count + 1 of them, starting at 0); `sequences` is int64. Compare
    with `same` (numpy fields). In JSON (`to_json`) it is the list of its KVSYNCs."""
    NAME: ClassVar[str] = "KVBULK"
    sequences: np.ndarray
    key_offsets: np.ndarray
    keys: bytes
    uuid_offsets: np.ndarray
    uuids: bytes
    property_offsets: np.ndarray
    properties: bytes
    value_offsets: np.ndarray
    values: bytes

    @property
    def count(self) -> int:
        return len(self.sequences)

    def __len__(self) -> int:
        return len(self.sequences)

    def rows(self) -> Iterator[tuple[bytes, int, bytes, bytes, bytes]]:
        """(key, sequence, uuid, properties, body) per entry, in order."""
        ko, uo = self.key_offsets.tolist(), self.uuid_offsets.tolist()
        po, vo = self.property_offsets.tolist(), self.value_offsets.tolist()
        keys, uuids, props, values = self.keys, self.uuids, self.properties, self.values
        for i, sequence in enumerate(self.sequences.tolist()):
            j = i + 1
            yield (keys[ko[i]:ko[j]], sequence, uuids[uo[i]:uo[j]], props[po[i]:po[j]],
                   values[vo[i]:vo[j]])

    def entries(self) -> list["Kvsync"]:
        """The entries as the KVSYNCs a classic snapshot would have sent."""
        return [Kvsync(*row) for row in self.rows()]

    def same(self, other: "KvBulk") -> bool:
        """Whether both hold the same entries (the numpy fields defeat ``==``)."""
        return encode_bulk(self.entries()) == encode_bulk(other.entries())


KvMsg = Union[Kvset, Kvpub, Kvsync]
Message = Union[Kvset, Kvpub, Kvsync, Hugz, Kthxbai, Icanhaz, BstarStatus, KvBulk]
MESSAGE_TYPES: tuple[type, ...] = (Kvset, Kvpub, Kvsync, Hugz, Kthxbai, Icanhaz, BstarStatus)


# --------------------------------------------------------------------------- properties
def parse_properties(raw: bytes, limits: Limits = DEFAULT_LIMITS
                     ) -> tuple[tuple[bytes, bytes], ...]:
    """Split ``name=value`` lines at the first ``=``; an unterminated last line counts,
    empty lines are skipped (the Python peer skips them too)."""
    if not raw:
        return ()
    if len(raw) > limits.max_properties_bytes:
        raise LimitExceeded("properties", f"{len(raw)} bytes > limit "
                            f"{limits.max_properties_bytes}", protocol=PROTOCOL)
    lines = raw.count(b"\n") + (raw[-1:] != b"\n")
    if lines > limits.max_properties:
        raise LimitExceeded("properties", f"more than {limits.max_properties} lines",
                            protocol=PROTOCOL)
    pairs = []
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line:
            continue
        name, eq, value = line.partition(b"=")
        if not eq or not name:
            raise InvalidField("properties", f"line {number} {line[:32]!r} is not "
                               "name=value", protocol=PROTOCOL)
        pairs.append((name, value))
    return tuple(pairs)


def format_properties(pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    """``name=value\\n`` lines, in order. Names may not hold ``=`` or newlines, values
    may not hold newlines."""
    out = []
    for name, value in pairs:
        if not name or b"=" in name or b"\n" in name or b"\n" in value:
            raise InvalidField("properties", f"cannot encode property {name[:32]!r}",
                               protocol=PROTOCOL)
        out.append(name + b"=" + value + b"\n")
    return b"".join(out)


def replace_property(raw: bytes, name: bytes, value: bytes | None) -> bytes:
    """`raw` with property `name` set to `value` (removed when None); the other lines
    are kept verbatim and in order, every line newline-terminated."""
    pairs = [(n, v) for n, v in parse_properties(raw) if n != name]
    if value is not None:
        pairs.append((name, value))
    return format_properties(pairs)


def _decimal(value: bytes, what: str) -> float:
    if not _DECIMAL.fullmatch(value):
        raise InvalidField("properties.ttl", f"{value[:32]!r} is not a decimal {what}",
                           protocol=PROTOCOL)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidField("properties.ttl", f"{value[:32]!r} is out of range",
                           protocol=PROTOCOL)
    return number


def parse_relative_ttl(value: bytes) -> float | None:
    """A KVSET's ttl: seconds from now as decimal text; 0 means no ttl (both peers).
    A negative ttl expires at once, as it does on both peers. Beyond
    ±`MAX_TTL_SECONDS` it is refused (`InvalidField`): no expiry could be stored."""
    seconds = _decimal(value, "number of seconds")
    if not -MAX_TTL_SECONDS <= seconds <= MAX_TTL_SECONDS:
        raise InvalidField("properties.ttl", f"{value[:32]!r} seconds is out of range: at "
                           f"most {MAX_TTL_SECONDS} either way (leave the ttl out for no "
                           "expiry)", protocol=PROTOCOL)
    return None if seconds == 0 else seconds


def parse_absolute_ttl(value: bytes) -> int | None:
    """A stored ttl, in epoch milliseconds: integer epoch ms (C peer) or float epoch
    seconds (Python peer, which prints large ones as ``1e+308``). 0 means no ttl. One
    outside a signed 64-bit count of milliseconds raises `InvalidField`."""
    number = _decimal(value, "epoch time")
    if number == 0:
        return None
    if number >= _MS_THRESHOLD and value.lstrip(b"+").isdigit():
        epoch_ms = int(value)
    else:
        epoch_ms = round(number * 1000) if abs(number) < MAX_EPOCH_MS else None
    if epoch_ms is None or not MIN_EPOCH_MS <= epoch_ms <= MAX_EPOCH_MS:
        raise InvalidField("properties.ttl", f"{value[:32]!r} is out of range: an expiry "
                           "is epoch milliseconds within a signed 64-bit integer",
                           protocol=PROTOCOL)
    return epoch_ms


def format_absolute_ttl(epoch_ms: int) -> bytes:
    """The absolute ttl we emit: integer epoch milliseconds, as the C peer does."""
    return b"%d" % epoch_ms


# --------------------------------------------------------------------------- encode
def encode(msg: Message) -> list[bytes]:
    """The frames of `msg`; raises `InvalidField` for a value no peer could decode."""
    if isinstance(msg, Icanhaz):
        if not msg.subtree_frame:
            if msg.subtree or msg.properties:
                raise InvalidField("subtree", "a subtree or properties need the subtree "
                                   "frame", protocol=PROTOCOL)
            return [ICANHAZ]
        if msg.properties:
            parse_properties(msg.properties)
            return [ICANHAZ, msg.subtree, msg.properties]
        return [ICANHAZ, msg.subtree]
    if isinstance(msg, BstarStatus):
        return [b"%d" % BstarState(msg.state)]
    if isinstance(msg, KvBulk):
        return encode_bulk(msg.entries())
    key = msg.KEY if isinstance(msg, _Command) else msg.key
    if not MIN_SEQUENCE <= msg.sequence <= MAX_SEQUENCE:
        raise InvalidField("sequence", f"{msg.sequence} does not fit a signed 64-bit "
                           "integer", protocol=PROTOCOL)
    if len(msg.uuid) not in (0, UUID_LENGTH):
        raise InvalidField("uuid", f"must be 16 bytes or empty, not {len(msg.uuid)}",
                           protocol=PROTOCOL)
    if msg.properties:
        parse_properties(msg.properties)
    return [key, pack_sequence(msg.sequence), msg.uuid, msg.properties, msg.body]


# --------------------------------------------------------------------------- decode
# Which command keys each channel may carry; None = any channel (no hint).
_COMMANDS_ALLOWED = {Channel.COLLECTOR: (), Channel.PUBLISHER: (Hugz,),
                     Channel.SNAPSHOT_REPLY: (Kthxbai,), None: (Hugz, Kthxbai)}


def decode(frames: Sequence[bytes], channel: Channel | None = None,
           limits: Limits = DEFAULT_LIMITS) -> Message:
    """The message in `frames`. `channel` says where they were read (see `Channel`);
    without it the kind is inferred from the frames themselves."""
    count = len(frames)
    if count == KVMSG_FRAMES and channel not in _NOT_KVMSG:
        return _decode_kvmsg(frames, channel, limits)
    if count == 0:
        raise Truncated("frames", "empty message", protocol=PROTOCOL)
    if channel in (None, Channel.SNAPSHOT_REQUEST) and frames[0] == ICANHAZ:
        return _decode_icanhaz(frames, limits)
    if channel in (None, Channel.BSTAR) and count == 1:
        return _decode_bstar(frames[0])
    if channel in (None, Channel.SNAPSHOT_REPLY) and frames[0] == KVBULK:
        return decode_bulk(frames, limits)
    if channel is Channel.SNAPSHOT_REQUEST:
        raise UnknownMessageType("command", f"{bytes(frames[0][:16])!r} is not ICANHAZ?",
                                 protocol=PROTOCOL)
    if channel is Channel.BSTAR:
        raise InvalidField("frames", f"got {count} frames, expected 1: the state digit",
                           protocol=PROTOCOL)
    error = Truncated if count < KVMSG_FRAMES else InvalidField
    raise error("frames", f"got {count} frames, expected 5: key, sequence, uuid, "
                "properties, body", protocol=PROTOCOL)


_NOT_KVMSG = (Channel.SNAPSHOT_REQUEST, Channel.BSTAR)


# --------------------------------------------------------------------------- KVBULK
if array("I").itemsize != 4 or array("q").itemsize != 8:   # pragma: no cover
    raise ImportError("connectors.chp.proto needs 4-byte array('I') and 8-byte array('q')")
_SWAP = sys.byteorder == "little"     # the wire is big-endian, as the kvmsg sequence
_U32 = np.dtype(">u4")
_MAX_INT32 = (1 << 31) - 1
_KEY, _SEQ, _UUID, _PROPERTIES, _BODY = (attrgetter(name) for name in (
    "key", "sequence", "uuid", "properties", "body"))
_I64 = np.dtype(">i8")


def bulk_column_bytes(entries: Sequence[EntryLike]) -> int:
    """The bytes of the largest variable column (keys, properties, bodies) a KVBULK of
    `entries` holds: what `Limits.max_bulk_bytes` bounds."""
    return max(sum(map(len, map(get, entries))) for get in (_KEY, _PROPERTIES, _BODY))


def encode_bulk(entries: Sequence[EntryLike]) -> list[bytes]:
    """The eight KVBULK frames of `entries` (anything with key, sequence, uuid,
    properties and body: `kvmap.Entry`, `Kvsync`). The caller keeps a KVBULK within
    `Limits` (`bulk.slices`); values no peer could decode raise `InvalidField`."""
    keys = list(map(_KEY, entries))         # attrgetter: the loops run in C
    uuids = list(map(_UUID, entries))
    props = list(map(_PROPERTIES, entries))
    bodies = list(map(_BODY, entries))
    try:
        sequences = array("q", map(_SEQ, entries))
    except OverflowError:
        raise InvalidField("sequence", "does not fit a signed 64-bit integer",
                           protocol=PROTOCOL) from None
    lengths = array("I", map(len, keys))
    uuid_lengths = array("I", map(len, uuids))
    if uuid_lengths.count(0) + uuid_lengths.count(UUID_LENGTH) != len(uuid_lengths):
        raise InvalidField("uuid", "must be 16 bytes or empty", protocol=PROTOCOL)
    lengths += uuid_lengths
    lengths.extend(map(len, props))
    lengths.extend(map(len, bodies))
    if _SWAP:
        sequences.byteswap()
        lengths.byteswap()
    return [KVBULK, _BULK_HEADER.pack(BULK_VERSION, len(keys)), sequences.tobytes(),
            lengths.tobytes(), b"".join(keys), b"".join(uuids), b"".join(props),
            b"".join(bodies)]


def _sized(frame: Any, expected: int, field: str) -> None:
    if len(frame) != expected:
        error = Truncated if len(frame) < expected else InvalidField
        raise error(field, f"{len(frame)} bytes, expected {expected}", protocol=PROTOCOL)


def decode_bulk(frames: Sequence[bytes], limits: Limits = DEFAULT_LIMITS) -> KvBulk:
    """A KVBULK, checked: the count against `limits` and the fixed-size frames, every
    length against its limit, the sums against the column frames, each UUID 16 bytes
    or empty, each non-empty properties value as in a KVSYNC. Nothing is allocated
    before the count and frame sizes are known to fit."""
    count = len(frames)
    if count != BULK_FRAMES:
        error = Truncated if count < BULK_FRAMES else InvalidField
        raise error("frames", f"got {count} frames, expected {BULK_FRAMES}: KVBULK, "
                    "header, sequences, lengths, keys, uuids, properties, bodies",
                    protocol=PROTOCOL)
    marker, header, seqs, lengths_frame, keys, uuids, props, values = frames
    if marker != KVBULK:
        raise UnknownMessageType("command", f"{bytes(marker[:16])!r} is not KVBULK",
                                 protocol=PROTOCOL)
    _sized(header, _BULK_HEADER.size, "header")
    version, n = _BULK_HEADER.unpack(header)
    if version != BULK_VERSION or header[1:4] != b"\0\0\0":
        raise InvalidField("header", f"version {version} (reserved bytes "
                           f"{bytes(header[1:4]).hex()}); we speak version {BULK_VERSION}",
                           protocol=PROTOCOL)
    if n > limits.max_bulk_entries:
        raise LimitExceeded("count", f"{n} entries > limit {limits.max_bulk_entries}",
                            protocol=PROTOCOL)
    _sized(seqs, 8 * n, "sequences")
    _sized(lengths_frame, 16 * n, "lengths")
    largest_frame = min(limits.max_bulk_bytes, _MAX_INT32)   # Arrow's int32 offsets
    for name, frame in (("keys", keys), ("uuids", uuids), ("properties", props),
                        ("bodies", values)):
        if len(frame) > largest_frame:
            raise LimitExceeded(name, f"{len(frame)} bytes > limit {largest_frame}",
                                protocol=PROTOCOL)
    lengths = np.frombuffer(lengths_frame, _U32).reshape(4, n)   # a view: no copy
    offsets = []
    for row, (name, frame_name, frame, largest) in enumerate((
            ("key", "keys", keys, limits.max_key_bytes),
            ("uuid", "uuids", uuids, UUID_LENGTH),
            ("properties", "properties", props, limits.max_properties_bytes),
            ("body", "bodies", values, limits.max_body_bytes))):
        column = lengths[row]
        if n and int(column.max()) > largest:
            raise LimitExceeded(name, f"an entry of {int(column.max())} bytes > limit "
                                f"{largest}", protocol=PROTOCOL)
        total = int(column.sum(dtype=np.int64))
        if total != len(frame):
            error = Truncated if len(frame) < total else InvalidField
            raise error(frame_name, f"the lengths add up to {total} bytes, the frame holds "
                        f"{len(frame)}", protocol=PROTOCOL)
        ends = np.zeros(n + 1, np.int32)
        np.cumsum(column, out=ends[1:], dtype=np.int32)   # total < 2 GiB: checked above
        offsets.append(ends)
    key_offsets, uuid_offsets, property_offsets, value_offsets = offsets
    if n and not np.all((lengths[1] == 0) | (lengths[1] == UUID_LENGTH)):
        raise InvalidField("uuid", "must be 16 bytes or empty", protocol=PROTOCOL)
    props = bytes(props)
    if props:
        po = property_offsets.tolist()
        for i in np.flatnonzero(lengths[2]).tolist():
            parse_properties(props[po[i]:po[i + 1]], limits)
    return KvBulk(np.frombuffer(seqs, _I64).astype(np.int64), key_offsets, bytes(keys),
                  uuid_offsets, bytes(uuids), property_offsets, props, value_offsets,
                  bytes(values))


def _decode_kvmsg(frames: Sequence[bytes], channel: Channel | None,
                  limits: Limits) -> Message:
    key, seq, uuid, properties, body = frames
    if not (type(key) is bytes and type(uuid) is bytes and type(properties) is bytes
            and type(body) is bytes):   # bytearray, memoryview, zmq.Frame...
        key, seq, uuid, properties, body = (bytes(f) for f in frames)
    if len(key) > limits.max_key_bytes:
        raise LimitExceeded("key", f"{len(key)} bytes > limit {limits.max_key_bytes}",
                            protocol=PROTOCOL)
    if len(seq) != 8:
        error = Truncated if len(seq) < 8 else InvalidField
        raise error("sequence", f"must be 8 bytes, got {len(seq)}", protocol=PROTOCOL)
    if len(uuid) != UUID_LENGTH and uuid:
        raise InvalidField("uuid", f"must be 16 bytes or empty, got {len(uuid)}",
                           protocol=PROTOCOL)
    if len(body) > limits.max_body_bytes:
        raise LimitExceeded("body", f"{len(body)} bytes > limit {limits.max_body_bytes}",
                            protocol=PROTOCOL)
    if properties:
        parse_properties(properties, limits)
    (sequence,) = _unpack_sequence(seq)
    if key in RESERVED_KEYS:
        for cls in _COMMANDS_ALLOWED[channel]:
            if key == cls.KEY:
                return cls(sequence, uuid, properties, body)
        if channel is not Channel.COLLECTOR:
            raise UnknownMessageType("key", f"{key!r} is not sent on the "
                                     f"{channel.value if channel else 'this'} channel",
                                     protocol=PROTOCOL)
    # Identity tests, not a dict keyed by Channel: Enum.__hash__ is Python code.
    if channel is Channel.PUBLISHER:
        cls = Kvpub
    elif channel is Channel.COLLECTOR:
        cls = Kvset
    elif channel is Channel.SNAPSHOT_REPLY:
        cls = Kvsync
    else:
        cls = Kvset if sequence == 0 else Kvpub
    return cls(key, sequence, uuid, properties, body)


def _decode_icanhaz(frames: Sequence[bytes], limits: Limits) -> Icanhaz:
    if len(frames) == 1:
        return Icanhaz(b"", subtree_frame=False)
    if len(frames) > 3:
        raise InvalidField("frames", f"ICANHAZ? has 2 frames (3 with resume properties), "
                           f"got {len(frames)}", protocol=PROTOCOL)
    subtree = frames[1]
    if len(subtree) > limits.max_key_bytes:
        raise LimitExceeded("subtree", f"{len(subtree)} bytes > limit "
                            f"{limits.max_key_bytes}", protocol=PROTOCOL)
    if len(frames) == 3:
        properties = bytes(frames[2])
        if not properties:
            raise InvalidField("properties", "ICANHAZ?'s third frame is empty: send two "
                               "frames, or name=value lines", protocol=PROTOCOL)
        parse_properties(properties, limits)
        return Icanhaz(bytes(subtree), properties=properties)
    return Icanhaz(bytes(subtree))


def _decode_bstar(frame: bytes) -> BstarStatus:
    if len(frame) != 1 or frame[0] - 0x30 not in _STATE_VALUES:
        raise InvalidField("state", f"{bytes(frame[:8])!r} is not a Binary Star state "
                           "1..4", protocol=PROTOCOL)
    return BstarStatus(BstarState(frame[0] - 0x30))


_STATE_VALUES = frozenset(int(s) for s in BstarState)


# --------------------------------------------------------------------------- JSON
_NAMES: dict[str, type] = {cls.NAME: cls for cls in MESSAGE_TYPES}


def to_json(msg: Message) -> dict[str, Any]:
    """``{"message": NAME, field: value...}``: bytes as lowercase hex, the Binary Star
    state by name."""
    if isinstance(msg, KvBulk):   # numpy columns: as the KVSYNCs it holds
        return {"message": msg.NAME, "entries": [to_json(e) for e in msg.entries()]}
    out: dict[str, Any] = {"message": msg.NAME}
    for f in fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, bytes):
            value = value.hex()
        elif isinstance(value, BstarState):
            value = value.name
        out[f.name] = value
    return out


def from_json(obj: dict[str, Any]) -> Message:
    """Inverse of `to_json`; raises `ProtocolError` naming the bad key."""
    if not isinstance(obj, dict):
        raise InvalidField("message", "a JSON object is expected", protocol=PROTOCOL)
    if obj.get("message") == KvBulk.NAME:
        return _bulk_from_json(obj)
    cls = _NAMES.get(obj.get("message"))  # type: ignore[arg-type]
    if cls is None:
        raise UnknownMessageType("message", f"unknown message {obj.get('message')!r}; "
                                 f"one of {', '.join(_NAMES)}", protocol=PROTOCOL)
    known = {f.name: f for f in fields(cls)}
    extra = set(obj) - set(known) - {"message"}
    if extra:
        raise InvalidField(sorted(extra)[0], f"not a field of {cls.NAME}", protocol=PROTOCOL)
    kwargs = {name: _json_value(name, obj[name]) for name in known if name in obj}
    if cls is BstarStatus and "state" not in kwargs:
        raise InvalidField("state", "missing", protocol=PROTOCOL)
    if issubclass(cls, _KvMsg) and "key" not in kwargs:
        raise InvalidField("key", "missing", protocol=PROTOCOL)
    msg = cls(**kwargs)
    encode(msg)  # the same checks as on the wire
    return msg


def _bulk_from_json(obj: dict[str, Any]) -> KvBulk:
    if set(obj) != {"message", "entries"} or not isinstance(obj["entries"], list):
        raise InvalidField("entries", "a KVBULK is {\"message\": \"KVBULK\", "
                           "\"entries\": [KVSYNC...]}", protocol=PROTOCOL)
    entries = [from_json(e) for e in obj["entries"]]
    if not all(type(e) is Kvsync for e in entries):
        raise InvalidField("entries", "every entry must be a KVSYNC", protocol=PROTOCOL)
    return decode_bulk(encode_bulk(entries))


def _json_value(name: str, value: Any) -> Any:
    if name == "state":
        try:
            return BstarState[value] if isinstance(value, str) else BstarState(value)
        except (KeyError, ValueError):
            raise InvalidField(name, f"{value!r} is not PRIMARY, BACKUP, ACTIVE or "
                               "PASSIVE", protocol=PROTOCOL) from None
    if name == "sequence":
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidField(name, "must be an integer", protocol=PROTOCOL)
        return value
    if name == "subtree_frame":
        if not isinstance(value, bool):
            raise InvalidField(name, "must be true or false", protocol=PROTOCOL)
        return value
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise InvalidField(name, "must be a hex string", protocol=PROTOCOL) from None


__all__ = [
    "BULK_FRAMES", "BULK_ROUTING_PREFIX", "BULK_VERSION", "BstarState", "BstarStatus",
    "Channel", "DEFAULT_LIMITS", "HUGZ", "ICANHAZ", "Icanhaz", "KTHXBAI", "KVBULK",
    "KVMSG_FRAMES", "KvBulk", "KvMsg", "Kthxbai", "Kvpub", "Kvset", "Kvsync", "Hugz",
    "Limits", "MAX_EPOCH_MS", "MAX_SEQUENCE", "MAX_TTL_SECONDS", "MESSAGE_TYPES",
    "MIN_EPOCH_MS", "MIN_EXPIRY_MS", "Message", "PROTOCOL", "ProtocolError",
    "RESERVED_KEYS", "TTL", "UUID_LENGTH", "EntryLike", "bulk_column_bytes", "decode",
    "decode_bulk", "encode", "encode_bulk",
    "format_absolute_ttl",
    "format_properties", "from_json", "pack_sequence", "parse_absolute_ttl",
    "parse_properties", "parse_relative_ttl", "replace_property", "to_json",
]
