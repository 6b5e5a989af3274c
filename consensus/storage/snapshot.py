"""Snapshot files: a state machine's data at a log index, several kept at once.

Sparse snapshots serve JournalKeeper's two-step reads: querySnapshot(index) answers from
the snapshot at that index, or replays the log from the nearest one at or below it.
One file per snapshot, named after its index (``00000000000000000042.snap``):

    magic "GFSN" | version u8 | 3 reserved | index u64 | term u64 | meta length u32 |
    data length u64 | meta (UTF-8 JSON object) | data | CRC-32 of all the bytes before

Saves are atomic (temp file, fsync, rename, directory fsync); a file that does not
check out raises CorruptLogError rather than being skipped.
"""
from __future__ import annotations

import bisect
import json
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Iterable

from consensus.storage.errors import CorruptLogError, StorageError
from consensus.storage.files import fsync_directory, replace_atomically

MAGIC = b"GFSN"
VERSION = 1
MAX_META_BYTES = 16 << 20
_HEADER = struct.Struct(">4sB3xQQIQ")
_CRC = struct.Struct(">I")
_NAME = re.compile(r"^(\d{20})\.snap(\.tmp)?$")
_U64 = (1 << 64) - 1


class SnapshotNotFoundError(StorageError, KeyError):
    """No snapshot is stored at the index asked for."""


@dataclass(frozen=True)
class StoredSnapshot:
    """The state at `index` (a record of term `term`), with free-form JSON `meta`
    (e.g. the cluster configuration)."""
    index: int
    term: int
    data: bytes
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotChunk:
    """Bytes [offset, offset + len(data)) of the snapshot *file* at `index` (the format
    above, CRC included: a copy is verified like the original), with the header's term
    and meta and the file's size, so a client copies a snapshot without it ever being
    whole in memory (backups: consensus/admin/backup.py)."""
    index: int
    term: int
    meta: dict
    file_size: int
    offset: int
    data: bytes


