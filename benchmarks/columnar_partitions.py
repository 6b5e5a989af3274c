"""The JVM reader against the Python source over a farm of several partitions: rows/s of
a batch read of every partition (`partitions` = all), each reader timed over the same
committed log (rows written once, routed by key over the partitions by the raft sink).

Each read runs to a `noop` sink (every column built, nothing kept); the best of
`--repeats` runs counts (the first of each reader also starts its Python planner or
workers). On one machine the farm, the driver and the executors share the cores: read
the figures with `nproc` in mind.

    PYTHONPATH=$PWD PYSPARK_PYTHON=$(which python) python benchmarks/columnar_partitions.py \\
        [--partitions 3] [--rows 600000] [--value-bytes 100] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from pyspark.sql import functions as F

from pyspark_farm import LocalFarm, spark_session


def read_seconds(spark, farm: LocalFarm, fmt: str, expected: int) -> float:
    """Seconds of one batch read of every partition to the noop sink (row count checked
    first, outside the timing)."""
    frame = spark.read.format(fmt).options(**farm.options).option("partitions", "all").load()
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    got = frame.where("value like 'v%'").count()
    if got != expected:
        raise SystemExit(f"{fmt} read {got} rows, not {expected}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session("columnar-partitions", "local[2]", conf={
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with LocalFarm(nodes=3, partitions=args.partitions) as farm:
            pad = "x" * max(0, args.value_bytes - 12)
            started = time.perf_counter()
            spark.range(args.rows, numPartitions=4).select(
                F.col("id").cast("string").alias("key"),
                F.format_string(f"v%010d{pad}", F.col("id")).cast("binary").alias("value")) \
                .write.format("garlicfarm").options(**farm.options).mode("append").save()
            print(f"wrote {args.rows} rows of {args.value_bytes} B over {args.partitions} "
                  f"partitions in {time.perf_counter() - started:.1f} s", flush=True)
            for fmt in ("garlicfarm-columnar", "garlicfarm"):
                runs = [read_seconds(spark, farm, fmt, args.rows) for _ in range(args.repeats)]
                best = min(runs)
                print(f"{fmt:20s} best {best:.2f} s = {args.rows / best:,.0f} rows/s "
                      f"(runs {', '.join(f'{r:.2f}' for r in runs)})", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
