"""The raft sink's commit over a farm of several partitions, stopped in its windows
(issue 28, item 3; docs/exactly-once.md, "Partitions"): a batch is visible in every
partition at once or in none. The driver's side (`RoutedSinkBackend`) runs here, in the
test process, against a real farm of 3 nodes x 3 partitions; readers use the calls the
Python and JVM readers use (the stable end, read_entries and the members' verdicts), at
every member; the last test kills a real Spark driver there."""
from __future__ import annotations

import time
import uuid
from typing import Callable, NamedTuple

import pyarrow as pa
import pytest

from consensus.client import FarmClient, FarmError, IndexOverflow
from pyspark_farm import LocalFarm
from pyspark_farm.connection import FarmClientOptions
from pyspark_farm.log_access import log_end
from pyspark_farm.raft.partitions import consistent_ends
from pyspark_farm.raft.routed_sink import RoutedSinkBackend
from pyspark_farm.raft.sink import RaftSinkBackend
from pyspark_farm.sink import TaskTag
from tests.spark.helpers import crash_after_commit, file_stream, write_files

pytestmark = pytest.mark.slow

PARTITIONS = 3
ROWS = 30           # keyless: spread row by row, 10 a partition


@pytest.fixture(scope="module")
def farm():
    with LocalFarm(nodes=3, partitions=PARTITIONS) as running:
        yield running


class QueryBackend(NamedTuple):
    """The driver's side of one query: its sink backend and the query's (fresh) name."""
    backend: RoutedSinkBackend
    query: str


