"""The raft kind against what a Spark user would pick instead: Kafka (a real 3-broker KRaft
cluster and Spark's own Kafka connector) and Spark's parquet files, in one run.

    .venv/bin/python benchmarks/spark_vs_kafka.py [--rows 1000000] [--value-bytes 100]
        [--rounds 3] [--partitions 2] [--brokers 3] [--kafka-fsync every|os]
        [--kafka-version 4.1.1] [--connector-version 4.2.0]

One `local[2]` session with the connector's jars (fetched once with Maven, see
kafka_cluster.py), one embedded 3-node farm (LocalFarm, fsync per batch) and one Kafka
cluster of --brokers brokers (topics with replication factor 3 and min.insync.replicas 2,
producer acks=all; `--kafka-fsync every` sets log.flush.interval.messages=1, an fsync per
append as the farm does per batch; `os` is Kafka's default). The same cached DataFrame of
--rows binary values (SHA-512 hex digits, as benchmarks/spark_raft.py) goes:
  sink     df.write into garlicfarm (raft, the exactly-once commit; and `raft 1 node`, a
           one-node farm with fsync never: a parquet file's durability), Kafka (at least
           once: Spark's Kafka sink has no exactly-once) and parquet (Spark's file commit
           protocol; one copy, no fsync); Kafka twice: `kafka` with the producer's
           defaults (the connector's kafka-clients 3.9: linger.ms 0, 16 KiB batches, no
           compression) and `kafka tuned` as a Kafka user tunes bulk writes
           (KAFKA_TUNED: linger 50 ms, 1 MiB batches, zstd);
  source   spark.read of the same rows into Spark's `noop` sink: the raft log range (all
           its columns, and `columns=value`), the Kafka topic (earliest to latest), the
           parquet folder, and the floor of any Python data source: `bench_ceiling`, which
           reads nothing and yields batches of the same rows built once in memory (the
           raft schema, and the value column alone);
  stream   readStream with trigger(availableNow=True) of the same rows into a `noop`
           stream: the raft source and Kafka's (parquet has no such stream source here);
  latency  a steady --latency-rate rows/s for --latency-seconds into each log (raft: a
           FarmClient appending an entry of rate/20 rows every 50 ms; Kafka: its own
           ProducerPerformance tool, acks=all) while a stream with the default trigger
           reads it: per row, the driver's clock when foreachBatch sees it minus the
           row's `timestamp` (the leader's append time / the producer's CreateTime).
After a warm-up (the sinks on 10,000 rows, each source and stream once on the rows), each
round runs the cases of a row in rotating order. Reported per case: rows/s of the median
round, and the median CPU seconds of each kind of process per million rows
(process_cpu.py: Spark's JVM, its Python workers, the farm's nodes, Kafka's brokers); per
comparison: the median of the rounds' own ratios (ours / other), which the machine's load
swings less. `--parts` runs some of sink, source, stream, latency (the source's rows are
written once, untimed, either way).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import spark_raft  # noqa: E402
from pyspark import cloudpickle  # noqa: E402
from kafka_cluster import KafkaCluster, connector_jars  # noqa: E402
from process_cpu import CpuLedger  # noqa: E402
from spark_raft import BenchSource, ceiling_reader, value_frame  # noqa: E402

from pyspark_farm import LocalFarm, spark_session  # noqa: E402
from pyspark_farm.jvm import jar_path  # noqa: E402
from pyspark_farm.raft.rows import RAFT_COLUMNS_DDL  # noqa: E402

WARM_ROWS = 10_000
#: The producer settings a Kafka user sets for bulk writes (the sink's `kafka tuned` case):
#: wait up to 50 ms to fill batches of up to 1 MiB per partition, compressed with zstd.
KAFKA_TUNED = {"kafka.linger.ms": "50", "kafka.batch.size": str(1 << 20),
               "kafka.compression.type": "zstd"}


def rotate(cases: list, round_number: int) -> list:
    shift = round_number % len(cases)
    return cases[shift:] + cases[:shift]


def run_rounds(rounds: int, cases: dict[str, Callable[[], object]], ledger: CpuLedger, *,
               warm: bool = False) -> dict[str, list[float]]:
    """Seconds of each case, round by round (rotating order), their CPU by process in
    `ledger`; `warm`: each case once, untimed, first (a stream's first query pays for
    Spark's cold start)."""
    if warm:
        for action in cases.values():
            action()
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for number in range(rounds):
        for name in rotate(list(cases), number):
            seconds[name].append(ledger.measure(name, cases[name]))
    return seconds


def report(title: str, rows: int, seconds: dict[str, list[float]],
           pairs: list[tuple[str, str]]) -> list[str]:
    """Rows/s of each case (median round) and, per (ours, other) pair, the median of the
    rounds' own ratios."""
    lines = [f"{title} ({rows:,} rows, {len(next(iter(seconds.values())))} rounds)"]
    for name, values in seconds.items():
        rates = sorted(rows / s for s in values)
        lines.append(f"  {name:<16} {statistics.median(rates):>12,.0f} rows/s   "
                     f"rounds: {', '.join(f'{r:,.0f}' for r in rates)}")
    for ours, other in pairs:
        ratios = [theirs / mine for mine, theirs in zip(seconds[ours], seconds[other])]
        lines.append(f"  {ours} / {other}: {statistics.median(ratios):.2f}x "
                     f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})")
    return lines


