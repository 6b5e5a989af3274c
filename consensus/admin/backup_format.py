"""The backup file of ``garlicfarm snapshot save`` (docs/operations.md, "Backup and
restore", has the layout): written front to back in one pass and read the same way,
never whole in memory.

    "GFBK" | version u16 | 2 reserved bytes
    records, each framed as the log's segment records (consensus/storage/record.py):
        length u32 | CRC-32 of (payload || length u32 || offset u64) u32 | payload
    where the payload's first byte is its kind:
        H  the header: UTF-8 JSON (cluster, source, first/last index, base term, the
           snapshot's index, term, size and configuration)
        S  the next bytes of the snapshot file (consensus/storage/snapshot.py's format,
           its own CRC included), in order, `snapshot.bytes` in all
        E  an entry: index u64 | term u64 | type u8 | data, indexes consecutive from
           `first_index` to `last_index`
        T  the trailer: UTF-8 JSON (counts, the last term, the configuration in force at
           the last index, `file_crc32`: CRC-32 of every byte before this record)
    and nothing after the trailer.

The record CRC covers the record's own offset (a record copied elsewhere does not pass),
so a flipped bit or a cut names the record, and its byte range, where the file breaks.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from consensus.common.errors import FarmError
from consensus.raft import Entry, EntryType
from consensus.storage.errors import CorruptLogError
from consensus.storage.record import HEADER, HEADER_SIZE, frame, payload_crc, record_crc
from consensus.storage.snapshot import FileCheck

MAGIC = b"GFBK"
VERSION = 1
_PREAMBLE = struct.Struct(">4sH2x")
_ENTRY = struct.Struct(">cQQB")
MAX_JSON_BYTES = 1 << 20
MAX_RECORD_BYTES = (32 << 20) + (1 << 16)   #: the largest entry (32 MiB) and its head
SNAPSHOT_CHUNK_BYTES = 1 << 20
_ENTRY_TYPES = {t.value: t for t in EntryType}


class CorruptBackup(FarmError):
    """A backup file that does not check out: `offset` is the byte where it breaks."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt at byte {offset}: {reason}; the file cannot be "
                         f"restored (save a new backup, or use another copy)")
        self.path, self.offset, self.reason = path, offset, reason


@dataclass(frozen=True)
class BackupHeader:
    cluster: str
    created_ms: int
    source: dict                #: {"node": id, "endpoint": ...}: the member it was read from
    first_index: int            #: the first entry in the file (the source's log start)
    base_term: int              #: the term of entry first_index - 1 (0 when first is 1)
    last_index: int             #: the last entry (committed at the source)
    snapshot: dict | None       #: {"index", "term", "bytes", "configuration"} or None

    def to_dict(self) -> dict:
        return {"version": VERSION, "cluster": self.cluster, "created_ms": self.created_ms,
                "source": self.source, "first_index": self.first_index,
                "base_term": self.base_term, "last_index": self.last_index,
                "snapshot": self.snapshot}


