"""The marker-byte Raft protocol (TaskFlux's inter-node protocol), sans-I/O.

Byte-exact with the TaskFlux code (tests/vectors/marker/LAYOUT.md), not with its document:
every packet is ``marker byte | payload | CRC``, big-endian, the CRC being CRC-32/MPEG-2
(crcmod's ``crc-32-mpeg``) over every byte after the marker. Nothing else frames a packet:
nine of the eleven packet types have a fixed size, and ``A`` / ``B`` carry a length prefix
(``A``'s "full size" counts the payload bytes after itself, CRC excluded). Byte buffers are
``i32 length | data | length % 8 zero bytes`` (``% 4`` in snapshot chunks): the
modulo is TaskFlux's padding quirk, not an alignment, and we copy it.

`encode(packet) -> bytes` and `decode(data) -> packet` handle exactly one packet;
`MarkerDecoder.feed(data)` takes a TCP stream in any chunking and returns, in stream
order, decoded packets and `CorruptPacket` events:

* A packet whose CRC fails does not end the stream when its length is known: the
  fixed-size packets, and ``A`` / ``B`` whose length prefix is intact and within the
  limits. `feed` yields a `CorruptPacket` (carrying the `ChecksumMismatch`) in its place
  and goes on with the next packet; the receiver answers it with a `RetransmitRequest`
  and the sender repeats the packet, as TaskFlux's NodeConnectionProcessor does. A flip in
  a length prefix that keeps it within limits cannot be told apart from a real length:
  the packet then swallows (or leaves) bytes of the next ones, its CRC fails, and the
  stream is lost at the next unknown marker -- the protocol has no way to resynchronise.
* `feed` raises a `ProtocolError` only when the stream cannot continue: an unknown marker
  (`UnknownMessageType`), a length prefix that is negative (`InvalidField`) or above the
  limits (`LimitExceeded`, raised before anything is buffered), or a field the protocol
  forbids inside a packet whose CRC is good (`InvalidField`: Term < 1, Lsn < -1,
  NodeId < 0, a negative entry count, an entry running past the declared size).
  Packets decoded before the error in the same call are returned first; the error is
  then raised by the next `feed` or `eof` call, and by every call after it.
* `eof()` says the peer closed the connection: it raises `Truncated` (naming the field
  that was cut) when a partial packet is left.

Where TaskFlux's reader is lenient we are too, so a real peer is never refused: any
non-zero Bool byte reads as true, padding bytes and bytes after the last entry (within
``A``'s size) are not inspected, and ConnectRequest's CRC is never checked by TaskFlux --
we accept that packet as well but set ``ConnectRequest.checksum_ok = False``. We are
stricter in three places, all of which TaskFlux never writes: a negative entry count (its
reader takes it as zero entries), a negative data length (its reader throws an
OverflowException), an entry running past A's size (its reader reads on into the CRC).
The encoder always writes the canonical form (Bool 1/0, zero padding, the right CRC);
`garlicfarm decode` notes when an accepted input was not in that form.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Union

import crcmod.predefined

from consensus.wire.errors import (ChecksumMismatch, InvalidField, LimitExceeded,
                                   ProtocolError, Truncated, UnknownMessageType)

PROTOCOL = "marker"

#: CRC-32/MPEG-2: poly 0x04C11DB7, init 0xFFFFFFFF, no reflection, no final xor.
#: ``crc32_mpeg2(data, crc)`` continues a running CRC. (zlib.crc32 is a different CRC.)
crc32_mpeg2 = crcmod.predefined.mkCrcFun("crc-32-mpeg")


class Marker(enum.IntEnum):
    """The first byte of every packet: an ASCII letter naming the packet type."""
    APPEND_ENTRIES_REQUEST = 0x41           # 'A'
    APPEND_ENTRIES_RESPONSE = 0x61          # 'a'
    CONNECT_REQUEST = 0x43                  # 'C'
    CONNECT_RESPONSE = 0x63                 # 'c'
    REQUEST_VOTE_REQUEST = 0x56             # 'V'
    REQUEST_VOTE_RESPONSE = 0x76            # 'v'
    INSTALL_SNAPSHOT_REQUEST = 0x53         # 'S'
    INSTALL_SNAPSHOT_RESPONSE = 0x73        # 's'
    INSTALL_SNAPSHOT_CHUNK_REQUEST = 0x42   # 'B'
    INSTALL_SNAPSHOT_CHUNK_RESPONSE = 0x62  # 'b'
    RETRANSMIT_REQUEST = 0x52               # 'R' (sent by the receiver of a corrupt packet)

    @property
    def wire_name(self) -> str:
        """The packet's name in the protocol, JSON and messages: ``AppendEntriesResponse``."""
        return "".join(part.title() for part in self.name.split("_"))


