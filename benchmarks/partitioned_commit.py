"""The raft sink's driver commit over a farm of several partitions: what deciding a batch
once (prepare, decide in partition 0, markers; docs/exactly-once.md, "Partitions") costs
against the commit it replaced (one plain commit per partition, one after the other),
on the same farm, in the same run, alternating.

Each batch stages `--rows` keyless rows from two tasks (spread over every partition) and
is committed by one of the two; the figure is the commit call's wall time (the staging
is the same for both). Run by hand:

    PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/partitioned_commit.py \\
        --partitions 3 --batches 40
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid

import pyarrow as pa

from pyspark_farm import LocalFarm
from pyspark_farm.connection import FarmClientOptions
from pyspark_farm.raft.routed_sink import RoutedOutput, RoutedSinkBackend
from pyspark_farm.raft.sink import RaftSinkBackend
from pyspark_farm.sink import TaskTag


def sequential_commit(backend: RoutedSinkBackend, query: str, batch: int,
                      outputs: list[RoutedOutput]) -> None:
    """The commit before issue 28's item 3: each partition's share, one after the other."""
    for partition in range(backend.partitions):
        parts = [o.routed[partition] for o in outputs if partition in o.routed]
        staged = [ref for refs, _ in parts for ref in refs]
        if staged:
            counts = [n for _, rows in parts for n in rows]
            with backend._of(partition).connection.client() as client:
                client.commit_batch(query, batch, staged, metadata={
                    "rows": counts, "partitions": len(parts), "writer": "pyspark_farm"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40, help="per way of committing")
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    timings: dict[str, list[float]] = {"decided once": [], "one after the other": []}
    with LocalFarm(nodes=3, partitions=args.partitions) as farm:
        options = farm.options
        connection = FarmClientOptions(options["endpoints"], options["cluster"],
                                       options["username"], options["password"])
        backend = RoutedSinkBackend(RaftSinkBackend(connection), args.partitions, "binary")
        query = f"bench-{uuid.uuid4().hex[:8]}"
        for batch in range(2 * args.batches):
            outputs = []
            for task in range(2):
                values = pa.array([b"x" * 100] * (args.rows // 2), pa.binary())
                frame = pa.RecordBatch.from_pydict({"value": values})
                outputs.append(backend.stage_batches(TaskTag(query, batch, task, 0),
                                                     iter([frame])))
            way = "decided once" if batch % 2 else "one after the other"
            started = time.perf_counter()
            if batch % 2:
                backend.commit(query, batch, outputs)
            else:
                sequential_commit(backend, query, batch, outputs)
            timings[way].append(time.perf_counter() - started)
    print(f"{args.partitions} partitions, 3 nodes, {args.batches} batches each, "
          f"{args.rows} rows a batch")
    print("| commit | median | p90 | mean |")
    print("|---|---:|---:|---:|")
    for way, times in timings.items():
        ms = sorted(t * 1000 for t in times)
        print(f"| {way} | {statistics.median(ms):.1f} ms | {ms[int(0.9 * len(ms))]:.1f} ms "
              f"| {statistics.mean(ms):.1f} ms |")


if __name__ == "__main__":
    main()
