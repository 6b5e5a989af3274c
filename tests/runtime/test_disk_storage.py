"""DiskStorage: the core's Storage over real files (log, hard state, snapshots, log-base)."""
from __future__ import annotations

import pytest

from consensus.raft import (CompactedError, Configuration, Entry, EntryType, HardState,
                            RaftNode, RaftOptions, Snapshot, UnavailableError)
from consensus.runtime.disk_storage import DiskStorage

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
