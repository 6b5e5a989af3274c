"""Readers over members whose logs start at different places (issue 18, reader side).

Each member compacts its own log, so a member can lack entries that another still holds.
The farms here make that certain with real nodes, whatever the Raft core keeps across
InstallSnapshot: a member restarted with its own, aggressive retention flags
(`--retain-entries 1`) drops the staged entries of a committed batch once its commit
entry is past that member's retention, while a staged entry of another query that is
never committed (the pin) keeps that member's log starting below the commit entry. Tiny
segments make the log start exactly after a snapshot. The driver's planning
(`LogPlanner`) and the executors' reads (`PieceReader`) are called directly, as Spark
calls them, against those members.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import pytest

from consensus.client import FarmError
from consensus.wire.journal_pages import JournalPage
from pyspark_farm import DataLossError, LocalFarm
from pyspark_farm.connection import FarmClientOptions
from pyspark_farm.log_access import LogPartition, LogPlanner, PieceReader
from pyspark_farm.planning import Piece
from tests.support import wait_until

pytestmark = pytest.mark.slow

COMPACTING = ("--snapshot-interval", "10", "--retain-entries", "1", "--segment-bytes", "256")
PAD = b"p" * 300              # bigger than a segment: each journal pad starts a segment
PAYLOADS = 6
QUERY = "query-a"


@dataclass
class Batch:
    """A committed batch of the ledger and the journal entries around it."""
    staged: list[int]                 # in the commit's order (not index order)
    payloads: list[bytes]             # in the same order
    commit: int = 0
    pads: dict[int, bytes] = field(default_factory=dict)
    end: int = 0

    def expected(self, start: int, stop: int) -> list[tuple[int, bytes]]:
        """What a reader of [start, stop) must return: (index, record), in order."""
        rows = [(i, pad) for i, pad in self.pads.items() if start <= i < stop]
        if start <= self.commit < stop:
            rows += [(self.commit, payload) for payload in self.payloads]
        return sorted(rows, key=lambda row: row[0])


@dataclass(frozen=True)
class Settings:
    """What LogPlanner needs of a source's settings."""
    connection: FarmClientOptions
    fail_on_data_loss: bool
    read_from: str = "any"
    min_partitions: int = 4
    limits: object = None


class Planner(LogPlanner):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings


def connection(farm: LocalFarm) -> FarmClientOptions:
    return FarmClientOptions(endpoints=farm.endpoints, cluster=farm.cluster_name,
                          username=farm.username, password=farm.password, timeout=10.0)


def bounds(client, farm: LocalFarm, node: int) -> tuple[int, int, int] | None:
    """(first, applied, snapshot) of one member; None while it does not answer."""
    try:
        return client.log_bounds(farm.endpoint_of(node))
    except FarmError:
        return None


def write_batch(farm: LocalFarm, client, compacting: list[int]) -> Batch:
    """Stages PAYLOADS entries; pads until every `compacting` member snapshotted 5 entries
    past them (so that pads lie between the payloads and its log start); stages the pin;
    commits the batch (the payloads in reverse index order: the first one read is not the
    lowest); pads until every `compacting` member's log starts after the payloads."""
    payloads = [f"payload-{n}-".encode() * 40 for n in range(PAYLOADS)]
    staged = [client.stage(QUERY, 0, n, 0, p, content_type="bytes")
              for n, p in enumerate(payloads)]
    batch = Batch(staged[::-1], payloads[::-1])

    def pad_until(condition, message: str) -> None:
        def step() -> bool:
            index, _ = client.append([PAD])
            batch.pads[index] = PAD
            return condition()
        wait_until(step, 60, interval=0, message=message)

    highest = max(staged)
    pad_until(lambda: all((bounds(client, farm, n) or (0, 0, 0))[2] >= highest + 5
                          for n in compacting), "a snapshot past the payloads")
    client.stage("query-pin", 0, 0, 0, b"pin", content_type="bytes")
    batch.commit = client.commit_batch(QUERY, 0, batch.staged,
                                       metadata={"rows": [1] * PAYLOADS}).index
    pad_until(lambda: all((bounds(client, farm, n) or (0, 0, 0))[0] > highest
                          for n in compacting), "compaction past the payloads")
    batch.end = client.last_applied() + 1
    for node in farm.node_ids:
        wait_until(lambda: (bounds(client, farm, node) or (0, 0, 0))[1] >= batch.end - 1,
                   30, message=f"node {node} applied the batch")
    return batch


