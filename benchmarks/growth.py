"""How each cost grows with the size of what it works on (issue 15 item 4).

    .venv/bin/python benchmarks/growth.py [--part read|snapshot|planning|open|all]
        [--log-sizes 1000000,10000000,50000000] [--state-keys 10000,100000,1000000]
        [--backlogs 10000,100000,1000000] [--repeats 3] [--dir /tmp]

Three questions, one part each; every point is the median of `--repeats` runs, and the
table says the load average of the machine before the part ran (other benchmarks share
it). Each part writes a PNG beside this file (growth-<part>.png).

read      A raft source read of a fixed range (`--range` entries, 100,000) at the start
          and at the end of a log of 1M, 10M and 50M entries: a read should cost
          O(range), not O(log). The range is read by the executor's read path
          (`PieceReader`: read_entries pages from the leader, journal records out), and
          by Spark (`spark.read.format("garlicfarm")` with startingOffsets and
          endingOffsets, into `noop`: planning, a Python worker, Arrow rows). Also
          per size: the node's start-up on that log (a restart: process start until it
          leads with the log applied; one sample, it is minutes at 50M) and, offline,
          where opening the log goes (SegmentedLog.open, then DiskStorage, which opens
          the log and loads every entry's term, then the core's RaftLog, which scans
          every entry for configuration entries).
snapshot  A node's state (the kv machine with 10k, 100k and 1M keys, in a snapshot, with
          an empty log behind it): restart (stop the node, start it again, until it
          answers with its commit index applied) and a new voter joining, which installs
          the leader's snapshot (InstallSnapshot, from spawn until it has applied the
          leader's commit index).
planning  A stream over the raft source (`spark.readStream.format("garlicfarm")`) with a
          backlog of 10k, 100k and 1M journal entries: the planner's own calls
          (initialOffset, latestOffset, partitions of the first micro-batch, in this
          process; the first time, while the members work out their row index, and the
          median of --repeats times after) and Spark's durationMs of the first micro-batch (latestOffset,
          queryPlanning, getBatch, addBatch) with Trigger.AvailableNow into `noop`.
open      Only read's offline start-up costs (`open_costs`, median of `--repeats`) on logs
          of `--log-sizes` entries: no farm, no Spark, for measuring a change to start-up
          (`all` leaves it out: read measures the same).

Why logs are built offline: appending 50M entries through a farm would take hours. Each
node directory is written with the project's own storage engine (`SegmentedLog`
append_many of journal entries exactly as a leader stores them, a `SnapshotStore`
snapshot of the farm state machine at the last entry, a `HardStateFile`), so the farm
starts on a log it could have written, with nothing to replay (the snapshot is at the
commit index), and keeps it (`--snapshot-interval` / `--retain-entries` too large to
compact it during the run). Data lives under `--dir` and is removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from statistics import median
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from consensus.raft import Configuration, EntryType  # noqa: E402
from consensus.raft.log import RaftLog  # noqa: E402
from consensus.runtime.disk_storage import RECORD_HEAD, DiskStorage  # noqa: E402
from consensus.runtime.machines import FarmStateMachine  # noqa: E402
from consensus.storage import HardStateFile, SegmentedLog, SnapshotStore  # noqa: E402
from consensus.storage import HardState  # noqa: E402
from consensus.wire.envelope import encode_journal  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = 1                        # the offline-built node's id
TERM = 1
APPEND_BATCH = 100_000          # records per append_many while building
RECORD = b"r" * 16              # each journal entry holds one 16-byte record
NEVER_COMPACT = ("--snapshot-interval", str(10**12), "--retain-entries", str(10**12))
POLL = 0.01


def parse_sizes(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v]


def load_average() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def short(count: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if count >= size and count % (size // 10) == 0:
            return f"{count / size:g}{unit}"
    return str(count)


def table(headings: list[str], rows: list[list[str]]) -> str:
    """A markdown table (printed, and pasted into RESULTS.md)."""
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- building node directories offline --------------------------------------------------------
def _journal_records(first: int, stop: int) -> list[bytes]:
    """Log records of journal entries [first, stop), as a leader stores them: one 16-byte
    record each, a distinct request id each (its last 8 bytes are the index)."""
    template = RECORD_HEAD.pack(TERM, EntryType.APPLICATION) + encode_journal(
        [RECORD], b"\0" * 16)
    at = template.index(b"\0" * 16) + 8
    head, tail, pack = template[:at], template[at + 8:], struct.Struct(">Q").pack
    return [head + pack(i) + tail for i in range(first, stop)]


def _save_snapshot_and_commit(node_dir: str, index: int, machine: FarmStateMachine) -> int:
    """The machine's snapshot at `index` (configuration: this node alone) and a hard state
    committing it; the snapshot's size in bytes."""
    machine.applied = index
    data = machine.snapshot()
    configuration = Configuration.of({NODE}).encode().decode()
    SnapshotStore(os.path.join(node_dir, "snapshots")).save(
        index, TERM, data, {"configuration": configuration})
    HardStateFile(os.path.join(node_dir, "hardstate")).save(HardState(TERM, NODE, index))
    return len(data)


