"""DiskStorage: the core's Storage over real files (log, hard state, snapshots, log-base)."""
from __future__ import annotations

import os

import pytest

from consensus.raft import (CompactedError, Configuration, Entry, EntryType, HardState,
                            RaftNode, RaftOptions, Snapshot, UnavailableError)
from consensus.runtime.disk_storage import DiskStorage, encode_record
from consensus.storage import CorruptLogError, SegmentedLog

CONFIG = Configuration.of([1, 2, 3], addresses={1: "h:1"})


def entries(first, last, term=1):
    return [Entry(term, i, EntryType.APPLICATION, b"e%d" % i) for i in range(first, last + 1)]


def test_entries_and_terms_survive_a_restart(tmp_path):
    storage = DiskStorage(str(tmp_path), fsync="always")
    storage.append(entries(1, 5, term=1))
    assert storage.append(entries(4, 6, term=2)) is True      # 4.. replaced
    storage.save_hard_state(HardState(2, 1, 6), urgent=True)
    storage.close()
    again = DiskStorage(str(tmp_path))
    assert (again.first_index(), again.last_index()) == (1, 6)
    assert [again.term(i) for i in range(0, 7)] == [0, 1, 1, 1, 2, 2, 2]
    assert [e.data for e in again.entries(2, 5)] == [b"e2", b"e3", b"e4"]
    assert again.initial_state() == HardState(2, 1, 6)
    with pytest.raises(UnavailableError):
        again.term(7)
    again.close()


def test_configuration_entries_are_named_without_reading_the_log(tmp_path):
    def configuration(index, voters, term=1):
        return Entry(term, index, EntryType.CONFIGURATION,
                     Configuration.of(voters).encode())
    storage = DiskStorage(str(tmp_path), segment_bytes=200)
    storage.append([*entries(1, 4), configuration(5, [1, 2]), *entries(6, 9),
                    configuration(10, [1, 2, 3]), *entries(11, 30)])
    assert storage.configuration_indexes() == [5, 10]
    storage.append([configuration(12, [1], term=2), *entries(13, 14, term=2)])   # 12.. replaced
    assert storage.configuration_indexes() == [5, 10, 12]
    storage.save_snapshot(Snapshot(8, 1, Configuration.of([1, 2]), b"state-8"))
    storage.compact(9)
    first = storage.first_index()
    assert 5 < first <= 9
    assert storage.configuration_indexes() == [10, 12]
    storage.save_hard_state(HardState(2, 1, 14), urgent=True)
    storage.close()
    again = DiskStorage(str(tmp_path), segment_bytes=200)
    assert again.configuration_indexes() == [10, 12]
    node = RaftNode(1, again, RaftOptions(), applied=8)      # its configuration: entry 12's
    assert node.configuration == Configuration.of([1])
    again.install_snapshot(Snapshot(20, 2, Configuration.of([1, 2]), b"state-20"))
    assert again.configuration_indexes() == []
    again.close()


def test_a_moved_commit_index_alone_is_saved_lazily(tmp_path):
    storage = DiskStorage(str(tmp_path), commit_save_interval=3600)
    storage.append(entries(1, 3))
    storage.save_hard_state(HardState(1, None, 1), urgent=True)
    assert storage.hard_state_file.load().commit == 0     # never beyond what is durable
    storage.sync()
    storage.save_hard_state(HardState(1, None, 1), urgent=True)
    storage.save_hard_state(HardState(1, None, 3), urgent=False)
    assert storage.hard_state_file.load().commit == 1           # not yet
    storage.close()                                              # saved on close
    assert DiskStorage(str(tmp_path)).initial_state().commit == 3


def test_compaction_keeps_the_base_term_and_a_node_restarts_on_it(tmp_path):
    storage = DiskStorage(str(tmp_path), segment_bytes=200)
    storage.append(entries(1, 40, term=3))
    storage.save_snapshot(Snapshot(20, 3, CONFIG, b"state-20"))
    storage.save_snapshot(Snapshot(30, 3, CONFIG, b"state-30"))
    storage.compact(25)
    first = storage.first_index()
    assert 1 < first <= 21      # just after the newest snapshot below 25, at most
    assert storage.term(first - 1) == 3
    with pytest.raises(CompactedError):
        storage.entries(first - 1, first)
    storage.save_hard_state(HardState(3, 1, 40), urgent=True)
    storage.close()
    again = DiskStorage(str(tmp_path), segment_bytes=200)
    assert again.first_index() == first and again.term(first - 1) == 3
    node = RaftNode(1, again, RaftOptions(), applied=30)
    assert node.commit_index == 40 and node.configuration == CONFIG
    again.close()


