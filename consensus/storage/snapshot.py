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
class Snapshot:
    """The state at `index` (a record of term `term`), with free-form JSON `meta`
    (e.g. the cluster configuration)."""
    index: int
    term: int
    data: bytes
    meta: dict = field(default_factory=dict)


class SnapshotStore:
    """The snapshots in `directory` (created if needed). Thread-safe."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self._lock = threading.Lock()

    def _path(self, index: int) -> str:
        return os.path.join(self.directory, f"{index:020d}.snap")

    def save(self, index: int, term: int, data: bytes, meta: dict | None = None) -> Snapshot:
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
        return Snapshot(index, term, data, json.loads(meta_bytes))

    def indexes(self) -> list[int]:
        """The indexes of the stored snapshots, ascending."""
        return sorted(int(m.group(1)) for name in os.listdir(self.directory)
                      if (m := _NAME.match(name)) and not m.group(2))

    def get(self, index: int) -> Snapshot:
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

    def latest(self) -> Snapshot | None:
        """The snapshot with the highest index, or None."""
        stored = self.indexes()
        return self.get(stored[-1]) if stored else None

    def nearest_at_or_below(self, index: int) -> Snapshot | None:
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


def _decode(path: str, index: int, blob: bytes) -> Snapshot:
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
    return Snapshot(stored_index, term, blob[meta_end:end], meta)
