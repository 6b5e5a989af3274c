"""The three kinds of `garlicfarm demo`: each streams the generated events into its
system through an exactly-once sink and back out with a streaming source, then judges
the output data: every event exactly once.

* **raft**: the farm's Raft log (the raft sink; the raft source, aggregated per kind);
* **dafka**: a Dafka topic on a local tower and store (the dafka sink, whose ledger is
  in the farm; the dafka source from the earliest offsets);
* **chp**: a CHP server's map (the KVSET sink, a key per event; the changelog source).

Each `DemoStage` names its queries and how many events its output holds so far (for the
live display) and computes its `DemoVerdict` from the output once the stream is done.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

EVENT_SCHEMA = "id long, user string, kind string, amount double, at timestamp"
KINDS = ("view", "click", "cart", "buy")


@dataclass
class DemoVerdict:
    """What the output of one kind says: `events` rows for `expected` generated ids,
    `distinct` of them different; `ok` when every id is there exactly once (and the
    kind's own checks in `detail` hold)."""
    kind: str
    expected: int
    events: int
    distinct: int
    ok: bool
    detail: str = ""


@dataclass
class DemoStage:
    kind: str
    title: str
    queries: list[tuple[str, Any]]          # (what it does, the streaming query)
    read_count: Callable[[], int]           # events in the output so far
    verdict: Callable[[int], DemoVerdict]       # from the output, given the generated count
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for query in (q for _, q in self.queries):
            query.stop()
        for close in reversed(self.closers):
            close()


def _events(spark, inbox: Path):
    """The generated JSON files as a stream, one file per micro-batch."""
    return (spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1)
            .json(str(inbox)))


def _wait_started(query, timeout: float) -> None:
    """Until the query's sources are up (it waits for data or a trigger), or it failed."""
    deadline = time.monotonic() + timeout
    while query.status["message"] == "Initializing sources" and query.isActive:
        if time.monotonic() > deadline:
            raise RuntimeError(f"query {query.name} did not start in time")
        time.sleep(0.1)   # polling Spark's query status
    if query.exception() is not None:
        raise RuntimeError(f"query {query.name} failed: {query.exception()}")


def _start_reader_first(reader, writer_factory: Callable[[], Any], timeout: float):
    """The reader's source starts first, on a quiet Spark: Spark gives the Python
    process that plans a streaming source 10 s to connect back, which a busy machine
    can miss. Then the writer."""
    try:
        _wait_started(reader, timeout)
        return writer_factory()
    except BaseException:
        reader.stop()
        raise


def _ids_verdict(spark, kind: str, table: str, expected: int, extra_ok: bool = True,
                 detail: str = "") -> DemoVerdict:
    row = spark.sql(f"select count(*) as n, count(distinct id) as d, "
                    f"sum(case when id >= 0 and id < {expected} then 0 else 1 end) as stray "
                    f"from {table}").collect()[0]
    events, distinct, stray = row["n"], row["d"], row["stray"] or 0
    ok = events == expected and distinct == expected and stray == 0 and extra_ok
    return DemoVerdict(kind, expected, events, distinct, ok, detail)


# -- raft -----------------------------------------------------------------------------------

def raft_stage(spark, farm, root: Path, inbox: Path, timeout: float) -> DemoStage:
    from pyspark.sql import functions as F
    start = farm.client().last_applied() + 1
    source = lambda: (spark.readStream.format("garlicfarm").options(**farm.options)  # noqa: E731
                      .option("startingOffsets", json.dumps({"index": start}))
                      .option("valueFormat", "json").option("valueSchema", EVENT_SCHEMA)
                      .load())
    reader = (source().groupBy("kind").agg(F.count("*").alias("events"),
                                            F.sum("amount").alias("amount"),
                                            F.approx_count_distinct("id").alias("ids"))
              .writeStream.format("memory").queryName("demo_raft").outputMode("complete")
              .option("checkpointLocation", str(root / "chk-raft-r"))
              .trigger(processingTime="500 milliseconds").start())
    writer = _start_reader_first(reader, lambda: (
        _events(spark, inbox).select(F.to_json(F.struct("*")).alias("value"))
        .writeStream.format("garlicfarm").options(**farm.options)
        .option("checkpointLocation", str(root / "chk-raft-w"))
        .trigger(processingTime="500 milliseconds").queryName("raft_writer").start()), timeout)

    def read_count() -> int:
        return spark.sql("select coalesce(sum(events), 0) as n from demo_raft") \
            .collect()[0]["n"]

    def verdict(expected: int) -> DemoVerdict:
        # every id exactly once, read back from the log with a batch read
        (spark.read.format("garlicfarm").options(**farm.options)
         .option("startingOffsets", json.dumps({"index": start}))
         .option("valueFormat", "json").option("valueSchema", EVENT_SCHEMA).load()
         .createOrReplaceTempView("demo_raft_log"))
        totals = {r["kind"]: r["events"] for r in spark.sql("select * from demo_raft").collect()}
        streamed = sum(totals.values())
        return _ids_verdict(spark, "raft", "demo_raft_log", expected,
                            extra_ok=streamed == expected,
                            detail="streamed per kind " + ", ".join(
                                f"{k} {totals.get(k, 0):,}" for k in KINDS))

    return DemoStage("raft", "Spark -> Raft log (exactly-once sink) -> Spark (raft source)",
                 [("writer -> raft sink", writer), ("reader <- raft source", reader)],
                 read_count, verdict)


# -- dafka ----------------------------------------------------------------------------------

