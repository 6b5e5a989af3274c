"""The Spark sink as scale_out.py's load (`--load spark`): one process runs a Spark
streaming query writing keyed rows with `format("garlicfarm")` into the farm under test,
as fast as the farm commits them.

The input is Spark's `rate-micro-batch` source: a fixed `rows_per_batch` rows per
micro-batch whatever the clock says, so the query is a closed loop (the next batch starts
when the sink has committed the last one) and the farm, not a generator's rate, sets the
pace. Each row is `key` = its number mod `KEYS` as a string (Kafka's partitioner spreads
the keys over the farm's partitions, docs/options.md, the raft sink's "Partitions"; a farm
of one partition gets no key) and a binary `value` of `value_bytes` bytes: the hex of
its number's SHA-256, repeated (text that zstd halves, not a run of one byte that the
sink's compression makes vanish, leaving the farm only per-entry costs).

Rows in a window come from the query's own progress reports: a micro-batch's rows are
committed over its run (staged in every partition, then decided once in partition 0), so
each batch counts with the share of its run that falls in the window. Batches last
seconds under a quota: counting only the batches that end in a window would round a 5 s
window to whole batches.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

import psutil

KEYS = 1000                 # distinct keys: enough to spread evenly over a few partitions
TASKS = 2                   # the source's partitions = the sink's tasks (local[2])


def sink_options(client_options: dict[str, Any]) -> dict[str, str]:
    """The raft sink's connection options from a FarmClient's (scale_out's
    `client_options`; the sink routes over every partition, so the partition goes)."""
    endpoints = client_options["endpoints"]
    if not isinstance(endpoints, str):
        endpoints = ",".join(endpoints)
    return {"endpoints": endpoints, "cluster": str(client_options["cluster"]),
            "username": str(client_options["username"]),
            "password": str(client_options["password"])}


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its descendants (the driver, Spark's JVM, its Python
    workers); a process that ended in between is left out."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            try:
                times = process.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                continue
    except psutil.NoSuchProcess:
        pass
    return total


def rows_in(progress: list[dict[str, Any]], start: float, end: float) -> float:
    """Rows of the batches in `progress` (Spark's StreamingQueryProgress as dicts) that
    fall in [start, end) (wall-clock seconds), each batch pro rata of its run."""
    rows = 0.0
    for report in progress:
        began = datetime.fromisoformat(report["timestamp"].replace("Z", "+00:00")).timestamp()
        ended = began + report["batchDuration"] / 1000
        overlap = min(ended, end) - max(began, start)
        if overlap > 0 and ended > began:
            rows += report["numInputRows"] * overlap / (ended - began)
    return rows


def spark_writer(client_options: dict[str, Any], rows_per_batch: int, value_bytes: int,
                 keyed: bool, conn: Connection, deadline: float = 120.0) -> None:
    """scale_out's client process for `--load spark`: "ready" once a micro-batch is
    committed, then the rows committed in the window the parent sends (monotonic start,
    end), as {"entries": rows, "errors": 0|1, "cpu": the query's CPU seconds}; a failure
    sends its text instead. `keyed`: rows carry a key (a farm of one partition takes
    none: the sink refuses a key column there), else they go round-robin."""
    try:
        _spark_writer(client_options, rows_per_batch, value_bytes, keyed, conn, deadline)
    except Exception as exc:
        conn.send(f"the Spark load failed: {type(exc).__name__}: {exc}")
        raise


def _spark_writer(client_options: dict[str, Any], rows_per_batch: int, value_bytes: int,
                  keyed: bool, conn: Connection, deadline: float) -> None:
    from pyspark_farm import spark_session

    spark = spark_session("garlicfarm-scale-out", "local[2]",
                          conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    checkpoint = tempfile.mkdtemp(prefix="garlicfarm-scale-out-")
    counts: dict[str, float] = {"entries": 0, "errors": 0, "cpu": 0.0}
    query = None
    try:
        frame = (spark.readStream.format("rate-micro-batch")
                 .option("rowsPerBatch", str(rows_per_batch))
                 .option("numPartitions", str(TASKS)).load()
                 .selectExpr(*([f"cast(value % {KEYS} as string) as key"] if keyed else []),
                             f"cast(substring(repeat(sha2(cast(value as string), 256), "
                             f"{-(-value_bytes // 64)}), 1, {value_bytes}) as binary) as value"))
        query = (frame.writeStream.format("garlicfarm").options(**sink_options(client_options))
                 .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds")
                 .start())
        give_up = time.monotonic() + deadline
        while not query.recentProgress:
            if not query.isActive or time.monotonic() > give_up:
                raise RuntimeError(f"the Spark sink committed no micro-batch in {deadline:.0f} "
                                   f"s: {query.exception()}")
            time.sleep(0.2)
        conn.send("ready")
        start, end = conn.recv()
        wall = time.time() - time.monotonic()      # monotonic -> wall clock, as Spark stamps
        time.sleep(max(0.0, start - time.monotonic()))
        began = tree_cpu(os.getpid())
        time.sleep(max(0.0, end - time.monotonic()))
        counts["cpu"] = tree_cpu(os.getpid()) - began
        # the batch running at the window's end counts pro rata: wait for its report
        give_up = time.monotonic() + deadline
        while not _covers(query.recentProgress, end + wall):
            if not query.isActive or time.monotonic() > give_up:
                counts["errors"] += 1
                break
            time.sleep(0.2)
        counts["entries"] = round(rows_in(query.recentProgress, start + wall, end + wall))
    finally:
        if query is not None:
            spark.sparkContext.setLogLevel("FATAL")   # stopping cancels the running batch
            query.stop()
        spark.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    conn.send(counts)


def _covers(progress: list[dict[str, Any]], moment: float) -> bool:
    """Whether a reported batch ended at or after `moment` (wall clock)."""
    if not progress:
        return False
    last = progress[-1]
    began = datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp()
    return began + last["batchDuration"] / 1000 >= moment
