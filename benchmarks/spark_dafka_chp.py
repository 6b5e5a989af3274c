"""The dafka and chp kinds' sources through Spark, against the in-memory Arrow ceiling.

    .venv/bin/python benchmarks/spark_dafka_chp.py [--dafka-rows 1000000]
        [--chp-rows 200000] [--value-bytes 100] [--rounds 5] [--partitions 2]
        [--only dafka|chp]

One run, one `local[2]` Spark session, a 3-node farm (LocalFarm: the dafka sink's ledger)
and, per kind, its own nodes on 127.0.0.1:
  dafka  a LocalDafka (a tower, two store processes); the rows are written once by the
         dafka sink (`df.write`, topic `bench`), then read back with `spark.read`
         (startingOffsets earliest, endingOffsets latest) into Spark's `noop` sink;
  chp    a `garlicfarm chp server` process; the rows (distinct keys) are set once by the
         chp sink, then (1) the map is read back with `spark.read` (a snapshot) into
         `noop`, and (2) the changelog stream is read with `spark.readStream`
         (`startingOffsets` snapshot, `trigger(availableNow=True)`, a fresh checkpoint
         each round) into `noop`: rows/s from the query's start to its end, the
         driver-side capture's snapshot into the farm journal included; its baselines
         are the ceiling read as a stream the same way (the fair one: both pay a
         streaming query's fixed costs) and as a batch read.
Each kind's baseline is the ceiling source of `benchmarks/spark_raft.py` (a Python source
yielding Arrow batches built once per task, no I/O) with the kind's schema, value size
and task count, measured in the same run, alternating with it (`Comparison`: best of
each side and the median of the rounds' ratios). Goal (issue 8): >= 0.5x.
A row per kind more, without Spark: the kind's reader itself reading the planned tasks in
`partitions` processes (`source_alone`), to tell the kind's own cost from Spark's.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyspark import cloudpickle  # noqa: E402

import spark_raft  # noqa: E402
from spark_raft import (TABLE_HEAD, BenchSource, Comparison, ceiling_reader,  # noqa: E402
                        source_alone, value_frame)

from pyspark_farm import LocalFarm, spark_session  # noqa: E402
from pyspark_farm.chp.rows import CHP_COLUMNS_DDL  # noqa: E402
from pyspark_farm.dafka.local import LocalDafka  # noqa: E402
from pyspark_farm.dafka.source import DAFKA_COLUMNS_DDL  # noqa: E402

# spark_raft is a plain module here: Spark's workers cannot import it, so its classes
# travel by value, as they do when spark_raft.py runs as the main script.
cloudpickle.register_pickle_by_value(spark_raft)

CHP_READY = "chp server "      # the server's first log line, once its sockets are bound


class ChpServer:
    """`garlicfarm chp server` on three consecutive free ports of 127.0.0.1."""

    def __init__(self, log_dir: Path, timeout: float = 30.0) -> None:
        self.log_path = log_dir / "chp-server.log"
        self.timeout = timeout
        self.port = 0
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "ChpServer":
        for _ in range(10):
            self.port = _free_port_span(3)
            with open(self.log_path, "w") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "garlicfarm", "chp", "server", "--port",
                     str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            deadline = time.monotonic() + self.timeout
            while self.proc.poll() is None and CHP_READY not in self.log_path.read_text():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"chp server not ready in {self.timeout}s: "
                                       f"{self.log_path.read_text()}")
                time.sleep(0.05)   # polling the log for the ready line
            if self.proc.poll() is None:
                return self
        raise RuntimeError(f"chp server could not start: {self.log_path.read_text()}")

    def __exit__(self, *exc_info: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def _free_port_span(count: int) -> int:
    """P such that P .. P+count-1 are free on 127.0.0.1 now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                held.append(socket.socket())
                held[-1].bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def measure(spark, name: str, options: dict[str, str], rows: int, ddl: str,
            args: argparse.Namespace) -> tuple[str, str, str]:
    """(table row, rounds line, no-Spark row) of one kind's batch read against the
    ceiling."""
    frame = spark.read.format("garlicfarm").options(**options).load()
    found = frame.count()
    assert found == rows, f"{name}: read back {found} rows of {rows}"
    tasks = frame.rdd.getNumPartitions()
    ceiling = ceiling_reader(spark, rows, tasks, args.value_bytes, ddl)
    noop = lambda df: df.write.format("noop").mode("overwrite").save  # noqa: E731
    noop(ceiling)()
    comparison = Comparison(rows)
    comparison.run(args.rounds, noop(frame), noop(ceiling))
    counted, seconds = source_alone(options, frame.schema, args.partitions,
                                    min(3, args.rounds))
    assert counted == rows
    return (comparison.row(f"{name} source -> noop ({tasks} tasks)",
                           "in-memory Arrow source", 0.50),
            comparison.rounds_line(name),
            f"| {name} source alone ({tasks} tasks in {args.partitions} processes) | "
            f"{counted / seconds:,.0f} |")