class SnapshotStore:
    """The snapshots in `directory` (created if needed). Thread-safe."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self._lock = threading.Lock()

    def _path(self, index: int) -> str:
        return os.path.join(self.directory, f"{index:020d}.snap")

    def save(self, index: int, term: int, data: bytes, meta: dict | None = None) -> StoredSnapshot:
        """Store a snapshot durably, replacing one at the same index."""
        for name, value in (("index", index), ("term", term)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _U64:
                raise ValueError(f"snapshot {name}={value!r}: must be an integer in 0..2**64-1")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"snapshot data must be bytes, not {type(data).__name__}")
        meta = {} if meta is None else meta
        if not isinstance(meta, dict):
            raise TypeError(f"snapshot meta must be a dict, not {type(meta).__name__}")
        try:
            meta_bytes = json.dumps(meta, sort_keys=True, separators=(",", ":"),
                                    allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"snapshot meta is not JSON-serialisable: {exc}") from None
        if len(meta_bytes) > MAX_META_BYTES:
            raise ValueError(f"snapshot meta is {len(meta_bytes)} bytes of JSON; the limit "
                             f"is {MAX_META_BYTES}: put bulky state in data")
        data = bytes(data)
        header = _HEADER.pack(MAGIC, VERSION, index, term, len(meta_bytes), len(data))
        crc = zlib.crc32(data, zlib.crc32(meta_bytes, zlib.crc32(header)))
        with self._lock:
            replace_atomically(self._path(index), [header, meta_bytes, data, _CRC.pack(crc)])
        return StoredSnapshot(index, term, data, json.loads(meta_bytes))

    def indexes(self) -> list[int]:
        """The indexes of the stored snapshots, ascending."""
        return sorted(int(m.group(1)) for name in os.listdir(self.directory)
                      if (m := _NAME.match(name)) and not m.group(2))

    def get(self, index: int) -> StoredSnapshot:
        """The snapshot at `index`; SnapshotNotFoundError when there is none."""
        path = self._path(index)
        try:
            with open(path, "rb") as file:
                blob = file.read()
        except FileNotFoundError:
            raise SnapshotNotFoundError(
                f"no snapshot at index {index} in {self.directory} "
                f"(stored: {self.indexes() or 'none'})") from None
        return _decode(path, index, blob)

    def read_chunk(self, index: int, offset: int, size: int) -> SnapshotChunk:
        """Up to `size` bytes of the file of the snapshot at `index` from `offset`, read
        without loading the rest; SnapshotNotFoundError when there is none (pruned)."""
        path = self._path(index)
        try:
            with open(path, "rb") as file:
                head = file.read(_HEADER.size)
                file_size = os.fstat(file.fileno()).st_size
                if len(head) < _HEADER.size:
                    raise CorruptLogError(path, len(head), "snapshot header cut short")
                magic, version, stored, term, meta_size, data_size = _HEADER.unpack(head)
                if magic != MAGIC or version != VERSION or stored != index or \
                        meta_size > MAX_META_BYTES or \
                        _HEADER.size + meta_size + data_size + _CRC.size != file_size:
                    raise CorruptLogError(path, 0, "snapshot header does not check out")
                try:
                    meta = json.loads(file.read(meta_size))
                except ValueError as exc:
                    raise CorruptLogError(path, _HEADER.size, f"snapshot meta is not JSON: "
                                                              f"{exc}") from None
                file.seek(offset)
                data = file.read(max(0, size))
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"no snapshot at index {index} in "
                                        f"{self.directory}") from None
        return SnapshotChunk(index, term, meta if isinstance(meta, dict) else {}, file_size,
                             offset, data)

    def save_file(self, index: int, chunks: Iterable[bytes]) -> None:
        """Store the snapshot *file* of `index` from `chunks` (its bytes in order, as
        `read_chunk` gives them), streamed to a temp file, fsynced, renamed; the caller
        checked them (`get` would refuse a bad file anyway)."""
        path = self._path(index)
        temp = path + ".tmp"
        with self._lock:
            with open(temp, "wb") as file:
                for chunk in chunks:
                    file.write(chunk)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, path)
            fsync_directory(self.directory)

    def latest(self) -> StoredSnapshot | None:
        """The snapshot with the highest index, or None."""
        stored = self.indexes()
        return self.get(stored[-1]) if stored else None

    def nearest_at_or_below(self, index: int) -> StoredSnapshot | None:
        """The snapshot with the highest index <= `index` (where a replay starts)."""
        stored = self.indexes()
        position = bisect.bisect_right(stored, index)
        return self.get(stored[position - 1]) if position else None

    def prune(self, keep: int) -> None:
        """Delete all but the newest `keep` snapshots (and temp files left below them)."""
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise ValueError(f"prune(keep={keep!r}): keep must be an integer >= 0")
        stored = self.indexes()
        self.prune_except(set(stored[len(stored) - keep:]) if keep else set())

    def prune_except(self, keep: set[int]) -> None:
        """Delete every snapshot whose index is not in `keep` (and temp files left below
        the oldest one kept)."""
        with self._lock:
            doomed = [index for index in self.indexes() if index not in keep]
            oldest_kept = min(keep, default=_U64 + 1)
            for name in os.listdir(self.directory):
                match = _NAME.match(name)
                if match and (int(match.group(1)) in doomed
                              or (match.group(2) and int(match.group(1)) < oldest_kept)):
                    os.unlink(os.path.join(self.directory, name))
            if doomed:
                fsync_directory(self.directory)


class FileCheck:
    """Checks a snapshot file streamed in chunks (a copy, a backup) as `get` checks a
    stored one, holding only its header and meta: `feed` the bytes in order, then
    `finish()` gives (index, term, meta) or raises CorruptLogError naming the offset
    within the file. `name` is what errors call the file."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size
        self._head = bytearray()
        self._fields: tuple | None = None
        self._crc = 0
        self._seen = 0
        self._tail = b""            # the last 4 bytes seen: the stored CRC at the end

    def feed(self, chunk: bytes) -> None:
        pos = self._seen
        if pos + len(chunk) > self.size:
            raise CorruptLogError(self.name, self.size, f"more bytes than the "
                                                        f"{self.size} declared")
        self._seen += len(chunk)
        crc_end = self.size - _CRC.size         # the CRC covers all but the last 4 bytes
        if pos < crc_end:
            self._crc = zlib.crc32(chunk[:crc_end - pos], self._crc)
        self._tail = (self._tail + chunk[-_CRC.size:])[-_CRC.size:]
        while True:         # keep the file's prefix: the header, then (once known) the meta
            limit = _HEADER.size + (self._fields[4] if self._fields else 0)
            at = len(self._head) - pos          # where the next prefix byte is in `chunk`
            if len(self._head) >= limit or at >= len(chunk):
                return
            self._head += chunk[at:at + limit - len(self._head)]
            if self._fields is not None or len(self._head) < _HEADER.size:
                return
            self._fields = self._check_header(bytes(self._head))

    def _check_header(self, head: bytes) -> tuple:
        fields = _HEADER.unpack(head)
        magic, version, _index, _term, meta_size, data_size = fields
        if magic != MAGIC:
            raise CorruptLogError(self.name, 0, f"bad magic {magic!r} (expected {MAGIC!r})")
        if version != VERSION:
            raise CorruptLogError(self.name, 4, f"snapshot format version {version} is "
                                                f"not supported (this code reads {VERSION})")
        if meta_size > MAX_META_BYTES or \
                _HEADER.size + meta_size + data_size + _CRC.size != self.size:
            raise CorruptLogError(self.name, 24, f"declared meta ({meta_size}) and data "
                                                 f"({data_size}) lengths do not add up to "
                                                 f"the file's {self.size} bytes")
        return fields

    def finish(self) -> tuple[int, int, dict]:
        if self._seen != self.size or self._fields is None:
            raise CorruptLogError(self.name, self._seen, f"snapshot file cut short "
                                                         f"({self._seen} of {self.size} bytes)")
        if _CRC.unpack(self._tail)[0] != self._crc:
            raise CorruptLogError(self.name, self.size - _CRC.size, "snapshot CRC mismatch")
        _magic, _version, index, term, meta_size, _data = self._fields
        try:
            meta = json.loads(bytes(self._head[_HEADER.size:_HEADER.size + meta_size]))
        except ValueError as exc:
            raise CorruptLogError(self.name, _HEADER.size, f"snapshot meta is not JSON: "
                                                           f"{exc}") from None
        if not isinstance(meta, dict):
            raise CorruptLogError(self.name, _HEADER.size, "snapshot meta is not a JSON object")
        return index, term, meta


