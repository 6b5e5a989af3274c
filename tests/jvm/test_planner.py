"""The JVM reader's Python planner (`python -m pyspark_farm.jvm.planner`), driven as the JVM
drives it: a subprocess asked over JSON lines, against a real farm, its answers compared
with what the raft source's own Python readers plan. `PythonPlanner.java`, its Java side,
has JUnit tests (jvm/src/test/.../PythonPlannerTest.java), and the columnar reads
(tests/spark/test_columnar_source.py) drive both together."""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from pyspark_farm import LocalFarm
from pyspark_farm.compat import ReadMaxRows
from pyspark_farm.jvm.planner import ProtocolError, partitions_json, read_limit, struct_of
from pyspark_farm.log_access import LogPartition, log_end
from pyspark_farm.planning import Piece
from pyspark_farm.raft import kind as raft_kind
from pyspark_farm.raft.consumer import BEHIND_KEYS
from pyspark_farm.raft.partitions import PartitionTask
from pyspark_farm.raft.rows import RAFT_COLUMNS_DDL
from pyspark_farm.raft.source import read_partition

ROOT = Path(__file__).resolve().parents[2]
ANSWER_SECONDS = 60
ENTRIES = 6            # journal entries of 2 records each


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    with LocalFarm(nodes=1) as running:
        client = running.client()
        try:
            for number in range(ENTRIES):
                client.append([b"x%d" % number, b"y%d" % number])
        finally:
            client.close()
        yield running


