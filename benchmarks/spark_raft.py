"""The raft kind's throughput through Spark, against the Python data source API's ceiling.

    .venv/bin/python benchmarks/spark_raft.py [--rows 2000000] [--value-bytes 100]
        [--rounds 5] [--partitions 2] [--compression zstd|lz4|none] [--only sink|source]
        [--sink-option KEY=VALUE ...]

One run, one `local[2]` Spark session, one embedded 3-node farm (LocalFarm):
  sink     `df.write.format("garlicfarm")` of --rows rows (a cached DataFrame of binary
           values: hex digits of a SHA-512 per row, which compress about 2x, like
           varied text) into the farm through the exactly-once commit protocol, against a
           no-op Arrow sink (a Python DataSourceArrowWriter that only counts the batches
           Spark hands it): the ceiling of a Python sink here.
  source   `spark.read.format("garlicfarm")` of the rows of one sink round into Spark's
           `noop` sink, against an in-memory Python source yielding Arrow batches of the
           same schema, sizes and task count (built once per task, no I/O): the ceiling
           of a Python source here.
Each round runs the farm case and its baseline back to back (which goes first alternates);
a first, unmeasured round of 10,000 rows warms the JVM and the Python workers. Reported:
rows/s of the Spark job's wall time (best round of each side, and the ratio of the
bests), and the median of the rounds' own ratios, which the machine's load swings less.

Two rows more show where the floor is, without Spark, in the same run:
  farm ingest   the sink's payloads (same rows per payload, same compression) staged
                straight into the farm by `partitions x stageThreads` clients;
  source alone  the source's planned tasks read by the raft reader itself (farm reads,
                Arrow decoding, building batches) in `partitions` processes.
Goals (issue 5): source >= 0.7x its ceiling, sink >= 0.5x.

`benchmarks/spark_dafka_chp.py` imports the ceiling source and the helpers from here.
"""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader,  # noqa: E402
                                    DataSourceStreamReader, InputPartition,
                                    WriterCommitMessage)
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from consensus.admin.progress_bars import track  # noqa: E402
from pyspark_farm import LocalFarm, spark_session  # noqa: E402
from pyspark_farm.raft.rows import RAFT_COLUMNS_DDL  # noqa: E402
from pyspark_farm.raft.sink import ipc_payload  # noqa: E402

WARM_ROWS = 10_000


