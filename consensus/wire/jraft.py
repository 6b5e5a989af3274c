"""The Garlic Farm / JRaft binary messages, sans-I/O (tests/vectors/garlicfarm/LAYOUT.md).

After the handshake (`handshake.py`) a Garlic Farm connection carries JRaft's messages with
no framing beyond their own sizes, big-endian, no CRC:

* a **request**: a 45-byte header ``type u8 | source i32 | destination i32 | term i64 |
  lastLogTerm i64 | lastLogIndex i64 | commitIndex i64 | logDataSize i32`` and then
  ``logDataSize`` bytes of log entries (a byte count, not an entry count;
  `jraft_values.LogEntry`);
* a **response**: 26 bytes ``type u8 | source i32 | destination i32 | term i64 |
  nextIndex i64 | accepted u8`` (only the byte 1 reads as true, as in JRaft).

The type byte alone says which shape follows, so one `JRaftDecoder` reads a mixed stream.
The shapes live in a `MessageRegistry` that maps type bytes to a name and a `MessageCodec`;
the 17 JRaft types are built in (`MessageType`) and garlicfarm's extensions are added from
their own module without touching this one::

    REGISTRY.register(0x20, "PreVoteRequest", REQUEST_CODEC)   # same shape as a request
    REGISTRY.register(0x30, "QueryRequest", MyQueryCodec())    # or a codec of its own

A type byte nobody registered raises `UnknownMessageType`. Sizes are checked against
`JRaftLimits` as soon as the header is in, before the body is buffered.

`to_json(msg)` / `from_json(obj)` give the inspector's JSON: ``{"message":
"AppendEntriesRequest", "source": 1, ..., "entries": [...]}``, with entries and their
payloads in readable form (`jraft_values.entry_to_json`).
"""
from __future__ import annotations

import enum
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence, Union

from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)
from consensus.wire.jraft_fields import (I32, I64, PROTOCOL, error, field_scope, json_bool,
                                         json_int, json_list, json_object, pack_ints)
from consensus.wire.jraft_logpack import LogPack, LogPackFormat
from consensus.wire.jraft_values import (DEFAULT_LIMITS, ENTRY_HEAD, ClusterConfiguration,
                                         ClusterServer, JRaftLimits, LogEntry, Payload, ServerId,
                                         SnapshotSyncRequest, ValueType, WireNamed,
                                         decode_entries, encode_entries, entry_from_json,
                                         entry_to_json)

__all__ = [
    "MessageType", "RaftRequest", "RaftResponse", "Message", "Framed", "MessageCodec", "RequestCodec",
    "ResponseCodec", "REQUEST_CODEC", "RESPONSE_CODEC", "Registration", "MessageRegistry",
    "REGISTRY", "JRaftDecoder", "encode", "decode", "to_json", "from_json", "check_shape",
    "client_request", "REQUEST_HEAD", "RESPONSE_LAYOUT", "ENTRY_HEAD", "LARGE_FRAME",
    # re-exported from jraft_values / jraft_logpack, so users import one module
    "JRaftLimits", "DEFAULT_LIMITS", "ValueType", "LogEntry", "Payload", "ClusterServer",
    "ServerId", "ClusterConfiguration", "SnapshotSyncRequest", "LogPack", "LogPackFormat",
]


class MessageType(WireNamed, enum.IntEnum):
    """JRaft's RaftMessageType: the first byte of every message; `wire_name` is the
    protocol's name (``AppendEntriesRequest``)."""
    REQUEST_VOTE_REQUEST = 1
    REQUEST_VOTE_RESPONSE = 2
    APPEND_ENTRIES_REQUEST = 3
    APPEND_ENTRIES_RESPONSE = 4     # also the answer to a ClientRequest (no ClientResponse)
    CLIENT_REQUEST = 5
    ADD_SERVER_REQUEST = 6
    ADD_SERVER_RESPONSE = 7
    REMOVE_SERVER_REQUEST = 8
    REMOVE_SERVER_RESPONSE = 9
    SYNC_LOG_REQUEST = 10
    SYNC_LOG_RESPONSE = 11
    JOIN_CLUSTER_REQUEST = 12
    JOIN_CLUSTER_RESPONSE = 13
    LEAVE_CLUSTER_REQUEST = 14
    LEAVE_CLUSTER_RESPONSE = 15
    INSTALL_SNAPSHOT_REQUEST = 16
    INSTALL_SNAPSHOT_RESPONSE = 17

    @property
    def is_request(self) -> bool:
        return self.name.endswith("_REQUEST")


