"""What an Application entry of the farm's log holds, sans-I/O (docs/protocol.md, "Entry
payloads").

An Application entry is one of:

* **Garlic Farm status JSON**: UTF-8 JSON text, starting with ``{``, as other Garlic
  Farm peers write and read it (`status.py`);
* **a farm command**: our envelope, ``0xC1 | version u8 (1) | timestamp_ms u64 | msgpack
  body``. 0xC1 can start neither JSON nor UTF-8 text (and msgpack never uses it). The
  client writes timestamp 0; the leader stamps its clock into bytes 2..9 as it appends
  (`stamp`), so readers get the time the entry entered the log. The body is a msgpack
  array ``[kind, request_id, args...]`` (`CommandKind`); `request_id` (bytes) makes a
  retried write apply once;
* anything else: bytes for the pluggable application state machine.

Raft's own entries (configuration, the leader's no-op) are not Application entries.
"""
from __future__ import annotations

import enum
import json
import os
import struct
from dataclasses import dataclass, replace
from typing import Any, Sequence

import msgpack

from consensus.common.results import CommitInfo, LogRecord, StagedInfo
from consensus.raft import Entry, EntryType
from consensus.wire.errors import InvalidField, ProtocolError, Truncated

MAGIC = 0xC1
VERSION = 1
HEAD = struct.Struct(">BBQ")
MAX_REQUEST_ID = 64
PROTOCOL = "envelope"


class CommandKind(enum.IntEnum):
    JOURNAL = 1         #: [records]
    KV_PUT = 2          #: [key, value]
    KV_APPEND = 3       #: [key, value]
    KV_CAS = 4          #: [key, expected or nil, new]
    STAGE = 5           #: [query_id, batch_id, partition, attempt, content_type, payload]
    COMMIT = 6          #: [query_id, batch_id, [staged indexes], metadata map]
    ABORT = 7           #: [query_id, batch_id]
    ALLOCATE = 8        #: [key, count, owner query_id, owner batch_id]


#: (argument names, argument types) per kind; a body must match exactly.
_SIGNATURES: dict[CommandKind, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    CommandKind.JOURNAL: (("records",), (list,)),
    CommandKind.KV_PUT: (("key", "value"), (str, str)),
    CommandKind.KV_APPEND: (("key", "value"), (str, str)),
    CommandKind.KV_CAS: (("key", "expected", "new"), (str, (str, type(None)), str)),
    CommandKind.STAGE: (("query_id", "batch_id", "partition", "attempt", "content_type",
                         "payload"), (str, int, int, int, str, bytes)),
    CommandKind.COMMIT: (("query_id", "batch_id", "staged", "metadata"), (str, int, list, dict)),
    CommandKind.ABORT: (("query_id", "batch_id"), (str, int)),
    CommandKind.ALLOCATE: (("key", "count", "owner_query", "owner_batch"), (str, int, str, int)),
}


@dataclass(frozen=True, slots=True)
class Command:
    kind: CommandKind
    request_id: bytes
    timestamp_ms: int
    args: tuple


def new_request_id() -> bytes:
    """16 random bytes (a uuid4's worth of randomness, without the uuid object)."""
    return os.urandom(16)


def _bad(field: str, reason: str) -> InvalidField:
    return InvalidField(field, reason, protocol=PROTOCOL)


def encode_command(kind: CommandKind, request_id: bytes, *args: Any) -> bytes:
    """A command's entry bytes (timestamp 0: the leader stamps it)."""
    if not isinstance(request_id, bytes) or not 0 < len(request_id) <= MAX_REQUEST_ID:
        raise ValueError(f"request_id must be 1..{MAX_REQUEST_ID} bytes, got {request_id!r}")
    body = msgpack.packb([int(kind), request_id, *args], use_bin_type=True)
    return HEAD.pack(MAGIC, VERSION, 0) + body


def encode_journal(records: Sequence[bytes], request_id: bytes) -> bytes:
    return encode_command(CommandKind.JOURNAL, request_id, list(records))


def is_command(data: bytes) -> bool:
    return bool(data) and data[0] == MAGIC


def is_status(data: bytes) -> bool:
    return data[:1] == b"{"