def build_journal_node(node_dir: str, entries: int) -> None:
    """A node directory whose log holds `entries` journal entries, all committed and
    covered by a snapshot at the last one."""
    with SegmentedLog.open(os.path.join(node_dir, "log"), fsync="never") as log:
        for first in range(1, entries + 1, APPEND_BATCH):
            log.append_many(_journal_records(first, min(first + APPEND_BATCH, entries + 1)))
        log.sync()
    machine = FarmStateMachine()
    machine.journal_entries = entries
    _save_snapshot_and_commit(node_dir, entries, machine)


def build_kv_node(node_dir: str, keys: int) -> int:
    """A node directory whose state is a kv map of `keys` keys (16-byte values), in a
    snapshot at index `keys` (one put per key), with an empty log after it (as after a
    compaction); the snapshot's size in bytes."""
    machine = FarmStateMachine()
    machine.kv = {f"key-{k:09d}": f"value-{k:010d}" for k in range(keys)}
    size = _save_snapshot_and_commit(node_dir, keys, machine)
    storage = DiskStorage(node_dir, fsync="never")
    try:       # the log starts after the snapshot, as install_snapshot leaves it
        storage.install_snapshot(storage.snapshot())
    finally:
        storage.close()
    return size


@dataclass
class OpenCosts:
    """Seconds to open a node's log at start-up, step by step (offline, one sample)."""
    segments: float          # SegmentedLog.open: recovery checks every record's CRC
    storage: float           # DiskStorage: the above, plus every entry's term
    raft_log: float          # RaftLog: scans every entry for configuration entries


def open_costs(node_dir: str) -> OpenCosts:
    segments = timed(lambda: SegmentedLog.open(os.path.join(node_dir, "log"),
                                               fsync="never").close())
    started = time.perf_counter()
    storage = DiskStorage(node_dir, fsync="never")
    storage_seconds = time.perf_counter() - started
    try:
        raft_log = timed(lambda: RaftLog(storage, Configuration.of({NODE})))
    finally:
        storage.close()
    return OpenCosts(segments, storage_seconds, raft_log)


# -- the farm --------------------------------------------------------------------------------
def start_farm(root: str):
    """A farm of node NODE on the directory built under root/node-1 (it keeps its log)."""
    from pyspark_farm import LocalFarm
    return LocalFarm(nodes=1, data_dir=root, leader_timeout=1800.0,
                     extra_args=NEVER_COMPACT).start()


def wait_applied(client, target: int, endpoint: str | None = None,
                 timeout: float = 1800.0) -> None:
    """Until the member (default: the leader) answers with `target` committed and applied."""
    from consensus.client import FarmError
    deadline = time.monotonic() + timeout
    while True:
        try:
            if client.log_bounds(endpoint)[1] >= target:
                return
        except FarmError:
            pass            # not listening yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"{endpoint or 'the leader'} did not apply {target} in time")
        time.sleep(POLL)


def restart_seconds(farm, node_id: int, commit: int) -> float:
    """Stop a node, start it again: seconds until it answers with `commit` applied."""
    probe = farm.client(timeout=1.0)
    try:
        farm.stop(node_id)
        started = time.perf_counter()
        farm.restart(node_id)
        wait_applied(probe, commit, farm.endpoint_of(node_id))
        return time.perf_counter() - started
    finally:
        probe.close()