class BackupWriter:
    """Writes a backup to a binary file: `header`, `snapshot_chunk`s, `entry`s, `finish`."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.offset = 0
        self.crc = 0
        self.entries = 0
        self.snapshot_bytes = 0
        self._write(_PREAMBLE.pack(MAGIC, VERSION))

    def _write(self, data: bytes) -> None:
        self.file.write(data)
        self.crc = zlib.crc32(data, self.crc)
        self.offset += len(data)

    def _record(self, payload: bytes) -> None:
        self._write(frame(payload, self.offset))

    def header(self, header: BackupHeader) -> None:
        self._record(b"H" + _json(header.to_dict()))

    def snapshot_chunk(self, data: bytes) -> None:
        self.snapshot_bytes += len(data)
        self._record(b"S" + data)

    def entry(self, entry: Entry) -> None:
        self.entries += 1
        self._record(_ENTRY.pack(b"E", entry.index, entry.term, entry.type) + entry.data)

    def finish(self, last_term: int, configuration: str | None) -> dict:
        """Write the trailer; what it says."""
        trailer = {"entries": self.entries, "snapshot_bytes": self.snapshot_bytes,
                   "last_term": last_term, "configuration": configuration,
                   "file_crc32": self.crc}
        self._record(b"T" + _json(trailer))
        return trailer


class BackupReader:
    """Reads and checks a backup: `header` at once, then `items()` yields ("snapshot",
    bytes) chunks and ("entry", Entry) in file order, checking every record, the
    snapshot file, the indexes and at the end the trailer (`trailer` afterwards).
    Every failure is a CorruptBackup naming the byte offset."""

    def __init__(self, file: BinaryIO, path: str) -> None:
        self.file, self.path = file, path
        self.size = os.fstat(file.fileno()).st_size
        self.offset = 0
        self.crc = 0
        self.trailer: dict | None = None
        self.snapshot_meta: tuple[int, int, dict] | None = None  #: (index, term, meta)
        preamble = self._read(_PREAMBLE.size, 0, "the file's first bytes")
        magic, version = _PREAMBLE.unpack(preamble)
        if magic != MAGIC:
            raise CorruptBackup(path, 0, f"not a garlicfarm backup (magic {magic!r}, "
                                         f"expected {MAGIC!r})")
        if version != VERSION:
            raise CorruptBackup(path, 4, f"backup format version {version}; this garlicfarm "
                                         f"reads version {VERSION}")
        if preamble[6:] != bytes(2):
            raise CorruptBackup(path, 6, "reserved bytes are not zero")
        at, payload = self._next_record()
        if payload[:1] != b"H":
            raise CorruptBackup(path, at, "the first record is not the header")
        self.header = self._header(at, _parse_json(path, at, payload[1:]))

    # -- records ------------------------------------------------------------------------
    def _fail(self, offset: int, reason: str) -> CorruptBackup:
        return CorruptBackup(self.path, offset, reason)

    def _read(self, size: int, at: int, what: str) -> bytes:
        """`size` bytes of `what`, which starts at byte `at` (named when the file ends)."""
        data = self.file.read(size)
        if len(data) != size:
            raise self._fail(at, f"the file ends inside {what} (at byte "
                                 f"{self.offset + len(data)}): truncated")
        self.crc = zlib.crc32(data, self.crc)
        self.offset += size
        return data

    def _next_record(self) -> tuple[int, bytes]:
        at = self.offset
        if at == self.size:
            raise self._fail(at, "the file ends before its trailer: truncated")
        what = f"the record at byte {at}"
        length, crc = HEADER.unpack(self._read(HEADER_SIZE, at, what))
        if length > MAX_RECORD_BYTES or length == 0:
            raise self._fail(at, f"{what} declares {length} bytes (1..{MAX_RECORD_BYTES} "
                                 f"allowed)")
        if length > self.size - self.offset:
            raise self._fail(at, f"{what} declares {length} bytes, past the end of the file "
                                 f"({self.size} bytes): truncated or corrupt")
        payload = self._read(length, at, what)
        if record_crc(payload_crc(payload), length, at) != crc:
            raise self._fail(at, f"the record of bytes {at}-{self.offset - 1} fails its CRC")
        return at, payload

    def _header(self, at: int, doc: dict) -> BackupHeader:
        try:
            snapshot = doc["snapshot"]
            header = BackupHeader(str(doc["cluster"]), int(doc["created_ms"]),
                                  dict(doc["source"]), int(doc["first_index"]),
                                  int(doc["base_term"]), int(doc["last_index"]),
                                  dict(snapshot) if snapshot is not None else None)
            if snapshot is not None:
                for key in ("index", "term", "bytes"):
                    int(snapshot[key])
        except (KeyError, TypeError, ValueError) as exc:
            raise self._fail(at, f"the header lacks a field or has a wrong one ({exc!r})") \
                from None
        if header.first_index < 1 or header.last_index < header.first_index - 1:
            raise self._fail(at, f"the header's range {header.first_index}.."
                                 f"{header.last_index} is impossible")
        return header

    # -- the contents ---------------------------------------------------------------------
    def items(self) -> Iterator[tuple[str, object]]:
        header = self.header
        snapshot = header.snapshot
        check = FileCheck(self.path, int(snapshot["bytes"])) if snapshot else None
        expected = header.first_index
        last_term = header.base_term
        snapshot_bytes = entries = 0
        while True:
            crc_before = self.crc
            at, payload = self._next_record()
            kind = payload[:1]
            if kind == b"S":
                if check is None or expected != header.first_index:
                    raise self._fail(at, "a snapshot record where none belongs")
                data = payload[1:]
                try:
                    check.feed(data)
                except CorruptLogError as exc:
                    raise self._fail(at, f"snapshot bytes: {exc.reason}") from None
                snapshot_bytes += len(data)
                yield "snapshot", data
            elif kind == b"E":
                if check is not None and self.snapshot_meta is None:
                    self.snapshot_meta = self._finish_snapshot(at, check)
                entry = self._entry(at, payload, expected, last_term)
                expected, last_term = expected + 1, entry.term
                entries += 1
                yield "entry", entry
            elif kind == b"T":
                if check is not None and self.snapshot_meta is None:
                    self.snapshot_meta = self._finish_snapshot(at, check)
                self._trailer(at, _parse_json(self.path, at, payload[1:]), crc_before,
                              entries, snapshot_bytes, expected - 1, last_term)
                return
            else:
                raise self._fail(at, f"a record of unknown kind {kind!r}")

    def _finish_snapshot(self, at: int, check: FileCheck) -> tuple[int, int, dict]:
        try:
            index, term, meta = check.finish()
        except CorruptLogError as exc:
            raise self._fail(at, f"the snapshot before this record: {exc.reason}") from None
        snapshot = self.header.snapshot or {}
        if (index, term) != (int(snapshot["index"]), int(snapshot["term"])):
            raise self._fail(at, f"the snapshot is at index {index} term {term}; the header "
                                 f"says {snapshot['index']} term {snapshot['term']}")
        return index, term, meta

    def _entry(self, at: int, payload: bytes, expected: int, last_term: int) -> Entry:
        if len(payload) < _ENTRY.size:
            raise self._fail(at, f"an entry record of {len(payload)} bytes (at least "
                                 f"{_ENTRY.size})")
        _, index, term, kind = _ENTRY.unpack_from(payload)
        if index != expected:
            raise self._fail(at, f"entry {index} where entry {expected} belongs")
        if index > self.header.last_index:
            raise self._fail(at, f"entry {index} is past the header's last index "
                                 f"{self.header.last_index}")
        if term < last_term:
            raise self._fail(at, f"entry {index} has term {term}, below its predecessor's "
                                 f"{last_term}")
        entry_type = _ENTRY_TYPES.get(kind)
        if entry_type is None:
            raise self._fail(at, f"entry {index} has unknown type {kind}")
        return Entry(term, index, entry_type, payload[_ENTRY.size:])

    def _trailer(self, at: int, doc: dict, crc: int, entries: int, snapshot_bytes: int,
                 last_index: int, last_term: int) -> None:
        header = self.header
        try:
            counts = (int(doc["entries"]), int(doc["snapshot_bytes"]), int(doc["last_term"]),
                      int(doc["file_crc32"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise self._fail(at, f"the trailer lacks a field or has a wrong one ({exc!r})") \
                from None
        if counts[3] != crc:
            raise self._fail(at, f"the whole-file CRC-32 of bytes 0-{at} is {crc:#010x}; "
                                 f"the trailer says {counts[3]:#010x}")
        if last_index != header.last_index:
            raise self._fail(at, f"the entries end at {last_index}; the header says "
                                 f"{header.last_index}")
        snapshot = header.snapshot
        wanted_bytes = int(snapshot["bytes"]) if snapshot else 0
        if counts[:3] != (entries, snapshot_bytes, last_term) or \
                snapshot_bytes != wanted_bytes:
            raise self._fail(at, f"the trailer counts {counts[0]} entries, {counts[1]} "
                                 f"snapshot bytes, last term {counts[2]}; the file holds "
                                 f"{entries}, {snapshot_bytes} (header: {wanted_bytes}), "
                                 f"{last_term}")
        if self.offset != self.size:
            raise self._fail(self.offset, f"{self.size - self.offset} bytes after the trailer")
        self.trailer = doc


def _json(doc: dict) -> bytes:
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"a backup header or trailer of {len(data)} bytes (limit "
                         f"{MAX_JSON_BYTES})")
    return data


def _parse_json(path: str, at: int, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptBackup(path, at, f"the record at byte {at} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CorruptBackup(path, at, f"the record at byte {at} is not a JSON object")
    return doc