def request_id_of(data: bytes) -> tuple[int, bytes] | None:
    """(kind, request id) of a command without decoding its arguments (hot paths).
    Commands as `encode_command` writes them (a fixarray, a fixint kind, a bin8 id) are
    read in place; anything else through msgpack."""
    if len(data) > 14 and data[0] == MAGIC and 0x92 <= data[10] <= 0x9f and \
            data[11] < 0x80 and data[12] == 0xC4:
        size = data[13]
        if 0 < size and len(data) >= 14 + size:
            return data[11], data[14:14 + size]
    if not is_command(data) or len(data) <= HEAD.size:
        return None
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(data))
    unpacker.feed(data[HEAD.size:])
    try:
        if unpacker.read_array_header() < 2:
            return None
        kind, request_id = unpacker.unpack(), unpacker.unpack()
    except Exception:
        return None
    return (kind, request_id) if isinstance(request_id, bytes) else None


def stamp(data: bytes, timestamp_ms: int) -> bytes:
    """The command with the leader's clock in it (other bytes are returned unchanged)."""
    if not is_command(data) or len(data) < HEAD.size:
        return data
    return stamp_head(timestamp_ms) + data[HEAD.size:]


def stamp_head(timestamp_ms: int) -> bytes:
    """The first `HEAD.size` bytes of every command stamped at `timestamp_ms` (a leader
    stamps a turn's commands with one clock reading: ``head + data[HEAD.size:]``)."""
    return HEAD.pack(MAGIC, VERSION, timestamp_ms)


def journal_request_id(data: bytes) -> bytes | None:
    """The request id of a well-formed JOURNAL command - one `decode_command` accepts -
    checked without building the Command (the leader's hot path); None for anything
    else, which then takes `decode_command` (and its errors)."""
    body = journal_body(data)
    return None if body is None else body[0]


def journal_body(data: bytes) -> tuple[bytes, list[bytes]] | None:
    """(request id, records) of a well-formed JOURNAL command, checked as
    `decode_command` checks it, without building the Command (hot paths: the leader's
    proposals, a member working out entries' row counts); None for anything else."""
    if len(data) < 15 or data[0] != MAGIC or data[1] != VERSION or data[10] != 0x93 \
            or data[11] != CommandKind.JOURNAL:
        return None
    try:
        body = msgpack.unpackb(data[HEAD.size:], raw=False)
    except Exception:   # noqa: BLE001 - msgpack's several error types: the slow path says
        return None
    if type(body) is not list or len(body) != 3:
        return None
    request_id, records = body[1], body[2]
    if type(request_id) is not bytes or not 0 < len(request_id) <= MAX_REQUEST_ID or \
            type(records) is not list:
        return None
    for record in records:
        if type(record) is not bytes:
            return None
    return request_id, records


_KIND_OF = {int(k): k for k in CommandKind}


