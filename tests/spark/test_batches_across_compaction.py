"""A committed batch reads whole, the same rows in the same order, at every member, after a
member caught up through a snapshot taken in the middle of the batch's staged entries
(issue 18).

The farm snapshots every 50 entries and keeps 60 below a snapshot (small segments, so
compaction really drops files). One follower is stopped; journal entries move the log
start past it, so it can only come back through InstallSnapshot. A batch is written whose
staged entries straddle the leader's latest snapshot, with its commit entry above it.
The follower restarts and catches up; then every reader must return the whole batch:
`FarmClient.read_committed` at each member, and the source with readFrom=followers / any
/ leader (leadership moved to the restarted member), failOnDataLoss true and false. Two
writers ride that ledger: the raft sink (`df.write`), and the chp capture, whose chunks
the chp source reads.

A leader picks the snapshot that catches a member up when it first finds that member
behind its log start, and sends that one until the member answers, even after it lost
the leadership (the message waits for the member). The leader that saw the follower go
is restarted, so that a fresh one, which has not heard from the follower, picks when
the follower restarts and answers: before the fix of issue 18 its latest snapshot,
which leaves the follower the commit entry without the payloads it names.
"""
from __future__ import annotations

import re
import uuid
from typing import Callable, Iterator, Sequence

import pytest
from pyspark.sql.types import (BinaryType, BooleanType, LongType, MapType, StringType,
                               StructField, StructType)

from connectors.chp.client import CloneClient, Update
from pyspark_farm import LocalFarm
from pyspark_farm.chp import kind as chp_kind
from pyspark_farm.chp.capture import Capture
from pyspark_farm.chp.rows import CHANGELOG_CONTENT, decode_payload
from pyspark_farm.chp.source import chp_offset
from pyspark_farm.raft.rows import payload_chunks
from tests.chp.support import ServerProcess
from tests.spark.helpers import log_range
from tests.support import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SNAPSHOT_INTERVAL = 50
COMPACTING = ("--snapshot-interval", str(SNAPSHOT_INTERVAL), "--retain-entries", "60",
              "--segment-bytes", "4096")
JOURNAL_BEFORE = 600     # entries that move the log start past the stopped follower
JOURNAL_AFTER = 5        # journal entries after the batch, inside the range read
ATTEMPTS = 4             # batches written until one straddles the leader's latest snapshot
MIN_PARTITIONS = "4"     # tasks per read: readFrom=followers sends some to each follower


# --- the farm ---------------------------------------------------------------------------------

def compacting_farm() -> LocalFarm:
    # Status entries every 60 s only: nothing but the test writes while it places a
    # batch against the snapshot cycle.
    return LocalFarm(nodes=3, extra_args=COMPACTING, status_interval=60.0)


def stop_a_follower(farm: LocalFarm, client) -> tuple[int, int]:
    """Stops the follower with the lowest id and appends journal entries (in groups, so
    that snapshots fall between them) until the log start passed it: at least
    JOURNAL_BEFORE. The follower, and the last entry it holds."""
    leader = farm.wait_for_leader()
    follower = min(i for i in farm.node_ids if i != leader)
    stopped_at = client.last_applied()     # nothing in flight: the leader's last entry
    farm.stop(follower)
    appended = 0
    while appended < JOURNAL_BEFORE or client.log_bounds()[0] <= stopped_at + 1:
        assert appended < 4 * JOURNAL_BEFORE, (
            f"the log still starts at {client.log_bounds()[0]} after {appended} entries")
        client.append_many([[f"before-{appended + n}".encode()] for n in range(25)])
        appended += 25
    return follower, stopped_at


def restart_the_leader(farm: LocalFarm, client) -> int:
    """Stops and restarts the leader (see the module doc); the new leader, once its first
    entry is applied."""
    leader = client.get_servers().leader_id
    applied = client.last_applied()
    farm.stop(leader)
    farm.restart(leader)
    new_leader = farm.wait_for_leader()
    wait_until(lambda: client.last_applied() > applied, 30, interval=0.02,
               message="the new leader's first entry")
    return new_leader


def move_leadership(client, node: int) -> None:
    client.transfer_leader(node, timeout=30)
    wait_until(lambda: client.get_servers().leader_id == node, 30,
               message=f"node {node} leading")


def leader_snapshot(client) -> int:
    return client.log_bounds()[2]


