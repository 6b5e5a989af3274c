"""Crashes and partitions of real node processes: every acknowledged write survives, none
is applied twice, a minority cannot commit.

The kill -9 loop runs 3 times in CI; the long version is a documented command:
``GARLICFARM_KILL_LOOPS=50 .venv/bin/python -m pytest tests/runtime/test_failures.py -k kill``.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from collections import defaultdict

import pytest

from consensus.client import FarmError, Unavailable
from consensus.torture import LocalCluster
from consensus.torture.faultproxy import ProxyNetwork
from tests.support import wait_until

pytestmark = pytest.mark.timeout(300)
KILL_LOOPS = int(os.environ.get("GARLICFARM_KILL_LOOPS", "3"))


class Writer(threading.Thread):
    """Appends unique payloads one after the other; remembers what was acknowledged
    (payload -> (index, term)), what failed maybe applied (`unknown`) and what failed
    certainly not applied (`refused`, FarmError.maybe_applied False), and when each
    acknowledgement came (`acked_at`, monotonic seconds)."""

    def __init__(self, farm: LocalCluster, name: str, timeout: float = 5) -> None:
        super().__init__(daemon=True)
        self.farm, self.prefix, self.timeout = farm, name.encode(), timeout
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.acked_at: list[float] = []
        self.unknown: set[bytes] = set()
        self.refused: set[bytes] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.farm.client(timeout=self.timeout) as client:
            n = 0
            while not self.stopping.is_set():
                payload = b"%s-%d" % (self.prefix, n)
                n += 1
                try:
                    self.acked[payload] = client.append([payload],
                                                        request_id=uuid.uuid4().bytes)
                    self.acked_at.append(time.monotonic())
                except FarmError as exc:
                    (self.unknown if exc.maybe_applied else self.refused).add(payload)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive()


def committed_journal(farm: LocalCluster, node_id: int, last: int) -> dict[bytes, list]:
    """payload -> [(index, term)] of the journal entries that took effect at a member."""
    found: dict[bytes, list] = defaultdict(list)
    with farm.client(timeout=10) as client:
        index = 1
        while index <= last:
            page = client.read_entries(index, last + 1, endpoint=farm.endpoint_of(node_id))
            for record in page:
                if record.type == "journal" and not record.duplicate:
                    for payload in record.records:
                        found[payload].append((record.index, record.term))
            index = page[-1].index + 1
    return found


def check_history(farm: LocalCluster, writers: list[Writer]) -> None:
    with farm.client(timeout=10) as client:
        # The highest commit index of any member: the member the client takes for the
        # leader may be a deposed one, whose commit index lags what was acknowledged.
        last = max(client.log_bounds(farm.endpoint_of(node_id))[1]
                   for node_id in farm.node_ids)
        for node_id in farm.node_ids:
            wait_until(lambda: client.log_bounds(farm.endpoint_of(node_id))[1] >= last, 30,
                       message=f"node {node_id} catching up")
    logs = {node_id: committed_journal(farm, node_id, last) for node_id in farm.node_ids}
    reference = logs[farm.node_ids[0]]
    assert all(log == reference for log in logs.values()), "members disagree"
    for writer in writers:
        assert writer.acked, "the writer never got a write through"
        for payload, where in writer.acked.items():
            assert reference.get(payload) == [where], f"{payload!r} acknowledged at {where}"
        for payload in writer.unknown:
            assert len(reference.get(payload, [])) <= 1, f"{payload!r} applied twice"
        for payload in writer.refused:
            assert payload not in reference, f"{payload!r} failed as not applied, but was"
    assert all(len(places) == 1 for places in reference.values()), "a payload applied twice"


def test_kill_9_of_the_leader_under_continuous_writes():
    with LocalCluster(3, fsync="batch", status_interval=1.0) as farm:
        farm.wait_for_leader(30)
        writers = [Writer(farm, f"w{i}") for i in range(2)]
        for writer in writers:
            writer.start()
        try:
            for loop in range(KILL_LOOPS):
                before = sum(len(w.acked) for w in writers)
                wait_until(lambda: sum(len(w.acked) for w in writers) > before + 20, 30,
                           message="writes going through")
                leader = farm.wait_for_leader(30)
                farm.kill(leader)
                new_leader = farm.wait_for_leader(30)
                assert new_leader != leader
                farm.restart(leader)
            before = sum(len(w.acked) for w in writers)
            wait_until(lambda: sum(len(w.acked) for w in writers) > before + 20, 30)
        finally:
            for writer in writers:
                writer.stop()
        check_history(farm, writers)


def test_full_restart_and_crash_of_every_node_keep_acknowledged_writes():
    with LocalCluster(3, fsync="batch", status_interval=1.0) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            first = client.append_many([[b"before-%d" % i] for i in range(50)])
            client.kv_put("survives", "yes")
        for node_id in farm.node_ids:
            assert farm.stop(node_id) == 0          # SIGTERM: a clean exit
        for node_id in farm.node_ids:
            farm.restart(node_id)
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            assert client.kv_get("survives") == "yes"
            second = client.append_many([[b"middle-%d" % i] for i in range(50)])
        for node_id in farm.node_ids:
            farm.kill(node_id)                       # every node crashes at once
        for node_id in farm.node_ids:
            farm.restart(node_id)
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            last = client.append([b"after"])[0]
        log = committed_journal(farm, farm.wait_for_leader(), last)
        for i, (index, term) in enumerate(first):
            assert log[b"before-%d" % i] == [(index, term)]
        for i, (index, term) in enumerate(second):
            assert log[b"middle-%d" % i] == [(index, term)]


def test_a_minority_partition_cannot_commit():
    with ProxyNetwork([1, 2, 3]) as network, \
            LocalCluster(3, fsync="never", status_interval=1.0,
                         peer_address=network.link) as farm:
        old = farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            client.append([b"before the partition"])
        network.isolate(old)
        # a client that keeps waiting for the old leader (it would otherwise go on to
        # the majority's new leader, as clients do, and the write would commit there)
        with farm.client(endpoints=farm.endpoint_of(old), timeout=2,
                         answer_timeout=5) as lonely:
            with pytest.raises(Unavailable) as failure:
                lonely.append([b"written to the minority"])
            assert failure.value.maybe_applied     # appended there, never answered
        majority = [i for i in farm.node_ids if i != old]
        with farm.client(endpoints=",".join(farm.endpoint_of(i) for i in majority),
                         timeout=20) as client:
            new_index, _ = client.append([b"written to the majority"])
            # each member of the majority names a leader among them (a plain ping() asks
            # any member the client knows, and it learns the isolated one's address too)
            leaders = {client.ping(farm.endpoint_of(i))["leader"] for i in majority}
            assert len(leaders) == 1 and leaders <= set(majority), leaders
        network.heal()
        with farm.client(timeout=20) as client:
            wait_until(lambda: client.log_bounds(farm.endpoint_of(old))[1] >= new_index, 30,
                       message="the old leader catching up")
            log = committed_journal(farm, old, client.log_bounds(farm.endpoint_of(old))[1])
        assert b"written to the majority" in log
        assert b"written to the minority" not in log       # never committed, then dropped
        assert all(len(v) == 1 for v in log.values())


def test_a_new_local_cluster_on_the_same_data_dir_keeps_ports_and_data(tmp_path):
    with LocalCluster(3, data_dir=str(tmp_path), fsync="batch") as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            index, term = client.append([b"kept"])
        endpoints = farm.endpoints
    with LocalCluster(3, data_dir=str(tmp_path), fsync="batch") as farm:
        assert farm.endpoints == endpoints      # the nodes' logs name these endpoints
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            [record] = client.read_entries(index, index + 1)
            assert (record.term, record.records) == (term, [b"kept"])
    assert (tmp_path / "node-1" / "hardstate").exists()      # a given data_dir stays
