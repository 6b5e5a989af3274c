"""One segment file of the log: a header, then records, and the in-memory index of them.

The file is named after the index of its first record (``00000000000000000001.seg``),
so finding the segment of an index and dropping whole segments needs no file reads.
The header (20 bytes): magic ``GFLG``, version u16, flags u16, first index u64, and a
CRC-32 of those 16 bytes. Flag `RESET` marks a segment created by `SegmentedLog.reset`:
recovery deletes every segment before it, which finishes a reset a crash interrupted.

`offsets[k]` is the byte offset of record k, rebuilt on open by one sequential scan, so
a read of records [a, b) is one pread of offsets[a]..end(b-1) and costs O(b - a). The
same scan can keep each record's first bytes (`record.Heads`) for the log's user.
"""
from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
import zlib
from array import array
from dataclasses import dataclass

from consensus.storage import record
from consensus.storage.errors import CorruptLogError, RecordTooLargeError
from consensus.storage.files import fsync_directory, read_exactly, remove_durably, write_all

MAGIC = b"GFLG"
VERSION = 1
FLAG_RESET = 1
_HEADER_BODY = struct.Struct(">4sHHQ")
HEADER_SIZE = _HEADER_BODY.size + 4
SUFFIX = ".seg"
TEMP_SUFFIX = SUFFIX + ".tmp"
_NAME = re.compile(r"^(\d{20})\.seg$")


def segment_name(first_index: int) -> str:
    return f"{first_index:020d}{SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The first index a segment file name stands for, or None for other files."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def encode_header(first_index: int, flags: int) -> bytes:
    body = _HEADER_BODY.pack(MAGIC, VERSION, flags, first_index)
    return body + struct.pack(">I", zlib.crc32(body))


def _header_problem(data: bytes, first_index: int) -> str | None:
    """Why `data` is not the header of the segment named `first_index`, or None."""
    magic, version, _flags, named = _HEADER_BODY.unpack_from(data)
    if magic != MAGIC:
        return f"bad magic {magic!r} (expected {MAGIC!r}): not a garlicfarm log segment"
    if struct.unpack_from(">I", data, _HEADER_BODY.size)[0] != zlib.crc32(data[:_HEADER_BODY.size]):
        return "segment header CRC mismatch"
    if version != VERSION:
        return f"segment format version {version} is not supported (this code reads {VERSION})"
    if named != first_index:
        return f"header says first index {named} but the file name says {first_index}"
    return None


@dataclass
class LoadedSegment:
    """What recovery learnt about one file: the segment, the heads of its records, and
    the bytes it cut off."""
    segment: "Segment"
    heads: record.Heads
    cut_at: int | None = None
    cut_bytes: int = 0