def commits_in(client, start: int, stop: int) -> list:
    """The commit entries in [start, stop) (headers: index, staged indexes)."""
    found, cursor = [], start
    while cursor < stop:
        page = client.read_entries(cursor, stop, payloads=False)
        if not page:
            break
        found += [r for r in page if r.type == "commit"]
        cursor = page[-1].index + 1
    return found


def check_straddled(client, stopped_at: int, staged: Sequence[int], commit: int) -> None:
    """What makes the test meaningful, checked at the leader before the stopped follower
    restarts: the follower can only come back through InstallSnapshot (the log starts
    above the last entry it holds, `stopped_at`), and the leader's latest snapshot lies
    inside the batch's staged entries, below its commit entry."""
    first, _, latest = client.log_bounds()
    assert first > stopped_at + 1, (
        f"the leader's log starts at {first}: the follower, stopped at {stopped_at}, could "
        "catch up without a snapshot")
    assert min(staged) <= latest < commit, (
        f"the leader's latest snapshot is at {latest}, not inside the staged entries "
        f"{min(staged)}..{max(staged)} below the commit entry {commit}")


def restart_and_catch_up(farm: LocalFarm, client, node: int, end: int) -> None:
    farm.restart(node)
    wait_caught_up(farm, client, node, end)


def wait_caught_up(farm: LocalFarm, client, node: int, end: int) -> None:
    """Waits until the leader counts `node` as holding [.., end) and `node` applied that
    far itself."""
    endpoint = farm.endpoint_of(node)

    def caught_up() -> bool:
        try:
            member = client.get_servers().members.get(node)
            return (member is not None and (member.match_index or 0) >= end - 1
                    and client.log_bounds(endpoint)[1] >= end - 1)
        except Exception:     # noqa: BLE001 - the node is still starting
            return False
    wait_until(caught_up, 60, interval=0.05, message=f"node {node} caught up to {end - 1}")


def append_after(farm: LocalFarm, client, restarted: int) -> tuple[list[bytes], int]:
    """JOURNAL_AFTER journal entries, once the restarted member caught up; the records
    and the end of the log."""
    records = [f"after-{n}".encode() for n in range(JOURNAL_AFTER)]
    client.append_many([[r] for r in records])
    end = client.last_applied() + 1
    wait_caught_up(farm, client, restarted, end)
    return records, end


# --- reading, and what each reader returned ----------------------------------------------------

def outcome(read: Callable[[], list], expected: list) -> str:
    """'whole' when `read` returns `expected` (same rows, same order), else what it did."""
    try:
        got = read()
    except Exception as exc:     # noqa: BLE001 - reported, and the test fails on it
        return failure(exc)
    if got == expected:
        return "whole"
    missing = len(expected) - len(got)
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                 min(len(got), len(expected)))
    return (f"{len(got)} of {len(expected)} rows ({missing} missing), "
            f"first difference at row {first}")


_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Underflow|Overflow|Exception)): (.+)$",
                         re.MULTILINE)


def failure(exc: BaseException) -> str:
    """The innermost error a read raised, short (a Spark error carries the Python
    traceback of the executor that failed: its last error line)."""
    text = str(exc)
    lines = _ERROR_LINE.findall(text)
    name, message = lines[-1] if lines else (type(exc).__name__, text)
    return f"{name}: {message.strip()[:240]}"


def check_whole(outcomes: dict[str, str]) -> None:
    partial = {reader: result for reader, result in outcomes.items() if result != "whole"}
    assert not partial, "readers that did not return the whole batch:\n" + "\n".join(
        f"  {reader}: {result}" for reader, result in partial.items())


def committed_values(client, start: int, stop: int, endpoint: str) -> list[bytes]:
    """The values of [start, stop) as `read_committed` at one member gives them: journal
    records, and the rows of each committed Arrow payload."""
    values: list[bytes] = []
    for visible in client.read_committed(start, stop, endpoint=endpoint):
        if visible.commit is None:
            values += visible.records
            continue
        for payload, content_type in zip(visible.records, visible.content_types):
            for array in payload_chunks(payload, content_type, visible.index):
                values += array.to_pylist()
    return values


def spark_values(spark, farm: LocalFarm, start: int, stop: int, **options) -> list[bytes]:
    frame = log_range(spark, farm, start, stop, minPartitions=MIN_PARTITIONS, **options)
    return [bytes(r.value) for r in frame.select("value").collect()]


def every_member(farm: LocalFarm, client, read: Callable[[str], list], expected: list
                 ) -> dict[str, str]:
    return {f"read_committed at node {node}": outcome(lambda: read(farm.endpoint_of(node)),
                                                       expected)
            for node in farm.node_ids}