# -- read --------------------------------------------------------------------------------------
def read_range(farm, start: int, stop: int) -> int:
    """The journal entries of [start, stop) through the executor's read path; how many."""
    from pyspark_farm.connection import FarmClientOptions
    from pyspark_farm.log_access import PieceReader
    from pyspark_farm.planning import Piece
    options = farm.options
    connection = FarmClientOptions(options["endpoints"], cluster=options["cluster"],
                                   username=options["username"], password=options["password"])
    reader = PieceReader(connection, None, fail_on_data_loss=True)
    try:
        return sum(len(page) for page in reader.read([Piece(start, stop)]))
    finally:
        reader.close()


def spark_read_range(spark, farm, start: int, stop: int) -> None:
    """`spark.read` of the entries [start, stop) into Spark's noop sink."""
    (spark.read.format("garlicfarm").options(**farm.options)
     .option("startingOffsets", json.dumps({"index": start}))
     .option("endingOffsets", json.dumps({"index": stop}))
     .load().write.format("noop").mode("overwrite").save())


@dataclass
class ReadPoint:
    entries: int
    build: float
    costs: OpenCosts
    start_up: float
    read_first: float
    read_last: float
    spark_first: float
    spark_last: float


def measure_read(workdir: str, spark, entries: int, span: int, repeats: int) -> ReadPoint:
    root = os.path.join(workdir, f"read-{entries}")
    node_dir = os.path.join(root, f"node-{NODE}")
    try:
        build = timed(lambda: build_journal_node(node_dir, entries))
        costs = open_costs(node_dir)
        started = time.perf_counter()
        farm = start_farm(root)
        try:
            with farm.client() as client:
                wait_applied(client, entries)
            start_up = time.perf_counter() - started
            spark_read_range(spark, farm, 1, 1 + span)      # warms Spark's workers
            firsts, lasts, spark_firsts, spark_lasts = [], [], [], []
            for _ in range(repeats):
                for spans, spark_spans, lo in ((firsts, spark_firsts, 1),
                                               (lasts, spark_lasts, entries + 1 - span)):
                    began = time.perf_counter()
                    if read_range(farm, lo, lo + span) != span:
                        raise AssertionError(f"read [{lo}, {lo + span}) came out short")
                    spans.append(time.perf_counter() - began)
                    spark_spans.append(timed(lambda: spark_read_range(spark, farm, lo,
                                                                      lo + span)))
        finally:
            farm.close()
        return ReadPoint(entries, build, costs, start_up, median(firsts), median(lasts),
                         median(spark_firsts), median(spark_lasts))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def part_read(args: argparse.Namespace) -> str:
    from pyspark_farm import spark_session
    span = args.range
    points = []
    spark = spark_session("growth")
    try:
        for entries in args.log_sizes:
            points.append(measure_read(args.dir, spark, entries, span, args.repeats))
            print(f"  read: {short(entries)} entries done", flush=True)
    finally:
        spark.stop()
    rows = [[short(p.entries), f"{p.read_first:.3f}", f"{p.read_last:.3f}",
             f"{span / p.read_last:,.0f}", f"{p.spark_first:.2f}", f"{p.spark_last:.2f}",
             f"{p.start_up:.2f}",
             f"{p.costs.segments:.2f}", f"{p.costs.storage:.2f}", f"{p.costs.raft_log:.2f}",
             f"{p.build:.1f}"] for p in points]
    text = table(["log entries", f"read first {short(span)} (s)", f"read last {short(span)} (s)",
                  "entries/s (last)", "Spark read first (s)", "Spark read last (s)",
                  "node start-up (s)",
                  "SegmentedLog.open (s)", "DiskStorage() (s)", "RaftLog() (s)",
                  "build (s)"], rows)
    sizes = [p.entries for p in points]
    plot("read", "log entries", sizes, {
        f"read first {short(span)} entries": [p.read_first for p in points],
        f"read last {short(span)} entries": [p.read_last for p in points],
        f"Spark read of the last {short(span)}": [p.spark_last for p in points],
        "node start-up on the log": [p.start_up for p in points],
        "DiskStorage() + RaftLog() (offline)": [p.costs.storage + p.costs.raft_log
                                                for p in points]},
         "A raft source read of a fixed range vs the log's size")
    return text


def part_open(args: argparse.Namespace) -> str:
    rows = []
    for entries in args.log_sizes:
        node_dir = os.path.join(args.dir, f"open-{entries}", f"node-{NODE}")
        try:
            build_journal_node(node_dir, entries)
            samples = [open_costs(node_dir) for _ in range(args.repeats)]
        finally:
            shutil.rmtree(os.path.dirname(node_dir), ignore_errors=True)
        rows.append([short(entries)] + [f"{median(getattr(c, step) for c in samples):.2f}"
                                        for step in ("segments", "storage", "raft_log")])
    return table(["log entries", "SegmentedLog.open (s)", "DiskStorage() (s)",
                  "RaftLog() (s)"], rows)


