"""garlicfarm's extension messages on the Garlic Farm wire, sans-I/O (docs/protocol.md).

JRaft's 17 message types cover elections, replication, snapshots and JRaft's membership
flows. What Raft-with-JournalKeeper needs beyond them travels as extra type bytes on the
same authenticated connection, registered in `GARLICFARM_REGISTRY` (a copy of
`consensus.wire.jraft.REGISTRY`, so the plain JRaft wire stays pure):

* 0x20-0x23 reuse JRaft's shapes: PreVoteRequest / TimeoutNowRequest /
  TransferVoteRequest (45-byte request header) and PreVoteResponse (26-byte response).
* 0x24-0x35 share one *extension shape*: ``type u8 | source i32 | destination i32 |
  term i64 | bodySize i32 | body`` (21-byte header), the body being a msgpack array of
  the message's fields in declaration order. `ExtensionCodec` checks bodySize against
  the limits before buffering, and every field's type after decoding; a bad frame raises
  a `ProtocolError` naming the field.

Responses of JRaft types are paired with their requests by order on a connection (JRaft
has no correlation ids); extension messages carry what they need (ctx, ids) and may come
in any order, on any connection.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import msgpack

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


def _bad(field: str, reason: str, offset: int | None = None) -> InvalidField:
    return InvalidField(field, reason, protocol=PROTOCOL, offset=offset)


# Field kinds: a Python type, a tuple of types, or one of these markers.
ANY = object()          #: any msgpack value (maps, lists: checked by the consumer)
OPT_INT = (int, type(None))


@dataclass(frozen=True, slots=True)
class ExtensionMessage:
    """Base: the header fields. Subclasses declare their body fields, in wire order, and
    ``TYPE`` / ``NAME`` / ``KINDS`` (one kind per body field). The Raft messages among
    them (`...Frame`) are the wire forms of consensus.raft's messages (jraft_mapping)."""
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
class ReadIndexRequestFrame(ExtensionMessage):
    ctx: bytes
    lease: bool
    TYPE = ExtType.READ_INDEX_REQUEST
    NAME = "ReadIndexRequest"
    KINDS = (bytes, bool)


@dataclass(frozen=True, slots=True)
class ReadIndexResponseFrame(ExtensionMessage):
    ctx: bytes
    index: int
    success: bool
    TYPE = ExtType.READ_INDEX_RESPONSE
    NAME = "ReadIndexResponse"
    KINDS = (bytes, int, bool)


@dataclass(frozen=True, slots=True)
class PullEntriesRequestFrame(ExtensionMessage):
    index: int
    max_entries: int
    max_bytes: int
    TYPE = ExtType.PULL_ENTRIES_REQUEST
    NAME = "PullEntriesRequest"
    KINDS = (int, int, int)


@dataclass(frozen=True, slots=True)
class PullEntriesResponseFrame(ExtensionMessage):
    status: int
    index: int
    entries: list          #: [[term, entry type, data], ...] from `index` on
    min_index: int
    commit: int
    TYPE = ExtType.PULL_ENTRIES_RESPONSE
    NAME = "PullEntriesResponse"
    KINDS = (int, int, list, int, int)


@dataclass(frozen=True, slots=True)
class PullSnapshotRequestFrame(ExtensionMessage):
    snapshot_index: int
    offset: int
    TYPE = ExtType.PULL_SNAPSHOT_REQUEST
    NAME = "PullSnapshotRequest"
    KINDS = (int, int)


@dataclass(frozen=True, slots=True)
class PullSnapshotResponseFrame(ExtensionMessage):
    snapshot_index: int
    snapshot_term: int
    configuration: bytes    #: Configuration.encode()
    offset: int
    data: bytes
    done: bool
    TYPE = ExtType.PULL_SNAPSHOT_RESPONSE
    NAME = "PullSnapshotResponse"
    KINDS = (int, int, bytes, int, bytes, bool)


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


EXTENSION_CLASSES: tuple[type[ExtensionMessage], ...] = (
    ReadIndexRequestFrame, ReadIndexResponseFrame, PullEntriesRequestFrame,
    PullEntriesResponseFrame, PullSnapshotRequestFrame, PullSnapshotResponseFrame, Hello, Welcome,
    Call, Reply, WriteResult, EventMessage)


def _checker(kind: Any) -> tuple[tuple[type, ...], bool] | None:
    """(types isinstance must accept, whether bool is refused) for a field kind; None
    for ANY."""
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
    """The extension shape for one message class (see the module docstring)."""
    head_size = _HEAD.size

    def __init__(self, cls: type[ExtensionMessage]) -> None:
        self.message_class = cls
        self._names = [f.name for f in fields(cls)][3:]
        self._checks = [(i, name, *check) for i, (name, kind) in
                        enumerate(zip(self._names, cls.KINDS))
                        if (check := _checker(kind)) is not None]

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

    def decode(self, frame: bytes, message_type: int, limits: JRaftLimits) -> ExtensionMessage:
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
        return self.message_class(source, destination, term, *body)

    def encode(self, message: ExtensionMessage) -> bytes:
        body = msgpack.packb([getattr(message, n) for n in self._names], use_bin_type=True)
        return _HEAD.pack(message.TYPE, message.source, message.destination, message.term,
                          len(body)) + body

    def fields_to_json(self, message: ExtensionMessage) -> dict:
        out: dict[str, Any] = {"source": message.source, "destination": message.destination,
                               "term": message.term}
        for name in self._names:
            value = getattr(message, name)
            out[_JSON_NAMES.get(name, name)] = \
                value.hex() if isinstance(value, bytes) else _to_json_value(value)
        return out

    def fields_from_json(self, obj: dict, message_type: int) -> ExtensionMessage:
        try:
            values = [obj[_JSON_NAMES.get(name, name)]
                      for name in ("source", "destination", "term", *self._names)]
        except KeyError as exc:
            raise _bad(str(exc.args[0]), "missing") from None
        for i, (name, kind) in enumerate(zip(self._names, self.message_class.KINDS)):
            if kind is bytes and isinstance(values[3 + i], str):
                try:
                    values[3 + i] = bytes.fromhex(values[3 + i])
                except ValueError:
                    raise _bad(name, "not hex") from None
            elif kind is not bytes:
                values[3 + i] = _from_json_value(values[3 + i], name)
            _check_kind(name, kind, values[3 + i])
        return self.message_class(*values)


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


def write_result_frame(source: int, term: int, request_id: bytes, index: int,
                       entry_term: int, code: int = 0, result: Any = None,
                       message: str = "", detail: dict | None = None) -> bytes:
    """`encode(WriteResult(source, 0, term, ...))` without building the message (a
    leader answers every write with one)."""
    body = msgpack.packb([request_id, index, entry_term, code, result, message,
                          detail or {}], use_bin_type=True)
    return _HEAD.pack(ExtType.WRITE_RESULT, source, 0, term, len(body)) + body


def _build_registry() -> MessageRegistry:
    registry = REGISTRY.copy()
    registry.register(ExtType.PRE_VOTE_REQUEST, "PreVoteRequest", REQUEST_CODEC)
    registry.register(ExtType.PRE_VOTE_RESPONSE, "PreVoteResponse", RESPONSE_CODEC)
    registry.register(ExtType.TIMEOUT_NOW_REQUEST, "TimeoutNowRequest", REQUEST_CODEC)
    registry.register(ExtType.TRANSFER_VOTE_REQUEST, "TransferVoteRequest", REQUEST_CODEC)
    for cls in EXTENSION_CLASSES:
        registry.register(cls.TYPE, cls.NAME, ExtensionCodec(cls))
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
