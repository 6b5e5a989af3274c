"""JRaft log entries and the five value types they carry, sans-I/O.

A log entry on the wire is ``term i64 | valueType u8 | size i32 | value`` (big-endian, no
padding; tests/vectors/garlicfarm/LAYOUT.md). The value's layout depends on its type:

====  ======================  ===============================================================
type  payload class           layout
====  ======================  ===============================================================
1     ``bytes``               application data (Garlic Farm: UTF-8 JSON), opaque here
2     `ClusterConfiguration`  logIndex i64 | lastLogIndex i64 | ClusterServer... to the end
3     `ClusterServer`         id i32 | endpointLength i32 | endpoint UTF-8
3     `ServerId`              a bare id i32: RemoveServerRequest's entry (4 bytes, so it can
                              never be mistaken for a ClusterServer, which has at least 8)
4     `LogPack`               gzip of a FileBased or H2 log store pack (`jraft_logpack`)
5     `SnapshotSyncRequest`   lastLogIndex i64 | lastLogTerm i64 | configSize i32 | config |
                              offset i64 | dataSize i32 | data | done u8 (only 1 is true)
====  ======================  ===============================================================

Every declared size is checked against `JRaftLimits` before anything is sliced, and every
failure is a `ProtocolError` whose ``field`` is a path such as
``entries[2].configuration.servers[1].endpointLength``. We refuse three things JRaft's
readers let through and its writers never produce: bytes after a payload's last field, an
endpoint that is not UTF-8 (Java substitutes U+FFFD) and bytes after a LogPack's last gzip
member (GZIPInputStream ignores them).

The JSON forms (for the inspector) use the protocol's camelCase names; bytes are
lowercase hex; see `entry_to_json`.
"""
from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Union

from consensus.wire.errors import InvalidField, LimitExceeded, ProtocolError, Truncated
from consensus.wire.jraft_fields import (I32, Reader, error, field_scope, join, json_bool,
                                         json_hex, json_int, json_list, json_object, json_str,
                                         pack_ints)

if TYPE_CHECKING:
    from consensus.wire.jraft_logpack import LogPack

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class JRaftLimits:
    """Upper bounds a decoder enforces before it allocates (JRaft itself has none)."""
    max_log_data_size: int = 64 * MiB   #: a request body (logDataSize)
    max_entries: int = 65_536           #: entries in one request, records in one log pack
    max_value_size: int = 32 * MiB      #: one entry's value
    max_log_pack_size: int = 64 * MiB   #: *uncompressed* bytes of the log packs of a message
    max_snapshot_data: int = 32 * MiB   #: a SnapshotSyncRequest's data chunk
    max_servers: int = 1024             #: servers in a ClusterConfiguration
    max_endpoint_length: int = 1024     #: bytes of one ClusterServer endpoint


DEFAULT_LIMITS = JRaftLimits()


class WireNamed:
    """Mixin for UPPER_SNAKE enums whose protocol names are CamelCase (LOG_PACK: LogPack)."""
    name: str

    @property
    def wire_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))


class ValueType(WireNamed, enum.IntEnum):
    """A log entry's valueType byte (JRaft's LogValueType)."""
    APPLICATION = 1
    CONFIGURATION = 2
    CLUSTER_SERVER = 3
    LOG_PACK = 4
    SNAPSHOT_SYNC_REQUEST = 5


VALUE_TYPE_BY_NAME = {vt.wire_name: vt for vt in ValueType}


# ---------------------------------------------------------------------------------------
# The payload classes.