# -- snapshot ------------------------------------------------------------------------------
@dataclass
class SnapshotPoint:
    keys: int
    snapshot_bytes: int
    restart: float
    install: float


def install_seconds(farm, commit: int, snapshot_index: int) -> float:
    """A new voter joins: seconds from its start until it has applied `commit` (it
    installs the leader's snapshot at `snapshot_index`: the leader's log starts after
    it). It is removed and retired after."""
    cluster = farm.cluster
    with farm.client() as client:
        probe = farm.client(timeout=1.0)
        try:
            started = time.perf_counter()
            node_id = cluster.spawn()
            endpoint = cluster.endpoint_of(node_id)
            client.add_server(node_id, endpoint, timeout=600.0)
            wait_applied(probe, commit, endpoint)
            seconds = time.perf_counter() - started
            if probe.log_bounds(endpoint)[2] != snapshot_index:
                raise AssertionError(f"node {node_id} did not install the leader's snapshot")
        finally:
            probe.close()
        client.remove_server(node_id, timeout=60.0)
    cluster.retire(node_id)
    return seconds


def measure_snapshot(workdir: str, keys: int, repeats: int) -> SnapshotPoint:
    root = os.path.join(workdir, f"snapshot-{keys}")
    try:
        size = build_kv_node(os.path.join(root, f"node-{NODE}"), keys)
        farm = start_farm(root)
        try:
            with farm.client() as client:
                wait_applied(client, keys)
                commit = client.log_bounds()[1]
            restart = median([restart_seconds(farm, NODE, commit) for _ in range(repeats)])
            farm.wait_for_leader()
            with farm.client() as client:
                commit = client.log_bounds()[1]
            install = median([install_seconds(farm, commit, keys) for _ in range(repeats)])
        finally:
            farm.close()
        return SnapshotPoint(keys, size, restart, install)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def part_snapshot(args: argparse.Namespace) -> str:
    points = []
    for keys in args.state_keys:
        points.append(measure_snapshot(args.dir, keys, args.repeats))
        print(f"  snapshot: {short(keys)} keys done", flush=True)
    rows = [[short(p.keys), f"{p.snapshot_bytes / 1e6:.1f}", f"{p.restart:.2f}",
             f"{p.install:.2f}"] for p in points]
    text = table(["kv keys", "snapshot (MB)", "restart (s)", "new voter installs (s)"], rows)
    plot("snapshot", "kv keys in the state", [p.keys for p in points], {
        "restart from own snapshot": [p.restart for p in points],
        "new voter: InstallSnapshot until applied": [p.install for p in points]},
         "Restart and snapshot install vs the state's size")
    return text


# -- planning -----------------------------------------------------------------------------
@dataclass
class PlanningPoint:
    backlog: int
    initial: float
    latest: float
    partitions: float
    first: float        # latestOffset + partitions the first time: the members' row index cold
    spark: dict[str, float] = field(default_factory=dict)


SPARK_STEPS = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "triggerExecution")


def planner_seconds(farm, backlog: int) -> tuple[float, float, float]:
    """The stream reader's planning calls for the first micro-batch, timed (no Spark)."""
    from pyspark.sql.types import _parse_datatype_string

    from pyspark_farm.compat import ReadAllAvailable
    from pyspark_farm.raft.kind import schema, stream_reader
    options = {**farm.options, "startingOffsets": "earliest"}
    reader = stream_reader(options, _parse_datatype_string(schema(options)))
    try:
        started = time.perf_counter()
        start = reader.initialOffset()
        initial = time.perf_counter() - started
        end = reader.latestOffset(start, ReadAllAvailable())
        latest = time.perf_counter() - started - initial
        tasks = reader.partitions(start, end)
        partitions = time.perf_counter() - started - initial - latest
    finally:
        reader.stop()
    if end["index"] < backlog or not tasks:
        raise AssertionError(f"the first micro-batch ends at {end}, before the backlog")
    return initial, latest, partitions