# ---------------------------------------------------------------------------------------
# Field kinds: one place that knows each wire type, its range and how to explain a bad one.

@dataclass(frozen=True, slots=True)
class _Int:
    """A signed integer field: struct format and the range the protocol allows."""
    fmt: str
    low: int
    high: int
    rule: str


I64_MAX = 2**63 - 1
I32_MAX = 2**31 - 1
TERM = _Int("q", 1, I64_MAX, "a term must be >= 1")
LSN = _Int("q", -1, I64_MAX, "a log index (Lsn) must be >= -1 (-1 = empty log)")
NODE_ID = _Int("i", 0, I32_MAX, "a node id must be >= 0")
BOOL = "?"      # one byte; any non-zero byte reads as true (as TaskFlux's reader does)
BYTES = "bytes"
ENTRIES = "entries"


def _wire(kind: Any) -> Any:
    """A dataclass field carrying its wire kind (fields are declared in wire order)."""
    return field(metadata={"wire": kind})


def _check_int(kind: _Int, value: Any, name: str, offset: int | None = None) -> None:
    if type(value) is not int:
        raise InvalidField(name, f"must be an integer, not {type(value).__name__}",
                           protocol=PROTOCOL, offset=offset)
    if not kind.low <= value <= kind.high:
        raise InvalidField(name, f"{value} is out of range: {kind.rule}",
                           protocol=PROTOCOL, offset=offset)


def _check(kind: Any, value: Any, name: str) -> None:
    """Validate one field of a message about to be encoded."""
    if isinstance(kind, _Int):
        _check_int(kind, value, name)
    elif kind is BOOL and type(value) is not bool:
        raise InvalidField(name, f"must be true or false, not {value!r}", protocol=PROTOCOL)
    elif kind is BYTES and not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidField(name, f"must be bytes, not {type(value).__name__}",
                           protocol=PROTOCOL)
    elif kind is BYTES and len(value) > I32_MAX:
        raise InvalidField(name, f"{len(value)} bytes do not fit an i32 length",
                           protocol=PROTOCOL)


# ---------------------------------------------------------------------------------------
# Messages (fields in wire order; JSON keys are the camelCase field names). Each is this
# wire's own record: its fields are not the Raft core's (no destination, Lsn indexes, a
# response without the index it answers). Their names are the protocol's (`Marker.
# wire_name`), but for the three responses whose protocol names are the core's messages
# (consensus.raft.messages): those carry TaskFlux's class suffix, ``...ResponsePacket``.