# --- the raft sink ----------------------------------------------------------------------------

ROWS = 20_000          # ~200 staged entries of 1 KiB: four snapshot intervals


@pytest.mark.timeout(240)
def test_raft_sink_batch_reads_whole_at_every_member_after_a_snapshot_install(spark):
    frame = spark.range(ROWS, numPartitions=2).selectExpr(
        "format_string('row-%06d', id) AS value")
    batch = [f"row-{i:06d}".encode() for i in range(ROWS)]
    with compacting_farm() as farm, farm.client() as client:
        restarted, stopped_at = stop_a_follower(farm, client)
        for _ in range(ATTEMPTS):
            start = client.last_applied() + 1
            (frame.write.format("garlicfarm").options(**farm.options)
             .option("stageBytes", "1024").mode("append").save())
            (commit,) = commits_in(client, start, client.last_applied() + 1)
            staged = commit.commit.staged
            # The leader that catches the follower up. Its latest snapshot must lie inside
            # the staged entries, below the commit (one at the commit or at the new
            # leader's first entry, ~1 time in 25, passes the whole batch: write another).
            restart_the_leader(farm, client)
            if min(staged) <= leader_snapshot(client) < commit.index:
                break
        else:
            pytest.fail(f"no batch of {ATTEMPTS} straddled the leader's latest snapshot")
        assert len(staged) > 2 * SNAPSHOT_INTERVAL
        check_straddled(client, stopped_at, staged, commit.index)
        restart_and_catch_up(farm, client, restarted, commit.index + 1)
        after, end = append_after(farm, client, restarted)
        expected = batch + after

        outcomes = every_member(farm, client, lambda endpoint: committed_values(
            client, commit.index, end, endpoint), expected)
        for read_from in ("followers", "any"):
            for fail in ("true", "false"):
                outcomes[f"spark readFrom={read_from} failOnDataLoss={fail}"] = outcome(
                    lambda: spark_values(spark, farm, commit.index, end, readFrom=read_from,
                                         failOnDataLoss=fail), expected)
        move_leadership(client, restarted)
        for fail in ("true", "false"):
            outcomes[f"spark readFrom=leader (node {restarted}) failOnDataLoss={fail}"] = \
                outcome(lambda: spark_values(spark, farm, commit.index, end,
                                             readFrom="leader", failOnDataLoss=fail),
                        expected)
        check_whole(outcomes)


# --- the chp capture --------------------------------------------------------------------------