def noop(frame) -> None:
    """Reads `frame` whole into Spark's `noop` sink."""
    frame.write.format("noop").mode("overwrite").save()


class LatencyProbe:
    """foreachBatch of a stream: each row's age (ms) when the driver sees its batch."""

    def __init__(self, skip_seconds: float) -> None:
        self.ages: list[float] = []
        self.not_before = time.time() + skip_seconds

    def __call__(self, batch, batch_id: int) -> None:
        stamps = [r.timestamp.timestamp() for r in batch.select("timestamp").collect()]
        now = time.time()
        self.ages += [(now - t) * 1000 for t in stamps if t >= self.not_before]

    def summary(self) -> str:
        if len(self.ages) < 100:
            return f"only {len(self.ages)} rows seen"
        ages = sorted(self.ages)
        return (f"p50 {ages[len(ages) // 2]:.0f} ms, p99 {ages[len(ages) * 99 // 100]:.0f} ms"
                f" ({len(ages):,} rows)")


def steady_latency(spark, fmt: str, options: dict, write: Callable[[], None],
                   seconds: float) -> str:
    """Runs `write` (a steady writer for `seconds`) under a stream of `fmt` read with the
    default trigger; the probe's summary."""
    probe = LatencyProbe(skip_seconds=3.0)
    query = (spark.readStream.format(fmt).options(**options).load()
             .writeStream.foreachBatch(probe).start())
    try:
        write()
        deadline = time.monotonic() + 30
        while query.status["isDataAvailable"] and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    return probe.summary()