@pytest.fixture
def driver(farm) -> QueryBackend:
    """A new query's driver side over the module's farm."""
    return QueryBackend(routed(farm), f"q-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def died_in_commit(driver, monkeypatch) -> Callable[[bool], QueryBackend]:
    """`died_in_commit(decided)`: the driver's first run of batch 0 stages its rows and
    dies in the commit - with `decided`, after partition 0's decision; otherwise before
    it (`stop_commits`); the driver side is returned for the restart."""
    def die(decided: bool) -> QueryBackend:
        first = run_batch(driver.backend, driver.query, 0, run=0)
        stop_commits(monkeypatch, decided=decided)
        with pytest.raises(Stop):
            driver.backend.commit(driver.query, 0, first)
        monkeypatch.undo()
        return driver
    return die


def routed(farm: LocalFarm) -> RoutedSinkBackend:
    options = farm.options
    connection = FarmClientOptions(endpoints=options["endpoints"], cluster=options["cluster"],
                                   username=options["username"],
                                   password=options["password"])
    return RoutedSinkBackend(RaftSinkBackend(connection, stage_bytes=256), PARTITIONS,
                             "binary")


def run_batch(backend: RoutedSinkBackend, query: str, batch: int, run: int):
    """What one run of a micro-batch stages (two tasks), as Spark's driver gets it."""
    outputs = []
    for task in range(2):
        values = [f"{query}-{batch}-{task}-{n}".encode() for n in range(ROWS // 2)]
        frame = pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})
        outputs.append(backend.stage_batches(TaskTag(query, batch, task, run), iter([frame])))
    return outputs


def cut(farm: LocalFarm) -> dict[int, int]:
    """Every partition's end in one consistent cut, as the partitioned readers plan."""
    clients = {p: farm.client(partition=p) for p in range(PARTITIONS)}
    try:
        return consistent_ends(clients[0], clients)
    finally:
        for client in clients.values():
            client.close()


def visible(farm: LocalFarm, partition: int, query: str, end: int,
            endpoint: str | None = None) -> list[bytes]:
    """The rows of `query` a reader of `partition` sees in [1, end) (at `endpoint`, else
    the leader), waiting, as the readers do, for a member whose stable end is behind."""
    with farm.client(partition=partition) as client:
        def read() -> list[bytes]:
            rows = []
            for record in client.read_committed(1, end, endpoint=endpoint):
                for payload in record.records if record.commit is not None else ():
                    for batch in pa.ipc.open_stream(payload):
                        rows += [v for v in batch.column("value").to_pylist()
                                 if v.startswith(query.encode())]
            return rows
        return wait_for(lambda: _or_none(read), f"partition {partition} read to {end}")[0]


def _or_none(read) -> list | None:
    """[what `read` returned] (a list, true even when empty), None on IndexOverflow."""
    try:
        return [read()]
    except IndexOverflow:
        return None


def shares(farm: LocalFarm, query: str, endpoint: str | None = None) -> list[int]:
    """How many of `query`'s rows each partition shows, in one consistent cut."""
    ends = cut(farm)
    return [len(visible(farm, p, query, ends[p], endpoint)) for p in range(PARTITIONS)]


def all_rows(farm: LocalFarm, query: str) -> list[bytes]:
    ends = cut(farm)
    return sorted(r for p in range(PARTITIONS) for r in visible(farm, p, query, ends[p]))


class Stop(FarmError):
    """The driver dies here (the injected fault)."""


def stop_commits(monkeypatch, *, decided: bool) -> None:
    """Make the driver stop: with `decided`, at its first commit call to a partition
    other than 0 after partition 0 took one (between the decision and the rest);
    otherwise at partition 0's commit call (before any decision)."""
    real = FarmClient.commit_batch
    seen = {"zero": False}

    def commit_batch(self, *args, **kwargs):
        if self.partition == 0 and not decided:
            raise Stop("the driver died before partition 0's commit")
        if self.partition != 0 and seen["zero"]:
            raise Stop("the driver died after partition 0's commit")
        result = real(self, *args, **kwargs)
        seen["zero"] |= self.partition == 0
        return result
    monkeypatch.setattr(FarmClient, "commit_batch", commit_batch)


def members(farm: LocalFarm) -> list[str]:
    return farm.options["endpoints"].split(",")


def wait_for(condition, what: str, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    delay = 0.02
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


@pytest.mark.timeout(60)
def test_a_driver_that_dies_after_partition_0_decided_leaves_the_batch_whole_everywhere(
        farm, died_in_commit):
    """Today's sequential commits fail this: partition 0 showed the batch, the others
    never did. Now partition 0's commit is the decision; the others' readers see their
    share from it, at every member, before any marker; the restart's re-run only rolls
    the decision forward, and every row shows once."""
    backend, query = died_in_commit(decided=True)
    whole = [ROWS // PARTITIONS] * PARTITIONS
    assert shares(farm, query) == whole
    for endpoint in members(farm):        # followers learn the decision from partition 0
        assert shares(farm, query, endpoint) == whole
    with farm.client(partition=1) as client:
        assert client.batch_status(query, 0) is None      # not rolled forward yet
    rerun = run_batch(backend, query, 0, run=1)           # the restart runs it again
    outcome = backend.commit(query, 0, rerun)
    assert (outcome.committed, outcome.duplicate) == (False, True)
    for partition in range(PARTITIONS):
        with farm.client(partition=partition) as client:
            assert client.batch_status(query, 0) is not None
    assert all_rows(farm, query) == sorted(f"{query}-0-{t}-{n}".encode()
                                           for t in range(2) for n in range(ROWS // 2))


@pytest.mark.timeout(60)
def test_an_undecided_batch_holds_the_other_partitions_readers_until_its_decision(
        farm, died_in_commit):
    """The driver dies after preparing partitions 1 and 2, before partition 0 decides:
    their readers stop before the prepared commit (an entry written after it waits
    too), and go on at once when the restart decides the batch, showing it once."""
    backend, query = died_in_commit(decided=False)
    with farm.client(partition=1) as client:
        after, _ = client.append([f"{query}-after".encode()])
        held = log_end(client)
        assert held < after
        with pytest.raises(IndexOverflow, match=f"batch 0 of query '{query}', waiting for "
                                                "partition 0's decision"):
            client.read_entries(held, after + 1)
    assert shares(farm, query) == [0, 0, 0]
    outcome = backend.commit(query, 0, run_batch(backend, query, 0, run=1))
    assert (outcome.committed, outcome.duplicate) == (True, False)
    end = cut(farm)[1]                      # the readers' end: at once
    assert end > after
    with farm.client(partition=1) as client:
        journal = wait_for(lambda: _or_none(lambda: [
            r for r in client.read_committed(held, end)
            if r.commit is None and f"{query}-after".encode() in r.records]),
            "partition 1 read past the decided batch")[0]
        assert len(journal) == 1
    assert all_rows(farm, query) == sorted(f"{query}-0-{t}-{n}".encode()
                                           for t in range(2) for n in range(ROWS // 2))
    assert shares(farm, query) == [ROWS // PARTITIONS] * PARTITIONS


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_spark_driver_killed_between_the_decision_and_the_markers(spark, farm, tmp_path,
                                                                     no_queries_left):
    """A streaming query's driver SIGKILLed inside the sink's commit of batch 1, after
    partition 0 decided it: the Python and JVM readers see batches 0 and 1 whole in
    every partition; the restart rolls the decision forward; every row shows once."""
    tag = f"d{uuid.uuid4().hex[:8]}"
    chunks = [[f"{tag}-f{f}-r{i:02d}" for i in range(12)] for f in range(3)]
    inbox, checkpoint = tmp_path / "in", tmp_path / "chk"
    write_files(inbox, chunks)
    query_id = crash_after_commit(farm.options, inbox, checkpoint, 1,
                                  where="--crash-after-decision")
    with farm.client(partition=0) as client:
        assert client.batch_status(query_id, 1) is not None         # decided
    with farm.client(partition=1) as client:
        assert client.batch_status(query_id, 1) is None             # no marker yet

    def read(fmt: str):
        frame = (spark.read.format(fmt).options(**farm.options).option("partitions", "all")
                 .load().where(f"value like '{tag}-%'").select("partition", "value"))
        rows = [(r["partition"], bytes(r["value"]).decode()) for r in frame.collect()]
        assert len({p for p, _ in rows}) == PARTITIONS              # spread over all
        return sorted(v for _, v in rows)

    decided = sorted(chunks[0] + chunks[1])
    assert read("garlicfarm") == decided
    assert read("garlicfarm-columnar") == decided
    rerun = (file_stream(spark, inbox).writeStream.format("garlicfarm")
             .options(**farm.options).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert rerun.id == query_id
        rerun.awaitTermination(120)
        assert rerun.exception() is None
    finally:
        rerun.stop()
    for partition in range(PARTITIONS):
        with farm.client(partition=partition) as client:
            assert client.last_committed_batch(query_id) == len(chunks) - 1
    assert read("garlicfarm") == sorted(sum(chunks, []))


@pytest.mark.timeout(60)
def test_a_batch_with_no_rows_in_partition_0_is_decided_there_all_the_same(farm, driver):
    """Keys that route to partitions 1 and 2 only: partition 0 takes an empty decision
    (it shows no rows, and no task reads it), the others show their shares."""
    from pyspark_farm.log_access import entry_sizes
    from pyspark_farm.raft.partitioning import partition_for
    backend, query = driver
    keys = [k for k in (f"key{n}" for n in range(100)) if partition_for(k, PARTITIONS)][:6]
    frame = pa.RecordBatch.from_pydict({
        "key": pa.array(keys * 2), "value": pa.array([f"{query}-{n}".encode()
                                                      for n in range(12)], pa.binary())})
    outcome = backend.commit(query, 0, [backend.stage_batches(TaskTag(query, 0, 0, 0),
                                                              iter([frame]))])
    assert (outcome.committed, outcome.rows) == (True, 12)
    expected = [sum(partition_for(k, PARTITIONS) == p for k in keys * 2)
                for p in range(PARTITIONS)]
    assert expected[0] == 0 and shares(farm, query) == expected
    with farm.client(partition=0) as client:
        decision = client.batch_status(query, 0)
        assert decision.staged == ()
        sizes = entry_sizes(client, decision.index, decision.index + 1)
        assert sum(s.rows for s in sizes) == 0


@pytest.mark.timeout(60)
def test_an_operator_releases_an_abandoned_batch_by_deciding_it_empty(farm, died_in_commit):
    """The documented escape (docs/exactly-once.md, "An abandoned batch"): an empty
    decision in partition 0 frees the partitions the abandoned run prepared in."""
    backend, query = died_in_commit(decided=False)
    with farm.client(partition=1) as client:
        after, _ = client.append([f"{query}-after".encode()])
        assert log_end(client) < after
    with farm.client(partition=0) as client:
        client.commit_batch(query, 0, [], metadata={"garlicfarm.markers": {}})
    assert cut(farm)[1] > after
    assert shares(farm, query) == [0, 0, 0]


@pytest.mark.timeout(60)
def test_the_next_batch_rolls_an_unmarked_decision_forward(farm, died_in_commit):
    """The driver dies after deciding batch 0, and nothing re-commits it (its re-run had
    no rows): batch 1's prepared commits find batch 0 unmarked in partitions 1 and 2,
    roll its decision forward there, then go on; both batches show once."""
    backend, query = died_in_commit(decided=True)
    outcome = backend.commit(query, 1, run_batch(backend, query, 1, run=0))
    assert (outcome.committed, outcome.duplicate) == (True, False)
    for partition in range(PARTITIONS):
        with farm.client(partition=partition) as client:
            assert client.batch_status(query, 0) is not None
            assert [w for w in client.prepared_commits()[1] if w[1] == query] == []
    assert all_rows(farm, query) == sorted(f"{query}-{b}-{t}-{n}".encode() for b in range(2)
                                           for t in range(2) for n in range(ROWS // 2))