def test_an_installed_snapshot_replaces_the_log(tmp_path):
    storage = DiskStorage(str(tmp_path))
    storage.append(entries(1, 5))
    storage.install_snapshot(Snapshot(100, 7, CONFIG, b"big state"))
    assert (storage.first_index(), storage.last_index(), storage.term(100)) == (101, 100, 7)
    storage.append(entries(101, 102, term=7))
    storage.close()
    again = DiskStorage(str(tmp_path))
    assert again.snapshot().data == b"big state" and again.snapshot().configuration == CONFIG
    assert (again.first_index(), again.last_index()) == (101, 102)
    again.close()


def test_the_entry_cache_serves_what_the_disk_holds(tmp_path):
    storage = DiskStorage(str(tmp_path), cache_entries=10, cache_bytes=1 << 20)
    storage.append(entries(1, 30))
    assert len(storage._cache) == 10 and storage._cache[0].index == 21
    assert storage.entries(15, 25) == entries(15, 24)          # disk, then cache
    assert storage.entries(25, 31, max_bytes=1) == entries(25, 25)
    storage.append(entries(28, 29, term=2))                    # truncation drops the cache
    assert storage.entries(27, 30) == entries(27, 27) + entries(28, 29, term=2)
    small = DiskStorage(str(tmp_path / "small"), cache_entries=100, cache_bytes=3)
    small.append(entries(1, 5))
    assert len(small._cache) == 1 and small.entries(1, 6) == entries(1, 5)
    storage.close()
    small.close()


def test_compaction_stops_at_a_kept_snapshot_that_catches_members_up(tmp_path):
    """Entries still needed below the latest snapshot stay, and the snapshot a lagging
    member is sent is one it can continue from with the log's entries (retention.py)."""
    storage = DiskStorage(str(tmp_path), segment_bytes=200, keep_snapshots=1)
    storage.append(entries(1, 60, term=2))
    for index in (10, 20, 30, 40, 50):
        storage.save_snapshot(Snapshot(index, 2, CONFIG, b"state-%d" % index))
    storage.compact(35)                 # entries from 35 on are still needed
    first = storage.first_index()
    assert 20 < first <= 31
    catch_up = storage.catch_up_snapshot()
    assert catch_up.index == 30 and catch_up.data == b"state-30"
    assert first - 1 <= catch_up.index < 35
    # pruning kept the newest one and the catch-up one, nothing else
    assert storage.snapshots.indexes() == [30, 50]
    assert storage.snapshot().index == 50
    storage.compact(20)                 # never backwards, never past what is needed
    assert storage.first_index() == first
    storage.close()
    again = DiskStorage(str(tmp_path), segment_bytes=200, keep_snapshots=1)
    assert again.first_index() == first and again.catch_up_snapshot().index == 30
    again.close()


def test_no_compaction_without_a_snapshot_below_what_is_needed(tmp_path):
    storage = DiskStorage(str(tmp_path), segment_bytes=200)
    storage.append(entries(1, 60))
    storage.save_snapshot(Snapshot(50, 1, CONFIG, b"state-50"))
    storage.compact(40)
    assert storage.first_index() == 1
    assert storage.catch_up_snapshot().index == 50     # first - 1 = 0: the oldest above
    storage.close()


def test_a_crash_before_log_base_is_written_recovers_at_the_catch_up_snapshot(tmp_path):
    """compact() drops segments, then names the new start in log-base: a crash between
    the two leaves a log whose base only a snapshot can tell."""
    storage = DiskStorage(str(tmp_path), segment_bytes=200, keep_snapshots=1)
    storage.append(entries(1, 60, term=4))
    for index in (20, 30, 50):
        storage.save_snapshot(Snapshot(index, 4, CONFIG, b"state-%d" % index))
    storage.compact(35)
    first = storage.first_index()
    assert 20 < first <= 31
    storage.close()
    (tmp_path / "log-base").unlink()
    again = DiskStorage(str(tmp_path), segment_bytes=200, keep_snapshots=1)
    assert again.first_index() == 31 and again.term(30) == 4
    assert [e.index for e in again.entries(31, 36)] == [31, 32, 33, 34, 35]
    again.close()