def raft_writer(farm, rate: int, seconds: float, value_bytes: int) -> Callable[[], None]:
    def write() -> None:
        rows = max(1, rate // 20)
        payload = [b"x" * value_bytes] * rows
        with farm.client() as client:
            began = time.monotonic()
            for tick in range(int(seconds * 20)):
                client.append(payload)
                pause = began + (tick + 1) / 20 - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
    return write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--kafka-fsync", choices=("every", "os"), default="every")
    parser.add_argument("--kafka-version", default="4.1.1")
    parser.add_argument("--connector-version", default="4.2.0",
                        help="spark-sql-kafka-0-10 version (the newest Maven Central "
                             "serves here; 4.2.0 runs on Spark 4.3)")
    parser.add_argument("--latency-rate", type=int, default=5000,
                        help="rows/s written during the latency phase")
    parser.add_argument("--latency-seconds", type=int, default=20)
    parser.add_argument("--parts", default="sink,source,stream,latency",
                        help="comma-separated: which of sink, source, stream, latency to run")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",")}
    if not parts <= {"sink", "source", "stream", "latency"}:
        parser.error(f"--parts: unknown {sorted(parts - {'sink', 'source', 'stream', 'latency'})}")
    for name in ("rows", "value_bytes", "rounds", "partitions", "brokers", "latency_rate",
                 "latency_seconds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    # Kafka's connector, and garlicfarm's JVM reader (format "garlicfarm-columnar")
    jars = ",".join([str(j) for j in connector_jars(args.connector_version)] + [jar_path()])
    work = tempfile.mkdtemp(prefix="spark-vs-kafka-")
    spark = spark_session("spark-vs-kafka", f"local[{args.partitions}]", conf={
        "spark.jars": jars, "spark.ui.enabled": "false", "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": str(args.partitions)})
    spark.sparkContext.setLogLevel("ERROR")
    # the in-memory ceiling source, pickled by value: the workers cannot import benchmarks/
    cloudpickle.register_pickle_by_value(spark_raft)
    spark.dataSource.register(BenchSource)
    kafka = KafkaCluster(args.kafka_version, args.brokers, args.kafka_fsync == "every")
    try:
        with kafka, LocalFarm(nodes=3) as farm, LocalFarm(nodes=1, fsync="never") as single:
            lines = [f"spark {spark.version}, connector {args.connector_version}, "
                     f"kafka: {json.dumps(kafka.settings)}, farm: 3 nodes, fsync batch; "
                     "raft 1 node: one node, fsync never (a parquet file's durability); "
                     f"kafka tuned: {json.dumps(KAFKA_TUNED)}"]
            kafka_options = {"kafka.bootstrap.servers": kafka.bootstrap}

            def topic() -> str:
                name = f"bench-{uuid.uuid4().hex[:8]}"
                kafka.create_topic(name, args.partitions)
                return name

            def sinks(frame, topics: dict) -> dict[str, Callable[[], object]]:
                return {
                    "raft": lambda: frame.write.format("garlicfarm").options(**farm.options)
                    .mode("append").save(),
                    "raft 1 node": lambda: frame.write.format("garlicfarm")
                    .options(**single.options).mode("append").save(),
                    "kafka": lambda: frame.write.format("kafka").options(**kafka_options)
                    .option("kafka.acks", "all").option("topic", topics["sink"]).save(),
                    "kafka tuned": lambda: frame.write.format("kafka").options(**kafka_options)
                    .options(**KAFKA_TUNED).option("kafka.acks", "all")
                    .option("topic", topics["sink"]).save(),
                    "parquet": lambda: frame.write.mode("overwrite")
                    .parquet(os.path.join(work, "sink.parquet")),
                }

            # warm-up: every case once, on few rows
            warm = value_frame(spark, WARM_ROWS, args.partitions, args.value_bytes)
            for action in sinks(warm, {"sink": topic()}).values():
                action()

            frame = value_frame(spark, args.rows, args.partitions, args.value_bytes)
            if "sink" in parts:
                ledger = CpuLedger()
                sink_seconds = run_rounds(args.rounds, sinks(frame, {"sink": topic()}), ledger)
                lines += report("sink: df.write", args.rows, sink_seconds,
                                [("raft", "kafka"), ("raft", "kafka tuned"),
                                 ("raft", "parquet"), ("raft 1 node", "parquet")])
                lines += ledger.lines(args.rows)

            # the source's rows: written once by each side, untimed
            source_topic = topic()
            with farm.client() as client:
                start = client.last_applied() + 1
            frame.write.format("garlicfarm").options(**farm.options).mode("append").save()
            with farm.client() as client:
                end = client.last_applied() + 1
            frame.write.format("kafka").options(**kafka_options).option("topic", source_topic) \
                .save()
            parquet = os.path.join(work, "source.parquet")
            frame.write.mode("overwrite").parquet(parquet)
            raft_range = {**farm.options, "startingOffsets": json.dumps({"index": start}),
                          "endingOffsets": json.dumps({"index": end})}
            kafka_range = {**kafka_options, "subscribe": source_topic,
                           "startingOffsets": "earliest"}
            if "source" in parts:
                parquet_raft = os.path.join(work, "source-raft.parquet")
                spark.read.format("garlicfarm").options(**raft_range).load() \
                    .write.mode("overwrite").parquet(parquet_raft)

                def raft_read(**extra):
                    return lambda: noop(spark.read.format("garlicfarm").options(**raft_range)
                                        .options(**extra).load())

                def ceiling(ddl: str):
                    return lambda: noop(ceiling_reader(spark, args.rows, args.partitions,
                                                       args.value_bytes, ddl))
                def columnar(*selected: str):
                    def read() -> None:
                        frame = spark.read.format("garlicfarm-columnar").options(**raft_range).load()
                        noop(frame.select(*selected) if selected else frame)
                    return read
                readers = {
                    "raft": raft_read(),
                    # the JVM reader: no Python worker on the executors
                    "raft columnar": columnar(),
                    "raft columnar value": columnar("value"),
                    "raft value": raft_read(columns="value"),
                    "kafka": lambda: noop(spark.read.format("kafka").options(**kafka_range)
                                          .option("endingOffsets", "latest").load()),
                    "parquet": lambda: noop(spark.read.parquet(parquet)),
                    # like for like: the raft source's six columns as a parquet file
                    "parquet raft": lambda: noop(spark.read.parquet(parquet_raft)),
                    # a Python data source that reads nothing: batches of the same rows built
                    # once in memory (benchmarks/spark_raft.py), the floor of any Python source
                    "ceiling": ceiling(RAFT_COLUMNS_DDL),
                    "ceiling value": ceiling("value binary"),
                }
                counts = {"raft": spark.read.format("garlicfarm").options(**raft_range).load()
                          .count(),
                          "raft columnar": spark.read.format("garlicfarm-columnar")
                          .options(**raft_range).load().count(),
                          "kafka": spark.read.format("kafka").options(**kafka_range).load()
                          .count()}
                if any(c != args.rows for c in counts.values()):
                    raise SystemExit(f"the sources hold {counts} rows, not {args.rows}")
                ledger = CpuLedger()
                lines += report("source: spark.read", args.rows,
                                run_rounds(args.rounds, readers, ledger, warm=True),
                                [("raft", "kafka"), ("raft", "parquet"), ("raft value", "parquet"),
                                 ("raft columnar", "kafka"), ("raft columnar", "parquet"),
                                 ("raft columnar", "parquet raft"),
                                 ("raft columnar value", "parquet"),
                                 ("ceiling", "parquet"), ("ceiling value", "parquet")])
                lines += ledger.lines(args.rows)

            def stream(fmt: str, options: dict) -> Callable[[], object]:
                def run() -> None:
                    checkpoint = tempfile.mkdtemp(dir=work)
                    query = (spark.readStream.format(fmt).options(**options).load()
                             .writeStream.format("noop").option("checkpointLocation", checkpoint)
                             .trigger(availableNow=True).start())
                    query.awaitTermination()
                    if query.exception() is not None:
                        raise SystemExit(f"{fmt} stream: {query.exception()}")
                    read = sum(p["numInputRows"] for p in query.recentProgress)
                    if read != args.rows:
                        raise SystemExit(f"the {fmt} stream read {read} rows, not {args.rows}")
                return run
            if "stream" in parts:
                streams = {"raft": stream("garlicfarm", {**farm.options, "startingOffsets":
                                                         json.dumps({"index": start})}),
                           "raft columnar": stream("garlicfarm-columnar", {
                               **farm.options, "startingOffsets": json.dumps({"index": start})}),
                           "kafka": stream("kafka", kafka_range)}
                ledger = CpuLedger()
                lines += report("stream: readStream availableNow", args.rows,
                                run_rounds(args.rounds, streams, ledger, warm=True),
                                [("raft", "kafka"), ("raft columnar", "kafka")])
                lines += ledger.lines(args.rows)

            if "latency" in parts:
                rate, seconds = args.latency_rate, args.latency_seconds
                lines.append(f"latency: {rate:,} rows/s for {seconds} s, default trigger")
                with farm.client() as client:
                    now = client.last_applied() + 1
                lines.append("  raft  " + steady_latency(
                    spark, "garlicfarm",
                    {**farm.options, "startingOffsets": json.dumps({"index": now})},
                    raft_writer(farm, rate, seconds, args.value_bytes), seconds))
                latency_topic = topic()
                lines.append("  kafka " + steady_latency(
                    spark, "kafka", {**kafka_options, "subscribe": latency_topic,
                                     "startingOffsets": "latest"},
                    lambda: kafka.produce_steadily(latency_topic, rate, seconds, args.value_bytes),
                    seconds))
    finally:
        spark.stop()
        kafka.close()
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(lines, f, indent=1)
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"({time.monotonic() - started:.0f} s in all)")
    sys.exit(code)