KEYS = 4000                   # x ~2 KiB values: a first-snapshot chunk of ~4 staged payloads
CHP_SCHEMA = StructType([     # CHP_COLUMNS_DDL, built without a session
    StructField("key", StringType()), StructField("sequence", LongType()),
    StructField("uuid", BinaryType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("value", BinaryType()), StructField("deleted", BooleanType())])


def chp_value(n: int) -> str:
    return f"value-{n:05d}-" + "v" * 2048


def chp_rows(tables) -> list[tuple[str, int, bytes]]:
    return [(r["key"], r["sequence"], r["value"]) for t in tables for r in t.to_pylist()]


def chp_committed(client, start: int, stop: int, endpoint: str) -> list:
    """The capture's rows in [start, stop) as `read_committed` at one member gives them,
    then the journal records in the range."""
    tables, journal = [], []
    for visible in client.read_committed(start, stop, endpoint=endpoint):
        if visible.commit is None:
            journal += visible.records
            continue
        assert set(visible.content_types) == {CHANGELOG_CONTENT}
        tables += [decode_payload(p, visible.index) for p in visible.records]
    return chp_rows(tables) + journal


def chp_source_rows(options: dict, capture_id: str, since: int, start: int, stop: int
                    ) -> list:
    """The capture's rows in [start, stop) as the chp source plans and reads them (the
    planner of the driver, `read` of the executors: the calls Spark makes)."""
    reader = chp_kind.stream_reader(options, CHP_SCHEMA)
    try:
        partitions = reader.partitions(chp_offset(start, capture_id, since),
                                       chp_offset(stop, capture_id, since))
        return [(row["key"], row["sequence"], row["value"]) for p in partitions
                for batch in reader.read(p) for row in batch.to_pylist()]
    finally:
        reader.stop()


def pad_to_snapshot(client, before: int) -> None:
    """Appends journal entries one at a time until the leader is `before` entries short
    of its next snapshot (a member snapshots once it applied SNAPSHOT_INTERVAL entries
    past its latest snapshot)."""
    while True:
        applied, snapshot = client.last_applied(), leader_snapshot(client)
        if snapshot + SNAPSHOT_INTERVAL - applied <= before:
            return
        client.append([b"pad"])


@pytest.fixture
def chp_server(tmp_path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path, "chp", "--hugz-interval", "0.2").start()
    try:
        with CloneClient([server.address]) as chp:
            chp.wait_synced(30)
            chp.set_many([Update(f"/c/{n:05d}", chp_value(n)) for n in range(KEYS)],
                         timeout=60)
        yield server
    finally:
        server.kill()


@pytest.mark.timeout(240)
def test_chp_capture_chunk_reads_whole_at_every_member_after_a_snapshot_install(
        spark, chp_server):
    with compacting_farm() as farm, farm.client() as client:
        options = {**farm.options, "kind": "chp", "endpoint": chp_server.address,
                   "subtree": "/c/", "serverTimeout": "1s", "startingOffsets": "snapshot",
                   "minPartitions": MIN_PARTITIONS, "captureLinger": "1s"}
        capture_settings = chp_kind.stream_reader(options, CHP_SCHEMA).settings.capture
        restarted, stopped_at = stop_a_follower(farm, client)
        # Here the new leader leads while the chunk is written: it compacts no further
        # than 60 entries below its latest snapshot, so not past where it would resume
        # sending to the follower, and it picks the follower's snapshot when it restarts.
        restart_the_leader(farm, client)
        for _ in range(ATTEMPTS):
            # A new capture writes the map as its first chunk: staged payloads, then their
            # commit. Started 2 entries short of the leader's next snapshot, the snapshot
            # falls inside the chunk's staged entries.
            pad_to_snapshot(client, 2)
            since = client.last_applied() + 1
            capture_id = f"chp-capture-{uuid.uuid4()}"
            capture = Capture(capture_settings, capture_id, since).start()
            try:
                capture.flush(60)
                wait_until(lambda: capture.chunks_written >= 1, 30, message="the first chunk")
            finally:
                capture.stop()
            status = client.batch_status(capture_id, 0)
            staged, commit = status.staged, status.index
            if min(staged) <= leader_snapshot(client) < commit:
                break
        else:
            pytest.fail(f"no chunk of {ATTEMPTS} straddled the leader's latest snapshot")
        assert len(staged) >= 3
        assert client.last_committed_batch(capture_id) == 0    # the map in one chunk
        check_straddled(client, stopped_at, staged, commit)
        restart_and_catch_up(farm, client, restarted, commit + 1)
        after, end = append_after(farm, client, restarted)

        leader_endpoint = farm.endpoint_of(client.get_servers().leader_id)
        (chunk,) = [v for v in client.read_committed(commit, end, endpoint=leader_endpoint)
                    if v.commit is not None]
        raw = chunk.records + after
        expected = chp_committed(client, commit, end, leader_endpoint)
        assert sorted((k, v) for k, _, v in expected[:-JOURNAL_AFTER]) == sorted(
            (f"/c/{n:05d}", chp_value(n).encode()) for n in range(KEYS))
        assert expected[-JOURNAL_AFTER:] == after
        rows = expected[:-JOURNAL_AFTER]

        outcomes = every_member(farm, client, lambda endpoint: chp_committed(
            client, commit, end, endpoint), expected)
        for read_from in ("followers", "any"):
            for fail in ("true", "false"):
                outcomes[f"chp source readFrom={read_from} failOnDataLoss={fail}"] = outcome(
                    lambda: chp_source_rows({**options, "readFrom": read_from,
                                             "failOnDataLoss": fail},
                                            capture_id, since, commit, end), rows)
            # Spark's own executors, through the raft kind: each payload of the chunk is a
            # row (its bytes as they were staged), then the journal records.
            outcomes[f"spark (raft kind) readFrom={read_from}"] = outcome(
                lambda: spark_values(spark, farm, commit, end, readFrom=read_from), raw)
        move_leadership(client, restarted)
        for fail in ("true", "false"):
            outcomes[f"chp source readFrom=leader (node {restarted}) failOnDataLoss={fail}"] \
                = outcome(lambda: chp_source_rows({**options, "readFrom": "leader",
                                                   "failOnDataLoss": fail},
                                                  capture_id, since, commit, end), rows)
        check_whole(outcomes)