def terms_and_types(storage: DiskStorage) -> tuple:
    """What a restart rebuilds from the heads of the log's records."""
    first, last = storage.first_index(), storage.last_index()
    return (first, last, [storage.term(i) for i in range(first, last + 1)],
            bytes(storage._types), storage.configuration_indexes())


def restricted(state: tuple, first: int, last: int) -> tuple:
    """`terms_and_types` of entries first..last of a storage that held `state`."""
    lo, hi = first - state[0], last - state[0] + 1
    return (first, last, state[2][lo:hi], state[3][lo:hi],
            [i for i in state[4] if first <= i <= last])


def test_terms_and_types_after_a_restart_are_those_before(tmp_path):
    """A restart takes each entry's term and type from the heads recovery's scan kept
    (the log is not read twice): the same as before it, across segments, after a
    truncation, when the log starts below the first index (log-base lost after a
    compaction), and when recovery cuts a torn tail."""
    kinds = list(EntryType)

    def varied(first, last, term):      # distinct big terms, every type, varied sizes
        return [Entry((term << 40) + i, i, kinds[i % len(kinds)], b"d" * (1 + i % 5))
                for i in range(first, last + 1)]

    def reopen():
        return DiskStorage(str(tmp_path), segment_bytes=200, keep_snapshots=1)
    storage = reopen()
    storage.append(varied(1, 60, term=1))
    assert storage.append(varied(50, 70, term=2)) is True
    for index in (20, 40):
        storage.save_snapshot(Snapshot(index, storage.term(index), CONFIG, b"s"))
    storage.compact(25)
    first = storage.first_index()
    assert 11 < first < 21
    before = terms_and_types(storage)
    assert len(set(before[2])) == 70 - first + 1 and len(set(before[3])) == len(kinds)
    storage.close()
    again = reopen()
    assert terms_and_types(again) == before
    again.close()
    # without log-base, the core's log starts after a snapshot, above the log's start
    (tmp_path / "log-base").unlink()
    again = reopen()
    assert again.log.first_index == first
    assert terms_and_types(again) == restricted(before, 21, 70)
    again.close()
    # ... and several segments above it (the snapshot that covered the base is gone)
    again.snapshots.prune_except({40})
    again = reopen()
    assert terms_and_types(again) == restricted(before, 41, 70)
    again.close()
    # a torn tail: the last entry's record loses its last byte, its head intact
    last_segment = sorted((tmp_path / "log").glob("*.seg"))[-1]
    with open(last_segment, "r+b") as file:
        file.truncate(os.path.getsize(last_segment) - 1)
    again = reopen()
    assert again.log.recovery.cut_bytes > 0
    assert terms_and_types(again) == restricted(before, 41, 69)
    again.close()


def test_a_record_shorter_than_an_entry_header_is_named_at_start(tmp_path):
    DiskStorage(str(tmp_path)).close()
    with SegmentedLog.open(tmp_path / "log") as log:
        log.append_many([encode_record(e) for e in entries(1, 3)] + [b"\0" * 5]
                        + [encode_record(e) for e in entries(5, 6)])
    with pytest.raises(CorruptLogError, match="record 4 has 5 bytes, fewer than an entry "
                                              "header"):
        DiskStorage(str(tmp_path))


def test_a_short_record_below_the_first_index_is_ignored(tmp_path):
    """Entries below the first index (the log starts before it) are never decoded."""
    storage = DiskStorage(str(tmp_path))
    storage.save_snapshot(Snapshot(5, 2, CONFIG, b"state-5"))
    storage.close()
    with SegmentedLog.open(tmp_path / "log") as log:
        log.reset(5)
        log.append_many([b"\0" * 3] + [encode_record(e) for e in entries(6, 8, term=3)])
    again = DiskStorage(str(tmp_path))
    assert (again.first_index(), again.last_index()) == (6, 8)
    assert [again.term(i) for i in range(5, 9)] == [2, 3, 3, 3]
    again.close()
