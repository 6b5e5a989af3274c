"""Sync rounds of many groups share one flush of the disk (syncfs): real files, real
node processes. The round's logs end durable and its votes saved, an error out of the
flush poisons the logs it covered, and a farm of many partitions elects them all with
fsync on, taking the shared path."""
from __future__ import annotations

import threading
import urllib.request

import pytest

from consensus.common.errors import ConfigError
from consensus.raft import Entry, EntryType, HardState
from consensus.runtime.config import NodeConfig
from consensus.runtime.disk_storage import DiskStorage
from consensus.runtime.sync_rounds import SyncThread
from consensus.storage import HardStateFile
from consensus.storage.errors import LogFailedError
from consensus.storage.filesystem_flush import filesystem_flush_available
from consensus.torture import LocalCluster
from tests.support import wait_until

needs_syncfs = pytest.mark.skipif(not filesystem_flush_available(),
                                  reason="syncfs(2) is Linux only")


class Counts:
    """The SyncThread's observer: what the node's metrics would count."""

    def __init__(self) -> None:
        self.fsyncs = self.shared = 0

    def fsynced(self, seconds: float) -> None:
        self.fsyncs += 1

    def flushed_shared(self) -> None:
        self.shared += 1


def entries(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, EntryType.APPLICATION, b"e%d" % i) for i in range(first, last + 1)]


def storages(tmp_path, count: int) -> list[DiskStorage]:
    made = []
    for k in range(count):
        storage = DiskStorage(str(tmp_path / f"group-{k}"), fsync="batch")
        storage.append(entries(1, 3 + k))
        made.append(storage)
    return made


def run_round(tmp_path, count: int, shared_from: int) -> tuple[Counts, list[DiskStorage]]:
    """`count` groups ask for a sync with a new vote each, all in one round: the first
    group's log is held busy (its disk token, as a sync in flight holds it) until every
    request is in, so the thread's first round is that group alone and the second is
    all the others."""
    groups = storages(tmp_path, count)
    counts = Counts()
    done = threading.Event()
    syncer = SyncThread(done.set, counts, shared_from=shared_from)
    try:
        first, rest = groups[0], groups[1:]
        with first.synced_by_flush():
            syncer.start(first, HardState(2, 1, 0))
            for storage in rest:
                syncer.start(storage, HardState(2, 1, 0))
        assert wait_until(lambda: all(syncer.done(s) for s in groups), timeout=20)
    finally:
        syncer.close()
    return counts, groups


@needs_syncfs
def test_a_round_of_many_groups_is_one_shared_flush_and_leaves_them_durable(tmp_path):
    counts, groups = run_round(tmp_path, 12, shared_from=4)
    assert counts.shared == 1                       # the 11 others: one shared round
    for storage in groups:
        assert storage.log.durable_index == storage.last_index()
        assert HardStateFile(f"{storage.data_dir}/hardstate").load() == HardState(2, 1, 0)
        storage.close()


def test_below_the_threshold_each_group_is_fsynced_on_its_own(tmp_path):
    counts, groups = run_round(tmp_path, 12, shared_from=0)
    assert counts.shared == 0 and counts.fsyncs == 12
    for storage in groups:
        assert storage.log.durable_index == storage.last_index()
        assert HardStateFile(f"{storage.data_dir}/hardstate").load() == HardState(2, 1, 0)
        storage.close()


def test_a_failed_flush_poisons_the_log_and_keeps_the_old_vote(tmp_path):
    storage = DiskStorage(str(tmp_path), fsync="batch")
    storage.append(entries(1, 5))
    storage.save_hard_state(HardState(1, 2, 0), urgent=True)
    with pytest.raises(OSError):
        with storage.hard_state_by_flush(HardState(3, 1, 0)) as publish:
            with storage.synced_by_flush():
                raise OSError(5, "EIO from the flush")
            publish()
    with pytest.raises(LogFailedError):
        storage.append(entries(6, 6))
    assert HardStateFile(f"{tmp_path}/hardstate").load() == HardState(1, 2, 0)
    storage.log.close()


def test_the_option_is_checked_at_the_edge(tmp_path):
    for bad in (-1, "4", True, 2_000_000):
        with pytest.raises(ConfigError, match="--shared-fsync-groups"):
            NodeConfig(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path),
                       shared_fsync_groups=bad)


def shared_flushes(farm: LocalCluster, node: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{farm.metrics_port(node)}/metrics",
                                  timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("garlicfarm_disk_shared_flushes_total "):
            return float(line.split()[1])
    raise AssertionError("no garlicfarm_disk_shared_flushes_total in /metrics")


@needs_syncfs
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("shared_from", [4, 0])
def test_a_farm_of_many_partitions_elects_with_fsync_on(shared_from):
    partitions = 24
    with LocalCluster(3, fsync="batch", partitions=partitions, metrics=True,
                      extra_args=["--shared-fsync-groups", str(shared_from)]) as farm:
        for p in range(partitions):
            farm.wait_for_leader(timeout=60, partition=p)
        with farm.client(partition=partitions - 1, timeout=10) as client:
            client.kv_put("k", "v")
            assert client.kv_get("k", consistency="read_index") == "v"
        flushes = [shared_flushes(farm, n) for n in farm.node_ids]
        if shared_from:
            assert sum(flushes) > 0, flushes        # 24 groups voting in a round share
        else:
            assert flushes == [0.0, 0.0, 0.0]