class Planner:
    """The planner process, asked one request at a time with a bounded wait."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pyspark_farm.jvm.planner"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, line: bytes) -> dict:
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()
        return json.loads(self.lines.get(timeout=ANSWER_SECONDS))

    def ask(self, op: str, **fields: Any) -> dict:
        return self.send(json.dumps({"op": op, **fields}).encode())

    def ok(self, op: str, **fields: Any) -> Any:
        answer = self.ask(op, **fields)
        assert set(answer) == {"ok"}, answer
        return answer["ok"]

    def finish(self) -> tuple[int, str]:
        """Close stdin (EOF); the exit code and stderr."""
        self.process.stdin.close()
        code = self.process.wait(timeout=ANSWER_SECONDS)
        return code, self.process.stderr.read().decode()


@pytest.fixture
def planner() -> Iterator[Planner]:
    running = Planner()
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait(timeout=ANSWER_SECONDS)


def as_json(planned, farm_partition: int = 0) -> list[dict]:
    """Python's planned LogPartitions (of farm partition `farm_partition`) as the planner
    should answer them (written out here, not with the planner's own conversion)."""
    return [{"partition": farm_partition, "endpoint": p.endpoint,
             "pieces": [[piece.start, piece.stop] + list(piece.parts or ()) for piece in p.pieces]}
            for p in planned]


def rows_in(options: dict, start: int, end: int) -> int:
    """The rows the raft source reads from entries [start, end)."""
    reader = raft_kind.batch_reader(options, struct_of(RAFT_COLUMNS_DDL))
    planned = reader.plan([(start, end)])
    reader.close()
    return sum(batch.num_rows for partition in planned
               for batch in read_partition(reader.settings, partition))


def test_open_answers_the_schema(farm, planner):
    assert planner.ok("open", mode="batch", options=farm.options) == {
        "schema": RAFT_COLUMNS_DDL}
    assert planner.finish()[0] == 0


def test_batch_partitions_equal_the_python_readers(farm, planner):
    options = {**farm.options, "minPartitions": "3"}
    planner.ok("open", mode="batch", options=options)
    answered = planner.ok("partitions")
    python = raft_kind.batch_reader(options, struct_of(RAFT_COLUMNS_DDL)).partitions()
    assert answered == as_json(python)
    assert len(answered) >= 3
    covered = sum(piece[1] - piece[0] for p in answered for piece in p["pieces"])
    assert covered >= ENTRIES


def test_stream_offsets_limits_partitions_and_commit(farm, planner):
    options = {**farm.options, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "3"}
    python = raft_kind.stream_reader(options, struct_of(RAFT_COLUMNS_DDL))
    try:
        planner.ok("open", mode="stream", options=options)
        start = planner.ok("initialOffset")
        assert start == python.initialOffset()
        assert planner.ok("defaultReadLimit") == {"type": "maxRows", "rows": 3}

        end = planner.ok("latestOffset", start=start, limit={"type": "maxRows", "rows": 3})
        assert end == python.latestOffset(start, ReadMaxRows(3))
        assert rows_in(options, start["index"], end["index"]) == 2   # one entry: 2 + 2 > 3

        answered = planner.ok("partitions", start=start, end=end)
        assert answered == as_json(python.partitions(start, end))
        assert answered and all(p["pieces"] for p in answered)
        assert planner.ok("commit", end=end) is None

        client = farm.client()
        try:
            latest = {"index": log_end(client)}
        finally:
            client.close()
        assert planner.ok("reportLatestOffset") == latest
        assert planner.ok("latestOffset", start=end, limit={"type": "all"}) == latest
        waits = {"type": "minRows", "rows": 10 ** 6, "maxTriggerDelayMs": 900_000}
        assert planner.ok("latestOffset", start=end, limit=waits) == end
        assert planner.ok("prepareForTriggerAvailableNow") is None
        assert planner.ok("latestOffset", start=end, limit=None)["index"] > end["index"]
        assert planner.ok("stop") is None
        assert planner.process.wait(timeout=ANSWER_SECONDS) == 0
    finally:
        python.stop()


def test_default_read_limit_of_min_rows_carries_the_delay(farm, planner):
    planner.ok("open", mode="stream", options={
        **farm.options, "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s"})
    assert planner.ok("defaultReadLimit") == {
        "type": "minRows", "rows": 5, "maxTriggerDelayMs": 30_000}


def test_a_bad_option_is_an_error_answer_and_the_process_answers_on(farm, planner):
    answer = planner.ask("open", mode="batch",
                         options={**farm.options, "startingOffsets": "garbage"})
    assert answer["error"]["type"] == "OptionError"
    assert "startingOffsets" in answer["error"]["message"]
    assert planner.ok("open", mode="batch", options=farm.options) == {
        "schema": RAFT_COLUMNS_DDL}


@pytest.mark.parametrize("extra, named", [
    ({"valueFormat": "json", "valueSchema": "a long"}, "valueFormat"),
    ({"columns": "index,value"}, "columns"),
    ({"kind": "chp"}, "kind"),
])
def test_what_the_jvm_reader_cannot_do_is_refused(farm, planner, extra, named):
    error = planner.ask("open", mode="stream", options={**farm.options, **extra})["error"]
    assert error["type"] == "OptionError"
    assert repr(named) in error["message"] and "format('garlicfarm')" in error["message"]


def test_malformed_requests_are_named(farm, planner):
    assert "not JSON" in planner.send(b"{nope")["error"]["message"]
    assert "string 'op'" in planner.send(b"[1, 2]")["error"]["message"]
    assert "before 'open'" in planner.ask("partitions")["error"]["message"]
    assert "mode" in planner.ask("open", mode="sideways", options={})["error"]["message"]
    planner.ok("open", mode="stream", options=farm.options)
    assert "unknown op 'explode'" in planner.ask("explode")["error"]["message"]
    error = planner.ask("latestOffset", start={"index": 1}, limit={"type": "maxFiles"})["error"]
    assert error["type"] == "ProtocolError" and "maxFiles" in error["message"]
    error = planner.ask("partitions", start={"index": 1})["error"]
    assert "'end'" in error["message"]
    assert "offset" in planner.ask("commit", end={"idx": 3})["error"]["message"]
    assert "close the scan" in planner.ask("open", mode="stream",
                                           options=farm.options)["error"]["message"]


def test_close_ends_a_scan_and_the_process_serves_the_next(farm, planner):
    """The JVM keeps a planner process for the next scan: after close, the old reader is
    gone and a new open (another mode, other options) plans as a fresh process would."""
    planner.ok("open", mode="batch", options=farm.options)
    first = planner.ok("partitions")
    assert planner.ok("close") is None
    assert "before 'open'" in planner.ask("partitions")["error"]["message"]
    earliest = {**farm.options, "startingOffsets": "earliest"}
    planner.ok("open", mode="stream", options=earliest)
    python = raft_kind.stream_reader(earliest, struct_of(RAFT_COLUMNS_DDL))
    try:
        assert planner.ok("initialOffset") == python.initialOffset()
    finally:
        python.close()
    planner.ok("close")
    planner.ok("open", mode="batch", options={**farm.options, "minPartitions": "2"})
    assert planner.ok("partitions")


def test_warnings_go_to_stderr_and_eof_exits_zero(farm, planner):
    assert planner.ok("open", mode="batch", options={**farm.options, "noSuchOption": "1"})
    code, stderr = planner.finish()
    assert code == 0
    assert "nosuchoption" in stderr


def test_limits_and_partitions_as_json():
    assert read_limit(None) is None
    assert read_limit({"type": "maxRows", "rows": 7}) == ReadMaxRows(7)
    for bad in ({"type": "maxRows"}, {"type": "maxRows", "rows": True}, "all", {"type": "x"}):
        with pytest.raises(ProtocolError):
            read_limit(bad)
    planned = [LogPartition((Piece(3, 5), Piece(9, 10, (2, 4))), "n1:7000")]
    assert partitions_json(planned) == [
        {"partition": 0, "endpoint": "n1:7000", "pieces": [[3, 5], [9, 10, 2, 4]]}]
    assert partitions_json([PartitionTask(2, planned[0])]) == [
        {"partition": 2, "endpoint": "n1:7000", "pieces": [[3, 5], [9, 10, 2, 4]]}]


def test_index_filters_narrow_a_batch_plan(farm, planner):
    """The filters a JVM batch scan pushes narrow what is planned; a malformed one is an
    error naming it."""
    planner.ok("open", mode="batch", options=farm.options)
    whole = [p for part in planner.ok("partitions") for p in part["pieces"]]
    planner.ok("close")
    low = whole[0][0] + 1
    high = max(p[1] for p in whole)
    assert high > low
    planner.ok("open", mode="batch", options=farm.options,
               filters=[{"type": "GreaterThanOrEqual", "value": low},
                        {"type": "LessThan", "value": high}])
    narrowed = [p for part in planner.ok("partitions") for p in part["pieces"]]
    assert narrowed and all(low <= p[0] and p[1] <= high for p in narrowed)
    assert narrowed != whole
    planner.ok("close")
    error = planner.ask("open", mode="batch", options=farm.options,
                        filters=[{"type": "StartsWith", "value": "x"}])["error"]
    assert error["type"] == "ProtocolError" and "StartsWith" in error["message"]


PARTITIONED_DDL = f"{RAFT_COLUMNS_DDL}, partition int"


@pytest.fixture(scope="module")
def partitioned_farm() -> Iterator[LocalFarm]:
    """A farm of 3 partitions, with 2 + p journal entries in partition p."""
    with LocalFarm(nodes=1, partitions=3) as running:
        for p in range(3):
            with running.client(partition=p) as client:
                for number in range(2 + p):
                    client.append([b"p%d-%d" % (p, number)])
        yield running


def test_a_farm_of_partitions_plans_each_as_the_python_source(partitioned_farm, planner):
    """With the `partitions` option the planner answers the Python source's per-partition
    offsets ({"0": n, ...}) and plans each farm partition, every task naming its own."""
    options = {**partitioned_farm.options, "partitions": "all",
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "6"}
    assert planner.ok("open", mode="stream", options=options) == {"schema": PARTITIONED_DDL}
    python = raft_kind.stream_reader(options, struct_of(PARTITIONED_DDL))
    try:
        start = planner.ok("initialOffset")
        assert sorted(start) == ["0", "1", "2"] and start == python.initialOffset()
        assert planner.ok("defaultReadLimit") == {"type": "maxRows", "rows": 6}
        end = planner.ok("latestOffset", start=start, limit={"type": "maxRows", "rows": 6})
        assert end == python.latestOffset(start, ReadMaxRows(6))
        answered = planner.ok("partitions", start=start, end=end)
        expected = [task for p in range(3) for task in as_json(
            [t.inner for t in python.partitions(start, end) if t.partition == p], p)]
        assert answered == expected
        assert {task["partition"] for task in answered} == {0, 1, 2}
        assert planner.ok("commit", end=end) is None
        error = planner.ask("commit", end={"index": 3})["error"]
        assert "partitions [0, 1, 2]" in error["message"]
        latest = planner.ok("reportLatestOffset")
        assert sorted(latest) == ["0", "1", "2"]
        assert set(planner.ok("metrics", consumed=end)) == set(BEHIND_KEYS)
    finally:
        python.stop()
    planner.ok("close")
    planner.ok("open", mode="batch", options={**partitioned_farm.options, "partitions": "0,2"})
    assert {task["partition"] for task in planner.ok("partitions")} == {0, 2}
    planner.ok("close")
    error = planner.ask("open", mode="batch", options=partitioned_farm.options)["error"]
    assert error["type"] == "OptionError" and "has 3 partitions" in error["message"]
    error = planner.ask("open", mode="batch",
                        options={**partitioned_farm.options, "partitions": "1,1"})["error"]
    assert "'partitions'" in error["message"] and "twice" in error["message"]
