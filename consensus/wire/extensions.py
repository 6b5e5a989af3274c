"""garlicfarm's extension messages on the Garlic Farm wire, sans-I/O (docs/protocol.md).

JRaft's 17 message types cover elections, replication, snapshots and JRaft's membership
flows. What Raft-with-JournalKeeper needs beyond them travels as extra type bytes on the
same authenticated connection, registered in `GARLICFARM_REGISTRY` (a copy of
`consensus.wire.jraft.REGISTRY`, so the plain JRaft wire stays pure):

* 0x20-0x23 reuse JRaft's shapes: PreVoteRequest / TimeoutNowRequest /
  TransferVoteRequest (45-byte request header) and PreVoteResponse (26-byte response).
* 0x24-0x38 share one *extension shape*: ``type u8 | source i32 | destination i32 |
  term i64 | bodySize i32 | body`` (21-byte header), the body being a msgpack array of
  the message's body fields in wire order. `ExtensionCodec` checks bodySize against the
  limits before buffering, and every field's type after decoding; a bad frame raises a
  `ProtocolError` naming the field.
* The Raft messages among them (reads, observer pulls) are consensus.raft's dataclasses
  themselves, defined once: `RAFT_CODECS` gives each its type byte, its inspector name
  and its body (the fields after the header, in wire order, with their kinds). The
  client's messages (`Hello` ... `EventMessage`) exist only on this wire, as
  `ExtensionMessage` subclasses.

Responses of JRaft types are paired with their requests by order on a connection (JRaft
has no correlation ids); extension messages carry what they need (ctx, ids) and may come
in any order, on any connection.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar

import msgpack

from consensus.raft import (Configuration, Entry, EntryType, PullEntries, PullEntriesResponse,
                            PullSnapshot, PullSnapshotResponse, PullStatus, ReadIndexRequest,
                            ReadIndexResponse)
from consensus.raft.errors import ConfigurationError
from consensus.wire.errors import InvalidField, LimitExceeded
from consensus.wire.jraft import (DEFAULT_LIMITS, REGISTRY, REQUEST_CODEC, RESPONSE_CODEC,
                                  JRaftDecoder, JRaftLimits, MessageCodec, MessageRegistry)
from consensus.wire.jraft import encode as jraft_encode
from consensus.wire.jraft import from_json as jraft_from_json
from consensus.wire.jraft import to_json as jraft_to_json

PROTOCOL = "garlicfarm-ext"
_HEAD = struct.Struct(">Biiqi")
_BODY_SIZE = struct.Struct(">i")


class ExtType(enum.IntEnum):
    PRE_VOTE_REQUEST = 0x20
    PRE_VOTE_RESPONSE = 0x21
    TIMEOUT_NOW_REQUEST = 0x22
    TRANSFER_VOTE_REQUEST = 0x23      #: a RequestVote after TimeoutNow (answered by type 2)
    READ_INDEX_REQUEST = 0x24
    READ_INDEX_RESPONSE = 0x25
    PULL_ENTRIES_REQUEST = 0x26
    PULL_ENTRIES_RESPONSE = 0x27
    PULL_SNAPSHOT_REQUEST = 0x28
    PULL_SNAPSHOT_RESPONSE = 0x29
    HELLO = 0x30
    WELCOME = 0x31
    CALL = 0x32
    REPLY = 0x33
    WRITE_RESULT = 0x34
    EVENT = 0x35
    GROUP_SELECT = 0x36
    QUIESCE = 0x37
    NODE_HEARTBEAT = 0x38


def _bad(field: str, reason: str, offset: int | None = None) -> InvalidField:
    return InvalidField(field, reason, protocol=PROTOCOL, offset=offset)


# Field kinds: a Python type, a tuple of types, ANY, or a `Shaped` kind.
ANY = object()          #: any msgpack value (maps, lists: checked by the consumer)
OPT_INT = (int, type(None))
_HEADER = ("term", "source", "destination")     #: the fields every frame's header carries


@dataclass(frozen=True, slots=True)
class Shaped:
    """A field whose wire value differs from its value in the message: `wire` is the
    kind checked on arrival, `to_wire(value)` writes it, `from_wire(value, body)` reads it
    back (`body`: the frame's fields by name, as on the wire), raising InvalidField."""
    wire: Any
    to_wire: Callable[[Any], Any]
    from_wire: Callable[[Any, dict], Any]


@dataclass(frozen=True, slots=True)
class ExtensionMessage:
    """Base of the client's messages, which exist only on this wire: the header fields.
    Subclasses declare their body fields, in wire order, and ``TYPE`` / ``NAME`` /
    ``KINDS`` (one kind per body field)."""
    source: int
    destination: int
    term: int

    TYPE: ClassVar[ExtType]
    NAME: ClassVar[str]         #: the name in the inspector's JSON
    KINDS: ClassVar[tuple[Any, ...]]

    @property
    def message_type(self) -> int:
        return self.TYPE


@dataclass(frozen=True, slots=True)
class Hello(ExtensionMessage):
    """A client's first message: it speaks the extensions (replies come as extension
    frames from now on)."""
    client_id: bytes
    version: int
    TYPE = ExtType.HELLO
    NAME = "Hello"
    KINDS = (bytes, int)


@dataclass(frozen=True, slots=True)
class Welcome(ExtensionMessage):
    """The member's answer to Hello: who it is and what it knows of the cluster."""
    node_id: int
    cluster: str
    leader_id: int | None
    role: str
    configuration: bytes    #: Configuration.encode()
    TYPE = ExtType.WELCOME
    NAME = "Welcome"
    KINDS = (int, str, OPT_INT, str, bytes)


@dataclass(frozen=True, slots=True)
class Call(ExtensionMessage):
    """A client call other than a write: `op` names it, `args` is a map."""
    call_id: int
    op: str
    args: dict
    TYPE = ExtType.CALL
    NAME = "Call"
    KINDS = (int, str, dict)


@dataclass(frozen=True, slots=True)
class Reply(ExtensionMessage):
    """The answer to the Call with `call_id`: `result` when `code` is 0, else the error
    code (errors.ErrorCode), its message and details."""
    call_id: int
    code: int
    result: Any
    message: str
    detail: dict
    TYPE = ExtType.REPLY
    NAME = "Reply"
    KINDS = (int, int, ANY, str, dict)


@dataclass(frozen=True, slots=True)
class WriteResult(ExtensionMessage):
    """The answer to a ClientRequest whose entry is a farm command, by its request id:
    the index and term of the entry that applied it, and its result (or an error)."""
    request_id: bytes
    index: int
    entry_term: int
    code: int
    result: Any
    message: str
    detail: dict
    TYPE = ExtType.WRITE_RESULT
    NAME = "WriteResult"
    KINDS = (bytes, int, int, int, ANY, str, dict)


@dataclass(frozen=True, slots=True)
class EventMessage(ExtensionMessage):
    """A subscribed event (leader-changed, state-changed, voters-changed)."""
    name: str
    leader_id: int | None
    data: dict
    TYPE = ExtType.EVENT
    NAME = "Event"
    KINDS = (str, OPT_INT, dict)


@dataclass(frozen=True, slots=True)
class GroupSelect(ExtensionMessage):
    """The frames that follow in this direction of the connection belong to Raft group
    (partition) `group`, until the next GroupSelect; each direction starts in group 0
    (docs/protocol.md, "Groups"). A single-group farm never sends one."""
    group: int
    TYPE = ExtType.GROUP_SELECT
    NAME = "GroupSelect"
    KINDS = (int,)


@dataclass(frozen=True, slots=True)
class Quiesce(ExtensionMessage):
    """The leader (`source`, in `term`) of the connection's current group stops ticking
    it: the group is idle with `index` its last and committed entry. A follower of that
    leader and term holding exactly that much stops ticking it too, until any message of
    the group (docs/runtime.md, "Quiescing idle groups")."""
    index: int
    TYPE = ExtType.QUIESCE
    NAME = "Quiesce"
    KINDS = (int,)


@dataclass(frozen=True, slots=True)
class NodeHeartbeat(ExtensionMessage):
    """Node `source` is alive: one per peer per heartbeat interval, for every group at
    once, so that the followers of quiesced groups notice a dead or cut-off leader node
    without a heartbeat per group (term 0, no body)."""
    TYPE = ExtType.NODE_HEARTBEAT
    NAME = "NodeHeartbeat"
    KINDS = ()


def _checker(kind: Any) -> tuple[tuple[type, ...], bool] | None:
    """(types isinstance must accept, whether bool is refused) for a field's wire kind;
    None for ANY."""
    if isinstance(kind, Shaped):
        kind = kind.wire
    if kind is ANY:
        return None
    types = kind if isinstance(kind, tuple) else (kind,)
    return types, int in types


def _check_kind(name: str, kind: Any, value: Any) -> None:
    check = _checker(kind)
    if check is None:
        return
    types, no_bool = check
    if not isinstance(value, types) or (no_bool and value.__class__ is bool):
        raise _bad(name, f"{value!r} is not the field's type")


class ExtensionCodec(MessageCodec):
    """The extension shape for one message class (see the module docstring): `body` is
    its fields after the header, in wire order, each with its kind. Messages are built
    by keyword, so the class's own field order does not matter; the class alone says
    the type byte (`typed_by_class`)."""
    head_size = _HEAD.size
    typed_by_class = True

    def __init__(self, cls: type, type_byte: ExtType, name: str,
                 body: tuple[tuple[str, Any], ...]) -> None:
        names = tuple(n for n, _ in body)
        own = {f.name for f in fields(cls)} - set(_HEADER)
        if set(names) != own or len(names) != len(own):
            raise ValueError(f"{cls.__name__}'s wire body must name each of its fields "
                             f"after the header once: {sorted(own)}, not {list(names)}")
        self.message_class = cls
        self.type_byte = type_byte
        self.name = name
        self.body = body
        self._names = names
        self._checks = [(i, n, *check) for i, (n, kind) in enumerate(body)
                        if (check := _checker(kind)) is not None]
        self._shaped = [(i, n, kind) for i, (n, kind) in enumerate(body)
                        if isinstance(kind, Shaped)]

    @classmethod
    def of(cls, message_class: type[ExtensionMessage]) -> "ExtensionCodec":
        """The codec of a client message (`ExtensionMessage` subclass)."""
        names = [f.name for f in fields(message_class)][3:]
        return cls(message_class, message_class.TYPE, message_class.NAME,
                   tuple(zip(names, message_class.KINDS)))

    def frame_size(self, head: bytes, limits: JRaftLimits) -> int:
        return self.size_at(head, 0, limits)

    def size_at(self, buffer: bytes | bytearray, pos: int, limits: JRaftLimits) -> int:
        (size,) = _BODY_SIZE.unpack_from(buffer, pos + 17)
        if size < 0:
            raise _bad("bodySize", f"negative size {size}", 17)
        if size > limits.max_log_data_size:
            raise LimitExceeded("bodySize", f"{size} bytes is above the limit of "
                                f"{limits.max_log_data_size}", protocol=PROTOCOL, offset=17)
        return self.head_size + size

    def decode(self, frame: bytes, message_type: int, limits: JRaftLimits) -> Any:
        _, source, destination, term, _size = _HEAD.unpack_from(frame)
        try:
            body = msgpack.unpackb(memoryview(frame)[self.head_size:], raw=False,
                                   strict_map_key=False, use_list=True)   # no copy of the body
        except Exception as exc:    # msgpack raises ExtraData, ValueError, FormatError...
            raise _bad("body", f"not msgpack ({exc})", self.head_size) from None
        if body.__class__ is not list or len(body) != len(self._names):
            raise _bad("body", f"must be an array of {len(self._names)} fields "
                       f"({', '.join(self._names)})", self.head_size)
        for i, name, types, no_bool in self._checks:
            value = body[i]
            if not isinstance(value, types) or (no_bool and value.__class__ is bool):
                raise _bad(name, f"{value!r} is not the field's type")
        return self._build(source, destination, term, body)

    def _build(self, source: int, destination: int, term: int, body: list) -> Any:
        values = dict(zip(self._names, body))
        if self._shaped:
            wire = dict(values)
            for i, name, kind in self._shaped:
                values[name] = kind.from_wire(body[i], wire)
        return self.message_class(source=source, destination=destination, term=term,
                                  **values)

    def _wire_values(self, message: Any) -> list:
        values = [getattr(message, n) for n in self._names]
        for i, _, kind in self._shaped:
            values[i] = kind.to_wire(values[i])
        return values

    def encode(self, message: Any) -> bytes:
        body = msgpack.packb(self._wire_values(message), use_bin_type=True)
        return _HEAD.pack(self.type_byte, message.source, message.destination, message.term,
                          len(body)) + body

    def fields_to_json(self, message: Any) -> dict:
        out: dict[str, Any] = {"source": message.source, "destination": message.destination,
                               "term": message.term}
        for name, value in zip(self._names, self._wire_values(message)):
            out[_JSON_NAMES.get(name, name)] = \
                value.hex() if isinstance(value, bytes) else _to_json_value(value)
        return out

    def fields_from_json(self, obj: dict, message_type: int) -> Any:
        try:
            values = [obj[_JSON_NAMES.get(name, name)]
                      for name in ("source", "destination", "term", *self._names)]
        except KeyError as exc:
            raise _bad(str(exc.args[0]), "missing") from None
        head, body = values[:3], values[3:]
        for i, (name, kind) in enumerate(self.body):
            wire_kind = kind.wire if isinstance(kind, Shaped) else kind
            if wire_kind is bytes and isinstance(body[i], str):
                try:
                    body[i] = bytes.fromhex(body[i])
                except ValueError:
                    raise _bad(name, "not hex") from None
            elif wire_kind is not bytes:
                body[i] = _from_json_value(body[i], name)
            _check_kind(name, kind, body[i])
        for name, value in zip(("source", "destination", "term"), head):
            _check_kind(name, int, value)
        return self._build(*head, body)


#: fields whose JSON key differs ("message" names the message type in the inspector's JSON)
_JSON_NAMES = {"message": "text"}
_HEX_KEY = "$hex"      #: JSON of bytes nested in a msgpack value: {"$hex": "00ff"}


def _to_json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return {_HEX_KEY: value.hex()}
    if isinstance(value, (list, tuple)):
        return [_to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json_value(v) for k, v in value.items()}
    return value


def _from_json_value(value: Any, field: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {_HEX_KEY} and isinstance(value[_HEX_KEY], str):
            try:
                return bytes.fromhex(value[_HEX_KEY])
            except ValueError:
                raise _bad(field, f"{value[_HEX_KEY]!r} is not hex") from None
        return {k: _from_json_value(v, field) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json_value(v, field) for v in value]
    return value


MAX_GROUP = (1 << 31) - 1      #: group ids are 0..MAX_GROUP (a non-negative i32)


def group_select_frame(source: int, group: int) -> bytes:
    """`encode(GroupSelect(source, 0, 0, group))`, built once per switch of a
    connection's direction to another group."""
    body = msgpack.packb([group])
    return _HEAD.pack(ExtType.GROUP_SELECT, source, 0, 0, len(body)) + body


def quiesce_frame(source: int, destination: int, term: int, index: int) -> bytes:
    """`encode(Quiesce(source, destination, term, index))`, built per follower by a
    leader that quiesces a group."""
    body = msgpack.packb([index])
    return _HEAD.pack(ExtType.QUIESCE, source, destination, term, len(body)) + body


def node_heartbeat_frame(source: int, destination: int) -> bytes:
    """`encode(NodeHeartbeat(source, destination, 0))`."""
    body = msgpack.packb([])
    return _HEAD.pack(ExtType.NODE_HEARTBEAT, source, destination, 0, len(body)) + body


def write_result_frame(source: int, term: int, request_id: bytes, index: int,
                       entry_term: int, code: int = 0, result: Any = None,
                       message: str = "", detail: dict | None = None) -> bytes:
    """`encode(WriteResult(source, 0, term, ...))` without building the message (a
    leader answers every write with one)."""
    body = msgpack.packb([request_id, index, entry_term, code, result, message,
                          detail or {}], use_bin_type=True)
    return _HEAD.pack(ExtType.WRITE_RESULT, source, 0, term, len(body)) + body


# -- the Raft messages on this wire: consensus.raft's dataclasses, encoded as they are -----

def _pull_status(value: int, body: dict) -> PullStatus:
    try:
        return PullStatus(value)
    except ValueError:
        raise _bad("status", f"{value} is not a pull status") from None


_ENTRY_TYPES = {t.value: t for t in EntryType}


def _entries_to_wire(entries: Any) -> list:
    return [[e.term, int(e.type), e.data] for e in entries]


def _entries_from_wire(items: list, body: dict) -> list[Entry]:
    """[[term, entry type, data], ...], the first at the frame's `index`."""
    first, out = body["index"], []
    for i, item in enumerate(items):
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                and item[1] in _ENTRY_TYPES and isinstance(item[2], bytes)):
            raise _bad(f"entries[{i}]", "must be [term, entry type, data]")
        out.append(Entry(item[0], first + i, _ENTRY_TYPES[item[1]], item[2]))
    return out


def _configuration_from_wire(data: bytes, body: dict) -> Configuration:
    try:
        return Configuration.decode(data)
    except ConfigurationError as exc:
        raise _bad("configuration", str(exc)) from None


STATUS = Shaped(int, int, _pull_status)                 #: a PullStatus as its number
ENTRIES = Shaped(list, _entries_to_wire, _entries_from_wire)
CONFIGURATION = Shaped(bytes, Configuration.encode, _configuration_from_wire)  #: its JSON
BLOB = Shaped(bytes, bytes, lambda value, body: value)  #: any bytes-like, sent as bytes

#: core message class -> its codec: type byte, inspector name, body in wire order
RAFT_CODECS: dict[type, ExtensionCodec] = {codec.message_class: codec for codec in (
    ExtensionCodec(ReadIndexRequest, ExtType.READ_INDEX_REQUEST, "ReadIndexRequest",
                   (("ctx", bytes), ("lease", bool))),
    ExtensionCodec(ReadIndexResponse, ExtType.READ_INDEX_RESPONSE, "ReadIndexResponse",
                   (("ctx", bytes), ("index", int), ("success", bool))),
    ExtensionCodec(PullEntries, ExtType.PULL_ENTRIES_REQUEST, "PullEntriesRequest",
                   (("index", int), ("max_entries", int), ("max_bytes", int))),
    ExtensionCodec(PullEntriesResponse, ExtType.PULL_ENTRIES_RESPONSE, "PullEntriesResponse",
                   (("status", STATUS), ("index", int), ("entries", ENTRIES),
                    ("min_index", int), ("commit", int))),
    ExtensionCodec(PullSnapshot, ExtType.PULL_SNAPSHOT_REQUEST, "PullSnapshotRequest",
                   (("snapshot_index", int), ("offset", int))),
    ExtensionCodec(PullSnapshotResponse, ExtType.PULL_SNAPSHOT_RESPONSE,
                   "PullSnapshotResponse",
                   (("snapshot_index", int), ("snapshot_term", int),
                    ("configuration", CONFIGURATION), ("offset", int), ("data", BLOB),
                    ("done", bool))),
)}

#: every extension-shaped frame (0x24-0x38), in type order
EXTENSION_CODECS: tuple[ExtensionCodec, ...] = tuple(sorted(
    (*RAFT_CODECS.values(),
     *map(ExtensionCodec.of, (Hello, Welcome, Call, Reply, WriteResult, EventMessage,
                              GroupSelect, Quiesce, NodeHeartbeat))),
    key=lambda codec: codec.type_byte))


def _build_registry() -> MessageRegistry:
    registry = REGISTRY.copy()
    registry.register(ExtType.PRE_VOTE_REQUEST, "PreVoteRequest", REQUEST_CODEC)
    registry.register(ExtType.PRE_VOTE_RESPONSE, "PreVoteResponse", RESPONSE_CODEC)
    registry.register(ExtType.TIMEOUT_NOW_REQUEST, "TimeoutNowRequest", REQUEST_CODEC)
    registry.register(ExtType.TRANSFER_VOTE_REQUEST, "TransferVoteRequest", REQUEST_CODEC)
    for codec in EXTENSION_CODECS:
        registry.register(codec.type_byte, codec.name, codec)
    return registry


GARLICFARM_REGISTRY = _build_registry()


# ---------------------------------------------------------------------------------------
# The whole Garlic Farm wire (JRaft's types and these), as the inspector sees it
# (`garlicfarm decode -p garlicfarm`): the same functions as consensus.wire.jraft, over
# GARLICFARM_REGISTRY.

class GarlicFarmDecoder(JRaftDecoder):
    """A stream decoder for one direction of a Garlic Farm connection after the
    handshake: JRaft's messages and the extension frames."""

    def __init__(self, limits: JRaftLimits = DEFAULT_LIMITS) -> None:
        super().__init__(limits, GARLICFARM_REGISTRY)


def encode(message: Any) -> bytes:
    return jraft_encode(message, GARLICFARM_REGISTRY)


def to_json(message: Any) -> dict:
    return jraft_to_json(message, GARLICFARM_REGISTRY)


def from_json(obj: Any) -> Any:
    return jraft_from_json(obj, GARLICFARM_REGISTRY)