def _decode(path: str, index: int, blob: bytes) -> StoredSnapshot:
    """Check every field of a snapshot file against its name and its size."""
    if len(blob) < _HEADER.size + _CRC.size:
        raise CorruptLogError(path, len(blob), f"a snapshot file has at least "
                                               f"{_HEADER.size + _CRC.size} bytes, found {len(blob)}")
    magic, version, stored_index, term, meta_size, data_size = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise CorruptLogError(path, 0, f"bad magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise CorruptLogError(path, 4, f"snapshot format version {version} is not "
                                       f"supported (this code reads {VERSION})")
    if meta_size > MAX_META_BYTES or _HEADER.size + meta_size + data_size + _CRC.size != len(blob):
        raise CorruptLogError(path, 24, f"declared meta ({meta_size}) and data ({data_size}) "
                                        f"lengths do not add up to the file's {len(blob)} bytes")
    end = len(blob) - _CRC.size
    if zlib.crc32(memoryview(blob)[:end]) != _CRC.unpack_from(blob, end)[0]:
        raise CorruptLogError(path, end, "snapshot CRC mismatch")
    if stored_index != index:
        raise CorruptLogError(path, 8, f"header says index {stored_index} but the file "
                                       f"name says {index}")
    meta_end = _HEADER.size + meta_size
    try:
        meta = json.loads(blob[_HEADER.size:meta_end])
    except ValueError as exc:
        raise CorruptLogError(path, _HEADER.size, f"snapshot meta is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise CorruptLogError(path, _HEADER.size, "snapshot meta is not a JSON object")
    return StoredSnapshot(stored_index, term, blob[meta_end:end], meta)
