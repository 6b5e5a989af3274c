"""``garlicfarm snapshot save | restore | status`` (issue 30, "Backup and restore"): a
backup of a running farm, restored into a new farm's first member, serves the same
entries at the same indexes; broken files fail naming the byte where they break."""
from __future__ import annotations

import io
import os
import struct
import threading

import pytest

from consensus.admin.backup import backup_status, main, restore_backup, save_backup
from consensus.admin.backup_format import CorruptBackup
from consensus.common.errors import IndexUnderflow
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)

COMPACTING = ["--snapshot-interval", "40", "--retain-entries", "30", "--segment-bytes", "4096"]


def _entries(client, first: int, last: int, endpoint: str | None = None) -> list:
    """read_entries over [first, last], page by page."""
    out, index = [], first
    while index <= last:
        page = client.read_entries(index, last + 1, max_bytes=64 << 10, endpoint=endpoint)
        out += page
        index = page[-1].index + 1
    return out


def _restored(backup: str, parent: str, cluster: str) -> LocalCluster:
    """A one-node LocalCluster whose node 1 starts from `backup` (its port is bound
    already, so the restore names the endpoint the node will have)."""
    farm = LocalCluster(1, data_dir=parent, cluster=cluster, fsync="never",
                        status_interval=5.0)
    restore_backup(backup, farm.node_dir(1), endpoint=farm.endpoint_of(1))
    return farm


def test_a_backup_of_a_farm_being_written_restores_the_same_entries_at_the_same_indexes(
        tmp_path):
    backup = str(tmp_path / "farm.gfb")
    stop, written = threading.Event(), []

    def writer(client) -> None:
        n = 0
        while not stop.is_set():
            written.append(client.append([b"live %d" % n])[0])
            n += 1

    with LocalCluster(3, fsync="never", status_interval=1.0) as source:
        source.wait_for_leader(30)
        with source.client(timeout=20) as client, source.client(timeout=20) as background:
            client.append_many([[b"journal %d" % i, b"more"] for i in range(50)])
            client.kv_put("colour", "green")
            client.kv_append("log", "a")
            staged = [client.stage("q", 1, p, 0, b"row %d" % p) for p in range(3)]
            commit = client.commit_batch("q", 1, staged, metadata={"rows": [1, 1, 1]})
            assert commit.committed
            thread = threading.Thread(target=writer, args=(background,), daemon=True)
            thread.start()
            wait_until(lambda: len(written) >= 5, 20, message="writes going on")
            before = len(written)
            doc = save_backup(client, backup, cluster="farm")
            wait_until(lambda: len(written) >= before + 5, 20, message="writes going on")
            stop.set()
            thread.join(20)
            # the backup is consistent as of a committed index, and the farm went on
            assert doc["first_index"] == 1 and doc["last_index"] >= commit.index
            assert client.last_applied() > doc["last_index"]
            source_entries = _entries(client, 1, doc["last_index"])
            kinds = {record.type for record in source_entries}
            assert {"journal", "kv", "staged", "commit"} <= kinds
    assert backup_status(backup)["entries"] == doc["last_index"]
    with _restored(backup, str(tmp_path / "new"), "farm-restored") as restored:
        restored.wait_for_leader(30)
        with restored.client(timeout=20) as client:
            assert _entries(client, 1, doc["last_index"]) == source_entries
            assert client.kv_get("colour") == "green"
            assert client.kv_get("log") == "a"
            assert client.batch_status("q", 1).committed
            # a new farm of one voter at the endpoint the restore named; it takes writes
            view = client.get_servers()
            assert view.voters == {1: restored.endpoint_of(1)}
            index, _ = client.append([b"after the restore"])
            assert index > doc["last_index"]
            # a second member joins with add-server and catches up
            new = restored.spawn()
            client.add_server(new, restored.endpoint_of(new), timeout=20)
            wait_until(lambda: client.log_bounds(restored.endpoint_of(new))[1] >= index, 30,
                       message=f"node {new} catching up")


def test_a_compacted_farm_round_trips_at_the_same_indexes_through_the_command(tmp_path):
    backup = str(tmp_path / "compacted.gfb")
    with LocalCluster(3, fsync="never", status_interval=5.0, extra_args=COMPACTING,
                      cluster="east") as source:
        leader = source.wait_for_leader(30)
        follower = source.endpoint_of(next(i for i in source.node_ids if i != leader))
        with source.client(timeout=20) as client:
            staged = [client.stage("q", 7, 0, 0, b"kept %d" % p) for p in range(4)]
            client.commit_batch("q", 7, staged, metadata={"rows": [1] * 4})
            n = 0
            while client.log_bounds(follower)[0] == 1:  # rounds until it compacted
                client.append_many([[b"round %d" % (n + i)] for i in range(20)])
                n += 20
                assert n < 5000, "the farm never compacted its log"
            client.kv_put("k", "v")
            # the save copies what the follower applied when it began: wait until that
            # includes the put
            put = client.last_applied()
            wait_until(lambda: client.log_bounds(follower)[1] >= put, 20,
                       message="the follower applying the kv put")
            out, err = io.StringIO(), io.StringIO()
            code = main(["save", backup, "--endpoints", source.endpoints, "--cluster", "east",
                         "--user", source.username, "--password", source.password,
                         "--member", follower, "--json"], out, err)
            assert code == 0, err.getvalue()
            status = backup_status(backup)
            first, last = status["first_index"], status["last_index"]
            assert first > 1 and status["snapshot"]["index"] >= first - 1
            assert status["cluster"] == "east" and status["entries"] == last - first + 1
            assert status["source"]["endpoint"] == follower
            source_entries = _entries(client, first, last, follower)
            with pytest.raises(IndexUnderflow):
                client.read_entries(first - 1, first, endpoint=follower)
    new = LocalCluster(1, data_dir=str(tmp_path / "new"), cluster="east-restored",
                       fsync="never", status_interval=5.0)
    out, err = io.StringIO(), io.StringIO()
    code = main(["restore", backup, "--data-dir", new.node_dir(1), "--endpoint",
                 new.endpoint_of(1)], out, err)
    assert code == 0, err.getvalue()
    assert "--cluster east-restored" in out.getvalue()
    with new:
        new.wait_for_leader(30)
        with new.client(timeout=20) as client:
            assert client.log_bounds()[0] == first
            assert _entries(client, first, last) == source_entries
            with pytest.raises(IndexUnderflow):     # compacted entries stay gone
                client.read_entries(first - 1, first)
            assert client.kv_get("k") == "v"
            assert client.batch_status("q", 7).committed


