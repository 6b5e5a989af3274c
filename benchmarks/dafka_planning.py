"""How long the dafka source's planning takes on the driver, without Spark.

    PYTHONPATH=<tree> .venv/bin/python benchmarks/dafka_planning.py [--stores 2]
        [--partitions 4] [--records 1000] [--repeat 10] [--plain]

A LocalDafka (a tower in this process, `stores` store processes, 0.1 s beacons) whose
store directories hold `partitions` partitions of `records` records each, then:
  fresh   a new store client until it has found every store, then `heads` (what a
          batch read's `partitions()` and the sink's stored-head check do);
  warm    `heads` on a client that is already open (a stream's `latestOffset`);
  plan    `DafkaBatchReader.partitions()` (startingOffsets earliest, endingOffsets
          latest, readCommitted false): the whole planning of a batch read.
  stream  (with `--stream-batches N`) a Spark stream over the stored records, N
          micro-batches (maxOffsetsPerTrigger, Trigger.AvailableNow) into `noop`,
          wall time per micro-batch: each plans with `latestOffset` (heads).
Each is timed `repeat` times; the table gives the median and the best. `--plain`
starts the stores with `--no-bulk` (C-store behaviour: no extension). Runs the same
against older trees (same API), for before/after comparisons.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from connectors.dafka.node import new_address  # noqa: E402
from connectors.dafka.partitions import PartitionStore  # noqa: E402
from pyspark_farm.dafka.deployment import open_store_client  # noqa: E402
from pyspark_farm.dafka.local import LocalDafka  # noqa: E402

TOPIC = "plan"


def fill(directory: Path, addresses: list[str], records: int) -> None:
    """A store directory holding `records` records of each partition."""
    partitions = PartitionStore(directory)
    for address in addresses:
        for seq in range(records):
            partitions.stage((TOPIC, address), seq, b"x" * 100)
    partitions.commit()
    partitions.close()


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def stream(options: dict[str, str], args: argparse.Namespace, timed) -> list[float]:
    """Seconds per micro-batch of an AvailableNow stream read into `noop`."""
    from pyspark_farm import spark_session
    spark = spark_session("dafka-planning", "local[2]", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    total = args.records * args.partitions
    per_batch = -(-total // args.stream_batches)
    times = []
    for number in range(args.repeat):
        with tempfile.TemporaryDirectory() as checkpoint:
            stream_options = {k: v for k, v in options.items() if k != "endingOffsets"}
            query = (spark.readStream.format("garlicfarm").options(**stream_options)
                     .option("maxOffsetsPerTrigger", str(per_batch)).load()
                     .writeStream.format("noop").option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True))
            start = time.perf_counter()
            running = query.start()
            running.awaitTermination(600)
            seconds = time.perf_counter() - start
            batches = sum(1 for p in running.recentProgress if p["numInputRows"])
            assert sum(p["numInputRows"] for p in running.recentProgress) == total
            times.append(seconds / batches)
    return times


def main(argv: list[str] | None = None) -> int:  # noqa: C901 - a script
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--stream-batches", type=int, default=0)
    args = parser.parse_args(argv)

    data = Path(tempfile.mkdtemp(prefix="dafka-plan-"))
    addresses = [new_address() for _ in range(args.partitions)]
    for number in range(args.stores):
        fill(data / f"store-{number}", addresses, args.records)
    expect = {(TOPIC, a): args.records - 1 for a in addresses}
    dafka = LocalDafka(stores=args.stores, data_dir=data)
    if args.plain:
        import subprocess
        original = subprocess.Popen

        def no_bulk(cmd, *a, **kw):
            return original([*cmd, "--no-bulk"] if "store" in cmd else cmd, *a, **kw)
        subprocess.Popen = no_bulk          # LocalDafka starts its stores by Popen
    with dafka:
        config, timeout = dafka.config, 30.0

        def fresh() -> None:
            client = open_store_client(config, timeout)
            try:
                assert client.heads(TOPIC, timeout=timeout) == expect
            finally:
                client.stop()

        warm_client = None

        def warm() -> None:
            nonlocal warm_client
            if warm_client is None:    # opened here: an idle client is forgotten
                warm_client = open_store_client(config, timeout)
            assert warm_client.heads(TOPIC, timeout=timeout) == expect

        from pyspark_farm.dafka import kind
        from pyspark.sql.types import (BinaryType, LongType, StringType, StructField,
                                       StructType, TimestampType)
        schema = StructType([StructField("topic", StringType()),
                             StructField("partition", StringType()),
                             StructField("offset", LongType()),
                             StructField("value", BinaryType()),
                             StructField("timestamp", TimestampType())])
        options = {**dafka.options, "subscribe": TOPIC, "readCommitted": "false",
                   "startingOffsets": "earliest", "endingOffsets": "latest"}

        def plan() -> None:
            reader = kind.batch_reader(options, schema)
            tasks = reader.partitions()
            assert sum(t.task.offsets for t in tasks) == args.records * args.partitions

        try:
            rows = [("fresh", timed(fresh, args.repeat))]
            warm()                     # open it, untimed
            rows += [("warm", timed(warm, args.repeat)), ("plan", timed(plan, args.repeat))]
            if args.stream_batches:
                rows.append((f"stream, per micro-batch ({args.stream_batches} batches)",
                             stream(options, args, timed)))
        finally:
            if warm_client is not None:
                warm_client.stop()
    print(f"| case ({args.stores} stores{', --no-bulk' if args.plain else ''}, "
          f"{args.partitions} partitions) | median s | best s |")
    print("|---|---:|---:|")
    for name, times in rows:
        print(f"| {name} | {statistics.median(times):.4f} | {min(times):.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