@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of an AppendEntriesRequest: its term and opaque application bytes."""
    term: int = _wire(TERM)
    data: bytes = _wire(BYTES)


@dataclass(frozen=True, slots=True)
class AppendEntriesRequest:
    """``A``: replicate entries (none = heartbeat). An empty log is (term 1, index -1)."""
    MARKER: ClassVar[Marker] = Marker.APPEND_ENTRIES_REQUEST
    leader_commit: int = _wire(LSN)
    term: int = _wire(TERM)
    prev_log_term: int = _wire(TERM)
    prev_log_index: int = _wire(LSN)
    leader_id: int = _wire(NODE_ID)
    entries: tuple[LogEntry, ...] = _wire(ENTRIES)

    def __post_init__(self) -> None:
        if not isinstance(self.entries, tuple):
            object.__setattr__(self, "entries", tuple(self.entries))


@dataclass(frozen=True, slots=True)
class AppendEntriesResponsePacket:
    """``a``: success first, then term (the document has them the other way round)."""
    MARKER: ClassVar[Marker] = Marker.APPEND_ENTRIES_RESPONSE
    success: bool = _wire(BOOL)
    term: int = _wire(TERM)


@dataclass(frozen=True, slots=True)
class ConnectRequest:
    """``C``: the first packet on a connection, naming the opener.

    TaskFlux never checks this packet's CRC; neither do we refuse it, but a decoded
    request whose CRC did not match has ``checksum_ok`` False (not part of equality)."""
    MARKER: ClassVar[Marker] = Marker.CONNECT_REQUEST
    node_id: int = _wire(NODE_ID)
    checksum_ok: bool = field(default=True, compare=False)


@dataclass(frozen=True, slots=True)
class ConnectResponse:
    """``c``: whether the receiver accepted the connection."""
    MARKER: ClassVar[Marker] = Marker.CONNECT_RESPONSE
    success: bool = _wire(BOOL)


@dataclass(frozen=True, slots=True)
class RequestVoteRequest:
    """``V``: candidate id first (the document puts it last)."""
    MARKER: ClassVar[Marker] = Marker.REQUEST_VOTE_REQUEST
    candidate_id: int = _wire(NODE_ID)
    candidate_term: int = _wire(TERM)
    last_log_term: int = _wire(TERM)
    last_log_index: int = _wire(LSN)


@dataclass(frozen=True, slots=True)
class RequestVoteResponsePacket:
    """``v``."""
    MARKER: ClassVar[Marker] = Marker.REQUEST_VOTE_RESPONSE
    current_term: int = _wire(TERM)
    vote_granted: bool = _wire(BOOL)


@dataclass(frozen=True, slots=True)
class InstallSnapshotRequest:
    """``S``: the snapshot header; lastIndex is an i64 (the document says i32)."""
    MARKER: ClassVar[Marker] = Marker.INSTALL_SNAPSHOT_REQUEST
    term: int = _wire(TERM)
    leader_id: int = _wire(NODE_ID)
    last_index: int = _wire(LSN)
    last_term: int = _wire(TERM)


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponsePacket:
    """``s``: sent once, at the end of a snapshot transfer or to refuse it."""
    MARKER: ClassVar[Marker] = Marker.INSTALL_SNAPSHOT_RESPONSE
    current_term: int = _wire(TERM)


@dataclass(frozen=True, slots=True)
class InstallSnapshotChunkRequest:
    """``B``: one chunk of snapshot bytes; an empty chunk ends the snapshot."""
    MARKER: ClassVar[Marker] = Marker.INSTALL_SNAPSHOT_CHUNK_REQUEST
    chunk: bytes = _wire(BYTES)

    @property
    def is_last(self) -> bool:
        return not self.chunk


@dataclass(frozen=True, slots=True)
class InstallSnapshotChunkResponse:
    """``b``: acknowledges a chunk (or the ``S`` header) and asks for the next one."""
    MARKER: ClassVar[Marker] = Marker.INSTALL_SNAPSHOT_CHUNK_RESPONSE


@dataclass(frozen=True, slots=True)
class RetransmitRequest:
    """``R``: the CRC of the packet just received failed; the sender repeats it."""
    MARKER: ClassVar[Marker] = Marker.RETRANSMIT_REQUEST


Packet = Union[AppendEntriesRequest, AppendEntriesResponsePacket, ConnectRequest,
               ConnectResponse, RequestVoteRequest, RequestVoteResponsePacket,
               InstallSnapshotRequest, InstallSnapshotResponsePacket, InstallSnapshotChunkRequest,
               InstallSnapshotChunkResponse, RetransmitRequest]
PACKET_TYPES: tuple[type, ...] = Packet.__args__  # type: ignore[attr-defined]
TYPE_OF_MARKER: dict[int, type] = {cls.MARKER: cls for cls in PACKET_TYPES}


@dataclass(frozen=True, slots=True)
class CorruptPacket:
    """A packet whose CRC failed but whose length was known: the stream goes on.

    Answer it with `RetransmitRequest`. `offset` is the stream offset of its marker."""
    marker: Marker
    offset: int
    length: int
    error: ChecksumMismatch


Event = Union[Packet, CorruptPacket]


@dataclass(frozen=True, slots=True)
class MarkerLimits:
    """Bounds on declared sizes, checked before anything is buffered or allocated.

    TaskFlux has none (any i32); these defaults leave room for large batches."""
    max_append_size: int = 64 * 1024 * 1024   # A's size field: payload bytes after it
    max_entries: int = 1_000_000              # A's entryCount
    max_entry_size: int = 16 * 1024 * 1024    # one entry's dataLength
    max_chunk_size: int = 16 * 1024 * 1024    # B's chunkLength


# ---------------------------------------------------------------------------------------
# Layouts

def _wire_fields(cls: type) -> list[tuple[str, Any]]:
    return [(f.name, f.metadata["wire"]) for f in fields(cls) if "wire" in f.metadata]


def camel(name: str) -> str:
    """``prev_log_term`` -> ``prevLogTerm``: the JSON and error-message name of a field."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True, slots=True)