# --- broken files and a used directory --------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    """A backup with a snapshot and entries after it, from a one-node farm."""
    path = str(tmp_path_factory.mktemp("backup") / "one.gfb")
    with LocalCluster(1, fsync="never", status_interval=5.0,
                      extra_args=["--snapshot-interval", "20"]) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=20) as client:
            for i in range(3):
                client.append_many([[b"entry %d.%d" % (i, j)] for j in range(15)])
            save_backup(client, path, cluster="farm")
    assert backup_status(path)["snapshot"] is not None
    return path


def _records(blob: bytes) -> list[tuple[int, int]]:
    """(start, end) of the preamble and of each record of a valid file."""
    spans, at = [(0, 8)], 8
    while at < len(blob):
        (length,) = struct.unpack_from(">I", blob, at)
        spans.append((at, at + 8 + length))
        at += 8 + length
    return spans


def _start_of(spans: list[tuple[int, int]], position: int) -> int:
    return next(start for start, end in spans if start <= position < end)


def test_a_truncated_file_fails_naming_the_record_where_it_breaks(saved, tmp_path):
    blob = open(saved, "rb").read()
    spans = _records(blob)
    kinds = {blob[start + 8:start + 9]: start for start, _ in spans[1:]}
    assert set(kinds) == {b"H", b"S", b"E", b"T"}
    cuts = {3, spans[1][0] + 4, spans[1][0] + 20, kinds[b"S"] + 30, kinds[b"E"],
            kinds[b"E"] + 9, kinds[b"T"], len(blob) - 1}
    for cut in sorted(cuts):
        broken = tmp_path / f"cut-{cut}.gfb"
        broken.write_bytes(blob[:cut])
        expected = 0 if cut < 8 else _start_of(spans, cut)
        with pytest.raises(CorruptBackup) as caught:
            backup_status(str(broken))
        assert caught.value.offset == expected, (cut, str(caught.value))
        assert "truncated" in caught.value.reason
        err = io.StringIO()
        assert main(["status", str(broken)], io.StringIO(), err) == 2
        assert f"corrupt at byte {expected}" in err.getvalue()
        target = tmp_path / f"restore-{cut}"
        with pytest.raises(CorruptBackup):
            restore_backup(str(broken), str(target), endpoint="127.0.0.1:9")
        assert not target.exists(), "a failed restore left files behind"


def test_a_flipped_byte_fails_naming_the_record_that_holds_it(saved, tmp_path):
    blob = open(saved, "rb").read()
    spans = _records(blob)
    kinds = {blob[start + 8:start + 9]: start for start, _ in spans[1:]}
    positions = {0, 5, 7, spans[1][0] + 1, spans[1][0] + 5, spans[1][0] + 30,
                 kinds[b"S"] + 100, kinds[b"E"] + 12, kinds[b"E"] + 30, kinds[b"T"] + 20,
                 len(blob) - 1}
    for position in sorted(positions):
        damaged = bytearray(blob)
        damaged[position] ^= 0x10
        broken = tmp_path / f"flip-{position}.gfb"
        broken.write_bytes(bytes(damaged))
        with pytest.raises(CorruptBackup) as caught:
            backup_status(str(broken))
        offset = caught.value.offset
        if position < 8:
            assert offset in (0, 4, 6) and offset <= position, (position, str(caught.value))
        else:
            assert offset == _start_of(spans, position), (position, str(caught.value))


def test_restore_refuses_a_directory_that_is_not_empty(saved, tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "hardstate").write_bytes(b"someone's")
    err = io.StringIO()
    assert main(["restore", saved, "--data-dir", str(used), "--endpoint",
                 "127.0.0.1:9001"], io.StringIO(), err) == 2
    assert "--data-dir" in err.getvalue() and "not empty" in err.getvalue()
    assert os.listdir(used) == ["hardstate"]
    assert (used / "hardstate").read_bytes() == b"someone's"
    # and one given no dialable endpoint is refused before anything is written
    fresh = tmp_path / "fresh"
    err = io.StringIO()
    assert main(["restore", saved, "--data-dir", str(fresh), "--endpoint", "0.0.0.0:9001"],
                io.StringIO(), err) == 2
    assert "--endpoint" in err.getvalue() and not fresh.exists()