@dataclass(frozen=True, slots=True)
class ClusterServer:
    """One server of a cluster: its id and endpoint (e.g. ``tcp://localhost:9001``)."""
    id: int
    endpoint: str

    VALUE_TYPE: ClassVar[ValueType] = ValueType.CLUSTER_SERVER
    JSON_KEY: ClassVar[str] = "server"

    def to_bytes(self) -> bytes:
        try:
            endpoint = self.endpoint.encode("utf-8")
        except (UnicodeEncodeError, AttributeError):
            raise error(InvalidField, "endpoint", f"{self.endpoint!r} is not encodable text") from None
        return pack_ints(">ii", ("id", "endpointLength"), self.id, len(endpoint)) + endpoint

    @classmethod
    def read(cls, reader: Reader, limits: JRaftLimits) -> ClusterServer:
        server_id = reader.i32("id")
        at = reader.base + reader.pos
        raw = reader.take(reader.size("endpointLength", limits.max_endpoint_length), "endpoint")
        try:
            endpoint = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(InvalidField, "endpoint", f"not UTF-8 ({exc.reason})", at) from None
        return cls(server_id, endpoint)

    @classmethod
    def from_bytes(cls, data: bytes, limits: JRaftLimits = DEFAULT_LIMITS,
                   base: int = 0) -> ClusterServer:
        reader = Reader(data, base=base)
        server = cls.read(reader, limits)
        reader.finish("endpoint")
        return server

    def to_json(self) -> dict:
        return {"id": self.id, "endpoint": self.endpoint}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> ClusterServer:
        json_object(obj, path, ("id", "endpoint"))
        return cls(json_int(obj, "id", path, I32, None), json_str(obj, "endpoint", path))


@dataclass(frozen=True, slots=True)
class ServerId:
    """RemoveServerRequest's entry value: a bare server id, no endpoint."""
    id: int

    VALUE_TYPE: ClassVar[ValueType] = ValueType.CLUSTER_SERVER
    JSON_KEY: ClassVar[str] = "serverId"

    def to_bytes(self) -> bytes:
        return pack_ints(">i", ("serverId",), self.id)

    @classmethod
    def from_bytes(cls, data: bytes, limits: JRaftLimits = DEFAULT_LIMITS,
                   base: int = 0) -> ServerId:
        reader = Reader(data, base=base)
        server_id = reader.i32("serverId")
        reader.finish("serverId")
        return cls(server_id)

    def to_json(self) -> int:
        return self.id

    @classmethod
    def from_json(cls, obj: Any, path: str) -> ServerId:
        return cls(json_int({"id": obj}, "id", path, I32, None))


@dataclass(frozen=True, slots=True)
class ClusterConfiguration:
    """The cluster's servers as of log index `log_index`; `last_log_index` is the index of
    the configuration before it. There is no server count on the wire."""
    log_index: int
    last_log_index: int
    servers: tuple[ClusterServer, ...] = ()

    VALUE_TYPE: ClassVar[ValueType] = ValueType.CONFIGURATION
    JSON_KEY: ClassVar[str] = "configuration"

    def to_bytes(self) -> bytes:
        head = pack_ints(">qq", ("logIndex", "lastLogIndex"), self.log_index, self.last_log_index)
        parts = [head]
        for i, server in enumerate(self.servers):
            with field_scope(f"servers[{i}]"):
                parts.append(server.to_bytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes, limits: JRaftLimits = DEFAULT_LIMITS,
                   base: int = 0) -> ClusterConfiguration:
        reader = Reader(data, base=base)
        log_index = reader.i64("logIndex")
        last_log_index = reader.i64("lastLogIndex")
        servers = []
        while reader.remaining:
            if len(servers) == limits.max_servers:
                raise error(LimitExceeded, "servers",
                            f"more than {limits.max_servers} servers", reader.base + reader.pos)
            with field_scope(f"servers[{len(servers)}]"):
                servers.append(ClusterServer.read(reader, limits))
        return cls(log_index, last_log_index, tuple(servers))

    def to_json(self) -> dict:
        return {"logIndex": self.log_index, "lastLogIndex": self.last_log_index,
                "servers": [server.to_json() for server in self.servers]}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> ClusterConfiguration:
        json_object(obj, path, ("logIndex", "lastLogIndex", "servers"))
        servers = json_list(obj, "servers", path)
        return cls(json_int(obj, "logIndex", path), json_int(obj, "lastLogIndex", path),
                   tuple(ClusterServer.from_json(s, join(join(path, "servers"), i))
                         for i, s in enumerate(servers)))


