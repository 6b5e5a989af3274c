"""The map on disk: write-ahead log + snapshots on consensus.storage, real files."""
from __future__ import annotations

import os

import pytest

from connectors.chp.errors import DataDirError
from connectors.chp.kvmap import CloneMap
from connectors.chp.persist import MapStore
from connectors.chp.proto import Kvpub, Kvset
from connectors.chp.server import ServerConfig, _open_data_dir
from consensus.storage import CorruptLogError, LogInUseError

T0 = 1_795_333_620.0


def apply_logged(store: MapStore, clone: CloneMap, key: bytes, body: bytes,
                 props: bytes = b"") -> None:
    clone.apply(Kvset(key, 0, os.urandom(16), props, body), T0)
    store.append(clone.take_changes())
    store.sync()
    store.maybe_snapshot(clone)


def state(clone: CloneMap) -> tuple:
    return clone.sequence, sorted((e.key, e.sequence, e.uuid, e.properties, e.body,
                                   e.expires_ms) for e in clone.entries())


def test_recover_replays_the_log(tmp_path):
    store = MapStore(tmp_path)
    clone = store.recover()
    assert clone.sequence == 0 and clone.track_changes
    apply_logged(store, clone, b"/a", b"1", b"ttl=30\n")
    apply_logged(store, clone, b"/b", b"2")
    apply_logged(store, clone, b"/a", b"")
    store.close()
    store = MapStore(tmp_path)
    assert state(store.recover()) == state(clone)
    store.close()


def test_snapshots_bound_the_replay_and_recovery_matches(tmp_path):
    store = MapStore(tmp_path, snapshot_every=5)
    clone = store.recover()
    for n in range(23):
        apply_logged(store, clone, b"/k%d" % (n % 7), b"v%d" % n if n % 5 else b"")
    store.close()
    snapshots = sorted(os.listdir(tmp_path / "snapshots"))
    assert len(snapshots) == 2   # pruned to the newest two
    store = MapStore(tmp_path, snapshot_every=5)
    recovered = store.recover()
    assert state(recovered) == state(clone) and recovered.sequence == 23
    apply_logged(store, recovered, b"/after", b"x")
    assert recovered.sequence == 24
    store.close()


def test_replace_persists_a_wholesale_new_map(tmp_path):
    store = MapStore(tmp_path)
    clone = store.recover()
    apply_logged(store, clone, b"/old", b"1")
    adopted = CloneMap(track_changes=True)
    adopted.follow(Kvpub(b"/new", 40, bytes(16), b"", b"n"), T0)
    adopted.take_changes()
    store.replace(adopted)
    apply_logged(store, adopted, b"/later", b"l")
    store.close()
    store = MapStore(tmp_path)
    recovered = store.recover()
    assert state(recovered) == state(adopted)
    assert recovered.sequence == 41 and recovered.get(b"/old") is None
    store.close()


def test_a_torn_tail_loses_only_the_unfinished_record(tmp_path):
    store = MapStore(tmp_path, fsync="always")
    clone = store.recover()
    apply_logged(store, clone, b"/a", b"1")
    apply_logged(store, clone, b"/b", b"2")
    store.close()
    segment = next((tmp_path / "log").glob("*.seg"))
    size = segment.stat().st_size
    with open(segment, "r+b") as f:     # a crash in the middle of the last append
        f.truncate(size - 3)
    store = MapStore(tmp_path)
    recovered = store.recover()
    assert recovered.sequence == 1 and recovered.get(b"/a").body == b"1"
    assert recovered.get(b"/b") is None
    store.close()


def test_data_dir_in_use_or_damaged_is_a_clear_error(tmp_path):
    config = ServerConfig(port=20000, data_dir=str(tmp_path))
    store, clone = _open_data_dir(config)
    for n in range(3):
        apply_logged(store, clone, b"/k%d" % n, b"v" * 40)
    with pytest.raises(DataDirError, match="--data-dir") as err:
        _open_data_dir(config)
    assert isinstance(err.value.__cause__, LogInUseError)
    store.close()
    segment = next((tmp_path / "log").glob("*.seg"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF        # damage in the middle, not a torn tail
    segment.write_bytes(bytes(data))
    with pytest.raises(DataDirError, match="--data-dir") as err:
        _open_data_dir(config)
    assert isinstance(err.value.__cause__, CorruptLogError)