def assert_lacks_the_payloads(client, farm: LocalFarm, node: int, batch: Batch) -> int:
    """The precondition: `node`'s log starts after every payload but holds the commit."""
    first = client.log_bounds(farm.endpoint_of(node))[0]
    assert max(batch.staged) < first <= batch.commit, (node, first, batch)
    return first


def read_pieces(conn: FarmClientOptions, endpoint: str | None, pieces: list[Piece], *,
                fail: bool) -> list[tuple[int, bytes]]:
    reader = PieceReader(conn, endpoint, fail_on_data_loss=fail)
    try:
        return [(index, record) for v in reader.read(pieces)
                for index, records in (v.entries() if isinstance(v, JournalPage)
                                       else [(v.index, v.records)])
                for record in records]
    finally:
        reader.close()


def read_planned(conn: FarmClientOptions, partitions: list[LogPartition], *, fail: bool
                 ) -> list[tuple[int, bytes]]:
    return [row for p in partitions
            for row in read_pieces(conn, p.endpoint, list(p.pieces), fail=fail)]


def whole(batch: Batch) -> Piece:
    return Piece(batch.commit, batch.commit + 1, (0, PAYLOADS))


# --- one member compacted the batch away; the others hold it ------------------------------------

@pytest.fixture(scope="module")
def one_compacted() -> Iterator[tuple[LocalFarm, int, Batch]]:
    """A farm whose follower `node` (restarted with COMPACTING) lacks the batch's payloads;
    the other members keep their whole log."""
    with LocalFarm(nodes=3, status_interval=60.0) as farm, farm.client() as client:
        leader = farm.wait_for_leader()
        node = max(i for i in farm.node_ids if i != leader)
        farm.stop(node)
        farm.cluster.extra_args = list(COMPACTING)
        try:
            farm.restart(node)
        finally:
            farm.cluster.extra_args = []
        yield farm, node, write_batch(farm, client, [node])


@pytest.mark.timeout(180)
def test_planner_sends_no_task_to_a_member_that_compacted_the_batch(one_compacted):
    farm, node, batch = one_compacted
    with farm.client() as client:
        assert_lacks_the_payloads(client, farm, node, batch)
        wait_until(lambda: client.get_servers().members[node].match_index >= batch.end - 1,
                   30, message=f"the leader counting node {node} caught up")
        view = client.get_servers()
        assert view.leader_id != node
        other = farm.endpoint_of(next(i for i in farm.node_ids if i not in (node,
                                                                            view.leader_id)))
    conn = connection(farm)
    for read_from, allowed in (("followers", {other}), ("any", {None, other})):
        planner = Planner(Settings(conn, True, read_from))
        try:
            partitions = planner.plan([(batch.commit, batch.end)])
        finally:
            planner.close()
        assert len(partitions) >= 2
        assert {p.endpoint for p in partitions} == allowed, read_from
        assert read_planned(conn, partitions, fail=True) == batch.expected(batch.commit,
                                                                            batch.end)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fail", [True, False])
def test_reader_at_that_member_reads_the_batch_from_another(one_compacted, fail):
    farm, node, batch = one_compacted
    conn = connection(farm)
    with farm.client() as client:
        first = assert_lacks_the_payloads(client, farm, node, batch)
    endpoint = farm.endpoint_of(node)
    assert read_pieces(conn, endpoint, [whole(batch)], fail=fail) == \
        batch.expected(batch.commit, batch.commit + 1)
    # A task's share of a split batch: payloads 2..4 in the commit's order.
    part = Piece(batch.commit, batch.commit + 1, (2, 5))
    assert read_pieces(conn, endpoint, [part], fail=fail) == \
        [(batch.commit, p) for p in batch.payloads[2:5]]
    # Journal entries below that member's log start: all of them, from another member.
    low = max(batch.staged) + 1
    journal = batch.expected(low, first)
    assert journal
    assert read_pieces(conn, endpoint, [Piece(low, first)], fail=fail) == journal


