"""How long after its prepared commits an abandoned batch is aborted (--prepared-timeout).

A 3-node farm of 3 partitions (`--prepared-timeout` T): a driver prepares a batch in
partitions 1 and 2 and never decides it, `--runs` times. Per run: the seconds from the
last prepared commit's answer to (a) partition 0's leader answering `batch_status` as
aborted, (b) partition 1's stable end passing an entry written after the batch, (c)
partitions 1 and 2 no longer holding the prepared commits (the abort rolled forward).
Expect (a) in [T, T + T/4 + a round trip]: each node checks every min(1 s, T/4).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/prepared_timeout.py --timeout 2 --runs 5
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid

import pyarrow as pa

from consensus.client import FarmClient
from pyspark_farm import LocalFarm
from pyspark_farm.connection import FarmClientOptions
from pyspark_farm.log_access import log_end
from pyspark_farm.raft.routed_sink import RoutedSinkBackend
from pyspark_farm.raft.sink import RaftSinkBackend
from pyspark_farm.sink import TaskTag

PARTITIONS = 3


class Abandon(Exception):
    """The driver walks away before partition 0's decision."""


def until(condition, seconds: float = 60.0) -> float:
    """Poll `condition` (every 10 ms) until true; the monotonic time it was first seen."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {seconds} s")
        time.sleep(0.01)
    return time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    real = FarmClient.commit_batch
    seen = {"prepared": 0.0}

    def commit_batch(self, *a, **k):
        if self.partition == 0:
            raise Abandon()
        result = real(self, *a, **k)
        seen["prepared"] = time.monotonic()
        return result
    with LocalFarm(nodes=3, partitions=PARTITIONS,
                   extra_args=("--prepared-timeout", str(args.timeout))) as farm:
        o = farm.options
        backend = RoutedSinkBackend(RaftSinkBackend(FarmClientOptions(
            endpoints=o["endpoints"], cluster=o["cluster"], username=o["username"],
            password=o["password"])), PARTITIONS, "binary")
        rows: list[tuple[float, float, float]] = []
        zero, one, two = (farm.client(partition=p) for p in range(PARTITIONS))
        for run in range(args.runs):
            query = f"bench-{uuid.uuid4().hex[:8]}"
            frame = pa.RecordBatch.from_pydict({"value": pa.array(
                [f"{query}-{n}".encode() for n in range(30)], pa.binary())})
            output = backend.stage_batches(TaskTag(query, 0, 0, 0), iter([frame]))
            FarmClient.commit_batch = commit_batch
            try:
                backend.commit(query, 0, [output])
            except Abandon:
                pass
            finally:
                FarmClient.commit_batch = real
            prepared = seen["prepared"]
            after, _ = one.append([b"after"])
            aborted = until(lambda: getattr(zero.batch_status(query, 0), "aborted", False))
            released = until(lambda: log_end(one) > after)
            forgotten = until(lambda: not [w for c in (one, two)
                                           for w in c.prepared_commits()[1] if w[1] == query])
            rows.append((aborted - prepared, released - prepared, forgotten - prepared))
            print(f"run {run + 1}: aborted {rows[-1][0]:.2f} s, readers released "
                  f"{rows[-1][1]:.2f} s, rolled forward {rows[-1][2]:.2f} s after prepare")
        for client in (zero, one, two):
            client.close()
    for name, col in zip(("aborted", "released", "rolled forward"), zip(*rows)):
        print(f"{name}: min {min(col):.2f} median {statistics.median(col):.2f} "
              f"max {max(col):.2f} s (timeout {args.timeout:g} s)")


if __name__ == "__main__":
    main()