@dataclass(frozen=True, slots=True)
class RaftRequest:
    """A request: the 45-byte header and its entries. Fields a sender leaves unset are 0
    (client-side requests 5, 6 and 8 set none of them)."""
    message_type: int
    source: int = 0
    destination: int = 0
    term: int = 0
    last_log_term: int = 0
    last_log_index: int = 0
    commit_index: int = 0
    entries: tuple[LogEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class RaftResponse:
    """A 26-byte response. The reply to a ClientRequest is an APPEND_ENTRIES_RESPONSE whose
    destination is the leader the replier believes in (a redirect hint)."""
    message_type: int
    source: int = 0
    destination: int = 0
    term: int = 0
    next_index: int = 0
    accepted: bool = False


#: JRaft's own messages: the closed set of this wire's two shapes.
Message = Union[RaftRequest, RaftResponse]


class Framed(Protocol):
    """What a registered codec's message offers: the type byte `encode` looks its codec
    up by (JRaft's messages, whose shapes several types share). A codec whose class is
    its type's alone (`MessageCodec.typed_by_class`) carries messages without it."""

    @property
    def message_type(self) -> int: ...


# ---------------------------------------------------------------------------------------
# Codecs: one per wire shape, shared by every type byte with that shape.

class MessageCodec(ABC):
    """How one shape of message is laid out. A stream decoder first collects `head_size`
    bytes (type byte included), asks `frame_size` for the whole length (which must check
    it against the limits), then hands the complete frame to `decode`. `encode` finds a
    message's codec by its ``message_type`` attribute, or by its class alone when the
    codec is `typed_by_class` (its class is carried by its type byte only)."""
    head_size: int
    message_class: type
    typed_by_class: bool = False

    @abstractmethod
    def frame_size(self, head: bytes, limits: JRaftLimits) -> int: ...

    def size_at(self, buffer: bytes | bytearray, pos: int, limits: JRaftLimits) -> int:
        """`frame_size` of the message starting at `buffer[pos]` (its head is there);
        codecs read it in place, the default copies the head."""
        return self.frame_size(bytes(buffer[pos:pos + self.head_size]), limits)

    @abstractmethod
    def decode(self, frame: bytes, message_type: int, limits: JRaftLimits) -> Framed: ...

    @abstractmethod
    def encode(self, message: Framed) -> bytes: ...

    @abstractmethod
    def fields_to_json(self, message: Framed) -> dict: ...

    @abstractmethod
    def fields_from_json(self, obj: dict, message_type: int) -> Framed: ...


#: The layouts, for callers that read or write hot messages in place (the runtime's fast
#: paths): a request's 45-byte header, a 26-byte response, an entry's 13-byte head.
REQUEST_HEAD = _REQUEST_HEAD = struct.Struct(">Biiqqqqi")
_LOG_DATA_SIZE = struct.Struct(">i")
_REQUEST_NAMES = ("messageType", "source", "destination", "term", "lastLogTerm",
                  "lastLogIndex", "commitIndex", "logDataSize")
RESPONSE_LAYOUT = _RESPONSE = struct.Struct(">BiiqqB")
_RESPONSE_NAMES = ("messageType", "source", "destination", "term", "nextIndex", "accepted")


def _header_from_json(obj: dict, names: tuple[str, ...]) -> list[int]:
    """The integer header fields (type byte and sizes excluded), absent ones being 0."""
    return [json_int(obj, name, "", I32 if name in ("source", "destination") else I64)
            for name in names]


class RequestCodec(MessageCodec):
    """The request shape: 45-byte header, then logDataSize bytes of entries."""
    head_size = _REQUEST_HEAD.size
    message_class = RaftRequest
    _JSON_INTS = _REQUEST_NAMES[1:7]

    def frame_size(self, head: bytes, limits: JRaftLimits) -> int:
        return self.size_at(head, 0, limits)

    def size_at(self, buffer: bytes | bytearray, pos: int, limits: JRaftLimits) -> int:
        (size,) = _LOG_DATA_SIZE.unpack_from(buffer, pos + 41)
        if size < 0:
            raise error(InvalidField, "logDataSize", f"negative size {size}", 41)
        if size > limits.max_log_data_size:
            raise error(LimitExceeded, "logDataSize",
                        f"{size} bytes is above the limit of {limits.max_log_data_size}", 41)
        return self.head_size + size

    def decode(self, frame: bytes, message_type: int, limits: JRaftLimits) -> RaftRequest:
        _, source, destination, term, last_term, last_index, commit, _size = \
            _REQUEST_HEAD.unpack_from(frame)
        entries = decode_entries(frame, self.head_size, len(frame), limits) \
            if len(frame) > self.head_size else ()
        return RaftRequest(message_type, source, destination, term, last_term, last_index,
                           commit, entries)

    def encode(self, message: RaftRequest) -> bytes:
        body = encode_entries(message.entries)
        head = pack_ints(_REQUEST_HEAD.format, _REQUEST_NAMES, message.message_type,
                         message.source, message.destination, message.term,
                         message.last_log_term, message.last_log_index, message.commit_index,
                         len(body))
        return head + body

    def fields_to_json(self, message: RaftRequest) -> dict:
        return {"source": message.source, "destination": message.destination,
                "term": message.term, "lastLogTerm": message.last_log_term,
                "lastLogIndex": message.last_log_index, "commitIndex": message.commit_index,
                "entries": [entry_to_json(e) for e in message.entries]}

    def fields_from_json(self, obj: dict, message_type: int) -> RaftRequest:
        json_object(obj, "", ("message",) + self._JSON_INTS + ("entries",))
        entries = tuple(entry_from_json(e, f"entries[{i}]")
                        for i, e in enumerate(json_list(obj, "entries", "")))
        return RaftRequest(message_type, *_header_from_json(obj, self._JSON_INTS),
                           entries=entries)


class ResponseCodec(MessageCodec):
    """The response shape: 26 bytes, nothing after."""
    head_size = _RESPONSE.size
    message_class = RaftResponse
    _JSON_INTS = _RESPONSE_NAMES[1:5]

    def frame_size(self, head: bytes, limits: JRaftLimits) -> int:
        return self.head_size

    def size_at(self, buffer: bytes | bytearray, pos: int, limits: JRaftLimits) -> int:
        return self.head_size

    def decode(self, frame: bytes, message_type: int, limits: JRaftLimits) -> RaftResponse:
        _, source, destination, term, next_index, accepted = _RESPONSE.unpack_from(frame)
        return RaftResponse(message_type, source, destination, term, next_index, accepted == 1)

    def encode(self, message: RaftResponse) -> bytes:
        return pack_ints(_RESPONSE.format, _RESPONSE_NAMES, message.message_type,
                         message.source, message.destination, message.term,
                         message.next_index, 1 if message.accepted else 0)

    def fields_to_json(self, message: RaftResponse) -> dict:
        return {"source": message.source, "destination": message.destination,
                "term": message.term, "nextIndex": message.next_index,
                "accepted": message.accepted}

    def fields_from_json(self, obj: dict, message_type: int) -> RaftResponse:
        json_object(obj, "", ("message",) + self._JSON_INTS + ("accepted",))
        return RaftResponse(message_type, *_header_from_json(obj, self._JSON_INTS),
                            accepted=json_bool(obj, "accepted", ""))


REQUEST_CODEC = RequestCodec()
RESPONSE_CODEC = ResponseCodec()


# ---------------------------------------------------------------------------------------
# The registry of type bytes.

@dataclass(frozen=True, slots=True)
class Registration:
    message_type: int       #: the value stored in decoded messages (an IntEnum member)
    name: str               #: the name in JSON and in errors
    codec: MessageCodec


class MessageRegistry:
    """Type byte -> (name, codec). Registering the same triple twice is a no-op (modules
    may be imported twice); a clash on the byte or the name is a ValueError."""

    def __init__(self) -> None:
        self._by_byte: dict[int, Registration] = {}
        self._by_name: dict[str, Registration] = {}
        self._by_class: dict[type, Registration] = {}   #: codecs `typed_by_class`

    def register(self, message_type: int, name: str, codec: MessageCodec) -> None:
        if not 0 <= message_type <= 255:
            raise ValueError(f"message type {message_type} does not fit the type byte (0..255)")
        new = Registration(message_type, name, codec)
        by_class = codec.message_class if codec.typed_by_class else None
        for existing in (self._by_byte.get(message_type), self._by_name.get(name),
                         self._by_class.get(by_class)):
            if existing is not None and existing != new:
                raise ValueError(f"cannot register {name} as type {message_type}: "
                                 f"{existing.name} is type {existing.message_type}")
        self._by_byte[message_type] = self._by_name[name] = new
        if by_class is not None:
            self._by_class[by_class] = new

    def lookup(self, type_byte: int) -> Registration:
        try:
            return self._by_byte[type_byte]
        except KeyError:
            raise error(UnknownMessageType, "messageType",
                        f"no message type {type_byte} is registered", 0) from None

    def of(self, message: Any) -> Registration:
        """The registration `message` is encoded by: its class's, or its type byte's."""
        found = self._by_class.get(message.__class__)
        if found is not None:
            return found
        message_type = getattr(message, "message_type", None)
        if message_type is None:
            raise error(InvalidField, "messageType", f"a {type(message).__name__} is not a "
                        f"message of this wire")
        return self.lookup(message_type)

    def named(self, name: Any) -> Registration:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise error(UnknownMessageType, "message", f"{name!r} is not a registered "
                        f"message type ({', '.join(self._by_name)})") from None

    def __iter__(self) -> Iterator[Registration]:
        return iter(sorted(self._by_byte.values(), key=lambda r: r.message_type))

    def copy(self) -> MessageRegistry:
        clone = MessageRegistry()
        for registration in self:
            clone.register(registration.message_type, registration.name, registration.codec)
        return clone


REGISTRY = MessageRegistry()
for _type in MessageType:
    REGISTRY.register(_type, _type.wire_name, REQUEST_CODEC if _type.is_request else RESPONSE_CODEC)


# ---------------------------------------------------------------------------------------
# Whole messages and streams.

def encode(message: Framed, registry: MessageRegistry = REGISTRY) -> bytes:
    """The wire bytes of one message. Raises `ProtocolError` naming a field that does not
    fit its wire type, or a message class that does not match its type's shape."""
    registration = registry.of(message)
    if not isinstance(message, registration.codec.message_class):
        raise error(InvalidField, "messageType", f"{registration.name} is sent as a "
                    f"{registration.codec.message_class.__name__}, "
                    f"not a {type(message).__name__}")
    return registration.codec.encode(message)


def client_request(values: Sequence[bytes]) -> bytes:
    """A ClientRequest (type 5, header all zero) holding one Application entry per value:
    `encode(RaftRequest(CLIENT_REQUEST, entries=...))` without building the objects (a
    client's hot path)."""
    pack = ENTRY_HEAD.pack
    body = b"".join([part for v in values for part in (pack(0, 1, len(v)), v)])
    return _REQUEST_HEAD.pack(MessageType.CLIENT_REQUEST, 0, 0, 0, 0, 0, 0, len(body)) + body


def decode(data: bytes, limits: JRaftLimits = DEFAULT_LIMITS,
           registry: MessageRegistry = REGISTRY) -> Framed:
    """Exactly one message: ``data`` must hold it whole and nothing after it."""
    decoder = JRaftDecoder(limits, registry)
    messages = decoder.feed(data)
    if len(messages) > 1 or (messages and decoder.buffered):
        codec = registry.lookup(data[0]).codec
        end = codec.frame_size(bytes(data[:codec.head_size]), limits)
        raise error(InvalidField, "message", f"{len(data) - end} bytes after its end", end)
    decoder.eof()
    if not messages:
        raise error(Truncated, "messageType", "no bytes", 0)
    return messages[0]


class JRaftDecoder:
    """Incremental decoder for one direction of a connection: `feed` takes the bytes in
    any chunking and returns the messages completed so far.

    A malformed message ends the stream (nothing frames messages, so there is no place
    to resynchronise): `feed` raises the `ProtocolError` at once when no message came
    before it in the same call, else returns those messages first and raises on the next
    call; every later call raises it again. `eof()` is called when the peer closes.

    `vet`, when set, is called with each message's head (``vet(registration, buffer,
    pos)``, the head at ``buffer[pos]``) before its size is checked against `limits`,
    which it may raise: JRaft has no authentication, so a receiver learns from a head who
    is talking and gives a sender it trusts the larger limits before the body comes.
    """

    def __init__(self, limits: JRaftLimits = DEFAULT_LIMITS,
                 registry: MessageRegistry = REGISTRY,
                 vet: Callable[[Registration, bytes | bytearray, int], None] | None = None
                 ) -> None:
        self.limits = limits
        self.registry = registry
        self.vet = vet
        self._buffer = bytearray()
        self._consumed = 0          # stream offset of _buffer[0]
        self._pending: tuple[Registration, int] | None = None
        self._error: ProtocolError | None = None
        self._frame: bytearray | None = None    # a large frame being assembled in place
        self._filled = 0                        # bytes of it received
        self._frame_start = 0                   # its stream offset

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole message."""
        return len(self._buffer) + self._filled

    @property
    def held(self) -> int:
        """Bytes of memory the decoder holds now (a large message's whole buffer)."""
        return len(self._buffer) + (len(self._frame) if self._frame is not None else 0)

    @property
    def claimed(self) -> int:
        """`held` once the message whose head is in has fully arrived: what reading on
        to the end of that message will cost (its size passed the limits)."""
        if self._frame is not None:
            return len(self._frame) + len(self._buffer)
        if self._pending is not None:
            return max(len(self._buffer), self._pending[1])
        return len(self._buffer)

    def pending_buffer(self) -> memoryview | None:
        """Where the rest of a large message goes (`LARGE_FRAME`): the unfilled part of a
        buffer of its exact size, for ``sock.recv_into``; tell `filled` how many bytes
        went in. None when no large message is under way (then use `feed`)."""
        if self._frame is None or self._error is not None:
            return None
        return memoryview(self._frame)[self._filled:]

    def filled(self, nbytes: int) -> list[Framed]:
        """`nbytes` were written into `pending_buffer()`: the messages now complete, as
        `feed` returns them."""
        if self._frame is None or not 0 <= nbytes <= len(self._frame) - self._filled:
            raise ValueError(f"{nbytes} bytes do not fit the pending buffer")
        self._filled += nbytes
        self._consumed += nbytes
        return self.feed(b"")

    def feed(self, data: bytes) -> list[Framed]:
        messages: list[Framed] = []
        try:
            for registration, frame, offset in self._split(data):
                try:
                    messages.append(registration.codec.decode(
                        frame, registration.message_type, self.limits))
                except ProtocolError as exc:
                    raise _at_stream_offset(exc, offset) from None
        except ProtocolError as exc:
            self._error = exc
            if not messages:
                raise
        return messages

    def split(self, data: bytes) -> list[tuple[Registration, bytes]]:
        """Like `feed`, but the whole messages come back undecoded, as (registration,
        frame bytes), their sizes checked against the limits: a caller with a faster
        decoder for some types decodes those itself (the others with
        ``registration.codec.decode(frame, registration.message_type, limits)``)."""
        try:
            return [(registration, frame) for registration, frame, _ in self._split(data)]
        except ProtocolError as exc:
            self._error = exc
            raise

    def eof(self) -> None:
        """The stream ended: raise `Truncated` if a message was cut short."""
        if self._error is not None:
            raise self._error
        if self._buffer or self._frame is not None:
            registration = self._pending[0] if self._frame is not None else \
                self.registry.lookup(self._buffer[0])
            self._error = error(Truncated, registration.name, f"the stream ended "
                                f"{self.buffered} bytes into the message",
                                self._consumed + len(self._buffer))
            raise self._error

    def _split(self, data: bytes) -> list[tuple[Registration, bytes, int]]:
        """The whole messages now received: (registration, frame, stream offset). A
        framing error (an unknown type, a size beyond the limits) is raised at once when
        no whole message came before it, else by the next call (see `feed`)."""
        if self._error is not None:
            raise self._error
        frames: list[tuple[Registration, bytes, int]] = []
        if self._frame is not None:
            data = self._fill(data, frames)
            if self._frame is not None or not data:
                return frames
        if self._buffer:
            self._buffer += data
            buffer = self._buffer
        else:
            buffer = data               # nothing pending: read the bytes in place
        limits, lookup = self.limits, self.registry.lookup
        pos, end = 0, len(buffer)
        try:
            while pos < end:
                if self._pending is None:
                    registration = lookup(buffer[pos])
                    codec = registration.codec
                    if end - pos < codec.head_size:
                        break
                    if self.vet is not None:
                        self.vet(registration, buffer, pos)
                        limits = self.limits
                    self._pending = (registration, codec.size_at(buffer, pos, limits))
                registration, size = self._pending
                if end - pos < size:
                    if size >= LARGE_FRAME and (end - pos) * LARGE_FRAME_SHARE >= size:
                        self._start_frame(buffer, pos, size)
                        pos = end
                    break
                frames.append((registration, _frame_bytes(buffer, pos, size),
                               self._consumed + pos))
                self._pending = None
                pos += size
        except ProtocolError as exc:
            self._error = _at_stream_offset(exc, self._consumed + pos)
            if not frames:
                raise self._error from None
        finally:
            if buffer is data:
                self._buffer = bytearray(data[pos:]) if pos < end else bytearray()
            else:
                del buffer[:pos]
            self._consumed += pos
        return frames

    def _start_frame(self, buffer: bytes | bytearray | memoryview, pos: int, size: int) -> None:
        """Move the received start of a large message (`buffer[pos:]`) into a buffer of
        its size, which later bytes fill in place (its size passed the limits)."""
        self._frame = bytearray(size)
        with memoryview(buffer) as view:
            self._frame[:len(buffer) - pos] = view[pos:]
        self._filled = len(buffer) - pos
        self._frame_start = self._consumed + pos

    def _fill(self, data: bytes | memoryview,
              frames: list[tuple[Registration, bytes, int]]) -> memoryview:
        """Copy what the large message still lacks from `data`; when it is whole, add it
        to `frames` (as bytes: its one copy). The bytes after it are returned."""
        frame, filled = self._frame, self._filled
        view = memoryview(data)
        taken = min(len(frame) - filled, len(view))
        frame[filled:filled + taken] = view[:taken]
        self._filled += taken
        self._consumed += taken
        if self._filled == len(frame):
            frames.append((self._pending[0], bytes(frame), self._frame_start))
            self._frame, self._filled, self._pending = None, 0, None
        return view[taken:]


#: Messages at least this large are assembled in a buffer of their exact size (rather
#: than grown in the stream buffer and sliced out): each byte is copied once on the way
#: in, or not at all when the caller `recv_into`s `JRaftDecoder.pending_buffer()`. The
#: buffer is allocated once the size has passed the limits and 1/LARGE_FRAME_SHARE of the
#: message has arrived, so a header alone never makes the decoder allocate its body.
LARGE_FRAME = 64 << 10
LARGE_FRAME_SHARE = 8


def _frame_bytes(buffer: bytes | bytearray | memoryview, pos: int, size: int) -> bytes:
    """`buffer[pos:pos + size]` as bytes, copied once (not at all when it is all of
    `buffer` and `buffer` is bytes)."""
    if buffer.__class__ is bytes:
        return buffer[pos:pos + size]
    with memoryview(buffer) as view:
        return bytes(view[pos:pos + size])


def _at_stream_offset(exc: ProtocolError, start: int) -> ProtocolError:
    """A codec's error (offsets from the message's first byte) with the stream's offset."""
    return type(exc)(exc.field, exc.reason, protocol=exc.protocol or PROTOCOL,
                     offset=start + (exc.offset or 0))


# ---------------------------------------------------------------------------------------
# JSON for the inspector.

def to_json(message: Framed, registry: MessageRegistry = REGISTRY) -> dict:
    """``{"message": name, ...fields}``; bytes are lowercase hex."""
    registration = registry.of(message)
    return {"message": registration.name, **registration.codec.fields_to_json(message)}


def from_json(obj: Any, registry: MessageRegistry = REGISTRY) -> Framed:
    """The inverse of `to_json`; header fields left out are 0 (false for accepted)."""
    if not isinstance(obj, dict):
        raise error(InvalidField, "message", f"expected a JSON object, got {obj!r}")
    registration = registry.named(obj.get("message"))
    return registration.codec.fields_from_json(obj, registration.message_type)


# ---------------------------------------------------------------------------------------
# What each JRaft request must carry (JRaft's handlers refuse the rest).

#: type -> (least entries, most entries or None, allowed value types)
_SHAPES: dict[MessageType, tuple[int, int | None, frozenset[ValueType]]] = {
    MessageType.REQUEST_VOTE_REQUEST: (0, 0, frozenset()),
    MessageType.APPEND_ENTRIES_REQUEST:
        (0, None, frozenset({ValueType.APPLICATION, ValueType.CONFIGURATION})),
    MessageType.CLIENT_REQUEST: (1, None, frozenset({ValueType.APPLICATION})),
    MessageType.ADD_SERVER_REQUEST: (1, 1, frozenset({ValueType.CLUSTER_SERVER})),
    MessageType.REMOVE_SERVER_REQUEST: (1, 1, frozenset({ValueType.CLUSTER_SERVER})),
    MessageType.SYNC_LOG_REQUEST: (1, 1, frozenset({ValueType.LOG_PACK})),
    MessageType.JOIN_CLUSTER_REQUEST: (1, 1, frozenset({ValueType.CONFIGURATION})),
    MessageType.LEAVE_CLUSTER_REQUEST: (0, 0, frozenset()),
    MessageType.INSTALL_SNAPSHOT_REQUEST: (1, 1, frozenset({ValueType.SNAPSHOT_SYNC_REQUEST})),
}


def check_shape(request: RaftRequest) -> None:
    """Raise `InvalidField` unless the request carries the entries its type calls for
    (e.g. AddServerRequest: one ClusterServer; RemoveServerRequest: one bare id). The
    codec itself accepts any entries; a node calls this and answers ``accepted=false``."""
    if request.message_type not in _SHAPES:
        return
    least, most, allowed = _SHAPES[MessageType(request.message_type)]
    name = MessageType(request.message_type).wire_name
    count = len(request.entries)
    if count < least or (most is not None and count > most):
        wanted = f"{least}" if least == most else f"at least {least}"
        raise error(InvalidField, "entries", f"{name} carries {wanted} entries, not {count}")
    for i, entry in enumerate(request.entries):
        if entry.value_type not in allowed:
            raise error(InvalidField, f"entries[{i}].valueType", f"{name} does not carry "
                        f"{entry.value_type.wire_name} entries")
    if request.message_type in (MessageType.ADD_SERVER_REQUEST,
                                MessageType.REMOVE_SERVER_REQUEST):
        wanted_class = (ServerId if request.message_type == MessageType.REMOVE_SERVER_REQUEST
                        else ClusterServer)
        with field_scope("entries[0]"):
            payload = request.entries[0].payload()
        if not isinstance(payload, wanted_class):
            raise error(InvalidField, "entries[0].value", f"{name} carries a "
                        f"{wanted_class.__name__}, not a {type(payload).__name__}")
