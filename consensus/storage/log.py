"""The segmented durable log: append-only records with CRCs, fsync policies, group commit.

One engine serves the Raft log, the Dafka store and the driver's capture journal. Records
are opaque bytes numbered by consecutive indexes; the newest segment file takes appends,
older ones are sealed (fsynced when they were rolled over).

Threads. `_lock` guards the segments and counters; appends write to the OS under it and
return. Whatever may fsync or close a descriptor holds the *disk token* (`_disk_busy`,
guarded by the `_disk` condition) instead: `sync()` callers queue on it and the first one
to get it fsyncs once for every append written before its fsync began (group commit,
leader/followers), while new appends go on under `_lock`. truncate/compact/reset/close
take the token too, so no fsync ever runs on a descriptor they close.
Lock order: `_lock` may be held when taking `_disk`, never the other way round.
"""
from __future__ import annotations

import bisect
import os
import threading
from array import array
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from typing import Iterable, Iterator, Sequence

from consensus.storage import record
from consensus.storage.errors import (CompactedIndexError, CorruptLogError, FutureIndexError,
                                      LogClosedError, LogFailedError, RecordTooLargeError)
from consensus.storage.files import DirectoryLock
from consensus.storage.policy import FsyncPolicy
from consensus.storage.recovery import RecordHeads, RecoveryReport, recover
from consensus.storage.segment import FLAG_RESET, HEADER_SIZE, PinnedRecords, Segment

Payload = bytes | bytearray | memoryview
READ_ATTEMPTS = 3   #: reads of one call: off the lock (a truncation may void them), the last under it


@dataclass(frozen=True)
class LogStats:
    """Counters since the log was opened (for benchmarks and group-commit checks)."""
    records_appended: int
    bytes_appended: int  # framed bytes written, headers included
    fsyncs: int  # fsyncs of segment data (syncs, roll-overs, truncations)


