"""A batch prepared across partitions and never decided is aborted after the farm's
--prepared-timeout (issue 28, item 3; docs/exactly-once.md, "An abandoned batch"), as
Kafka ends a transaction after transaction.timeout.ms: its partitions' readers go on
without it, a driver that decides it late gets an error naming the option (never
"duplicate"), and the restart's re-run commits it once. The driver's side
(`RoutedSinkBackend`) runs here against a real farm of 3 nodes x 3 partitions."""
from __future__ import annotations

import time
import uuid

import msgpack
import pytest

from consensus.client import FarmClient, FarmError
from consensus.common.partitions import ABORTED_KEY, PREPARED_TIMEOUT_KEY
from pyspark_farm import LocalFarm
from tests.spark.test_partition_commits import PARTITIONS, ROWS, Stop, _or_none, all_rows, \
    cut, members, routed, run_batch, shares, stop_commits, wait_for

pytestmark = pytest.mark.slow

TIMEOUT = 2.0       # long enough that the live commits here never meet it


@pytest.fixture(scope="module")
def farm():
    with LocalFarm(nodes=3, partitions=PARTITIONS,
                   extra_args=("--prepared-timeout", str(TIMEOUT))) as running:
        yield running


def expected(query: str, *batches: int) -> list[bytes]:
    return sorted(f"{query}-{b}-{t}-{n}".encode() for b in batches for t in range(2)
                  for n in range(ROWS // 2))


def replica_status(farm: LocalFarm, endpoint: str, query: str, batch: int):
    """Partition 0's batch_status as the member at `endpoint` has applied it."""
    with farm.client(partition=0) as client:
        return msgpack.unpackb(client.query_server(
            endpoint, msgpack.packb(["batch_status", query, batch])), raw=False)


def aborted(farm: LocalFarm, query: str, batch: int):
    with farm.client(partition=0) as client:
        status = client.batch_status(query, batch)
    return status if status is not None and status.aborted else None


def stall_decision(monkeypatch, stall) -> None:
    """The driver's call to partition 0 (its decision) first runs `stall(prepared_at)`,
    `prepared_at` the moment its last prepared commit returned."""
    real, seen = FarmClient.commit_batch, {"prepared_at": 0.0}

    def commit_batch(self, *args, **kwargs):
        if self.partition == 0:
            stall(seen["prepared_at"])
        result = real(self, *args, **kwargs)
        if self.partition != 0:
            seen["prepared_at"] = time.monotonic()
        return result
    monkeypatch.setattr(FarmClient, "commit_batch", commit_batch)


@pytest.mark.timeout(90)
def test_an_abandoned_batch_is_aborted_after_the_timeout_and_its_readers_go_on(
        farm, monkeypatch):
    """The driver dies after preparing partitions 1 and 2: not before --prepared-timeout,
    partition 0 aborts the batch; every member's readers then read past it (an entry
    written after it shows, the aborted rows never); partitions 1 and 2 forget the
    aborted commits; the restart re-runs the batch and goes on, every row once."""
    backend, query = routed(farm), f"q-{uuid.uuid4().hex[:8]}"
    first = run_batch(backend, query, 0, run=0)
    stop_commits(monkeypatch, decided=False)
    started = time.monotonic()
    with pytest.raises(Stop):
        backend.commit(query, 0, first)
    monkeypatch.undo()
    with farm.client(partition=1) as client:
        after, _ = client.append([f"{query}-after".encode()])
    status = wait_for(lambda: aborted(farm, query, 0), "partition 0 aborts batch 0",
                      TIMEOUT + 20)
    assert time.monotonic() - started >= TIMEOUT            # not before the timeout
    assert sorted(status.metadata[ABORTED_KEY]) == ["1", "2"]
    assert status.metadata[PREPARED_TIMEOUT_KEY] == TIMEOUT and not status.committed
    ends = cut(farm)
    assert ends[1] > after
    for endpoint in members(farm):
        assert shares(farm, query, endpoint) == [0, 0, 0]
        with farm.client(partition=1) as client:
            journal = wait_for(lambda: _or_none(lambda: list(client.read_committed(
                after, after + 1, endpoint=endpoint))), "the entry after the aborted batch")[0]
            assert journal[0].records == [f"{query}-after".encode()]
    for partition in (1, 2):        # the abort rolled forward: q's log may compact
        with farm.client(partition=partition) as client:
            wait_for(lambda: not [w for w in client.prepared_commits()[1] if w[1] == query],
                     f"partition {partition} forgets the aborted prepared commit")
    outcome = backend.commit(query, 0, run_batch(backend, query, 0, run=1))
    assert (outcome.committed, outcome.duplicate) == (True, False)
    outcome = backend.commit(query, 1, run_batch(backend, query, 1, run=0))
    assert (outcome.committed, outcome.duplicate) == (True, False)
    assert all_rows(farm, query) == expected(query, 0, 1)
    with farm.client(partition=0) as client:
        assert not client.batch_status(query, 0).aborted


@pytest.mark.timeout(90)
def test_a_driver_that_decides_after_the_abort_is_told_so_and_its_rerun_commits_once(
        farm, monkeypatch):
    """The driver stalls between preparing and deciding until partition 0 has aborted
    its batch: its decision fails naming the batch, the query and the option (not
    "duplicate", which would lose its rows); the restart's re-run commits it once."""
    backend, query = routed(farm), f"q-{uuid.uuid4().hex[:8]}"
    stall_decision(monkeypatch, lambda _: wait_for(lambda: aborted(farm, query, 0),
                                                   "partition 0 aborts batch 0", TIMEOUT + 20))
    with pytest.raises(FarmError, match=(
            f"batch 0 of query '{query}' was aborted after --prepared-timeout 2 s "
            f"undecided; the query must restart and re-run it")):
        backend.commit(query, 0, run_batch(backend, query, 0, run=0))
    monkeypatch.undo()
    assert aborted(farm, query, 0) is not None
    assert shares(farm, query) == [0, 0, 0]
    outcome = backend.commit(query, 0, run_batch(backend, query, 0, run=1))
    assert (outcome.committed, outcome.duplicate) == (True, False)
    assert all_rows(farm, query) == expected(query, 0)
    assert shares(farm, query) == [ROWS // PARTITIONS] * PARTITIONS


@pytest.mark.timeout(120)
@pytest.mark.parametrize("late", [0.0, 0.1, 0.2, 0.4])
def test_a_decision_racing_the_abort_wins_or_loses_whole_on_every_member(
        farm, monkeypatch, late):
    """The decision is sent `late` seconds after --prepared-timeout (from its prepared
    commits), about when the leader of partition 0 proposes the abort (it checks every
    TIMEOUT / 4): whichever partition 0 orders first wins, and every member shows the
    same outcome: the batch whole, or nothing and an abort."""
    backend, query = routed(farm), f"q-{uuid.uuid4().hex[:8]}"
    stall_decision(monkeypatch, lambda at: time.sleep(max(0.0, at + TIMEOUT + late
                                                          - time.monotonic())))
    try:
        outcome = backend.commit(query, 0, run_batch(backend, query, 0, run=0))
        won = outcome.committed
        assert won
    except FarmError as exc:
        assert "was aborted after --prepared-timeout" in str(exc)
        won = False
    monkeypatch.undo()
    with farm.client(partition=0) as client:
        leader = client.batch_status(query, 0)
    assert leader.aborted is not won
    for endpoint in members(farm):
        status = wait_for(lambda: replica_status(farm, endpoint, query, 0),
                          f"{endpoint} applies partition 0's outcome")
        assert status[0] == leader.index                     # the same entry won
        assert (ABORTED_KEY in status[2]) is not won
        assert shares(farm, query, endpoint) == ([ROWS // PARTITIONS] * PARTITIONS if won
                                                 else [0, 0, 0])
    if not won:
        assert backend.commit(query, 0, run_batch(backend, query, 0, run=1)).committed
    assert all_rows(farm, query) == expected(query, 0)
