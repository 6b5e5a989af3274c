"""Failover of a partitioned farm under a keyed stream (issue 28, item 4): SIGKILL the
node that leads a third of 6 partitions while a writer per partition appends keyed
records; every partition has a leader again within the deadline, and every acknowledged
record is in its partition, once, each key's records in write order.
(benchmarks/failover.py measures the time over many kills.)"""
from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from consensus.common.errors import FarmError
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

PARTITIONS = 6
KEYS = 12                   #: key k lives in partition k % PARTITIONS
FAILOVER_DEADLINE = 5.0     #: seconds; the election timeout is 0.3-0.6 s


def leaders(farm: LocalCluster) -> dict[int, int]:
    """partition -> the running node that says it leads it (short timeouts: polled
    through the failover)."""
    return farm.partition_leaders(timeout=2, answer_timeout=0.5)


class KeyedWriter(threading.Thread):
    """Appends "key-<k>:<seq>" to key k's partition, one key after the other, each
    append waited for; keeps the acknowledged records and the failures."""

    def __init__(self, farm: LocalCluster, partition: int) -> None:
        super().__init__(daemon=True)
        self.client = farm.client(partition=partition, timeout=10)
        self.keys = [k for k in range(KEYS) if k % PARTITIONS == partition]
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        seq = 0
        with self.client:
            while not self.stop.is_set():
                record = f"key-{self.keys[seq % len(self.keys)]}:{seq}".encode()
                try:
                    self.client.append([record])
                    self.acked.append(record)
                except FarmError as exc:       # an answer lost in the kill: not acked
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                seq += 1


def journal(farm: LocalCluster, partition: int) -> list[bytes]:
    with farm.client(partition=partition, timeout=10) as client:
        start, applied, _ = client.log_bounds()
        records: list[bytes] = []
        while start <= applied:
            page = client.read_entries(start, applied + 1)
            records += [r for e in page if e.type == "journal" and not e.duplicate
                        for r in e.records]
            start = page[-1].index + 1
        return records


def test_killing_the_node_leading_a_third_of_6_partitions_fails_over_and_loses_nothing():
    with LocalCluster(nodes=3, partitions=PARTITIONS) as farm:
        # the balancer spreads the leaders: 2 each, so one node leads a third
        led = wait_until(lambda: (found := leaders(farm)) and len(found) == PARTITIONS
                         and max(Counter(found.values()).values()) == 2 and found,
                         timeout=30, interval=0.1, message="2 leaderships on each node")
        writers = [KeyedWriter(farm, p) for p in range(PARTITIONS)]
        for writer in writers:
            writer.start()
        wait_until(lambda: all(len(w.acked) >= 5 for w in writers), timeout=15,
                   message="every writer's first appends")
        victim = led[0]
        at = time.monotonic()
        farm.kill(victim)
        after = wait_until(lambda: (found := leaders(farm)) and len(found) == PARTITIONS
                           and found, timeout=FAILOVER_DEADLINE, interval=0.01,
                           message=f"a leader in every partition within "
                                   f"{FAILOVER_DEADLINE} s of killing n{victim}")
        took = time.monotonic() - at
        assert victim not in after.values()
        counts = [len(w.acked) for w in writers]
        wait_until(lambda: all(len(w.acked) >= c + 5 for w, c in zip(writers, counts)),
                   timeout=15, message="every writer's appends after the kill")
        for writer in writers:
            writer.stop.set()
        for writer in writers:
            writer.join(15)
            assert not writer.is_alive()
        for partition, writer in enumerate(writers):
            written, acked = journal(farm, partition), set(writer.acked)
            assert [r for r in written if r in acked] == writer.acked, \
                f"partition {partition}: an acknowledged record missing, twice or out of order"
            assert all(int(r.split(b"-")[1].split(b":")[0]) % PARTITIONS == partition
                       for r in written), f"partition {partition} holds another's key"
        print(f"failover {took:.3f} s; failed appends "
              f"{sum(len(w.failed) for w in writers)}")