def dafka_stage(spark, farm, root: Path, inbox: Path, timeout: float) -> DemoStage:
    from pyspark.sql import functions as F
    from .dafka.local import LocalDafka
    dafka = LocalDafka(stores=1, data_dir=root / "dafka").start()
    topic = "demo-events"
    options = {**dafka.options, **farm.options}
    try:
        reader = (spark.readStream.format("garlicfarm").options(**options)
                  .option("subscribe", topic).option("startingOffsets", "earliest").load()
                  .select(F.get_json_object(F.col("value").cast("string"), "$.id")
                          .cast("long").alias("id"), "partition", "offset")
                  .writeStream.format("memory").queryName("demo_dafka").outputMode("append")
                  .option("checkpointLocation", str(root / "chk-dafka-r"))
                  .trigger(processingTime="500 milliseconds").start())
        writer = _start_reader_first(reader, lambda: (
            _events(spark, inbox).select(F.to_json(F.struct("*")).alias("value"))
            .writeStream.format("garlicfarm").options(**options).option("topic", topic)
            .option("checkpointLocation", str(root / "chk-dafka-w"))
            .trigger(processingTime="500 milliseconds").queryName("dafka_writer").start()),
            timeout)
    except BaseException:
        dafka.close()
        raise

    def read_count() -> int:
        return spark.sql("select count(*) as n from demo_dafka").collect()[0]["n"]

    def verdict(expected: int) -> DemoVerdict:
        # offsets of each partition run 0, 1, 2, ... with no gap and no repeat
        gaps = spark.sql("select partition, count(*) as n, count(distinct offset) as d, "
                         "min(offset) as lo, max(offset) as hi from demo_dafka "
                         "group by partition").collect()
        contiguous = all(r["n"] == r["d"] == r["hi"] + 1 and r["lo"] == 0 for r in gaps)
        return _ids_verdict(spark, "dafka", "demo_dafka", expected, contiguous,
                            f"{len(gaps)} partition(s), offsets "
                            + ("contiguous" if contiguous else "NOT contiguous"))

    return DemoStage("dafka", "Spark -> Dafka topic (exactly-once sink) -> Spark (dafka source)",
                 [("writer -> dafka sink", writer), ("reader <- dafka source", reader)],
                 read_count, verdict, [dafka.close])


# -- chp ------------------------------------------------------------------------------------

CHP_PORT_ATTEMPTS = 20
CHP_START_TIMEOUT = 30.0


def start_chp_server(log_path: Path) -> tuple[subprocess.Popen, str]:
    """A standalone `garlicfarm chp server` process on three consecutive free loopback
    ports; (the process, its HOST:PORT). Another port is tried when one was taken
    between choosing and binding."""
    for _ in range(CHP_PORT_ATTEMPTS):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 2 > 65535:
            continue
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "garlicfarm", "chp", "server", "--port", str(port),
                 "--hugz-interval", "0.2"], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + CHP_START_TIMEOUT
        while proc.poll() is None and "chp server " not in log_path.read_text(errors="replace"):
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the chp server did not start: {log_path.read_text()}")
            time.sleep(0.05)   # waiting for the server's first log line
        if proc.poll() is None:
            return proc, f"127.0.0.1:{port}"
        if "cannot bind" not in log_path.read_text(errors="replace"):
            raise RuntimeError(f"the chp server exited: {log_path.read_text()}")
    raise RuntimeError(f"no three free consecutive ports after {CHP_PORT_ATTEMPTS} tries")


def chp_stage(spark, farm, root: Path, inbox: Path, timeout: float) -> DemoStage:
    from pyspark.sql import functions as F
    server, address = start_chp_server(root / "chp-server.log")

    def stop_server() -> None:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    chp = {"kind": "chp", "endpoint": address, "serverTimeout": "2s"}
    try:
        reader = (spark.readStream.format("garlicfarm").options(**chp).options(**farm.options)
                  .option("startingOffsets", "snapshot").load()
                  .select("key", "sequence", "deleted")
                  .writeStream.format("memory").queryName("demo_chp").outputMode("append")
                  .option("checkpointLocation", str(root / "chk-chp-r"))
                  .trigger(processingTime="500 milliseconds").start())
        writer = _start_reader_first(reader, lambda: (
            _events(spark, inbox)
            .select(F.concat(F.lit("/demo/"), F.col("id").cast("string")).alias("key"),
                    F.to_json(F.struct("*")).alias("value"))
            .writeStream.format("garlicfarm").options(**chp)
            .option("checkpointLocation", str(root / "chk-chp-w"))
            .trigger(processingTime="500 milliseconds").queryName("chp_writer").start()),
            timeout)
    except BaseException:
        stop_server()
        raise
    live = "select cast(substring(key, 7) as long) as id, sequence from demo_chp " \
           "where key like '/demo/%' and not deleted"

    def read_count() -> int:
        return spark.sql(f"select count(*) as n from ({live})").collect()[0]["n"]

    def verdict(expected: int) -> DemoVerdict:
        spark.sql(live).createOrReplaceTempView("demo_chp_events")
        row = spark.sql("select count(*) as n, count(distinct sequence) as d from demo_chp") \
            .collect()[0]
        unique = row["n"] == row["d"]
        return _ids_verdict(spark, "chp", "demo_chp_events", expected, unique,
                            f"{row['n']:,} changelog rows, sequences "
                            + ("each once" if unique else "REPEATED"))

    return DemoStage("chp", "Spark -> CHP map (KVSET sink) -> Spark (changelog source)",
                 [("writer -> chp sink", writer), ("reader <- chp changelog", reader)],
                 read_count, verdict, [stop_server])


STAGES = {"raft": raft_stage, "dafka": dafka_stage, "chp": chp_stage}