def decode_command(data: bytes) -> Command:
    """Parse and check a command; `ProtocolError` (naming the field) when malformed."""
    if len(data) < HEAD.size:
        raise Truncated("header", f"a command needs {HEAD.size} bytes, got {len(data)}",
                        protocol=PROTOCOL)
    magic, version, timestamp = HEAD.unpack_from(data)
    if magic != MAGIC:
        raise _bad("magic", f"0x{magic:02x} is not 0x{MAGIC:02x}")
    if version != VERSION:
        raise _bad("version", f"{version} is not supported (this node reads {VERSION})")
    try:
        # a view, not a slice: a STAGE command's megabytes are copied once, into its payload
        body = msgpack.unpackb(memoryview(data)[HEAD.size:], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several types: ExtraData, ValueError, ...
        raise _bad("body", f"not msgpack ({exc})") from None
    if type(body) is not list or len(body) < 2:
        raise _bad("body", "must be an array [kind, request_id, args...]")
    kind = _KIND_OF.get(body[0]) if type(body[0]) is int else None
    if kind is None:
        raise _bad("kind", f"{body[0]!r} is not a command kind")
    request_id = body[1]
    if type(request_id) is not bytes or not 0 < len(request_id) <= MAX_REQUEST_ID:
        raise _bad("request_id", f"must be 1..{MAX_REQUEST_ID} bytes")
    names, types = _SIGNATURES[kind]
    args = body[2:]
    if len(args) != len(names):
        raise _bad(kind.name.lower(), f"takes {len(names)} arguments ({', '.join(names)}), "
                   f"got {len(args)}")
    for name, wanted, value in zip(names, types, args):
        if not isinstance(value, wanted) or isinstance(value, bool) and wanted is int:
            raise _bad(name, f"{value!r} has the wrong type")
    if kind is CommandKind.JOURNAL:
        for record in args[0]:
            if type(record) is not bytes:
                raise _bad("records", "must all be bytes")
    elif kind is CommandKind.COMMIT and not all(type(i) is int and i > 0 for i in args[2]):
        raise _bad("staged", "must be positive log indexes")
    elif kind is CommandKind.ALLOCATE and args[1] <= 0:
        raise _bad("count", "must be positive")
    return Command(kind, request_id, timestamp, tuple(args))


def log_record(entry: Entry, effective: bool | None = None) -> LogRecord:
    """The client's view of a committed entry (results.LogRecord); `effective` is the
    ledger's verdict on a COMMIT entry, which only a member's state can tell."""
    index, term, data = entry.index, entry.term, entry.data
    if entry.type == EntryType.CONFIGURATION:
        return LogRecord(index, term, "configuration", None, data, 0)
    if entry.type == EntryType.NOOP or not data:
        return LogRecord(index, term, "noop", None, b"", 0)
    journal = journal_body(data)
    if journal is not None:         # the common case, checked without building a Command
        records = journal[1]
        return LogRecord(index, term, "journal", records, b"", HEAD.unpack_from(data)[2],
                         count=len(records))
    if is_status(data):
        return LogRecord(index, term, "status", None, data, _status_date(data))
    if not is_command(data):
        return LogRecord(index, term, "control", None, data, 0)
    try:
        command = decode_command(data)
    except ProtocolError:
        return LogRecord(index, term, "control", None, data, 0)
    kind, args, ts = command.kind, command.args, command.timestamp_ms
    if kind is CommandKind.JOURNAL:
        return LogRecord(index, term, "journal", list(args[0]), b"", ts, count=len(args[0]))
    if kind is CommandKind.STAGE:
        query_id, batch_id, partition, attempt, content_type, payload = args
        return LogRecord(index, term, "staged", None, payload, ts,
                         staged=StagedInfo(query_id, batch_id, partition, attempt, content_type))
    if kind is CommandKind.COMMIT:
        query_id, batch_id, staged, metadata = args
        return LogRecord(index, term, "commit", None, b"", ts,
                         commit=CommitInfo(query_id, batch_id, tuple(staged), metadata, effective))
    if kind in (CommandKind.KV_PUT, CommandKind.KV_APPEND, CommandKind.KV_CAS):
        return LogRecord(index, term, "kv", None, data, ts)
    return LogRecord(index, term, "control", None, data, ts)


def _status_date(data: bytes) -> int:
    try:
        date = json.loads(data).get("date", 0)
    except (ValueError, AttributeError):
        return 0
    return date if isinstance(date, int) else 0


def described(entry: Entry, verdict: bool | None) -> LogRecord:
    """`log_record` with a member's verdict: False marks a COMMIT that did not take
    effect, or any other command that was a retry of one applied before (duplicate)."""
    record = log_record(entry, effective=verdict)
    if verdict is False and record.commit is None:
        record = replace(record, duplicate=True)
    return record


def header_of(record: LogRecord) -> list:
    """A record without its payloads, as `read_entries(payloads=False)` ships it."""
    staged = record.staged
    commit = record.commit
    return [record.index, record.term, record.type, record.count, record.timestamp_ms,
            None if staged is None else [staged.query_id, staged.batch_id, staged.partition,
                                         staged.attempt, staged.content_type],
            None if commit is None else [commit.query_id, commit.batch_id, list(commit.staged),
                                         commit.metadata, commit.effective],
            record.duplicate]


def record_from_header(header: list) -> LogRecord:
    index, term, kind, count, ts, staged, commit, duplicate = header
    return LogRecord(index, term, kind, None, b"", ts,
                     StagedInfo(*staged) if staged is not None else None,
                     CommitInfo(commit[0], commit[1], tuple(commit[2]), commit[3], commit[4])
                     if commit is not None else None, duplicate, count)