def spark_progress(spark, farm, checkpoint: str) -> dict[str, float]:
    """Spark's durationMs (as seconds) of the first micro-batch of an AvailableNow stream."""
    stream = (spark.readStream.format("garlicfarm").options(**farm.options)
              .option("startingOffsets", "earliest").load())
    query = (stream.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    first = next(p for p in query.recentProgress if p["numInputRows"] > 0)
    return {step: first["durationMs"].get(step, 0) / 1000 for step in SPARK_STEPS}


def measure_planning(workdir: str, spark, backlog: int, repeats: int) -> PlanningPoint:
    root = os.path.join(workdir, f"planning-{backlog}")
    try:
        build_journal_node(os.path.join(root, f"node-{NODE}"), backlog)
        farm = start_farm(root)
        try:
            with farm.client() as client:
                wait_applied(client, backlog)
            direct = [planner_seconds(farm, backlog) for _ in range(repeats + 1)]
            runs = [spark_progress(spark, farm, os.path.join(root, f"checkpoint-{n}"))
                    for n in range(repeats)]
        finally:
            farm.close()
        cold, warm = direct[0], direct[1:]
        return PlanningPoint(backlog, *(median([d[k] for d in warm]) for k in range(3)),
                             first=cold[1] + cold[2],
                             spark={s: median([r[s] for r in runs]) for s in SPARK_STEPS})
    finally:
        shutil.rmtree(root, ignore_errors=True)


def part_planning(args: argparse.Namespace) -> str:
    from pyspark_farm import spark_session
    spark = spark_session("growth")
    try:
        points = []
        for backlog in args.backlogs:
            points.append(measure_planning(args.dir, spark, backlog, args.repeats))
            print(f"  planning: {short(backlog)} entries done", flush=True)
    finally:
        spark.stop()
    rows = [[short(p.backlog), f"{p.first:.3f}", f"{p.initial:.3f}", f"{p.latest:.3f}",
             f"{p.partitions:.3f}", f"{p.backlog / (p.latest + p.partitions):,.0f}"]
            + [f"{p.spark[s]:.3f}" for s in SPARK_STEPS] for p in points]
    text = table(["backlog (entries)", "first plan (s)", "initialOffset (s)",
                  "latestOffset (s)", "partitions (s)", "entries/s (both)"]
                 + [f"Spark {s} (s)" for s in SPARK_STEPS], rows)
    plot("planning", "backlog (journal entries)", [p.backlog for p in points], {
        "first plan, cold row index (planner)": [p.first for p in points],
        "latestOffset (planner)": [p.latest for p in points],
        "partitions (planner)": [p.partitions for p in points],
        "Spark latestOffset": [p.spark["latestOffset"] for p in points],
        "Spark queryPlanning + getBatch": [p.spark["queryPlanning"] + p.spark["getBatch"]
                                           for p in points]},
         "Planning the first micro-batch vs the backlog")
    return text


# -- plots ------------------------------------------------------------------------------------
def plot(part: str, x_label: str, xs: list[int], series: dict[str, list[float]],
         title: str) -> None:
    """growth-<part>.png: seconds against size, both axes logarithmic (a slope of 1 is
    linear growth, a flat line none)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, ys in series.items():
        axes.plot(xs, [max(y, 1e-4) for y in ys], marker="o", label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(x_label)
    axes.set_ylabel("seconds (median)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(os.path.join(HERE, f"growth-{part}.png"), dpi=100)
    plt.close(figure)


PARTS: dict[str, Callable[[argparse.Namespace], str]] = {
    "read": part_read, "snapshot": part_snapshot, "planning": part_planning,
    "open": part_open}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=[*PARTS, "all"], default="all")
    parser.add_argument("--log-sizes", type=parse_sizes, default=[1_000_000, 10_000_000,
                                                                  50_000_000])
    parser.add_argument("--range", type=int, default=100_000, help="entries per read")
    parser.add_argument("--state-keys", type=parse_sizes, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--backlogs", type=parse_sizes, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where data is built")
    args = parser.parse_args()
    args.dir = tempfile.mkdtemp(prefix="growth-", dir=args.dir)
    try:
        for name in [p for p in PARTS if p != "open"] if args.part == "all" else [args.part]:
            load = load_average()
            started = time.perf_counter()
            text = PARTS[name](args)
            print(f"\n{name} ({load} before; took {time.perf_counter() - started:.0f} s; "
                  f"{load_average()} after)\n{text}\n", flush=True)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