@dataclass(frozen=True, slots=True)
class SnapshotSyncRequest:
    """One chunk of a snapshot (InstallSnapshotRequest's entry). `last_log_index`,
    `last_log_term` and `last_config` describe the snapshot; JRaft does not send its size."""
    last_log_index: int
    last_log_term: int
    last_config: ClusterConfiguration
    offset: int
    data: bytes
    done: bool

    VALUE_TYPE: ClassVar[ValueType] = ValueType.SNAPSHOT_SYNC_REQUEST
    JSON_KEY: ClassVar[str] = "snapshotSync"

    def to_bytes(self) -> bytes:
        with field_scope("lastConfig"):
            config = self.last_config.to_bytes()
        return b"".join((
            pack_ints(">qqi", ("lastLogIndex", "lastLogTerm", "configSize"),
                      self.last_log_index, self.last_log_term, len(config)),
            config,
            pack_ints(">qi", ("offset", "dataSize"), self.offset, len(self.data)),
            self.data, b"\x01" if self.done else b"\x00"))

    @classmethod
    def from_bytes(cls, data: bytes, limits: JRaftLimits = DEFAULT_LIMITS,
                   base: int = 0) -> SnapshotSyncRequest:
        reader = Reader(data, base=base)
        last_log_index = reader.i64("lastLogIndex")
        last_log_term = reader.i64("lastLogTerm")
        config_size = reader.size("configSize", limits.max_value_size)
        config_at = reader.pos
        reader.pos += config_size
        with field_scope("lastConfig"):
            config = ClusterConfiguration.from_bytes(
                data[config_at:reader.pos], limits, reader.base + config_at)
        offset = reader.i64("offset")
        chunk = reader.take(reader.size("dataSize", limits.max_snapshot_data), "data")
        done = reader.u8("done") == 1
        reader.finish("done")
        return cls(last_log_index, last_log_term, config, offset, chunk, done)

    def to_json(self) -> dict:
        return {"lastLogIndex": self.last_log_index, "lastLogTerm": self.last_log_term,
                "lastConfig": self.last_config.to_json(), "offset": self.offset,
                "data": self.data.hex(), "done": self.done}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> SnapshotSyncRequest:
        json_object(obj, path, ("lastLogIndex", "lastLogTerm", "lastConfig", "offset",
                                "data", "done"))
        return cls(json_int(obj, "lastLogIndex", path), json_int(obj, "lastLogTerm", path),
                   ClusterConfiguration.from_json(obj.get("lastConfig"), join(path, "lastConfig")),
                   json_int(obj, "offset", path), json_hex(obj, "data", path),
                   json_bool(obj, "done", path))


Payload = Union[bytes, ClusterServer, ServerId, ClusterConfiguration, "LogPack",
                SnapshotSyncRequest]


def _log_pack_class() -> Any:
    # jraft_logpack builds on this module; importing it lazily keeps the graph acyclic.
    from consensus.wire.jraft_logpack import LogPack
    return LogPack


def _cluster_server_or_id(data: bytes, limits: JRaftLimits, base: int) -> Payload:
    if len(data) == 4:
        return ServerId.from_bytes(data, limits, base)
    return ClusterServer.from_bytes(data, limits, base)


_DECODERS: dict[ValueType, Callable[[bytes, JRaftLimits, int], Payload]] = {
    ValueType.APPLICATION: lambda data, limits, base: data,
    ValueType.CONFIGURATION: ClusterConfiguration.from_bytes,
    ValueType.CLUSTER_SERVER: _cluster_server_or_id,
    ValueType.LOG_PACK: lambda data, limits, base: _log_pack_class().from_bytes(data, limits, base),
    ValueType.SNAPSHOT_SYNC_REQUEST: SnapshotSyncRequest.from_bytes,
}


def decode_payload(value_type: ValueType, value: bytes, limits: JRaftLimits = DEFAULT_LIMITS,
                   base: int = 0) -> Payload:
    """The typed payload of a value: application bytes as they are, the rest parsed.

    A ClusterServer-typed value of exactly 4 bytes is a `ServerId` (RemoveServerRequest).
    """
    return _DECODERS[value_type](value, limits, base)


