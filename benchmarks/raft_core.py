"""Benchmarks of the raft core: the durable log (this part) and the pure cluster (to come).

    .venv/bin/python benchmarks/raft_core.py [--part storage] [--seconds 1.0] [--dir DIR]

Storage: appends/s and MB/s of `SegmentedLog` for each fsync policy with 100-byte and
64 KiB records, and the group-commit case (8 threads each appending then syncing, under
`batch`). The baseline, measured in the same run on the same file system, is raw
`os.write` of records of the same size to a plain file with the same fsync pattern;
`log/raw` is the ratio of the two rates (1.0 = the log costs nothing over the syscalls).

Patterns: always = an fsync per append; batch = one thread, sync() after every 100
appends; never = no fsync; group = 8 threads, each append followed by sync() (the raw
baseline: each thread os.write + os.fsync, so the kernel sees one fsync per record);
many = append_many of 100 records then sync() under batch (raw: one os.write of the 100
records, one fsync), which shows the per-call cost of Python amortised.
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

from consensus.storage import SegmentedLog  # noqa: E402
from consensus.storage.record import HEADER_SIZE, frame  # noqa: E402

SIZES = (100, 64 << 10)
BATCH_SYNC_EVERY = 100
GROUP_THREADS = 8
MAX_BYTES_PER_CASE = 256 << 20  # keeps the disk traffic of one case bounded


@dataclass
class Run:
    records: int
    seconds: float
    fsyncs: int

    def rate(self) -> float:
        return self.records / self.seconds


@dataclass
class Row:
    case: str
    size: int
    log: Run
    raw: Run

    def cells(self) -> list[str]:
        mb = self.size / 1e6
        return [self.case, _size_name(self.size), str(self.log.records),
                f"{self.log.rate():,.0f}", f"{self.log.rate() * mb:,.1f}",
                f"{self.raw.rate():,.0f}", f"{self.raw.rate() * mb:,.1f}",
                f"{self.log.rate() / self.raw.rate():.2f}",
                f"{self.log.fsyncs} ({self.log.records / max(self.log.fsyncs, 1):.1f} rec/fsync)"]


HEADINGS = ["case", "record", "records", "log appends/s", "log MB/s", "raw appends/s",
            "raw MB/s", "log/raw", "log fsyncs"]


def _size_name(size: int) -> str:
    return f"{size >> 10} KiB" if size >= 1024 else f"{size} B"


def _timed_loop(step: Callable[[int], None], seconds: float, limit: int) -> tuple[int, float]:
    """Call step(i) until `seconds` pass or `limit` calls were made."""
    start = time.perf_counter()
    deadline = start + seconds
    done = 0
    while done < limit:
        step(done)
        done += 1
        if done % 16 == 0 and time.perf_counter() >= deadline:
            break
    return done, time.perf_counter() - start


def _threads(count: int, work: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=work, args=(n,)) for n in range(count)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def single_thread_case(workdir: str, policy: str, size: int, seconds: float) -> Row:
    payload = os.urandom(size)
    limit = max(100, MAX_BYTES_PER_CASE // size)
    sync_every = {"always": 0, "batch": BATCH_SYNC_EVERY, "never": 0}[policy]
    with SegmentedLog.open(os.path.join(workdir, f"log-{policy}-{size}"), fsync=policy) as log:
        def append(i: int) -> None:
            log.append(payload)
            if sync_every and (i + 1) % sync_every == 0:
                log.sync()

        records, elapsed = _timed_loop(append, seconds, limit)
        if sync_every:
            log.sync()
        log_run = Run(records, elapsed, log.stats().fsyncs)

    framed = frame(payload, 0)
    path = os.path.join(workdir, f"raw-{policy}-{size}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    fsyncs = 0
    try:
        start = time.perf_counter()
        for i in range(records):
            os.write(fd, framed)
            if policy == "always" or (sync_every and (i + 1) % sync_every == 0):
                os.fsync(fd)
                fsyncs += 1
        if sync_every and records % sync_every:
            os.fsync(fd)
            fsyncs += 1
        raw_run = Run(records, time.perf_counter() - start, fsyncs)
    finally:
        os.close(fd)
    return Row(policy, size, log_run, raw_run)


def group_commit_case(workdir: str, size: int, seconds: float) -> Row:
    payload = os.urandom(size)
    per_thread = [0] * GROUP_THREADS
    limit = max(100, MAX_BYTES_PER_CASE // size // GROUP_THREADS)
    deadline = time.perf_counter() + seconds
    with SegmentedLog.open(os.path.join(workdir, f"log-group-{size}"), fsync="batch") as log:
        def appender(n: int) -> None:
            while per_thread[n] < limit and time.perf_counter() < deadline:
                log.append(payload)
                log.sync()
                per_thread[n] += 1

        elapsed = _threads(GROUP_THREADS, appender)
        log_run = Run(sum(per_thread), elapsed, log.stats().fsyncs)

    framed = frame(payload, 0)
    fd = os.open(os.path.join(workdir, f"raw-group-{size}"),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        def raw_appender(n: int) -> None:
            for _ in range(per_thread[n]):
                os.write(fd, framed)
                os.fsync(fd)

        raw_run = Run(sum(per_thread), _threads(GROUP_THREADS, raw_appender), sum(per_thread))
    finally:
        os.close(fd)
    return Row(f"group ({GROUP_THREADS} threads, batch)", size, log_run, raw_run)


def append_many_case(workdir: str, size: int, seconds: float) -> Row:
    payloads = [os.urandom(size)] * BATCH_SYNC_EVERY
    limit = max(1, MAX_BYTES_PER_CASE // size // BATCH_SYNC_EVERY)
    with SegmentedLog.open(os.path.join(workdir, f"log-many-{size}"), fsync="batch") as log:
        def append(_i: int) -> None:
            log.append_many(payloads)
            log.sync()

        calls, elapsed = _timed_loop(append, seconds, limit)
        log_run = Run(calls * BATCH_SYNC_EVERY, elapsed, log.stats().fsyncs)

    framed = frame(payloads[0], 0) * BATCH_SYNC_EVERY
    fd = os.open(os.path.join(workdir, f"raw-many-{size}"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(calls):
            os.write(fd, framed)
            os.fsync(fd)
        raw_run = Run(calls * BATCH_SYNC_EVERY, time.perf_counter() - start, calls)
    finally:
        os.close(fd)
    return Row(f"many (append_many x{BATCH_SYNC_EVERY}, batch)", size, log_run, raw_run)


def storage_benchmarks(workdir: str, seconds: float) -> list[Row]:
    rows = []
    for size in SIZES:
        for case in (lambda: single_thread_case(workdir, "always", size, seconds),
                     lambda: single_thread_case(workdir, "batch", size, seconds),
                     lambda: single_thread_case(workdir, "never", size, seconds),
                     lambda: group_commit_case(workdir, size, seconds),
                     lambda: append_many_case(workdir, size, seconds)):
            rows.append(case())
            print(" | ".join(rows[-1].cells()), file=sys.stderr)
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["storage"], default="storage",
                        help="which benchmarks to run")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="time budget of each measured log case (default 1.0)")
    parser.add_argument("--dir", default=None,
                        help="where to write the files (default: a temp dir; put it on "
                             "the disk you want to measure)")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="garlicfarm-bench-", dir=args.dir)
    try:
        print(f"storage: files in {workdir}; header overhead {HEADER_SIZE} bytes/record; "
              f"batch syncs every {BATCH_SYNC_EVERY} appends", file=sys.stderr)
        print(markdown(storage_benchmarks(workdir, args.seconds)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
