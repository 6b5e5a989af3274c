"""The Raft core's `Storage` over the storage engine, and `SyncedDisk`, the runtime's disk for the Ready driver.

One node's data directory holds::

    log/            SegmentedLog: one record per Raft entry (term u64 | type u8 | data)
    hardstate       HardStateFile: term, vote, commit
    snapshots/      SnapshotStore: the state machine at sparse indexes; meta holds the
                    configuration in force there (Configuration.encode(), as text)
    log-base        the (index, term) of the entry just before the log's first record,
                    written before compacting or resetting (36 bytes, like hardstate)

Terms of every entry in the log are cached in memory (8 bytes each), so `term(i)` never
reads the disk: the leader asks for it on every AppendEntries it builds. The newest
entries themselves are kept too (`cache_entries`, `cache_bytes`): the core drops
entries from memory once persisted, then reads them back to apply them and to replicate
them, which would otherwise cost a disk read and a CRC check per entry.

Hard state: a new term or vote is saved (fsynced) at once, before the messages that
depend on it leave. A commit index that moved alone is saved at most every
`commit_save_interval` seconds, by a background thread, and on close: the commit index
is not needed for safety (a restarted node relearns it from the leader), and saving it
on every Ready would cost an fsync per Ready even with ``--fsync never``. Saves take
turns under a lock and never replace a newer term, vote or commit by an older one.
"""
from __future__ import annotations

import array
import logging
import os
import struct
import sys
import threading
import time
import zlib
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, Protocol, Sequence

from consensus.raft import Configuration, Entry, EntryType, HardState, Ready, Snapshot
from consensus.raft.entry import limit_size
from consensus.raft.errors import CompactedError, UnavailableError
from consensus.raft.retention import catch_up_index, compaction_point, snapshots_to_keep
from consensus.storage import (CorruptLogError, HardStateFile, RecordHeads, SegmentedLog,
                               SnapshotStore, StoredSnapshot)
from consensus.storage.errors import CompactedIndexError
from consensus.storage.files import replace_atomically
from consensus.storage.segment import PinnedRecords

if TYPE_CHECKING:
    from consensus.runtime.sync_rounds import SyncThread

log = logging.getLogger("garlicfarm.storage")
RECORD_HEAD = struct.Struct(">QB")
_BASE = struct.Struct(">4sQQI")     # magic, index, term, crc
_ENTRY_TYPES = {t.value: t for t in EntryType}


def encode_record(entry: Entry) -> bytes:
    return RECORD_HEAD.pack(entry.term, entry.type) + entry.data


def decode_record(index: int, payload: bytes) -> Entry:
    if len(payload) < RECORD_HEAD.size:
        raise CorruptLogError("log", index, f"record {index} has {len(payload)} bytes, "
                                            f"fewer than an entry header")
    term, kind = RECORD_HEAD.unpack_from(payload)
    entry_type = _ENTRY_TYPES.get(kind)
    if entry_type is None:
        raise CorruptLogError("log", index, f"record {index} has unknown entry type {kind}")
    return Entry(term, index, entry_type, payload[RECORD_HEAD.size:])


def write_log_base(data_dir: str, index: int, term: int) -> None:
    """Name the (index, term) of the entry just before the log's first record (the
    `log-base` file): before compacting, and when a restore lays out a data directory
    whose log starts after 1 (consensus/admin/backup.py)."""
    head = struct.pack(">4sQQ", b"GFLB", index, term)
    replace_atomically(os.path.join(data_dir, "log-base"),
                       [head, struct.pack(">I", zlib.crc32(head))])


class ReadCompacted(CompactedError):
    """A read's entries were compacted while it ran; `first_index` is the log's first
    index after the compaction (the storage may not say so yet)."""

    def __init__(self, first_index: int) -> None:
        super().__init__(f"compacted while read: the log starts at {first_index}")
        self.first_index = first_index