class _FixedLayout:
    """A packet of fixed size: its fields map one to one onto a struct after the marker."""
    cls: type
    attrs: tuple[str, ...]       # dataclass field names
    names: tuple[str, ...]       # camelCase names, for JSON and errors
    kinds: tuple[Any, ...]
    offsets: tuple[int, ...]     # of each field in the packet (the marker is at 0)
    payload: struct.Struct

    @property
    def size(self) -> int:
        return 1 + self.payload.size + 4

    @classmethod
    def of(cls, packet_type: type) -> "_FixedLayout":
        wire = _wire_fields(packet_type)
        fmt = ">" + "".join(kind if kind is BOOL else kind.fmt for _, kind in wire)
        offsets, at = [], 1
        for _, kind in wire:
            offsets.append(at)
            at += struct.calcsize(">" + (kind if kind is BOOL else kind.fmt))
        return cls(packet_type, tuple(n for n, _ in wire), tuple(camel(n) for n, _ in wire),
                   tuple(k for _, k in wire),
                   tuple(offsets), struct.Struct(fmt))


_FIXED: dict[int, _FixedLayout] = {
    cls.MARKER: _FixedLayout.of(cls) for cls in PACKET_TYPES
    if cls not in (AppendEntriesRequest, InstallSnapshotChunkRequest)}

# A: size, leaderCommit, term, prevLogTerm, prevLogIndex, leaderId, entryCount.
_APPEND_HEAD = struct.Struct(">iqqqqii")
_APPEND_HEAD_FIELDS = ("size", "leaderCommit", "term", "prevLogTerm", "prevLogIndex",
                       "leaderId", "entryCount")
_APPEND_HEAD_KINDS = (None, LSN, TERM, TERM, LSN, NODE_ID, None)
_APPEND_HEAD_OFFSETS = (1, 5, 13, 21, 29, 37, 41)
_APPEND_MIN_SIZE = _APPEND_HEAD.size - 4   # 40: the size field counts what follows it
_ENTRY_HEAD = struct.Struct(">qi")         # term, dataLength
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_ZEROS = tuple(bytes(n) for n in range(8))  # padding: length % 8 (or % 4) zero bytes


# ---------------------------------------------------------------------------------------
# Encoding

