"""The raft kind's throughput through Spark, against the Python data source API's ceiling.

    .venv/bin/python benchmarks/spark_raft.py [--rows 1000000] [--value-bytes 100] [--rounds 3]
                                              [--compression zstd|lz4|none]

One run, one `local[2]` Spark session, one embedded 3-node farm (LocalFarm):
  sink     `df.write.format("garlicfarm")` of --rows rows (a cached DataFrame of binary
           values: hex digits of a SHA-512 per row, which compress about 2x, like
           varied text) into the farm through the exactly-once commit protocol, against a
           no-op Arrow sink (a Python DataSourceArrowWriter that only counts the batches
           Spark hands it): the ceiling of a Python sink here.
  source   `spark.read.format("garlicfarm")` of the committed rows into Spark's `noop`
           sink, against an in-memory Python source yielding Arrow batches of the same
           schema, sizes and partition count (built once per task, no I/O): the ceiling of
           a Python source here.
Each side runs --rounds times, alternating with its baseline; rates are rows/s of wall
time of the Spark job, best round of each. Goals: source >= 0.7x, sink >= 0.5x.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader,  # noqa: E402
                                    InputPartition, WriterCommitMessage)

from pyspark_farm import LocalFarm, spark_session  # noqa: E402
from pyspark_farm.raft.rows import RAFT_COLUMNS_DDL  # noqa: E402
from pyspark_farm.schema import arrow_schema  # noqa: E402


class Counted(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class NoopArrowWriter(DataSourceArrowWriter):
    def write(self, iterator):
        return Counted(sum(batch.num_rows for batch in iterator))


class CeilingReader(DataSourceReader):
    """Yields `rows` rows of the raft schema in `partitions` tasks, from one batch built
    per task (numpy buffers: no Python object per row)."""

    def __init__(self, schema, options) -> None:
        self.arrow = arrow_schema(schema)
        self.rows = int(options["rows"])
        self.parts = int(options["partitions"])
        self.value_bytes = int(options["valueBytes"])
        self.batch_rows = int(options.get("batchRows", 35_000))

    def partitions(self):
        share = -(-self.rows // self.parts)
        return [InputPartition((i * share, min(self.rows, (i + 1) * share)))
                for i in range(self.parts)]

    def read(self, partition):
        start, stop = partition.value
        size = min(self.batch_rows, stop - start)
        if size <= 0:
            return
        offsets = np.arange(0, (size + 1) * self.value_bytes, self.value_bytes, dtype=np.int32)
        data = np.full(size * self.value_bytes, ord("x"), dtype=np.uint8)
        values = pa.Array.from_buffers(pa.binary(), size,
                                       [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        batch = pa.RecordBatch.from_arrays([
            pa.repeat(pa.scalar("farm", pa.string()), size),
            pa.array(np.full(size, 7, dtype=np.int64)), pa.array(np.ones(size, dtype=np.int64)),
            pa.repeat(pa.scalar("commit", pa.string()), size), values,
            pa.array(np.zeros(size, dtype=np.int64), pa.timestamp("us", tz="UTC"))],
            schema=self.arrow)
        done = start
        while done < stop:
            take = min(size, stop - done)
            yield batch if take == size else batch.slice(0, take)
            done += take


class BenchSource(DataSource):
    @classmethod
    def name(cls):
        return "bench_ceiling"

    def schema(self):
        return RAFT_COLUMNS_DDL

    def reader(self, schema):
        return CeilingReader(schema, self.options)

    def writer(self, schema, overwrite):
        return NoopArrowWriter()


def timed(action) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--compression", default="zstd", choices=("zstd", "lz4", "none"))
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another option of the raft sink (e.g. stageThreads=4)")
    args = parser.parse_args(argv)

    sink_options = dict(o.split("=", 1) for o in args.sink_option)
    spark = spark_session("garlicfarm-bench", "local[2]", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BenchSource)
    hexes = -(-args.value_bytes // 128)
    digits = ", ".join(f"sha2(cast(id * {hexes} + {k} as string), 512)" for k in range(hexes))
    frame = (spark.range(args.rows, numPartitions=args.partitions)
             .selectExpr(f"cast(substr(concat({digits}), 1, {args.value_bytes}) as binary) "
                         "as value").cache())
    assert frame.count() == args.rows
    results: dict[str, list[float]] = {k: [] for k in ("sink", "noop sink", "source", "ceiling")}
    try:
        with LocalFarm(nodes=3) as farm:
            client = farm.client()
            ranges = []
            for _ in range(args.rounds):
                results["noop sink"].append(timed(
                    lambda: frame.write.format("bench_ceiling").mode("append").save()))
                before = client.last_applied() + 1
                results["sink"].append(timed(
                    lambda: frame.write.format("garlicfarm").options(**farm.options)
                    .option("compression", args.compression).options(**sink_options)
                    .mode("append").save()))
                ranges.append((before, client.last_applied() + 1))
            start, stop = ranges[0]
            raft = (spark.read.format("garlicfarm").options(**farm.options)
                    .option("startingOffsets", f'{{"index": {start}}}')
                    .option("endingOffsets", f'{{"index": {stop}}}')
                    .option("minPartitions", str(args.partitions)).load())
            tasks = raft.rdd.getNumPartitions()
            assert raft.count() == args.rows, "the source must read back every row written"
            ceiling = (spark.read.format("bench_ceiling").option("rows", str(args.rows))
                       .option("partitions", str(tasks))
                       .option("valueBytes", str(args.value_bytes)).load())
            for _ in range(args.rounds):
                results["ceiling"].append(timed(
                    lambda: ceiling.write.format("noop").mode("overwrite").save()))
                results["source"].append(timed(
                    lambda: raft.write.format("noop").mode("overwrite").save()))
            client.close()
    finally:
        spark.stop()

    rate = {k: args.rows / min(v) for k, v in results.items()}
    print(f"rows={args.rows:,} value={args.value_bytes} B rounds={args.rounds} "
          f"source tasks={tasks} compression={args.compression} sink options={sink_options}")
    print("| case | rows/s (best) | baseline rows/s (best) | ratio | goal |")
    print("|---|---:|---:|---:|---:|")
    print(f"| raft source -> noop | {rate['source']:,.0f} | {rate['ceiling']:,.0f} "
          f"(in-memory Arrow source) | {rate['source'] / rate['ceiling']:.2f} | 0.70 |")
    print(f"| exactly-once raft sink | {rate['sink']:,.0f} | {rate['noop sink']:,.0f} "
          f"(no-op Arrow sink) | {rate['sink'] / rate['noop sink']:.2f} | 0.50 |")
    for name, times in results.items():
        print(f"  {name}: " + ", ".join(f"{t:.2f}s" for t in times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
