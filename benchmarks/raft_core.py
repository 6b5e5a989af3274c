"""Benchmarks of the raft core: the durable log and the pure cluster.

    .venv/bin/python benchmarks/raft_core.py [--part storage|cluster|all] [--seconds 1.0] [--dir DIR]

Storage: appends/s and MB/s of `SegmentedLog` for each fsync policy with 100-byte and
64 KiB records, and the group-commit case (8 threads each appending then syncing, under
`batch`). The baseline, measured in the same run on the same file system, is raw
`os.write` of records of the same size to a plain file with the same fsync pattern;
`log/raw` is the ratio of the two rates (1.0 = the log costs nothing over the syscalls).
Log and baseline run in alternating rounds (log, raw, log, raw, ...) so that a change
in the machine's load during the run hits both alike.

Patterns: always = an fsync per append; batch = one thread, sync() after every 100
appends; never = no fsync; group = 8 threads, each append followed by sync() (the raw
baseline: each thread os.write + os.fsync, so the kernel sees one fsync per record);
many = append_many of 100 records then sync() under batch (raw: one os.write of the 100
records, one fsync), which shows the per-call cost of Python amortised.

Cluster: entries/s through a 3-node cluster of pure RaftNodes (consensus.sim.local:
MemoryStorage, messages handed over in memory, no network, no disk), from propose to
applied on all three nodes. Rows: one proposal per round (each one a full round of
Readys: leader append, AppendEntries, follower append, response, commit, apply),
then batches of 10, 100 and 1000 proposals per round. The in-run baseline ("floor") is
the work any implementation must do for the same entries in Python: build the entries,
append them to three MemoryStorages and hand them to three appliers; core/floor is
how many times that the whole Raft machinery costs. The single-proposal row also gives
the p50/p99 CPU time of one commit round, the core's share of a commit's latency.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from consensus.raft import Entry, EntryType, MemoryStorage, RaftOptions  # noqa: E402
from consensus.sim.local import InMemoryCluster  # noqa: E402
from consensus.storage import SegmentedLog  # noqa: E402
from consensus.storage.record import HEADER_SIZE, frame  # noqa: E402

SIZES = (100, 64 << 10)
BATCH = 100  # appends per sync() in "batch", records per append_many in "many"
GROUP_THREADS = 8
ROUNDS = 3
MAX_BYTES_PER_ROUND = 96 << 20  # keeps the disk traffic of one case bounded


@dataclass
class Run:
    records: int = 0
    seconds: float = 0.0
    fsyncs: int = 0

    def add(self, other: "Run") -> None:
        self.records += other.records
        self.seconds += other.seconds
        self.fsyncs += other.fsyncs

    def rate(self) -> float:
        return self.records / self.seconds


HEADINGS = ["case", "record", "records", "log appends/s", "log MB/s", "raw appends/s",
            "raw MB/s", "log/raw", "log fsyncs"]


def _size_name(size: int) -> str:
    return f"{size >> 10} KiB" if size >= 1024 else f"{size} B"


def _timed_loop(step: Callable[[], None], seconds: float, limit: int) -> tuple[int, float]:
    """Call step() until `seconds` pass or `limit` calls were made."""
    start = time.perf_counter()
    deadline = start + seconds
    done = 0
    while done < limit:
        step()
        done += 1
        if done % 8 == 0 and time.perf_counter() >= deadline:
            break
    return done, time.perf_counter() - start


def _in_threads(work: Callable[[int], None]) -> float:
    """Run work(n) in GROUP_THREADS threads at once; the wall time."""
    threads = [threading.Thread(target=work, args=(n,)) for n in range(GROUP_THREADS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


class Case:
    """One row: a log and a plain file, measured in alternating rounds.

    `pattern` is always, batch, never, group or many (see the module docstring)."""

    def __init__(self, workdir: str, pattern: str, size: int) -> None:
        self.pattern, self.size = pattern, size
        self.payload = os.urandom(size)
        self.framed = frame(self.payload, 0)  # the raw baseline writes the same bytes
        policy = pattern if pattern in ("always", "never") else "batch"
        name = f"{pattern}-{size}"
        self.log = SegmentedLog.open(os.path.join(workdir, "log-" + name), fsync=policy)
        self.fd = os.open(os.path.join(workdir, "raw-" + name),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.per_thread = [0] * GROUP_THREADS
        self.appended = 0

    def close(self) -> None:
        self.log.close()
        os.close(self.fd)

    def label(self) -> str:
        return {"batch": f"batch (sync every {BATCH})",
                "group": f"group ({GROUP_THREADS} threads, append+sync)",
                "many": f"many (append_many x{BATCH} + sync)"}.get(self.pattern, self.pattern)

    def log_round(self, seconds: float) -> Run:
        log, payload = self.log, self.payload
        limit = max(BATCH, MAX_BYTES_PER_ROUND // self.size)
        fsyncs = log.stats().fsyncs
        if self.pattern == "group":
            deadline = time.perf_counter() + seconds
            counts = [0] * GROUP_THREADS

            def appender(n: int) -> None:
                while counts[n] < limit // GROUP_THREADS and time.perf_counter() < deadline:
                    log.append(payload)
                    log.sync()
                    counts[n] += 1

            elapsed, records = _in_threads(appender), sum(counts)
            self.per_thread = counts
        elif self.pattern == "many":
            batch = [payload] * BATCH

            def step() -> None:
                log.append_many(batch)
                log.sync()

            calls, elapsed = _timed_loop(step, seconds, limit // BATCH)
            records = calls * BATCH
        else:
            def step() -> None:
                log.append(payload)
                self.appended += 1
                if self.pattern == "batch" and self.appended % BATCH == 0:
                    log.sync()

            records, elapsed = _timed_loop(step, seconds, limit)
        return Run(records, elapsed, log.stats().fsyncs - fsyncs)

    def raw_round(self, records: int) -> Run:
        fd, framed = self.fd, self.framed
        if self.pattern == "group":
            def appender(n: int) -> None:
                for _ in range(self.per_thread[n]):
                    os.write(fd, framed)
                    os.fsync(fd)

            return Run(records, _in_threads(appender), records)
        start = time.perf_counter()
        fsyncs = 0
        if self.pattern == "many":
            block = framed * BATCH
            for _ in range(records // BATCH):
                os.write(fd, block)
                os.fsync(fd)
                fsyncs += 1
        else:
            every = {"always": 1, "batch": BATCH, "never": 0}[self.pattern]
            for i in range(records):
                os.write(fd, framed)
                if every and (i + 1) % every == 0:
                    os.fsync(fd)
                    fsyncs += 1
        return Run(records, time.perf_counter() - start, fsyncs)

    def measure(self, seconds: float) -> list[str]:
        log_total, raw_total = Run(), Run()
        for _ in range(ROUNDS):
            log_run = self.log_round(seconds / ROUNDS)
            log_total.add(log_run)
            raw_total.add(self.raw_round(log_run.records))
        mb = self.size / 1e6
        return [self.label(), _size_name(self.size), str(log_total.records),
                f"{log_total.rate():,.0f}", f"{log_total.rate() * mb:,.1f}",
                f"{raw_total.rate():,.0f}", f"{raw_total.rate() * mb:,.1f}",
                f"{log_total.rate() / raw_total.rate():.2f}",
                f"{log_total.fsyncs} ({log_total.records / max(log_total.fsyncs, 1):.1f} "
                f"records/fsync)"]


def storage_benchmarks(workdir: str, seconds: float) -> list[list[str]]:
    rows = []
    for size in SIZES:
        for pattern in ("always", "batch", "never", "group", "many"):
            case = Case(workdir, pattern, size)
            try:
                rows.append(case.measure(seconds))
            finally:
                case.close()
            print(" | ".join(rows[-1]), file=sys.stderr)
    return rows


# -- the pure cluster ----------------------------------------------------------------------
CLUSTER_BATCHES = (1, 10, 100, 1000)
CLUSTER_PAYLOAD = 100
CLUSTER_HEADINGS = ["proposals per round", "entries", "core entries/s", "floor entries/s",
                    "core/floor", "vs 1 per round", "round p50 us", "round p99 us"]


class ClusterCase:
    """A 3-node cluster with an elected leader; `round` proposes `batch` entries and
    delivers until all three nodes applied them."""

    def __init__(self) -> None:
        self.cluster = InMemoryCluster([1, 2, 3], RaftOptions(pre_vote=False, check_quorum=False))
        self.leader = self.cluster.elect(1)
        self.cluster.deliver()
        self.payload = os.urandom(CLUSTER_PAYLOAD)
        for applied in self.cluster.applied.values():
            applied.clear()

    def round(self, batch: int) -> None:
        cluster, leader = self.cluster, self.leader
        target = leader.propose_many([self.payload] * batch)
        cluster.deliver()
        if not all(node.applied_index >= target for node in cluster.nodes.values()):
            leader.tick()       # a commit index alone goes out once per tick (replication.py)
            cluster.deliver()
        if not all(node.applied_index >= target for node in cluster.nodes.values()):
            raise RuntimeError("a round ended before every node applied its entries")
        for applied in cluster.applied.values():
            applied.clear()


class Floor:
    """The baseline: the same entries built, stored three times and applied three times."""

    def __init__(self) -> None:
        self.storages = [MemoryStorage() for _ in range(3)]
        self.applied: list[list[Entry]] = [[], [], []]
        self.index = 0
        self.payload = os.urandom(CLUSTER_PAYLOAD)

    def round(self, batch: int) -> None:
        first = self.index + 1
        entries = [Entry(1, first + i, EntryType.APPLICATION, self.payload) for i in range(batch)]
        self.index += batch
        for storage, applied in zip(self.storages, self.applied):
            storage.append(entries)
            applied.extend(entries)
            applied.clear()


def _timed_rounds(round_: Callable[[int], None], batch: int, seconds: float,
                  times: list[float] | None = None) -> tuple[int, float]:
    """Rounds of `batch` until `seconds` pass; entries done and time spent."""
    clock = time.perf_counter
    start = clock()
    deadline = start + seconds
    done = 0
    while True:
        t0 = clock()
        round_(batch)
        t1 = clock()
        done += batch
        if times is not None:
            times.append(t1 - t0)
        if t1 >= deadline:
            return done, t1 - start


def cluster_benchmarks(seconds: float) -> list[list[str]]:
    rows, single_rate = [], 0.0
    for batch in CLUSTER_BATCHES:
        case, floor = ClusterCase(), Floor()
        core_run, floor_run, times = Run(), Run(), []
        for _ in range(ROUNDS):
            done, spent = _timed_rounds(case.round, batch, seconds / ROUNDS, times)
            core_run.add(Run(done, spent))
            done, spent = _timed_rounds(floor.round, batch, seconds / ROUNDS / 10)
            floor_run.add(Run(done, spent))
        rate = core_run.rate()
        single_rate = single_rate or rate
        times.sort()
        rows.append([str(batch), str(core_run.records), f"{rate:,.0f}",
                     f"{floor_run.rate():,.0f}", f"{rate / floor_run.rate():.3f}",
                     f"{rate / single_rate:.1f}x", f"{times[len(times) // 2] * 1e6:,.0f}",
                     f"{times[min(len(times) - 1, len(times) * 99 // 100)] * 1e6:,.0f}"])
        print(" | ".join(rows[-1]), file=sys.stderr)
    return rows


def markdown(rows: list[list[str]], headings: list[str] = HEADINGS) -> str:
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["storage", "cluster", "all"], default="all",
                        help="which benchmarks to run (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="time given to the log in each case, split over "
                             f"{ROUNDS} rounds (default 1.0)")
    parser.add_argument("--dir", default=None,
                        help="where to write the files (default: a temp dir; put it on "
                             "the disk you want to measure)")
    args = parser.parse_args(argv)
    if args.part in ("storage", "all"):
        workdir = tempfile.mkdtemp(prefix="garlicfarm-bench-", dir=args.dir)
        try:
            print(f"storage: files in {workdir}; {HEADER_SIZE}-byte header per record",
                  file=sys.stderr)
            print(markdown(storage_benchmarks(workdir, args.seconds)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.part in ("cluster", "all"):
        print(f"cluster: 3 pure nodes in memory, {CLUSTER_PAYLOAD}-byte entries", file=sys.stderr)
        print(markdown(cluster_benchmarks(args.seconds), CLUSTER_HEADINGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