def encode(packet: Packet) -> bytes:
    """The wire bytes of one packet (canonical form). Raises InvalidField on a bad field."""
    layout = _FIXED.get(getattr(packet, "MARKER", -1))
    if layout is not None and type(packet) is layout.cls:
        values = [getattr(packet, attr) for attr in layout.attrs]
        for name, kind, value in zip(layout.names, layout.kinds, values):
            _check(kind, value, name)
        span = layout.payload.pack(*values)
    elif type(packet) is AppendEntriesRequest:
        span = _encode_append_span(packet)
    elif type(packet) is InstallSnapshotChunkRequest:
        _check(BYTES, packet.chunk, "chunk")
        n = len(packet.chunk)
        span = b"".join((_I32.pack(n), packet.chunk, _ZEROS[n % 4]))
    else:
        raise TypeError(f"not a marker packet: {packet!r}")
    return b"".join((bytes((packet.MARKER,)), span, _U32.pack(crc32_mpeg2(span))))


def _check_entry(i: int, entry: Any) -> None:
    """The slow path of `_encode_append_span`: say which part of entry `i` is wrong."""
    if type(entry) is not LogEntry:
        raise InvalidField(f"entries[{i}]", f"must be a LogEntry, not {entry!r}",
                           protocol=PROTOCOL)
    _check_int(TERM, entry.term, f"entries[{i}].term")
    _check(BYTES, entry.data, f"entries[{i}].data")


def _encode_append_span(packet: AppendEntriesRequest) -> bytes:
    """A's bytes after the marker and before the CRC (the CRC span)."""
    parts: list[bytes] = []
    pack = _ENTRY_HEAD.pack
    for i, entry in enumerate(packet.entries):
        if type(entry) is not LogEntry or type(entry.term) is not int or \
                not 0 < entry.term <= I64_MAX or type(entry.data) is not bytes:
            _check_entry(i, entry)   # raises, unless data is another bytes-like type
        n = len(entry.data)
        parts += (pack(entry.term, n), entry.data, _ZEROS[n % 8])
    body = b"".join(parts)
    values = (packet.leader_commit, packet.term, packet.prev_log_term,
              packet.prev_log_index, packet.leader_id)
    for name, kind, value in zip(_APPEND_HEAD_FIELDS[1:], _APPEND_HEAD_KINDS[1:], values):
        _check(kind, value, name)
    size = _APPEND_MIN_SIZE + len(body)
    if size > I32_MAX:
        raise InvalidField("entries", f"{size} bytes do not fit A's i32 size field",
                           protocol=PROTOCOL)
    return _APPEND_HEAD.pack(size, *values, len(packet.entries)) + body


# ---------------------------------------------------------------------------------------
# Decoding

def decode(data: bytes, limits: MarkerLimits = MarkerLimits()) -> Packet:
    """Exactly one packet from `data` (a corrupt CRC raises its ChecksumMismatch)."""
    length = _frame_length(data, 0, 0, limits)
    if length is None or len(data) < length:
        _raise_truncated(data, 0, 0, limits)
    if len(data) > length:
        raise InvalidField("packet", f"{len(data) - length} bytes follow the "
                           f"{Marker(data[0]).wire_name}; expected one packet",
                           protocol=PROTOCOL, offset=length)
    event = _decode_frame(data if type(data) is bytes else bytes(data), 0, limits)
    if isinstance(event, CorruptPacket):
        raise event.error
    return event