class Counted(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class NoopArrowWriter(DataSourceArrowWriter):
    def write(self, iterator):
        return Counted(sum(batch.num_rows for batch in iterator))


def constant_column(field_: pa.Field, size: int) -> pa.Array:
    """`size` copies of one value of the field's type, from numpy buffers (no Python object
    per row)."""
    kind = field_.type
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return pa.repeat(pa.scalar("x" if pa.types.is_string(kind) else b"x", kind), size)
    if pa.types.is_timestamp(kind):
        return pa.array(np.zeros(size, dtype=np.int64), kind)
    if pa.types.is_boolean(kind):
        return pa.array(np.zeros(size, dtype=bool))
    if pa.types.is_map(kind):     # empty maps
        return pa.MapArray.from_arrays(pa.array(np.zeros(size + 1, dtype=np.int32)),
                                       pa.array([], kind.key_type), pa.array([], kind.item_type),
                                       type=kind)
    return pa.array(np.ones(size, dtype=np.int64)).cast(kind)


class CeilingReader(DataSourceReader):
    """Yields `rows` rows of a kind's schema in `partitions` tasks, from one batch built
    per task (numpy buffers: no Python object per row). The `value` column holds
    `valueBytes`-byte values; the others repeat one value."""

    def __init__(self, schema, options) -> None:
        # pyspark's conversion (as pyspark_farm.schema.arrow_schema does): the baseline's
        # workers import nothing of garlicfarm, so they do not pay for its imports.
        self.arrow = to_arrow_schema(schema, timezone="UTC")
        self.rows = int(options["rows"])
        self.parts = int(options["partitions"])
        self.value_bytes = int(options["valueBytes"])
        self.batch_rows = int(options.get("batchRows", 1 << 16))

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
        batch = pa.RecordBatch.from_arrays(
            [values if f.name == "value" else constant_column(f, size) for f in self.arrow],
            schema=self.arrow)
        done = start
        while done < stop:
            take = min(size, stop - done)
            yield batch if take == size else batch.slice(0, take)
            done += take


class CeilingStreamReader(DataSourceStreamReader):
    """The ceiling as a stream source: all `rows` are available at once and the first
    micro-batch reads them in the same tasks and batches as `CeilingReader`, so a stream
    of a kind is compared with a stream that pays the same fixed costs (Spark's Python
    stream-source process, offsets and commit logs), not with a batch job."""

    def __init__(self, schema, options) -> None:
        self.ceiling = CeilingReader(schema, options)

    def initialOffset(self):
        return {"row": 0}

    def latestOffset(self):
        return {"row": self.ceiling.rows}

    def partitions(self, start, end):
        low, high = start["row"], end["row"]
        share = -(-(high - low) // self.ceiling.parts) if high > low else 0
        return [InputPartition((first, min(high, first + share)))
                for first in range(low, high, share or 1)]

    def read(self, partition):
        return self.ceiling.read(partition)

    def commit(self, end) -> None:
        pass


class BenchSource(DataSource):
    """`bench_ceiling`: the ceiling source (option `schema`: its DDL, raft's by default)
    and the no-op Arrow sink."""

    @classmethod
    def name(cls):
        return "bench_ceiling"

    def schema(self):
        return self.options.get("schema", RAFT_COLUMNS_DDL)

    def reader(self, schema):
        return CeilingReader(schema, self.options)

    def streamReader(self, schema):
        return CeilingStreamReader(schema, self.options)

    def writer(self, schema, overwrite):
        return NoopArrowWriter()


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


@dataclass
class Comparison:
    """Seconds of the farm case and of its baseline, round by round."""
    rows: int
    farm: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)

    def run(self, rounds: int, farm: Callable[[], object], base: Callable[[], object]) -> None:
        """`rounds` rounds, the two back to back, which one goes first alternating."""
        for number in track(range(rounds), f"{self.rows:,} rows", rounds):
            if number % 2:
                self.farm.append(timed(farm))
                self.base.append(timed(base))
            else:
                self.base.append(timed(base))
                self.farm.append(timed(farm))

    @property
    def farm_rate(self) -> float:
        return self.rows / min(self.farm)

    @property
    def base_rate(self) -> float:
        return self.rows / min(self.base)

    @property
    def best_ratio(self) -> float:
        return self.farm_rate / self.base_rate

    @property
    def median_ratio(self) -> float:
        return statistics.median(b / f for f, b in zip(self.farm, self.base))

    def row(self, case: str, baseline: str, goal: float) -> str:
        return (f"| {case} | {self.farm_rate:,.0f} | {self.base_rate:,.0f} ({baseline}) | "
                f"{self.best_ratio:.2f} | {self.median_ratio:.2f} | {goal:.2f} |")

    def rounds_line(self, name: str) -> str:
        return (f"  {name}: farm " + ", ".join(f"{t:.2f}s" for t in self.farm)
                + " / baseline " + ", ".join(f"{t:.2f}s" for t in self.base))


TABLE_HEAD = ("| case | rows/s (best) | baseline rows/s (best) | ratio of bests | "
              "median ratio of rounds | goal |\n|---|---:|---:|---:|---:|---:|")


def sha_values(start: int, count: int, value_bytes: int) -> pa.Array:
    """The benchmark's values in Python (the same bytes as `value_frame`'s rows)."""
    hexes = -(-value_bytes // 128)
    return pa.array([b"".join(hashlib.sha512(str(i * hexes + k).encode()).hexdigest().encode()
                              for k in range(hexes))[:value_bytes]
                     for i in range(start, start + count)], pa.binary())


def value_frame(spark, rows: int, partitions: int, value_bytes: int):
    """A cached DataFrame of one binary `value` column: SHA-512 hex digits per row."""
    hexes = -(-value_bytes // 128)
    digits = ", ".join(f"sha2(cast(id * {hexes} + {k} as string), 512)" for k in range(hexes))
    frame = (spark.range(rows, numPartitions=partitions)
             .selectExpr(f"cast(substr(concat({digits}), 1, {value_bytes}) as binary) as value")
             .cache())
    assert frame.count() == rows
    return frame


def ceiling_reader(spark, rows: int, tasks: int, value_bytes: int, schema_ddl: str):
    """The in-memory ceiling source as a DataFrame (`BenchSource` must be registered)."""
    return (spark.read.format("bench_ceiling").option("rows", str(rows))
            .option("partitions", str(tasks)).option("valueBytes", str(value_bytes))
            .option("schema", schema_ddl).load())


def _count_partition(reader, partition) -> int:
    return sum(batch.num_rows for batch in reader.read(partition))


def source_alone(options: dict[str, str], schema, processes: int, rounds: int) -> tuple[int, float]:
    """(rows, best seconds) of reading a garlicfarm batch read's planned tasks with the
    kind's own reader, no Spark: `processes` spawned processes, as Spark's workers."""
    from pyspark_farm.datasource import GarlicFarmDataSource
    reader = GarlicFarmDataSource(dict(options)).reader(schema)
    partitions = reader.partitions()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        pool.starmap(_count_partition, [(reader, partitions[0])])   # warm: imports, connections
        best, counted = float("inf"), 0
        for _ in range(rounds):
            began = time.perf_counter()
            counted = sum(pool.starmap(_count_partition, [(reader, p) for p in partitions]))
            best = min(best, time.perf_counter() - began)
    return counted, best


def farm_ingest(farm: LocalFarm, payload: bytes, payloads: int, threads: int) -> float:
    """Seconds to stage `payloads` copies of `payload` from `threads` clients at once."""
    clients = [farm.client() for _ in range(threads)]
    try:
        def stage(worker: int) -> None:
            for number in range(worker, payloads, threads):
                clients[worker].stage("bench-ingest", 0, number, 0, payload,
                                      content_type="arrow")
        with ThreadPoolExecutor(threads) as pool:
            began = time.perf_counter()
            list(pool.map(stage, range(threads)))
            return time.perf_counter() - began
    finally:
        for client in clients:
            client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--compression", default="zstd", choices=("zstd", "lz4", "none"))
    parser.add_argument("--only", choices=("sink", "source"),
                        help="run one side (the source still writes its rows once)")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another option of the raft sink (e.g. stageThreads=4)")
    args = parser.parse_args(argv)

    sink_options = {"compression": args.compression,
                    **dict(o.split("=", 1) for o in args.sink_option)}
    spark = spark_session("garlicfarm-bench", "local[2]", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BenchSource)
    frame = value_frame(spark, args.rows, args.partitions, args.value_bytes)
    warm = value_frame(spark, WARM_ROWS, args.partitions, args.value_bytes)
    sink = Comparison(args.rows)
    source = Comparison(args.rows)
    floors: list[str] = []
    try:
        with LocalFarm(nodes=3) as farm:
            client = farm.client()

            def write(df, fmt: str) -> Callable[[], object]:
                writer = df.write.format(fmt).mode("append")
                if fmt == "garlicfarm":
                    writer = writer.options(**farm.options).options(**sink_options)
                return writer.save

            write(warm, "bench_ceiling")()
            write(warm, "garlicfarm")()
            start = client.last_applied() + 1
            sink_rounds = args.rounds if args.only != "source" else 1
            sink.run(sink_rounds, write(frame, "garlicfarm"), write(frame, "bench_ceiling"))
            stop = client.last_applied() + 1
            if args.only != "source":
                stage_bytes = int(sink_options.get("stageBytes", 4 << 20))
                per_payload = max(1, stage_bytes // (args.value_bytes + 4))
                payload = ipc_payload([sha_values(0, per_payload, args.value_bytes)],
                                      args.compression)
                threads = args.partitions * int(sink_options.get("stageThreads", 2))
                count = -(-args.rows // per_payload)
                seconds = min(farm_ingest(farm, payload, count, threads)
                              for _ in range(min(3, args.rounds)))
                floors.append(f"| farm ingest alone ({count} payloads of {len(payload):,} B, "
                              f"{threads} clients) | {args.rows / seconds:,.0f} | "
                              f"{count * len(payload) / seconds / 1e6:.1f} MB/s |")
            if args.only != "sink":
                # The rows of the first measured sink round (each round appends args.rows).
                read_options = {**farm.options, "minPartitions": str(args.partitions),
                                "startingOffsets": f'{{"index": {start}}}'}
                # One round's rows: up to the commit of the first measured sink round.
                read_options["endingOffsets"] = \
                    f'{{"index": {_end_of_first_batch(client, start, stop)}}}'
                raft = spark.read.format("garlicfarm").options(**read_options).load()
                assert raft.count() == args.rows, "the source must read back every row written"
                tasks = raft.rdd.getNumPartitions()
                ceiling = ceiling_reader(spark, args.rows, tasks, args.value_bytes,
                                         RAFT_COLUMNS_DDL)
                noop = lambda df: df.write.format("noop").mode("overwrite").save  # noqa: E731
                noop(ceiling)()
                source.run(args.rounds, noop(raft), noop(ceiling))
                counted, seconds = source_alone(read_options, raft.schema, args.partitions,
                                                min(3, args.rounds))
                assert counted == args.rows
                floors.append(f"| raft source alone ({tasks} tasks in {args.partitions} "
                              f"processes, no Spark) | {counted / seconds:,.0f} | |")
            client.close()
    finally:
        spark.stop()

    print(f"rows={args.rows:,} value={args.value_bytes} B rounds={args.rounds} "
          f"partitions={args.partitions} sink options={sink_options} "
          f"load average={os.getloadavg()[0]:.1f}")
    print(TABLE_HEAD)
    if source.farm:
        print(source.row(f"raft source -> noop ({tasks} tasks)", "in-memory Arrow source", 0.70))
    if args.only != "source":
        print(sink.row("exactly-once raft sink", "no-op Arrow sink", 0.50))
    print("\n| without Spark | rows/s (best) | |\n|---|---:|---:|")
    print("\n".join(floors))
    if source.farm:
        print(source.rounds_line("source"))
    print(sink.rounds_line("sink"))
    return 0


def _end_of_first_batch(client, start: int, stop: int) -> int:
    """One past the first effective commit entry in [start, stop)."""
    from pyspark_farm.log_access import entry_sizes
    first = next(s for s in entry_sizes(client, start, stop) if s.parts)
    return first.index + 1


if __name__ == "__main__":
    sys.exit(main())