class Segment:
    """An open segment file. Not thread-safe: the log serialises access."""

    def __init__(self, path: str, first_index: int, fd: int, offsets: array, size: int,
                 flags: int) -> None:
        self.path = path
        self.first_index = first_index
        self.flags = flags
        self._fd = fd
        self.offsets = offsets
        self.size = size

    def __repr__(self) -> str:
        return f"Segment({self.path!r}, records {self.first_index}..{self.last_index})"

    @property
    def count(self) -> int:
        return len(self.offsets)

    @property
    def last_index(self) -> int:
        return self.first_index + len(self.offsets) - 1

    @property
    def next_index(self) -> int:
        return self.first_index + len(self.offsets)

    @classmethod
    def create(cls, directory: str, first_index: int, *, durable: bool,
               flags: int = 0) -> "Segment":
        """A new empty segment. It appears under its name only with a complete header:
        written to a temp file, fsynced, renamed, and the directory fsynced."""
        path = os.path.join(directory, segment_name(first_index))
        temp = path + ".tmp"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, [encode_header(first_index, flags)], 0)
            if durable:
                os.fsync(fd)
            os.replace(temp, path)
            if durable:
                fsync_directory(directory)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, first_index, fd, array("Q"), HEADER_SIZE, flags)

    @classmethod
    def load(cls, path: str, first_index: int, *, max_record_bytes: int,
             is_last: bool, head_bytes: int = 0) -> LoadedSegment | None:
        """Open an existing segment and index its records (keeping the first `head_bytes`
        bytes of each: `LoadedSegment.heads`).

        Damage in a segment other than the last raises CorruptLogError. In the last one,
        damage with no valid record after it is a torn tail: it is cut (truncated and
        fsynced). None means the last segment's header was never completely written (so
        nothing in it was ever durable): the caller removes the file."""
        fd = os.open(path, os.O_RDWR)
        try:
            loaded = cls._load(fd, path, first_index, max_record_bytes, is_last, head_bytes)
        except BaseException:
            os.close(fd)
            raise
        if loaded is None:
            os.close(fd)
        return loaded

    @classmethod
    def _load(cls, fd: int, path: str, first_index: int, max_record_bytes: int,
              is_last: bool, head_bytes: int) -> LoadedSegment | None:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEADER_SIZE, 0)
        problem = (f"file of {size} bytes is shorter than the segment header"
                   if len(head) < HEADER_SIZE else _header_problem(head, first_index))
        if problem is not None:
            if is_last and size <= HEADER_SIZE:
                return None
            raise CorruptLogError(path, 0, problem)
        flags = _HEADER_BODY.unpack_from(head)[2]
        offsets = array("Q")
        heads = record.Heads(head_bytes)
        damage = resumes = None
        if size > HEADER_SIZE:
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    damage = record.scan(view, HEADER_SIZE, max_record_bytes, offsets, heads)
                    if damage is not None and is_last and not damage.over_limit:
                        resumes = record.next_valid_record(view, damage)
                finally:
                    view.release()  # the map cannot close while a view exports it
        segment = cls(path, first_index, fd, offsets, size, flags)
        if damage is None:
            return LoadedSegment(segment, heads)
        if damage.over_limit:
            raise RecordTooLargeError(f"{path}: at byte {damage.offset}: {damage.reason}")
        if not is_last:
            raise CorruptLogError(path, damage.offset, f"{damage.reason} in a sealed segment")
        if resumes is not None:
            raise CorruptLogError(path, damage.offset,
                                  f"{damage.reason}, and valid records resume at byte "
                                  f"{resumes}, so this is not a torn tail")
        segment.cut(damage.offset)
        return LoadedSegment(segment, heads, damage.offset, size - damage.offset)

    def cut(self, size: int) -> None:
        """Truncate the file to `size` bytes and fsync it (recovery and truncation)."""
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)
        self.size = size

    def write(self, parts: list[bytes], starts: list[int], end: int) -> None:
        """Append `parts`, whole records beginning at the file offsets `starts` and
        ending at `end`. On an error the file is cut back to what it was."""
        try:
            write_all(self._fd, parts, self.size)
        except BaseException:
            os.ftruncate(self._fd, self.size)
            raise
        self.offsets.extend(starts)
        self.size = end

    def sync(self) -> None:
        os.fsync(self._fd)

    def record_end(self, k: int) -> int:
        return self.offsets[k + 1] if k + 1 < len(self.offsets) else self.size

    def read(self, a: int, b: int, max_bytes: int | None, at_least_one: bool) -> list[bytes]:
        """The payloads of records a..b-1, stopping before their sizes would pass
        `max_bytes` (but returning record a when `at_least_one`)."""
        if max_bytes is not None and b > a:
            b = self._fitting(a, b, max_bytes, at_least_one)
        if b <= a:
            return []
        return self._payloads(a, b)

    def _fitting(self, a: int, b: int, max_bytes: int, at_least_one: bool) -> int:
        """The largest stop in a..b whose records a..stop-1 hold at most `max_bytes`
        payload bytes (a + 1 at least when `at_least_one`). The payload bytes of a..j-1
        are the bytes between their offsets less their headers, which grow with j, so
        this is a binary search: O(log(b - a)), not a step per record."""
        offsets, first = self.offsets, self.offsets[a]

        def payload_bytes(j: int) -> int:
            return (offsets[j] if j < len(offsets) else self.size) - first \
                - record.HEADER_SIZE * (j - a)

        stop = a + bisect.bisect_right(range(a + 1, b + 1), max_bytes, key=payload_bytes)
        return max(stop, a + 1) if at_least_one else stop

    def _payloads(self, a: int, b: int) -> list[bytes]:
        """Records a..b-1 (a < b), checked (length and CRC): one pread, then
        `record.unframe_many` (no Python step per record)."""
        return self._piece(a, b, self._fd).read()

    def pin(self, a: int, b: int, max_bytes: int | None, at_least_one: bool
            ) -> "PinnedRecords | None":
        """Records a..b-1 as `read` would choose them, to be read later without the
        log's lock: the file's descriptor is duplicated, so a compaction that closes and
        deletes this segment meanwhile does not disturb the read. None when no record
        fits. The caller must `read()` or `close()` the result."""
        if max_bytes is not None and b > a:
            b = self._fitting(a, b, max_bytes, at_least_one)
        if b <= a:
            return None
        return self._piece(a, b, os.dup(self._fd), owned=True)

    def _piece(self, a: int, b: int, fd: int, *, owned: bool = False) -> "PinnedRecords":
        offsets = self.offsets
        ends = offsets[a + 1:b]
        ends.append(self.record_end(b - 1))
        return PinnedRecords(self.path, fd, offsets[a:b], ends, owned)


    def truncate(self, count: int, *, durable: bool) -> None:
        """Keep the first `count` records; the cut is fsynced when `durable`."""
        if count >= len(self.offsets):
            return
        size = self.offsets[count]
        os.ftruncate(self._fd, size)
        if durable:
            os.fsync(self._fd)
        del self.offsets[count:]
        self.size = size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self, *, durable: bool) -> None:
        """Close and delete the file; durably (directory fsynced) when `durable`."""
        self.close()
        if durable:
            remove_durably(self.path)
        else:
            os.unlink(self.path)


@dataclass
class PinnedRecords:
    """Records of one segment, located: their start and end offsets, and a descriptor
    to read them with (owned: closed by `read` or `close`)."""
    path: str
    fd: int
    starts: array
    ends: array
    owned: bool

    def read(self) -> list[bytes]:
        """The payloads, checked (length and CRC): one pread, then `record.unframe_many`
        (no Python step per record)."""
        try:
            base = self.starts[0]
            data = read_exactly(self.fd, self.ends[-1] - base, base)
            if data is None:
                raise CorruptLogError(self.path, base, "the file is shorter than the "
                                      "records indexed when it was opened (truncated by "
                                      "someone else?)")
            try:
                return record.unframe_many(data, base, self.starts, self.ends)
            except record.BadRecord as exc:
                raise CorruptLogError(self.path, exc.offset, exc.reason) from None
        finally:
            self.close()

    def close(self) -> None:
        if self.owned and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