class DiskStorage:
    """`consensus.raft.Storage` on disk; `persist_*` methods are the Ready loop's writes."""

    def __init__(self, data_dir: str, *, fsync: str = "batch", segment_bytes: int = 64 << 20,
                 commit_save_interval: float = 1.0, keep_snapshots: int = 8,
                 cache_entries: int = 32768, cache_bytes: int = 32 << 20,
                 saver: "CommitSaver | None" = None) -> None:
        self.data_dir = data_dir
        os.makedirs(data_dir, exist_ok=True)
        self.log = SegmentedLog.open(os.path.join(data_dir, "log"), fsync=fsync,
                                     segment_bytes=segment_bytes,
                                     head_bytes=RECORD_HEAD.size)
        self.hard_state_file = HardStateFile(os.path.join(data_dir, "hardstate"))
        self.snapshots = SnapshotStore(os.path.join(data_dir, "snapshots"))
        self.keep_snapshots = keep_snapshots
        self.commit_save_interval = commit_save_interval
        self._base_path = os.path.join(data_dir, "log-base")
        self._hard = self.hard_state_file.load()
        self._saved_hard = self._hard
        self._saved_at = time.monotonic()
        self._file_lock = threading.Lock()
        self._lazy: tuple[HardState, int] | None = None
        self._version = self._saved_version = 0
        self._lazy_lock = threading.Lock()
        self._own_saver = saver is None     # a storage alone; a node's groups share one
        self._saver = saver if saver is not None else CommitSaver()
        self._latest = self._load_latest_snapshot()
        self._catch_up: Snapshot | None = None     # cached: the leader sends it in chunks
        self._first = self._recover_first_index()
        self._base_term = self._term_before_first()
        self._terms = array.array("q")
        self._types = bytearray()       # each entry's EntryType, beside its term
        self._load_terms(self.log.take_heads())
        self.cache_entries, self.cache_bytes = cache_entries, cache_bytes
        self._cache: list[Entry] = []       # the newest entries, the last one last
        self._cached_bytes = 0

    # -- start-up -------------------------------------------------------------------------
    def _load_latest_snapshot(self) -> Snapshot | None:
        stored = self.snapshots.latest()
        return _core_snapshot(stored) if stored is not None else None

    def _read_base(self) -> tuple[int, int] | None:
        try:
            with open(self._base_path, "rb") as f:
                data = f.read(_BASE.size + 1)
        except FileNotFoundError:
            return None
        if len(data) != _BASE.size:
            return None
        magic, index, term, crc = _BASE.unpack(data)
        if magic != b"GFLB" or crc != zlib.crc32(data[:-4]):
            return None
        return index, term

    def _write_base(self, index: int, term: int) -> None:
        write_log_base(self.data_dir, index, term)

    def _recover_first_index(self) -> int:
        """The first index the core may read: the log's, when we know the term of the
        entry before it; else just after the latest snapshot (entries below it are then
        ignored)."""
        first = self.log.first_index
        if first == 1:
            return 1
        base = self._read_base()
        if base is not None and base[0] == first - 1:
            return first
        covering = catch_up_index(self.snapshots.indexes(), first)
        if covering is not None:
            return covering + 1     # the snapshot that catches members up covers the base
        raise CorruptLogError(self.log.directory, 0, f"the log starts at {first} but neither "
                              f"log-base nor a snapshot tells the term of entry {first - 1}")

    def _term_before_first(self) -> int:
        if self._first == 1:
            return 0
        base = self._read_base()
        if base is not None and base[0] == self._first - 1:
            return base[1]
        return self.snapshots.get(self._first - 1).term

    def _load_terms(self, heads: RecordHeads) -> None:
        """Each entry's term and type from `heads`, the first bytes of each record that
        the log's recovery scan kept: the log is not read a second time. A chunk is
        split by slicing (no Python step per entry): its every 9th byte is a type, the
        rest the terms, big-endian."""
        for index in heads.short:
            if index >= self._first:        # raises: shorter than an entry header
                decode_record(index, self.log.get(index))
        size = RECORD_HEAD.size
        skip = (self._first - heads.first_index) * size  # entries below _first are ignored
        for chunk in heads.chunks:
            if skip >= len(chunk):
                skip -= len(chunk)
                continue
            heads_of_entries = chunk[skip:] if skip else chunk
            skip = 0
            self._types += heads_of_entries[size - 1::size]
            terms = bytearray(heads_of_entries)
            del terms[size - 1::size]
            self._terms.frombytes(terms)
        if sys.byteorder == "little":
            self._terms.byteswap()

    # -- Storage (what the core reads) ----------------------------------------------------
    def initial_state(self) -> HardState:
        return self._hard

    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return self._first + len(self._terms) - 1

    def term(self, index: int) -> int:
        offset = index - self._first
        if offset >= 0:
            try:
                return self._terms[offset]
            except IndexError:
                raise UnavailableError(f"index {index} is beyond the last index "
                                       f"{self.last_index()}") from None
        if offset == -1:
            return self._base_term
        raise CompactedError(f"index {index} is compacted (first index {self._first})")

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo < self._first:
            raise CompactedError(f"index {lo} is compacted (first index {self._first})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries up to {hi - 1} asked, last index is "
                                   f"{self.last_index()}")
        if lo >= hi:
            return []
        cache = self._cache
        if cache and lo >= cache[0].index:
            start = lo - cache[0].index
            return limit_size(cache[start:start + hi - lo], max_bytes)
        payloads = self.log.read(lo, hi, max_bytes=max_bytes)
        return limit_size([decode_record(lo + i, p) for i, p in enumerate(payloads)], max_bytes)

    def read_applied(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """`entries` for reader threads (consensus/runtime/log_reads.py): entries
        [lo, hi) that the loop appended and that are committed (no truncation touches
        them). Safe beside the loop's appends, fsyncs and compactions: the cache is read
        by one slice (atomic under the GIL) and used only if it holds exactly those
        entries (it may have been trimmed meanwhile), else the segments are read (the log
        is thread-safe). CompactedError when `lo` is below the first index, now or by
        the time the segments are read."""
        if lo < self._first:
            raise CompactedError(f"index {lo} is compacted (first index {self._first})")
        if lo >= hi:
            return []
        cache = self._cache
        try:
            offset = lo - cache[0].index
        except IndexError:
            offset = -1
        if offset >= 0:
            part = cache[offset:offset + hi - lo]
            if len(part) == hi - lo and part[0].index == lo and part[-1].index == hi - 1:
                return limit_size(part, max_bytes)
        try:
            payloads = self.log.read(lo, hi, max_bytes=max_bytes)
        except CompactedIndexError as exc:   # the log moved on before self._first did
            raise ReadCompacted(max(exc.first_index, self._first)) from None
        return limit_size([decode_record(lo + i, p) for i, p in enumerate(payloads)], max_bytes)

    def pin_applied(self, lo: int, hi: int, max_bytes: int | None = None
                    ) -> list[PinnedRecords]:
        """Entries [lo, hi) as `read_applied` would find them (lo < hi), located in the
        segments for the reader process (consensus/runtime/reader_process.py): with the
        same CompactedError when `lo` is compacted away, now or as the log is asked."""
        if lo < self._first:
            raise CompactedError(f"index {lo} is compacted (first index {self._first})")
        try:
            return self.log.pin(lo, hi, max_bytes=max_bytes)
        except CompactedIndexError as exc:   # the log moved on before self._first did
            raise ReadCompacted(max(exc.first_index, self._first)) from None

    def configuration_indexes(self) -> list[int]:
        """The indexes of the CONFIGURATION entries in the log, from the types kept
        beside the terms (bytes.find: no entry is read or decoded)."""
        found, kind, at = [], bytes([EntryType.CONFIGURATION]), self._types.find
        position = at(kind)
        while position >= 0:
            found.append(self._first + position)
            position = at(kind, position + 1)
        return found

    def snapshot(self) -> Snapshot | None:
        return self._latest

    def catch_up_snapshot(self) -> Snapshot | None:
        index = catch_up_index(self.snapshots.indexes(), self._first)
        if index is None:
            return None
        if self._catch_up is None or self._catch_up.index != index:
            self._catch_up = (self._latest if self._latest is not None
                              and self._latest.index == index
                              else _core_snapshot(self.snapshots.get(index)))
        return self._catch_up

    # -- the write side -------------------------------------------------------------------
    def install_snapshot(self, snapshot: Snapshot) -> None:
        """A snapshot received from the leader replaces the whole log."""
        self.save_snapshot(snapshot)
        self._write_base(snapshot.index, snapshot.term)
        self.log.reset(snapshot.index + 1)
        self._first = snapshot.index + 1
        self._base_term = snapshot.term
        self._terms = array.array("q")
        self._types = bytearray()
        self._cache, self._cached_bytes = [], 0
        self._prune()

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store a snapshot (the application's, or one received); `compact` prunes."""
        self.snapshots.save(snapshot.index, snapshot.term, snapshot.data,
                            {"configuration": snapshot.configuration.encode().decode()})
        if self._latest is None or snapshot.index >= self._latest.index:
            self._latest = snapshot

    def _prune(self) -> None:
        """Keep the newest `keep_snapshots` and the one that catches members up."""
        stored = self.snapshots.indexes()
        keep = snapshots_to_keep(stored, self._first, self.keep_snapshots)
        self.snapshots.prune_except(keep)

    def append(self, entries: Sequence[Entry]) -> bool:
        """Append entries, first dropping what the log holds at or after the first one;
        True when something was dropped."""
        first = entries[0].index
        last = self.last_index()
        truncated = first <= last
        if truncated:
            self.log.truncate_after(first - 1)
            del self._terms[first - self._first:], self._types[first - self._first:]
            self._cache, self._cached_bytes = [], 0
        elif first != last + 1:
            raise CorruptLogError(self.log.directory, 0, f"gap: appending {first} after {last}")
        self.log.append_many([encode_record(e) for e in entries])
        self._terms.extend(e.term for e in entries)
        self._types.extend(e.type for e in entries)
        self._remember(entries)
        return truncated

    def _remember(self, entries: Sequence[Entry]) -> None:
        """Keep the newest entries within cache_entries and cache_bytes (at least one)."""
        cache = self._cache
        cache.extend(entries)
        size = self._cached_bytes + sum(len(e.data) for e in entries)
        drop = 0
        while drop < len(cache) - 1 and (len(cache) - drop > self.cache_entries
                                         or size > self.cache_bytes):
            size -= len(cache[drop].data)
            drop += 1
        if drop:
            del cache[:drop]
        self._cached_bytes = size

    def sync(self) -> None:
        self.log.sync()

    def synced_by_flush(self) -> ContextManager[None]:
        """`sync` by the caller's flush of the filesystem inside the block (a round of
        many groups: consensus/runtime/sync_rounds.py)."""
        return self.log.synced_by_flush()

    @contextmanager
    def hard_state_by_flush(self, state: HardState) -> Iterator[Callable[[], None]]:
        """`save_hard_state(state, urgent=True)` by the caller's flushes: the temp file
        is written on entering; the caller flushes the filesystem, calls the yielded
        `publish` (the rename), flushes again and leaves; the state counts as saved only
        then (an error out of the block leaves the old one saved)."""
        self._hard = state
        self._version += 1
        version = self._version
        with self._file_lock:
            written = self._to_write(state, version)
            if written is None:
                yield lambda: None
                return
            with self.hard_state_file.save_by_flush(written) as publish:
                yield publish
            self._saved_hard, self._saved_version = written, version

    def save_hard_state(self, state: HardState, *, urgent: bool) -> None:
        """Save a new term or vote now (`urgent`); a new commit index alone lazily, at
        most every `commit_save_interval`, by a background thread (the save fsyncs, and
        the loop must not stall on it)."""
        self._hard = state
        self._version += 1
        if urgent:
            self._save_hard(state, self._version)
        elif time.monotonic() - self._saved_at >= self.commit_save_interval:
            self._saved_at = time.monotonic()
            with self._lazy_lock:
                self._lazy = (state, self._version)
            self._saver.due(self)

    def _save_hard(self, state: HardState, version: int) -> None:
        """Write `state` unless a later one (by `version`) was written: saves take turns,
        and a lazy save never replaces a vote cast meanwhile."""
        with self._file_lock:
            written = self._to_write(state, version)
            if written is not None:
                self.hard_state_file.save(written)
                self._saved_hard, self._saved_version = written, version

    def _to_write(self, state: HardState, version: int) -> HardState | None:
        """What a save of `state` (by `version`) writes, None when nothing: a later
        save was written, or this one is. Never a commit beyond what the log holds
        durably (a restart that finds a commit beyond its log refuses to start)."""
        if version <= self._saved_version:
            return None
        written = HardState(state.term, state.vote, min(state.commit, self.log.durable_index))
        return None if written == self._saved_hard else written

    def save_lazily_due(self) -> None:
        """The `CommitSaver`'s side: write the commit index handed to it, if any."""
        with self._lazy_lock:
            state, self._lazy = self._lazy, None
        if state is not None:
            try:
                self._save_hard(*state)
            except OSError as exc:      # the next save tries again; the commit index
                log.warning("saving the commit index failed: %s", exc)  # is optional

    def compact(self, needed_from: int) -> None:
        """Drop whole segments of entries below `needed_from` that a kept snapshot covers
        (retention.compaction_point: the log starts at most just after the newest
        snapshot at or below `needed_from - 1`, which then catches members up), then
        prune the snapshots."""
        point = compaction_point(self.snapshots.indexes(), needed_from)
        keep_from = min(point, self.last_index() + 1) if point is not None else self._first
        if keep_from <= self._first:
            self._prune()
            return
        self.log.sync()
        # The log drops whole segments, so it may start below keep_from. A crash before
        # log-base names the new start leaves a log whose base a kept snapshot covers
        # (see _recover_first_index).
        self.log.compact_before(keep_from)
        first = self.log.first_index
        if first > self._first:
            self._base_term = self.term(first - 1)
            self._write_base(first - 1, self._base_term)
            del self._terms[:first - self._first], self._types[:first - self._first]
            self._first = first
        self._prune()

    @property
    def log_bytes(self) -> int:
        """Bytes of the log's segment files (status reports)."""
        directory = self.log.directory
        return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
                   if not name.endswith(".lock"))

    def close(self) -> None:
        self._saver.forget(self)
        if self._own_saver:
            self._saver.close()
        try:
            self.log.sync()          # what was appended is durable: the commit may say so
            self._save_hard(self._hard, self._version + 1)
        finally:
            self.log.close()


class CommitSaver:
    """The thread that saves commit indexes lazily (a save fsyncs a small file, which
    the loop must not wait for), one per node, shared by its groups as the SyncThread
    is: a thread per group made a node of 1,000 partitions hold 1,000 threads. A save
    racing a storage's close is harmless: saves are ordered by version (`_save_hard`)."""

    def __init__(self) -> None:
        self._due: dict[int, DiskStorage] = {}
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="commit-saver")
        self._thread.start()

    def due(self, storage: DiskStorage) -> None:
        with self._cond:
            self._due[id(storage)] = storage
            self._cond.notify()

    def forget(self, storage: DiskStorage) -> None:
        with self._cond:
            self._due.pop(id(storage), None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due and not self._closing:
                    self._cond.wait()
                if not self._due:
                    return
                batch, self._due = self._due, {}
            for storage in batch.values():
                storage.save_lazily_due()

    def close(self) -> None:
        """Save what is due, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()


class DiskObserver(Protocol):
    """Who measures the disk (the metrics): seconds per append and per fsync."""

    def appended(self, seconds: float) -> None: ...

    def fsynced(self, seconds: float) -> None: ...

    def flushed_shared(self) -> None: ...


class SyncedDisk:
    """`DiskStorage` as the Ready driver's `Disk` (consensus.raft.driver): writes on the
    loop thread, fsyncs on the `SyncThread` (the loop goes on meanwhile), or at once
    under a policy that does not fsync (`fsyncs` False: the sync is then cheap)."""

    def __init__(self, storage: DiskStorage, *, fsyncs: bool, syncer: SyncThread,
                 observer: DiskObserver) -> None:
        self.storage = storage
        self.fsyncs = fsyncs
        self._appended = observer.appended
        self._syncer = syncer       #: shared by the node's groups (closed by the node)
        #: a new term or vote of the Ready being persisted (`expect`), saved by the syncer
        self._hard: HardState | None = None

    def write(self, rd: Ready) -> bool:
        if rd.snapshot is not None:
            self.storage.install_snapshot(rd.snapshot)
        if not rd.entries:
            return False
        started = time.perf_counter()
        truncated = self.storage.append(rd.entries)
        self._appended(time.perf_counter() - started)
        return truncated

    def expect(self, rd: Ready) -> None:
        """The Ready the driver persists next: its new term or vote goes with its sync."""
        self._hard = rd.hard_state if rd.term_or_vote_changed else None

    def start_sync(self) -> bool:
        if self.fsyncs:
            hard, self._hard = self._hard, None
            self._syncer.start(self.storage, hard)
            return True
        self.storage.sync()
        return False

    def sync_done(self) -> bool:
        return self._syncer.done(self.storage)

    def save_hard_state(self, state: HardState, *, urgent: bool) -> None:
        self.storage.save_hard_state(state, urgent=urgent)

    def close(self) -> None:
        """Close the storage (the node closed the `SyncThread` first: no fsync runs)."""
        self.storage.close()


def _core_snapshot(stored: StoredSnapshot) -> Snapshot:
    text = stored.meta.get("configuration")
    config = Configuration.decode(text.encode()) if text else Configuration.of(())
    return Snapshot(stored.index, stored.term, config, stored.data)


class SnapshotView:
    """`nearest_at_or_below` over the store, for two-step reads (core `SparseSnapshots`)."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store

    def nearest_at_or_below(self, index: int):
        return self.store.nearest_at_or_below(index)