def measure_stream(spark, options: dict[str, str], rows: int, ddl: str,
                   args: argparse.Namespace, checkpoints: Path) -> list[tuple[str, str]]:
    """(table row, rounds line) of the chp changelog stream (startingOffsets snapshot,
    Trigger.AvailableNow, into noop; the capture included) against (1) the ceiling as a
    stream (the same query shape: a fresh checkpoint and a new Python stream-source
    process per query, one micro-batch of every row) and (2) the ceiling as a batch read,
    which pays none of a streaming query's fixed costs."""
    rounds = iter(range(1 << 30))

    def start(frame, sink):
        return (sink(frame.writeStream).trigger(availableNow=True)
                .option("checkpointLocation", str(checkpoints / f"stream-{next(rounds)}"))
                .start())

    def run_stream(frame_of) -> Callable[[], None]:
        def stream() -> None:
            query = start(frame_of(), lambda w: w.format("noop"))
            query.awaitTermination()
            assert query.exception() is None, query.exception()
        return stream

    def chp_frame():
        return (spark.readStream.format("garlicfarm").options(**options)
                .option("startingOffsets", "snapshot").load())

    def ceiling_frame():
        return (spark.readStream.format("bench_ceiling").option("rows", str(rows))
                .option("partitions", "1").option("valueBytes", str(args.value_bytes))
                .option("schema", ddl).load())

    # Warm (the sources' processes, imports, the farm) and check: one run of each
    # counting rows (a Python stream source reports no numInputRows to noop's progress).
    for frame_of, name in ((chp_frame, "chp stream"), (ceiling_frame, "ceiling stream")):
        counts: list[int] = []
        query = start(frame_of(),
                      lambda w: w.foreachBatch(lambda df, _: counts.append(df.count())))
        query.awaitTermination()
        assert query.exception() is None, query.exception()
        assert sum(counts) == rows, f"{name}: read {sum(counts)} rows of {rows}"

    ceiling = ceiling_reader(spark, rows, 1, args.value_bytes, ddl)
    base = ceiling.write.format("noop").mode("overwrite").save
    base()
    results = []
    for baseline, label, base_run in (
            ("in-memory Arrow stream source, availableNow", "vs ceiling stream",
             run_stream(ceiling_frame)),
            ("in-memory Arrow source, batch read", "vs ceiling batch", base)):
        comparison = Comparison(rows)
        comparison.run(args.rounds, run_stream(chp_frame), base_run)
        results.append((comparison.row("chp changelog stream (snapshot, availableNow) -> "
                                       "noop", baseline, 0.50),
                        comparison.rounds_line(f"chp stream {label}")))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dafka-rows", type=int, default=1_000_000)
    parser.add_argument("--chp-rows", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--only", choices=("dafka", "chp"))
    args = parser.parse_args(argv)

    spark = spark_session("garlicfarm-bench", "local[2]", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BenchSource)
    results: list[tuple[str, str, str]] = []
    streams: list[tuple[str, str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="garlicfarm-bench-") as tmp, \
                LocalFarm(nodes=3) as farm:
            if args.only != "chp":
                with LocalDafka(stores=2, data_dir=Path(tmp) / "dafka") as dafka:
                    frame = value_frame(spark, args.dafka_rows, args.partitions,
                                        args.value_bytes)
                    (frame.write.format("garlicfarm").options(**dafka.options, **farm.options)
                     .option("topic", "bench").mode("append").save())
                    frame.unpersist()
                    results.append(measure(
                        spark, "dafka",
                        {**dafka.options, **farm.options, "subscribe": "bench",
                         "startingOffsets": "earliest", "endingOffsets": "latest"},
                        args.dafka_rows, DAFKA_COLUMNS_DDL, args))
            if args.only != "dafka":
                with ChpServer(Path(tmp)) as server:
                    frame = (value_frame(spark, args.chp_rows, args.partitions,
                                         args.value_bytes)
                             .selectExpr("concat('k', substr(cast(value as string), 1, 16)) as key",
                                         "value"))
                    (frame.write.format("garlicfarm").option("kind", "chp")
                     .option("endpoint", server.address).mode("append").save())
                    results.append(measure(
                        spark, "chp", {"kind": "chp", "endpoint": server.address},
                        args.chp_rows, CHP_COLUMNS_DDL, args))
                    print(*results[-1], sep="\n", flush=True)
                    for row, rounds in measure_stream(
                            spark, {"kind": "chp", "endpoint": server.address,
                                    **farm.options},
                            args.chp_rows, CHP_COLUMNS_DDL, args, Path(tmp)):
                        streams.append((row, rounds))
                        print(row, rounds, sep="\n", flush=True)
    finally:
        spark.stop()

    print(f"dafka rows={args.dafka_rows:,} chp rows={args.chp_rows:,} "
          f"value={args.value_bytes} B rounds={args.rounds} partitions={args.partitions} "
          f"load average={os.getloadavg()[0]:.1f}")
    print(TABLE_HEAD)
    print("\n".join(row for row, _, _ in results))
    print("\n".join(row for row, _ in streams))
    print("\n| without Spark | rows/s (best) |\n|---|---:|")
    print("\n".join(alone for _, _, alone in results))
    print("\n".join(rounds for _, rounds, _ in results))
    print("\n".join(rounds for _, rounds in streams))
    return 0


if __name__ == "__main__":
    sys.exit(main())