class SegmentedLog:
    """A durable, thread-safe, append-only log of byte records. Use `SegmentedLog.open`."""

    def __init__(self, directory: str, policy: FsyncPolicy, segment_bytes: int,
                 max_record_bytes: int, segments: list[Segment], lock: DirectoryLock,
                 recovery: RecoveryReport, heads: RecordHeads) -> None:
        self.directory = directory
        self.policy = policy
        self._always = policy is FsyncPolicy.ALWAYS
        self.segment_bytes = segment_bytes
        self.max_record_bytes = max_record_bytes
        self.recovery = recovery
        self._heads: RecordHeads | None = heads
        self._segments = segments  # oldest first; the last one takes the appends
        self._firsts = [s.first_index for s in segments]  # for bisect
        self._dir_lock = lock
        self._lock = threading.Lock()
        self._disk = threading.Condition(threading.Lock())
        self._disk_busy = False
        self._writes = 0  # sequence number of the latest append call that wrote
        self._cuts = 0    # truncations that shortened a file: a read spanning one is redone
        self._durable_writes = 0  # every append call <= this is durable
        self._durable_index = self._last()
        self._records = 0
        self._bytes = 0
        self._fsyncs = 0
        self._closed = False
        self._failure: BaseException | None = None

    @classmethod
    def open(cls, directory: str | os.PathLike, fsync: FsyncPolicy | str = "batch",
             segment_bytes: int = 64 << 20, first_index: int = 1,
             max_record_bytes: int = 64 << 20, head_bytes: int = 0) -> "SegmentedLog":
        """Open the log in `directory`, creating it (starting at `first_index`) when it
        holds no segment, or recovering it: a torn tail is cut, nothing fsynced is lost,
        and damage anywhere else raises CorruptLogError. `first_index` is ignored for an
        existing log. `max_record_bytes` bounds appends (and so reads); recovery maps
        the files and checks each length against the file, so a corrupt length never
        allocates, and a valid record above a lowered limit raises RecordTooLargeError.
        Only one SegmentedLog may have a directory open at a time. Recovery keeps the
        first `head_bytes` bytes of each record for `take_heads`."""
        policy = FsyncPolicy.parse(fsync)
        _check_int("segment_bytes", segment_bytes, HEADER_SIZE + record.HEADER_SIZE + 1)
        _check_int("first_index", first_index, 0)
        _check_int("max_record_bytes", max_record_bytes, 0, record.MAX_LENGTH)
        _check_int("head_bytes", head_bytes, 0, record.MAX_LENGTH)
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        lock = DirectoryLock(directory)
        try:
            segments, report, heads = recover(directory, first_index=first_index,
                                              max_record_bytes=max_record_bytes,
                                              durable=policy.fsyncs, head_bytes=head_bytes)
        except BaseException:
            lock.release()
            raise
        return cls(directory, policy, segment_bytes, max_record_bytes, segments, lock, report,
                   heads)

    def __enter__(self) -> "SegmentedLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"SegmentedLog({self.directory!r}, fsync={self.policy.value!r}, "
                f"records {self.first_index}..{self.last_index})")

    # -- positions ---------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        """The index of the oldest record kept."""
        with self._lock:
            return self._segments[0].first_index

    @property
    def last_index(self) -> int:
        """The index of the newest record; first_index - 1 when the log is empty."""
        with self._lock:
            return self._last()

    @property
    def durable_index(self) -> int:
        """Every record <= this index is on disk (with NEVER: handed to the OS)."""
        return self._durable_index

    def _last(self) -> int:
        return self._segments[-1].last_index

    def take_heads(self) -> RecordHeads:
        """The heads of the records as opened (`RecordHeads`, `open`'s `head_bytes`),
        handed over once: the log drops them, so they take memory only while the caller
        decodes them (9 bytes a record make 90 MB at 10M records)."""
        heads, self._heads = self._heads, None
        if heads is None:
            raise ValueError(f"the record heads of the log in {self.directory} were "
                             f"already taken")
        return heads

    def stats(self) -> LogStats:
        with self._lock, self._disk:
            return LogStats(self._records, self._bytes, self._fsyncs)

    # -- appending ---------------------------------------------------------------------

    def append(self, payload: Payload) -> int:
        """Append one record; returns its index. Durable on return with ALWAYS."""
        return self._append(*zip(self._prepared(payload)))

    def append_many(self, payloads: Iterable[Payload]) -> int:
        """Append records in order with as few writes as possible; returns the index of
        the last one (last_index when `payloads` is empty). Every payload is checked
        before anything is written."""
        if type(payloads) is list and set(map(type, payloads)) <= {bytes}:
            sizes = list(map(len, payloads))     # the common case, without a call each
            if not sizes or max(sizes) <= self.max_record_bytes:
                return self._append(payloads, sizes,
                                    list(map(record.payload_crc, payloads)))
        prepared = [self._prepared(p) for p in payloads]
        return self._append(*(zip(*prepared) if prepared else ((), (), ())))

    def _append(self, payloads: Sequence[bytes], sizes: Sequence[int],
                crcs: Sequence[int]) -> int:
        """Write records given as columns (payload, size, payload CRC)."""
        with self._lock:
            self._check_usable()
            if payloads:
                self._write(payloads, sizes, crcs)
            written, last = self._writes, self._segments[-1].last_index
        if self._always and payloads:
            self._sync_to(written)
        return last

    def _prepared(self, payload: Payload) -> tuple[bytes, int, int]:
        if type(payload) is not bytes:
            if not isinstance(payload, (bytes, bytearray, memoryview)):
                raise TypeError(f"a log record must be bytes, not {type(payload).__name__}")
            payload = bytes(payload)  # a private copy: the CRC must match what is written
        size = len(payload)
        if size > self.max_record_bytes:
            raise RecordTooLargeError(
                f"a record of {size} bytes exceeds max_record_bytes={self.max_record_bytes} "
                f"of the log in {self.directory}; split it or open the log with a larger "
                f"max_record_bytes")
        return payload, size, record.payload_crc(payload)

    def _write(self, payloads: Sequence[bytes], sizes: Sequence[int],
               crcs: Sequence[int]) -> None:
        """Frame and write the records, rolling to a new segment when one is full (under
        _lock). A failed write poisons the log: what reached the disk is unknown."""
        segment = self._segments[-1]
        try:
            if not self._write_whole(segment, payloads, sizes, crcs):
                self._write_rolling(segment, zip(payloads, sizes, crcs))
        except OSError as exc:
            self._failure = exc
            raise
        self._writes += 1

    def _write_whole(self, segment: Segment, payloads: Sequence[bytes],
                     sizes: Sequence[int], crcs: Sequence[int]) -> bool:
        """All the records into `segment` in one write when they fit (the common case),
        headers built by `record.headers` with no Python step per record; False (and
        nothing written) when they do not."""
        ends = list(accumulate([record.HEADER_SIZE + size for size in sizes],
                               initial=segment.size))
        if ends[-1] > self.segment_bytes and (segment.offsets or len(sizes) > 1):
            return False
        starts = ends[:-1]
        parts: list[bytes] = [b""] * (2 * len(sizes))
        parts[0::2] = record.headers(sizes, crcs, starts)
        parts[1::2] = payloads
        self._flush(segment, parts, starts, ends[-1])
        return True

    def _write_rolling(self, segment: Segment, items: Iterable[tuple[bytes, int, int]]
                       ) -> None:
        """Record by record, rolling to a new segment whenever the next one would
        overflow the current segment (a record alone in a segment may)."""
        parts: list[bytes] = []
        starts: list[int] = []
        position = segment.size
        header = record.header
        for payload, size, crc in items:
            framed = record.HEADER_SIZE + size
            if (segment.offsets or starts) and position + framed > self.segment_bytes:
                self._flush(segment, parts, starts, position)
                segment = self._roll()
                parts, starts, position = [], [], segment.size
            parts += (header(size, crc, position), payload)
            starts.append(position)
            position += framed
        self._flush(segment, parts, starts, position)

    def _flush(self, segment: Segment, parts: list[bytes], starts: list[int],
               end: int) -> None:
        if starts:
            self._bytes += end - segment.size
            segment.write(parts, starts, end)
            self._records += len(starts)

    def _roll(self) -> Segment:
        """Seal the active segment (fsynced unless NEVER) and start the next one."""
        sealed = self._segments[-1]
        if self.policy.fsyncs:
            sealed.sync()
            with self._disk:
                self._fsyncs += 1
                self._durable_writes = self._writes
                self._durable_index = max(self._durable_index, sealed.last_index)
        segment = Segment.create(self.directory, sealed.next_index,
                                 durable=self.policy.fsyncs)
        self._segments.append(segment)
        self._firsts.append(segment.first_index)
        return segment

    # -- durability --------------------------------------------------------------------

    def sync(self) -> None:
        """Return once everything appended so far is durable. Concurrent callers share
        one fsync (group commit); with NEVER nothing is fsynced."""
        with self._lock:
            self._check_usable()
            target = self._writes
        self._sync_to(target)

    def _sync_to(self, target: int) -> None:
        with self._disk:
            while self._durable_writes < target and self._disk_busy:
                self._disk.wait()
            if self._durable_writes >= target:
                return
            self._disk_busy = True
        try:
            self._lead_sync()
        finally:
            self._release_token()

    def _lead_sync(self) -> None:
        """One fsync for every append written before it begins (holding the token)."""
        with self._lock:
            self._check_usable()
            segment, writes, last = self._segments[-1], self._writes, self._last()
        if self.policy.fsyncs:
            try:
                segment.sync()
            except OSError as exc:
                self._failure = exc
                raise
        with self._disk:
            self._fsyncs += self.policy.fsyncs
            self._durable_writes = max(self._durable_writes, writes)
            self._durable_index = max(self._durable_index, last)

    @contextmanager
    def synced_by_flush(self) -> Iterator[None]:
        """`sync()` for a caller that makes the files durable itself, with one flush of
        the filesystem for many logs (storage/filesystem_flush.py) inside the block. The
        disk token is held meanwhile; on a clean exit every append written before the
        block is durable; an OSError out of the block poisons the log as a failed fsync
        does. Nothing is held when everything is durable already, or under NEVER."""
        with self._lock:
            self._check_usable()
            target = self._writes
        with self._disk:
            while self._durable_writes < target and self._disk_busy:
                self._disk.wait()
            if self._durable_writes >= target or not self.policy.fsyncs:
                held = False
            else:
                self._disk_busy = held = True
        if not held:
            yield
            return
        try:
            with self._lock:
                self._check_usable()
                writes, last = self._writes, self._last()
            try:
                yield
            except OSError as exc:
                self._failure = exc
                raise
            with self._disk:
                self._fsyncs += 1
                self._durable_writes = max(self._durable_writes, writes)
                self._durable_index = max(self._durable_index, last)
        finally:
            self._release_token()

    @contextmanager
    def _disk_token(self) -> Iterator[None]:
        """Hold the disk token: no fsync runs, and none starts, meanwhile."""
        with self._disk:
            while self._disk_busy:
                self._disk.wait()
            self._disk_busy = True
        try:
            yield
        finally:
            self._release_token()

    def _release_token(self) -> None:
        with self._disk:
            self._disk_busy = False
            self._disk.notify_all()

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the disk token and _lock: no append, sync or read runs meanwhile. A
        failed file operation poisons the log (the files may be half changed)."""
        with self._disk_token(), self._lock:
            self._check_usable()
            try:
                yield
            except OSError as exc:
                self._failure = exc
                raise

    def _now_durable(self, fsyncs: int) -> None:
        """After a structural change fsynced what remains (under _exclusive)."""
        self._writes += 1
        with self._disk:
            self._fsyncs += fsyncs
            self._durable_writes = self._writes
            self._durable_index = self._last()

    # -- reading -----------------------------------------------------------------------

    def get(self, index: int) -> bytes:
        """The payload of record `index`."""
        with self._lock:
            self._check_usable()
            self._check_range(index, index + 1)
            segment = self._segments[bisect.bisect_right(self._firsts, index) - 1]
            return segment.read(index - segment.first_index, index - segment.first_index + 1,
                                None, True)[0]

    def read(self, start: int, stop: int, *, max_bytes: int | None = None) -> list[bytes]:
        """The payloads of records [start, stop): at least one when start < stop, then as
        many as fit in `max_bytes` payload bytes. Costs O(stop - start). Thread-safe:
        the records are located under the lock, read and checked after it (on
        duplicated descriptors), so a large read never holds up appends, and a segment
        compacted away meanwhile is still read whole."""
        if max_bytes is not None:
            _check_int("max_bytes", max_bytes, 0)
        if start > stop:
            raise ValueError(f"read(start={start}, stop={stop}): start is after stop")
        # Read off the lock, then check no truncation cut a file meanwhile (its bytes may
        # be short, or rewritten by later appends); such a read is redone, the last time
        # under the lock, so a reader always gets records the log held at one moment.
        for _ in range(READ_ATTEMPTS - 1):
            with self._lock:
                cuts, pieces = self._cuts, self._pin(start, stop, max_bytes)
            try:
                payloads = self._read_pieces(pieces)
            except CorruptLogError:
                with self._lock:
                    if self._cuts == cuts:
                        raise
                continue
            with self._lock:
                if self._cuts == cuts:
                    return payloads
        with self._lock:
            return self._read_pieces(self._pin(start, stop, max_bytes))

    def pin(self, start: int, stop: int, *, max_bytes: int | None = None
            ) -> list[PinnedRecords]:
        """Records [start, stop) as `read` would choose them, located now, to be read
        later by anyone holding the pins' descriptors (e.g. another process they are
        sent to): a compaction meanwhile does not disturb them. Sealed records only
        (committed ones): a truncation would void the pins. The caller closes them."""
        if max_bytes is not None:
            _check_int("max_bytes", max_bytes, 0)
        with self._lock:
            return self._pin(start, stop, max_bytes)

    def _pin(self, start: int, stop: int, max_bytes: int | None) -> list[PinnedRecords]:
        """Locate records [start, stop) as `read` chooses them (under _lock)."""
        self._check_usable()
        self._check_range(start, stop)
        pieces: list[PinnedRecords] = []
        try:
            position = bisect.bisect_right(self._firsts, start) - 1
            index, budget = start, max_bytes
            while index < stop:
                segment = self._segments[position]
                a = index - segment.first_index
                b = min(stop, segment.next_index) - segment.first_index
                piece = segment.pin(a, b, budget, not pieces)
                if piece is None:
                    break
                pieces.append(piece)
                got = len(piece.starts)
                index += got
                if got < b - a:
                    break
                if budget is not None:
                    budget -= piece.ends[-1] - piece.starts[0] - record.HEADER_SIZE * got
                position += 1
        except BaseException:
            for piece in pieces:
                piece.close()
            raise
        return pieces

    @staticmethod
    def _read_pieces(pieces: list[PinnedRecords]) -> list[bytes]:
        """The pinned records' payloads, checked; the pins are closed either way."""
        try:
            payloads: list[bytes] = []
            for piece in pieces:
                payloads += piece.read()
            return payloads
        finally:
            for piece in pieces:
                piece.close()

    def read_joined(self, start: int, stop: int, *, max_bytes: int | None = None
                    ) -> tuple[array, bytes]:
        """Like `read`, packed: (the payload lengths as an array('I'), the payloads
        concatenated). For readers that ship many records as one buffer (the Dafka
        store's bulk answers): every record is checked as by `read`, and the payloads
        are joined once, with no Python step per record."""
        payloads = self.read(start, stop, max_bytes=max_bytes)
        return array("I", map(len, payloads)), b"".join(payloads)

    def _check_range(self, start: int, stop: int) -> None:
        first, last = self._segments[0].first_index, self._last()
        if start < first:
            raise CompactedIndexError(start, first, last)
        if stop > last + 1:
            raise FutureIndexError(max(start, last + 1), first, last)

    # -- cutting -----------------------------------------------------------------------

    def truncate_after(self, index: int) -> None:
        """Drop every record > `index`, durably (the cut is fsynced before returning)."""
        with self._exclusive():
            first, last = self._segments[0].first_index, self._last()
            if index >= last:
                return
            if index < first - 1:
                raise CompactedIndexError(index, first, last)
            durable = self.policy.fsyncs
            while len(self._segments) > 1 and self._segments[-1].first_index > index:
                self._segments.pop().remove(durable=durable)  # newest first
                self._firsts.pop()
            active = self._segments[-1]
            self._cuts += 1
            active.truncate(index + 1 - active.first_index, durable=durable)
            self._now_durable(fsyncs=durable)

    def compact_before(self, index: int) -> None:
        """Delete the segments whose records are all < `index` (never the newest one).
        Records < index in a kept segment stay readable: first_index may stay below."""
        with self._exclusive():
            while len(self._segments) > 1 and self._segments[1].first_index <= index:
                self._segments.pop(0).remove(durable=self.policy.fsyncs)  # oldest first
                self._firsts.pop(0)

    def reset(self, first_index: int) -> None:
        """Drop every record; the next append gets `first_index` (after a snapshot is
        installed). A crash in the middle leaves the old log, a prefix of it, or the
        new empty one: the new segment is flagged so recovery can finish the job."""
        _check_int("first_index", first_index, 0)
        with self._exclusive():
            durable = self.policy.fsyncs
            while self._segments and self._segments[-1].first_index >= first_index:
                self._segments.pop().remove(durable=durable)  # frees the new file name
            fresh = Segment.create(self.directory, first_index, durable=durable,
                                   flags=FLAG_RESET)
            for old in self._segments:
                old.remove(durable=durable)
            self._segments[:] = [fresh]
            self._firsts[:] = [first_index]
            self._now_durable(fsyncs=durable)

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Make what was appended durable (unless NEVER or failed) and release the files.
        Closing twice is harmless."""
        with self._disk_token(), self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self.policy.fsyncs and self._failure is None:
                    self._segments[-1].sync()
            finally:
                for segment in self._segments:
                    segment.close()
                self._dir_lock.release()

    def _check_usable(self) -> None:
        if self._closed:
            raise LogClosedError(f"the log in {self.directory} is closed; open it again")
        if self._failure is not None:
            raise LogFailedError(
                f"the log in {self.directory} failed ({self._failure}); close it and open "
                f"it again, which recovers what reached the disk") from self._failure


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low \
            or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value!r}: must be an integer {bound}")