@pytest.mark.timeout(180)
def test_leader_that_compacted_the_batch_is_read_past(one_compacted):
    """Runs last on this farm: leadership moves to the member that lacks the batch."""
    farm, node, batch = one_compacted
    conn = connection(farm)
    with farm.client() as client:
        client.transfer_leader(node, timeout=30)
        wait_until(lambda: client.get_servers().leader_id == node, 30,
                   message=f"node {node} leading")
        assert_lacks_the_payloads(client, farm, node, batch)
        # reads without endpoint go to it (its log start may move on: its own no-op
        # entry can reach its next snapshot)
        wait_until(lambda: client.log_bounds()[0] == (bounds(client, farm, node) or [None])[0], 15,
                   message="log_bounds without endpoint answered by the new leader")
    for fail in (True, False):
        assert read_pieces(conn, None, [whole(batch)], fail=fail) == \
            batch.expected(batch.commit, batch.commit + 1)
    # The leader's log starts after `low`, another member's does not: planning starts
    # there, reads the entry headers elsewhere, and its tasks read everything.
    low = max(batch.staged) + 1
    planner = Planner(Settings(conn, True, "leader"))
    try:
        assert planner.checked_start(low) == low
        partitions = planner.plan([(low, batch.end)])
    finally:
        planner.close()
    assert {p.endpoint for p in partitions} == {None}
    assert read_planned(conn, partitions, fail=True) == batch.expected(low, batch.end)


# --- no member holds the batch's payloads any more -----------------------------------------------

@pytest.fixture(scope="module")
def all_compacted() -> Iterator[tuple[LocalFarm, Batch, dict[int, int]]]:
    with LocalFarm(nodes=3, status_interval=60.0, extra_args=COMPACTING) as farm, \
            farm.client() as client:
        batch = write_batch(farm, client, farm.node_ids)
        firsts = {n: assert_lacks_the_payloads(client, farm, n, batch) for n in farm.node_ids}
        yield farm, batch, firsts


def assert_names_the_batch(error: DataLossError, batch: Batch, firsts: dict[int, int]) -> None:
    text = str(error)
    assert f"committed batch at index {batch.commit} (query {QUERY}, batch 0)" in text
    assert f"staged entries {min(batch.staged)}..{max(batch.staged)} ({PAYLOADS} of its " \
           f"{PAYLOADS} payloads)" in text
    assert ", ".join(f"n{n} {f}" for n, f in sorted(firsts.items())) in text
    assert "Set the option failOnDataLoss to false" not in text


@pytest.mark.timeout(180)
def test_reader_skips_only_a_whole_batch_that_no_member_holds(all_compacted):
    farm, batch, firsts = all_compacted
    conn = connection(farm)
    with pytest.raises(DataLossError) as raised:
        read_pieces(conn, None, [whole(batch)], fail=True)
    assert_names_the_batch(raised.value, batch, firsts)
    assert "readers skip the whole batch" in str(raised.value)
    assert read_pieces(conn, None, [whole(batch)], fail=False) == []
    # Part of a split batch is never skipped on its own: other tasks may read the rest.
    with pytest.raises(DataLossError) as raised:
        read_pieces(conn, farm.endpoint_of(farm.node_ids[0]),
                    [Piece(batch.commit, batch.commit + 1, (2, 5))], fail=False)
    assert_names_the_batch(raised.value, batch, firsts)


@pytest.mark.timeout(180)
def test_planner_names_or_skips_a_whole_batch_that_no_member_holds(all_compacted):
    farm, batch, firsts = all_compacted
    conn = connection(farm)
    failing = Planner(Settings(conn, True))
    try:
        with pytest.raises(DataLossError) as raised:
            failing.plan([(batch.commit, batch.end)])
        assert_names_the_batch(raised.value, batch, firsts)
        # A journal range: the numbers of what is gone, and the option that skips it.
        with pytest.raises(DataLossError) as raised:
            failing.checked_start(min(batch.staged))
        kept = min(firsts.values())
        assert f"entries {min(batch.staged)}..{kept - 1} were compacted" in str(raised.value)
        assert f"continue from index {kept}" in str(raised.value)
    finally:
        failing.close()
    skipping = Planner(Settings(conn, False))
    try:
        partitions = skipping.plan([(batch.commit, batch.end)])
    finally:
        skipping.close()
    pieces = [piece for p in partitions for piece in p.pieces]
    assert pieces and all(piece.parts is None for piece in pieces)   # journal only
    assert read_planned(conn, partitions, fail=False) == batch.expected(batch.commit + 1,
                                                                         batch.end)
