"""Would a JVM DataSource V2 with columnar reads pass Spark's parquet source? A spike:
the arrowsocket reader (ArrowSocketSource.java, PartitionReader<ColumnarBatch> over
ArrowColumnVector, as parquet's vectorized reader) fed by serve.py, which runs the raft
source's own Python read path per task, against parquet and the Python data source.

    PYTHONPATH=$PWD PYSPARK_PYTHON=/work/main/.venv/bin/python \\
        /work/main/.venv/bin/python benchmarks/jvm_reader/bench.py [--rows 1000000]
        [--value-bytes 100] [--rounds 5] [--partitions 2] [--threads] [--json FILE]

One `local[2]` session with build/arrowsocket.jar (built by build.sh first), a 3-node
LocalFarm holding --rows values written by the garlicfarm sink (the values of
benchmarks/spark_vs_kafka.py), and the same values as parquet. Cases, each read whole
into Spark's `noop` sink, after a warm-up round, in rotating order per round:
  parquet             spark.read.parquet of the one `value` column (as RESULTS.md)
  parquet raft        parquet of the raft source's rows, all six columns
  raft, raft value    the garlicfarm Python source over the range (all columns; columns=value)
  jvm raft(, value)   arrowsocket over serve.py running the same planned partitions'
                      `reader.read(partition)`: the real read path, Arrow over TCP, columnar
  jvm payloads(, value) arrowsocket, mode=payloads: serve.py runs only the raft reader's
                      PieceReader (fetching, fallback, visibility) and forwards the farm's
                      zstd Arrow payloads; the JVM decodes them, entry columns constant
  jvm ceiling(, value) arrowsocket over serve.py streaming bench_ceiling's in-memory batches:
                      the JVM transport's own floor
  ceiling(, value)    bench_ceiling, the Python data source's floor (spark_raft.py)
Reported as spark_vs_kafka.py does: rows/s of the median round, the median of the rounds'
own ratios, and CPU seconds per 1M rows by kind of process (serve.py and its workers
are `arrow server`). Before timing, the JVM paths' rows are checked against the Python
source's (count and a sum of xxhash64 over every column), and a refused spec and a read
failing mid-stream must fail their jobs (their server tracebacks show in the output).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, BENCHMARKS)
sys.path.insert(0, os.path.dirname(BENCHMARKS))

import spark_raft  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from process_cpu import CpuLedger  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql.datasource import InputPartition  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402
from serve import encode_spec  # noqa: E402
from spark_raft import BenchSource, CeilingReader, ceiling_reader, value_frame  # noqa: E402
from spark_vs_kafka import noop, report, run_rounds  # noqa: E402

from pyspark_farm import LocalFarm, spark_session  # noqa: E402
from pyspark_farm.datasource import GarlicFarmDataSource  # noqa: E402
from pyspark_farm.raft.rows import RAFT_COLUMNS_DDL  # noqa: E402

WARM_ROWS = 10_000
FULL_HASH = "xxhash64(cluster, index, term, type, value, timestamp)"


class Server:
    """serve.py in a child process (its CPU: process_cpu's `arrow server` group)."""

    def __init__(self, workers: int, threads: bool) -> None:
        command = [sys.executable, os.path.join(HERE, "serve.py"), "--workers", str(workers)]
        self.process = subprocess.Popen(command + (["--threads"] if threads else []),
                                        stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


class RaftPlan:
    """The raft source's schema, and its partitions planned anew on each call as
    arrowsocket specs: the source's own planner (farm RPCs for the log's bounds and entry
    sizes) runs in this driver process, where a JVM source would plan, so every read pays
    for its planning as the Python source's reads do."""

    def __init__(self, spark, options: dict[str, str]) -> None:
        self.schema: StructType = spark.read.format("garlicfarm").options(**options).load().schema
        self.reader = GarlicFarmDataSource(dict(options)).reader(self.schema)

    def specs(self, mode: str = "stream") -> list[str]:
        arrow = self.reader.settings.schema
        return [encode_spec(self.reader, p, arrow, mode) for p in self.reader.partitions()]


def ceiling_specs(schema: StructType, rows: int, tasks: int, value_bytes: int) -> list[str]:
    reader = CeilingReader(schema, {"rows": rows, "partitions": tasks, "valueBytes": value_bytes})
    return [encode_spec(reader, p, reader.arrow) for p in reader.partitions()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--threads", action="store_true",
                        help="serve.py serves tasks in threads of one process, not in "
                             "--partitions worker processes")
    parser.add_argument("--json", help="also write the report's lines to this file")
    args = parser.parse_args(argv)

    jar = subprocess.run([os.path.join(HERE, "build.sh"), sys.executable], check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    server = Server(args.partitions, args.threads)
    work = tempfile.mkdtemp(prefix="jvm-reader-")
    try:
        lines = measure(args, jar, f"127.0.0.1:{server.port}", work)
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(lines, f, indent=1)
    return 0


def measure(args: argparse.Namespace, jar: str, address: str, work: str) -> list[str]:
    """The whole run in one Spark session; the report's lines."""
    spark = spark_session("jvm-reader", f"local[{args.partitions}]", conf={
        "spark.jars": jar, "spark.ui.enabled": "false", "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": str(args.partitions)})
    spark.sparkContext.setLogLevel("ERROR")
    cloudpickle.register_pickle_by_value(spark_raft)   # the workers cannot import benchmarks/
    spark.dataSource.register(BenchSource)
    try:
        with LocalFarm(nodes=3) as farm:
            value_frame(spark, WARM_ROWS, args.partitions, args.value_bytes).write \
                .format("garlicfarm").options(**farm.options).mode("append").save()
            frame = value_frame(spark, args.rows, args.partitions, args.value_bytes)
            with farm.client() as client:
                start = client.last_applied() + 1
            frame.write.format("garlicfarm").options(**farm.options).mode("append").save()
            with farm.client() as client:
                end = client.last_applied() + 1
            raft_range = {**farm.options, "startingOffsets": json.dumps({"index": start}),
                          "endingOffsets": json.dumps({"index": end})}
            parquet = os.path.join(work, "value.parquet")
            frame.write.parquet(parquet)
            parquet_raft = os.path.join(work, "raft.parquet")
            spark.read.format("garlicfarm").options(**raft_range).load().write.parquet(parquet_raft)

            full = RaftPlan(spark, raft_range)
            value = RaftPlan(spark, {**raft_range, "columns": "value"})
            full_schema, value_schema = full.schema, value.schema
            tasks = len(full.specs())

            def arrowsocket(schema: StructType, specs: list[str], **extra: str) -> DataFrame:
                return (spark.read.format("arrowsocket").schema(schema).options(**extra)
                        .option("address", address).option("specs", "\n".join(specs)).load())

            def payloads(plan: RaftPlan) -> DataFrame:
                return arrowsocket(plan.schema, plan.specs("payloads"), mode="payloads",
                                   cluster=plan.reader.settings.connection.cluster)

            def garlic(**extra: str) -> DataFrame:
                return spark.read.format("garlicfarm").options(**raft_range).options(**extra).load()

            frames: dict[str, Callable[[], DataFrame]] = {
                "parquet": lambda: spark.read.parquet(parquet),
                "parquet raft": lambda: spark.read.parquet(parquet_raft),
                "raft": garlic,
                "raft value": lambda: garlic(columns="value"),
                "jvm raft": lambda: arrowsocket(full_schema, full.specs()),
                "jvm raft value": lambda: arrowsocket(value_schema, value.specs()),
                "jvm payloads": lambda: payloads(full),
                "jvm payloads value": lambda: payloads(value),
                "jvm ceiling": lambda: arrowsocket(full_schema, ceiling_specs(
                    full_schema, args.rows, tasks, args.value_bytes)),
                "jvm ceiling value": lambda: arrowsocket(value_schema, ceiling_specs(
                    value_schema, args.rows, tasks, args.value_bytes)),
                "ceiling": lambda: ceiling_reader(spark, args.rows, tasks, args.value_bytes,
                                                  RAFT_COLUMNS_DDL),
                "ceiling value": lambda: ceiling_reader(spark, args.rows, tasks,
                                                        args.value_bytes, "value binary"),
            }
            lines = [f"spark {spark.version}, {args.rows:,} rows of {args.value_bytes} B, "
                     f"local[{args.partitions}], {tasks} tasks per read, serve.py "
                     f"{'threads' if args.threads else f'{args.partitions} worker processes'}"]
            lines += check(frames, args.rows)
            lines += check_failures(spark, address, full_schema)
            planning = sorted(timed(full.specs) for _ in range(5))
            lines.append(f"planning the raft read in the driver (jvm raft, each read): "
                         f"{planning[2] * 1000:.0f} ms median")
            lines.append(f"load before rounds: {uptime()}")
            ledger = CpuLedger()
            cases = {name: (lambda make=make: noop(make())) for name, make in frames.items()}
            seconds = run_rounds(args.rounds, cases, ledger, warm=True)
            lines.append(f"load after rounds: {uptime()}")
            lines += report("spark.read -> noop", args.rows, seconds, [
                ("jvm raft", "parquet"), ("jvm raft value", "parquet"),
                ("jvm payloads", "parquet"), ("jvm payloads value", "parquet"),
                ("jvm ceiling", "parquet"), ("jvm ceiling value", "parquet"),
                ("raft", "parquet"), ("raft value", "parquet"),
                ("ceiling", "parquet"), ("ceiling value", "parquet"),
                ("jvm raft", "parquet raft"), ("jvm payloads", "parquet raft"),
                ("jvm ceiling", "parquet raft"),
                ("raft", "parquet raft"), ("jvm raft", "raft"),
                ("jvm raft value", "raft value")])
            lines += ledger.lines(args.rows)
    finally:
        spark.stop()
    return lines


def check(frames: dict[str, Callable[[], DataFrame]], rows: int) -> list[str]:
    """The JVM path reads what the Python source reads: the same count and hash sums
    (every column; the value column against parquet's too). Raises when not."""
    def sums(name: str, expression: str) -> tuple[int, int]:
        found = frames[name]().selectExpr(
            "count(*)", f"sum(cast({expression} as decimal(38, 0)))").first()
        return int(found[0]), int(found[1] or 0)
    pairs = [("raft", "jvm raft", FULL_HASH), ("raft", "parquet raft", FULL_HASH),
             ("raft", "jvm payloads", FULL_HASH),
             ("raft value", "jvm raft value", "xxhash64(value)"),
             ("raft value", "jvm payloads value", "xxhash64(value)"),
             ("parquet", "jvm raft value", "xxhash64(value)")]
    lines = []
    for ours, theirs, expression in pairs:
        a, b = sums(ours, expression), sums(theirs, expression)
        if a != b or a[0] != rows:
            raise SystemExit(f"{theirs} read {b} (rows, hash sum), {ours} {a}; {rows} rows written")
        lines.append(f"check: {theirs} = {ours}: {a[0]:,} rows, sum {expression} = {a[1]}")
    for name in ("jvm ceiling", "jvm ceiling value", "ceiling"):
        counted = frames[name]().count()
        if counted != rows:
            raise SystemExit(f"{name} read {counted} rows, not {rows}")
    return lines


def check_failures(spark, address: str, schema: StructType) -> list[str]:
    """A read the server refuses (an unknown mode), and one that fails after its stream
    began (a partition the reader cannot read), must fail the Spark job with the server's
    error, never end as fewer rows. Raises when not."""
    reader = CeilingReader(schema, {"rows": 10, "partitions": 1, "valueBytes": 10})
    broken = InputPartition(("not", "rows"))
    specs = {"refused": encode_spec(reader, reader.partitions()[0], reader.arrow, "nope"),
             "failed mid-stream": encode_spec(reader, broken, reader.arrow)}
    lines = []
    for case, spec in specs.items():
        try:
            spark.read.format("arrowsocket").schema(schema).option("address", address) \
                .option("specs", spec).load().count()
        except Exception as exc:     # Py4J / Spark's wrapping of the task's IOException
            if "arrowsocket server failed" not in str(exc):
                raise
            lines.append(f"check: a read {case} fails its job with the server's error")
            continue
        raise SystemExit(f"arrowsocket: a read {case} did not fail")
    return lines


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    began = time.monotonic()
    code = main()
    print(f"({time.monotonic() - began:.0f} s in all)")
    sys.exit(code)