class MarkerDecoder:
    """Incremental decoder for one direction of a TCP connection (see the module doc)."""

    def __init__(self, limits: MarkerLimits = MarkerLimits()) -> None:
        self.limits = limits
        self._buffer = bytearray()
        self._base = 0                       # stream offset of self._buffer[0]
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole packet."""
        return len(self._buffer)

    #: bytes of memory the decoder holds now
    held = buffered

    @property
    def claimed(self) -> int:
        """`buffered` once the packet whose length is in has fully arrived: what reading
        on to the end of that packet will cost (its length passed the limits)."""
        if self._error is not None:
            return len(self._buffer)
        try:
            length = _packet_length(self._buffer, 0, self._base, self.limits)
        except ProtocolError:
            return len(self._buffer)
        return max(len(self._buffer), length or 0)

    def feed(self, data: bytes) -> list[Event]:
        """Add bytes from the stream; return the packets and corrupt-packet events they
        complete, in order. Raises ProtocolError when the stream cannot continue."""
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        buffer += data
        events: list[Event] = []
        pos = 0
        try:
            while True:
                length = _frame_length(buffer, pos, self._base, self.limits)
                if length is None:
                    break
                with memoryview(buffer) as view:
                    packet = bytes(view[pos:pos + length])
                events.append(_decode_frame(packet, self._base + pos, self.limits))
                pos += length
        except ProtocolError as error:
            self._error = error
            if not events:
                raise
        finally:
            del buffer[:pos]
            self._base += pos
        return events

    def eof(self) -> None:
        """The stream has ended: raise the pending error or Truncated for a partial packet."""
        if self._error is not None:
            raise self._error
        if self._buffer:
            _raise_truncated(self._buffer, 0, self._base, self.limits)


def _packet_length(buf: Any, pos: int, base: int, limits: MarkerLimits) -> int | None:
    """Total length of the packet starting at buf[pos], or None until its length prefix
    has arrived. Raises for an unknown marker or an impossible / oversized prefix."""
    if len(buf) - pos < 1:
        return None
    marker = buf[pos]
    fixed = _FIXED.get(marker)
    if fixed is not None:
        return fixed.size
    if marker not in (Marker.APPEND_ENTRIES_REQUEST, Marker.INSTALL_SNAPSHOT_CHUNK_REQUEST):
        shown = f" ({chr(marker)!r})" if 0x20 < marker < 0x7f else ""
        raise UnknownMessageType("marker", f"0x{marker:02x}{shown} is not a packet type; "
                                 f"expected one of {''.join(chr(m) for m in Marker)}",
                                 protocol=PROTOCOL, offset=base + pos)
    if len(buf) - pos < 5:
        return None
    (declared,) = _I32.unpack_from(buf, pos + 1)
    if marker == Marker.APPEND_ENTRIES_REQUEST:
        name, limit, limit_name = "size", limits.max_append_size, "max_append_size"
    else:
        name, limit, limit_name = "chunkLength", limits.max_chunk_size, "max_chunk_size"
    if declared < 0:
        raise InvalidField(name, f"{declared} is negative", protocol=PROTOCOL,
                           offset=base + pos + 1)
    if declared > limit:
        raise LimitExceeded(name, f"{declared} bytes declared, above the limit of {limit} "
                            f"(MarkerLimits.{limit_name})", protocol=PROTOCOL,
                            offset=base + pos + 1)
    if marker == Marker.APPEND_ENTRIES_REQUEST:
        return 9 + declared
    return 9 + declared + declared % 4


def _frame_length(buf: Any, pos: int, base: int, limits: MarkerLimits) -> int | None:
    """Length of the packet starting at buf[pos] once all of it is there, else None."""
    length = _packet_length(buf, pos, base, limits)
    return length if length is not None and len(buf) - pos >= length else None


def _raise_truncated(buf: Any, pos: int, base: int, limits: MarkerLimits) -> None:
    """The input ends inside the packet at buf[pos]: name the field that was cut."""
    have = len(buf) - pos
    if have == 0:
        raise Truncated("marker", "no packet: the input is empty", protocol=PROTOCOL,
                        offset=base + pos)
    length = _packet_length(buf, pos, base, limits)
    marker = buf[pos]
    if length is not None and have >= length - 4:
        cut = "crc"
    elif marker in _FIXED:
        layout = _FIXED[marker]
        cut = [n for n, at in zip(layout.names, layout.offsets) if at <= have][-1]
    elif marker == Marker.INSTALL_SNAPSHOT_CHUNK_REQUEST:
        cut = "chunkLength" if have < 5 else "chunk"
    elif have < _APPEND_HEAD.size + 1:
        cut = [n for n, at in zip(_APPEND_HEAD_FIELDS, _APPEND_HEAD_OFFSETS) if at <= have][-1]
    else:
        cut = "entries"
    of = f"{have} of {length}" if length is not None else f"{have}"
    raise Truncated(cut, f"the input ends inside the {Marker(marker).wire_name} "
                    f"({of} bytes)", protocol=PROTOCOL, offset=base + pos + have)


def _decode_frame(packet: bytes, origin: int, limits: MarkerLimits) -> Event:
    """Decode one whole packet (`origin` = its stream offset): CRC first, then fields."""
    marker = packet[0]
    crc_at = len(packet) - 4
    (stored,) = _U32.unpack_from(packet, crc_at)
    with memoryview(packet) as view:
        computed = crc32_mpeg2(view[1:crc_at])
    checksum_ok = stored == computed
    if not checksum_ok:
        error = ChecksumMismatch("crc", f"checksum mismatch (expected {computed:08x}, "
                                 f"got {stored:08x})", protocol=PROTOCOL, offset=origin + crc_at)
        if marker != Marker.CONNECT_REQUEST:   # TaskFlux never checks C's CRC
            return CorruptPacket(Marker(marker), origin, len(packet), error)
    layout = _FIXED.get(marker)
    if layout is not None:
        values = layout.payload.unpack_from(packet, 1)
        for name, kind, value, at in zip(layout.names, layout.kinds, values, layout.offsets):
            if kind is not BOOL:
                _check_int(kind, value, name, origin + at)
        if marker == Marker.CONNECT_REQUEST:
            return ConnectRequest(*values, checksum_ok=checksum_ok)
        return layout.cls(*values)
    if marker == Marker.INSTALL_SNAPSHOT_CHUNK_REQUEST:
        (n,) = _I32.unpack_from(packet, 1)
        return InstallSnapshotChunkRequest(packet[5:5 + n])
    return _decode_append(packet, origin, limits)


def _decode_append(packet: bytes, origin: int, limits: MarkerLimits) -> AppendEntriesRequest:
    """Fields of an A packet whose CRC is good."""
    def bad(error: type, name: str, reason: str, at: int) -> ProtocolError:
        return error(name, reason, protocol=PROTOCOL, offset=origin + at)

    end = len(packet) - 4   # the CRC
    if end - 5 < _APPEND_MIN_SIZE:
        raise bad(InvalidField, "size", f"{end - 5} is below the {_APPEND_MIN_SIZE} "
                  "bytes of A's fixed fields", 1)
    head = _APPEND_HEAD.unpack_from(packet, 1)
    for name, kind, value, at in zip(_APPEND_HEAD_FIELDS, _APPEND_HEAD_KINDS, head,
                                     _APPEND_HEAD_OFFSETS):
        if kind is not None:
            _check_int(kind, value, name, origin + at)
    count = head[6]
    if count < 0:
        raise bad(InvalidField, "entryCount", f"{count} is negative", 41)
    if count > limits.max_entries:
        raise bad(LimitExceeded, "entryCount", f"{count} entries, above the limit of "
                  f"{limits.max_entries} (MarkerLimits.max_entries)", 41)
    at = 45
    if count * _ENTRY_HEAD.size > end - at:
        raise bad(InvalidField, "entryCount", f"{count} entries cannot fit in the "
                  f"{end - at} bytes the size field leaves for them", 41)
    entries = []
    unpack, max_entry = _ENTRY_HEAD.unpack_from, limits.max_entry_size
    for i in range(count):
        if at + 12 > end:
            raise bad(InvalidField, f"entries[{i}]", "runs past the declared size", at)
        term, n = unpack(packet, at)
        if term < 1:
            _check_int(TERM, term, f"entries[{i}].term", origin + at)
        if n < 0 or n > max_entry:
            error = InvalidField if n < 0 else LimitExceeded
            raise bad(error, f"entries[{i}].dataLength", f"{n} bytes" + (
                " is negative" if n < 0 else
                f", above the limit of {max_entry} (MarkerLimits.max_entry_size)"), at + 8)
        start = at + 12
        at = start + n + n % 8
        if at > end:
            raise bad(InvalidField, f"entries[{i}].dataLength",
                      f"{n} bytes run past the declared size", start - 4)
        entries.append(LogEntry(term, packet[start:start + n]))
    return AppendEntriesRequest(head[1], head[2], head[3], head[4], head[5], tuple(entries))


# ---------------------------------------------------------------------------------------
# JSON (for the inspector): {"message": NAME, camelCase fields...}, bytes as hex.

def to_json(packet: Packet) -> dict[str, Any]:
    """A JSON-ready dict of `packet`; `from_json` is its inverse."""
    out: dict[str, Any] = {"message": packet.MARKER.wire_name}
    for name, kind in _wire_fields(type(packet)):
        value = getattr(packet, name)
        if kind is BYTES:
            value = value.hex()
        elif kind is ENTRIES:
            value = [{"term": e.term, "data": e.data.hex()} for e in value]
        out[camel(name)] = value
    if isinstance(packet, ConnectRequest) and not packet.checksum_ok:
        out["checksumOk"] = False
    return out


def from_json(obj: dict[str, Any]) -> Packet:
    """The packet described by `obj` (as `to_json` writes it); InvalidField names the key."""
    if not isinstance(obj, dict):
        raise InvalidField("message", "expected a JSON object", protocol=PROTOCOL)
    name = obj.get("message")
    cls = next((c for c in PACKET_TYPES if c.MARKER.wire_name == name), None)
    if cls is None:
        raise InvalidField("message", f"unknown message {name!r}; expected one of "
                           + ", ".join(c.MARKER.wire_name for c in PACKET_TYPES), protocol=PROTOCOL)
    wire = {camel(n): (n, k) for n, k in _wire_fields(cls)}
    optional = {"checksumOk"} if cls is ConnectRequest else set()
    _check_keys(set(obj) - {"message"}, set(wire), optional, "")
    kwargs = {attr: _json_value(kind, obj[key], key) for key, (attr, kind) in wire.items()}
    if "checksumOk" in obj:  # informational: encode always writes the right CRC
        kwargs["checksum_ok"] = _json_value(BOOL, obj["checksumOk"], "checksumOk")
    return cls(**kwargs)


def _check_keys(keys: set[str], required: set[str], optional: set[str], where: str) -> None:
    for key in sorted(keys - required - optional):
        raise InvalidField(f"{where}{key}", "unknown key; expected "
                           + ", ".join(sorted(required | optional)), protocol=PROTOCOL)
    for key in sorted(required - keys):
        raise InvalidField(f"{where}{key}", "missing", protocol=PROTOCOL)


def _json_value(kind: Any, value: Any, key: str) -> Any:
    if kind is BYTES:
        if not isinstance(value, str):
            raise InvalidField(key, "must be a hex string", protocol=PROTOCOL)
        try:
            return bytes.fromhex(value)
        except ValueError:
            raise InvalidField(key, f"not valid hex: {value!r}", protocol=PROTOCOL) from None
    if kind is ENTRIES:
        if not isinstance(value, list):
            raise InvalidField(key, "must be a list of {term, data} objects",
                               protocol=PROTOCOL)
        entries = []
        for i, item in enumerate(value):
            where = f"{key}[{i}]."
            if not isinstance(item, dict):
                raise InvalidField(f"{key}[{i}]", "must be an object {term, data}",
                                   protocol=PROTOCOL)
            _check_keys(set(item), {"term", "data"}, set(), where)
            entries.append(LogEntry(_json_value(TERM, item["term"], where + "term"),
                                    _json_value(BYTES, item["data"], where + "data")))
        return tuple(entries)
    if kind is BOOL:
        if type(value) is not bool:
            raise InvalidField(key, f"must be true or false, not {value!r}", protocol=PROTOCOL)
        return value
    _check_int(kind, value, key)
    return value
