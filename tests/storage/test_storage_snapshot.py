"""Snapshot files: atomic saves, sparse lookups, pruning, corruption."""
from __future__ import annotations

import os

import pytest

from consensus.storage import CorruptLogError, StoredSnapshot, SnapshotNotFoundError, SnapshotStore
from storage_testkit import flip_byte, payload


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(tmp_path / "snapshots")


def test_an_empty_store(store):
    assert (store.indexes(), store.latest(), store.nearest_at_or_below(100)) == ([], None, None)
    with pytest.raises(SnapshotNotFoundError, match="no snapshot at index 5"):
        store.get(5)
    with pytest.raises(KeyError):
        store.get(5)


def test_save_and_read_back(store):
    data = os.urandom(100_000)
    saved = store.save(10, 3, data, {"voters": [1, 2, 3], "note": "é"})
    assert saved == StoredSnapshot(10, 3, data, {"voters": [1, 2, 3], "note": "é"})
    assert store.get(10) == saved
    assert SnapshotStore(store.directory).latest() == saved  # a second store sees it
    assert store.save(11, 3, b"").meta == {}


def test_sparse_snapshots_answer_the_nearest_at_or_below(store):
    for index in (100, 200, 300):
        store.save(index, index // 100, payload(index), {"at": index})
    assert store.indexes() == [100, 200, 300]
    assert store.nearest_at_or_below(99) is None
    assert store.nearest_at_or_below(100).index == 100
    assert store.nearest_at_or_below(299).data == payload(200)
    assert store.nearest_at_or_below(10**9).index == store.latest().index == 300


def test_saving_the_same_index_replaces_it(store):
    store.save(5, 1, b"old")
    store.save(5, 2, b"new")
    assert store.get(5) == StoredSnapshot(5, 2, b"new", {})
    assert store.indexes() == [5]


def test_prune_keeps_the_newest(store):
    for index in range(1, 8):
        store.save(index * 10, 1, payload(index))
    with open(os.path.join(store.directory, f"{5:020d}.snap.tmp"), "wb") as file:
        file.write(b"left by a crash")
    store.prune(3)
    assert store.indexes() == [50, 60, 70]
    assert sorted(os.listdir(store.directory)) == [f"{i:020d}.snap" for i in (50, 60, 70)]
    store.prune(0)
    assert store.indexes() == []
    with pytest.raises(ValueError, match="keep=-1"):
        store.prune(-1)


def test_a_temp_file_is_not_a_snapshot(store):
    store.save(7, 1, b"seven")
    with open(os.path.join(store.directory, f"{9:020d}.snap.tmp"), "wb") as file:
        file.write(b"half")
    assert store.indexes() == [7] and store.latest().index == 7


@pytest.mark.parametrize("damage, message", [
    (lambda p: flip_byte(p, 60), "snapshot CRC mismatch"),
    (lambda p: flip_byte(p, 2), "bad magic"),
    (lambda p: os.truncate(p, 50), "do not add up"),
    (lambda p: os.truncate(p, 10), "at least 40 bytes"),
])
def test_a_damaged_snapshot_is_reported(store, damage, message):
    store.save(3, 1, b"x" * 100, {"k": "v"})
    path = os.path.join(store.directory, f"{3:020d}.snap")
    damage(path)
    with pytest.raises(CorruptLogError, match=message) as caught:
        store.latest()
    assert caught.value.file == path


def test_a_snapshot_renamed_to_another_index_is_caught(store):
    store.save(3, 1, b"three")
    os.rename(os.path.join(store.directory, f"{3:020d}.snap"),
              os.path.join(store.directory, f"{4:020d}.snap"))
    with pytest.raises(CorruptLogError, match="header says index 3"):
        store.get(4)


@pytest.mark.parametrize("args, error, message", [
    ((-1, 1, b""), ValueError, "snapshot index=-1"),
    ((1, 1, "text"), TypeError, "data must be bytes"),
    ((1, 1, b"", ["not", "a", "dict"]), TypeError, "meta must be a dict"),
    ((1, 1, b"", {"x": object()}), ValueError, "not JSON-serialisable"),
    ((1, 1, b"", {"x": float("nan")}), ValueError, "not JSON-serialisable"),
])
def test_bad_arguments_are_refused_before_writing(store, args, error, message):
    with pytest.raises(error, match=message):
        store.save(*args)
    assert os.listdir(store.directory) == []