def check_payload(field: str, value_type: ValueType, value: bytes, limits: JRaftLimits,
                  base: int = 0) -> None:
    """Raise if ``value`` does not parse as ``value_type``, naming e.g.
    ``entries[0].configuration.logIndex``."""
    with field_scope(f"{field}.{_JSON_KEYS[value_type]}"):
        decode_payload(value_type, value, limits, base)


# ---------------------------------------------------------------------------------------
# The log entry.

@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log entry as it travels: the value stays bytes; `payload()` parses it."""
    term: int
    value_type: ValueType
    value: bytes = b""

    @classmethod
    def of(cls, term: int, payload: Payload) -> LogEntry:
        """An entry holding ``payload`` (``bytes`` for an Application entry)."""
        if isinstance(payload, (bytes, bytearray)):
            return cls(term, ValueType.APPLICATION, bytes(payload))
        return cls(term, payload.VALUE_TYPE, payload.to_bytes())

    def payload(self, limits: JRaftLimits = DEFAULT_LIMITS) -> Payload:
        return decode_payload(self.value_type, self.value, limits)


ENTRY_HEAD = struct.Struct(">qBi")
VALUE_TYPE_OF_BYTE: tuple[ValueType | None, ...] = tuple(
    ValueType(b) if b in ValueType._value2member_map_ else None for b in range(256))


def encode_entries(entries: tuple[LogEntry, ...]) -> bytes:
    """The entries back to back (the hot path of every AppendEntries)."""
    pack = ENTRY_HEAD.pack
    try:
        return b"".join([part for e in entries
                         for part in (pack(e.term, e.value_type, len(e.value)), e.value)])
    except (struct.error, TypeError):
        for i, entry in enumerate(entries):   # slow path: find the entry and field at fault
            with field_scope(f"entries[{i}]"):
                pack_ints(">qBi", ("term", "valueType", "size"), entry.term,
                          int(entry.value_type), len(entry.value))
                if not isinstance(entry.value, bytes):
                    raise error(InvalidField, "value", f"{type(entry.value).__name__} is not bytes")
        raise


def decode_entries(data: bytes, pos: int, end: int, limits: JRaftLimits) -> tuple[LogEntry, ...]:
    """Parse the entries in ``data[pos:end]`` (they run to its end: there is no count) and
    check that every non-application value parses as its type says."""
    entries: list[LogEntry] = []
    append, unpack, head = entries.append, ENTRY_HEAD.unpack_from, ENTRY_HEAD.size
    max_value, max_entries = limits.max_value_size, limits.max_entries
    pack_budget = limits.max_log_pack_size
    while pos < end:
        if end - pos < head or len(entries) == max_entries:
            raise _bad_entry(data, pos, end, len(entries), limits)
        term, type_byte, size = unpack(data, pos)
        value_type = VALUE_TYPE_OF_BYTE[type_byte]
        start = pos + head
        if value_type is None or not 0 <= size <= max_value or size > end - start:
            raise _bad_entry(data, pos, end, len(entries), limits)
        value = data[start:start + size]
        if value_type is ValueType.LOG_PACK:
            with field_scope(f"entries[{len(entries)}].logPack"):
                pack = _log_pack_class().from_bytes(
                    value, limits, start, max_uncompressed=pack_budget)
            pack_budget -= pack.uncompressed_size
        elif value_type is not ValueType.APPLICATION:
            check_payload(f"entries[{len(entries)}]", value_type, value, limits, start)
        append(LogEntry(term, value_type, value))
        pos = start + size
    return tuple(entries)


def _bad_entry(data: bytes, pos: int, end: int, index: int, limits: JRaftLimits) -> ProtocolError:
    """What is wrong with the entry at ``pos`` (off the hot path of `decode_entries`)."""
    field = f"entries[{index}]"
    if index == limits.max_entries:
        return error(LimitExceeded, "entries", f"more than {limits.max_entries} entries", pos)
    if end - pos < ENTRY_HEAD.size:
        return error(Truncated, field, f"an entry needs at least {ENTRY_HEAD.size} bytes, "
                     f"logDataSize leaves {end - pos}", pos)
    _, type_byte, size = ENTRY_HEAD.unpack_from(data, pos)
    if VALUE_TYPE_OF_BYTE[type_byte] is None:
        return error(InvalidField, f"{field}.valueType",
                     f"unknown value type {type_byte} (1..5)", pos + 8)
    if size < 0:
        return error(InvalidField, f"{field}.size", f"negative size {size}", pos + 9)
    if size > limits.max_value_size:
        return error(LimitExceeded, f"{field}.size",
                     f"{size} bytes is above the limit of {limits.max_value_size}", pos + 9)
    return error(Truncated, f"{field}.size", f"declares {size} bytes, logDataSize leaves "
                 f"{end - pos - ENTRY_HEAD.size}", pos + 9)


# ---------------------------------------------------------------------------------------
# Entries as JSON.

_JSON_KEYS = {
    ValueType.CONFIGURATION: "configuration",
    ValueType.CLUSTER_SERVER: "server",
    ValueType.LOG_PACK: "logPack",
    ValueType.SNAPSHOT_SYNC_REQUEST: "snapshotSync",
}
_ENTRY_KEYS = ("term", "valueType", "value", "text", "invalid", "configuration", "server",
               "serverId", "logPack", "snapshotSync")


def entry_to_json(entry: LogEntry) -> dict:
    """``{"term", "valueType", ...}`` plus the payload under one key: ``value`` (hex) and
    ``text`` (when it is UTF-8) for Application data, ``configuration``, ``server``,
    ``serverId``, ``logPack`` or ``snapshotSync`` for the others. A value that does not
    parse as its type appears as ``value`` hex with the reason under ``invalid``."""
    out: dict[str, Any] = {"term": entry.term, "valueType": entry.value_type.wire_name}
    try:
        payload = entry.payload()
    except ProtocolError as exc:
        out["value"] = entry.value.hex()
        out["invalid"] = str(exc)
        return out
    if isinstance(payload, bytes):
        out["value"] = payload.hex()
        try:
            out["text"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            pass
    else:
        out[payload.JSON_KEY] = payload.to_json()
    return out


@functools.cache
def _typed_classes() -> dict[str, tuple[ValueType, Any]]:
    return {cls.JSON_KEY: (cls.VALUE_TYPE, cls) for cls in
            (ClusterConfiguration, ClusterServer, ServerId, _log_pack_class(),
             SnapshotSyncRequest)}


def entry_from_json(obj: Any, path: str) -> LogEntry:
    """The inverse of `entry_to_json`. Give exactly one of ``value`` (hex, any type),
    ``text`` (Application) or the typed key; ``invalid`` is informational and ignored."""
    json_object(obj, path, _ENTRY_KEYS)
    term = json_int(obj, "term", path)
    name = obj.get("valueType")
    if name not in VALUE_TYPE_BY_NAME:
        raise error(InvalidField, join(path, "valueType"),
                    f"{name!r} is not one of {', '.join(VALUE_TYPE_BY_NAME)}")
    value_type = VALUE_TYPE_BY_NAME[name]
    typed = [key for key in _typed_classes() if key in obj]
    if len(typed) > 1 or (typed and ("value" in obj or "text" in obj)):
        raise error(InvalidField, path, "give one of value, text or a typed payload, not several")
    if typed:
        key = typed[0]
        payload_type, cls = _typed_classes()[key]
        if payload_type is not value_type:
            raise error(InvalidField, join(path, key), f"is a {payload_type.wire_name} "
                        f"payload but valueType is {name}")
        return LogEntry.of(term, cls.from_json(obj[key], join(path, key)))
    if "text" in obj:
        if value_type is not ValueType.APPLICATION:
            raise error(InvalidField, join(path, "text"), "only Application entries take text")
        try:
            text = json_str(obj, "text", path).encode("utf-8")
        except UnicodeEncodeError:
            raise error(InvalidField, join(path, "text"), "is not encodable as UTF-8") from None
        if "value" in obj and json_hex(obj, "value", path) != text:
            raise error(InvalidField, join(path, "text"), "disagrees with value")
        return LogEntry(term, value_type, text)
    return LogEntry(term, value_type, json_hex(obj, "value", path) if "value" in obj else b"")
