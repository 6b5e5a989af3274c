"""`garlicfarm demo` (`make demo`): Spark streaming through an embedded 3-node farm.

1. starts a LocalFarm (three `garlicfarm node` processes on loopback) and a local Spark;
2. a generator drops files of JSON events into a folder, a few per second;
3. query **writer** streams them into the farm's Raft log through the exactly-once sink;
4. query **reader** streams the log back with the raft source, decodes the JSON values
   into columns and aggregates them per kind of event;
5. a live table shows both queries' progress and the log, then the final totals are
   printed and checked against what was generated (every event exactly once), and
   everything is shut down. `--kill-leader` SIGKILLs the farm's leader half way through.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

KINDS = ("view", "click", "cart", "buy")
EVENT_SCHEMA = "id long, user string, kind string, amount double, at timestamp"


@dataclass
class Generated:
    """What the generator wrote: the expected result."""
    events: int = 0
    files: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})
    amount: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in KINDS})
    done: threading.Event = field(default_factory=threading.Event)


def event(i: int) -> dict:
    kind = KINDS[(i * 7 + i // 5) % len(KINDS)]
    return {"id": i, "user": f"user{i % 97:02d}", "kind": kind,
            "amount": round((i % 50) * 1.25, 2) if kind == "buy" else 0.0,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_700_000_000 + i))}


def generate(folder: Path, events: int, files: int, pause: float, out: Generated,
             stop: threading.Event) -> None:
    """Write `events` events in `files` JSON-lines files, one every `pause` seconds (each
    file appears atomically: written aside, then renamed into the folder)."""
    per_file = -(-events // files)
    for number in range(files):
        if stop.is_set():
            break
        batch = [event(i) for i in range(number * per_file, min(events, (number + 1) * per_file))]
        staging = folder.parent / f".{number:05d}.json"
        staging.write_text("".join(json.dumps(e) + "\n" for e in batch))
        staging.rename(folder / f"{number:05d}.json")
        for e in batch:
            out.by_kind[e["kind"]] += 1
            out.amount[e["kind"]] += e["amount"]
        out.events += len(batch)
        out.files += 1
        stop.wait(pause)
    out.done.set()


def _progress(query) -> tuple[int, int]:
    """(batches done, rows so far) of a streaming query."""
    progress = query.recentProgress
    return len(progress), sum(p.get("numInputRows", 0) for p in progress)


def _table(generated: Generated, writer, reader, farm_line: str, totals: list) -> Table:
    table = Table(title="garlicfarm demo: Spark -> Raft log -> Spark", expand=False)
    table.add_column("stage")
    table.add_column("batches", justify="right")
    table.add_column("rows", justify="right")
    table.add_row("generator (JSON files)", str(generated.files), f"{generated.events:,}")
    for name, query in (("writer -> exactly-once sink", writer), ("reader <- raft source", reader)):
        batches, rows = _progress(query)
        table.add_row(name, str(batches), f"{rows:,}")
    table.add_row("farm", "", farm_line)
    for row in totals:
        table.add_row(f"  total {row['kind']}", "", f"{row['events']:,}")
    return table


def _result(rows: list, generated: Generated, distinct: int, console: Console) -> bool:
    table = Table(title="events per kind, read back from the Raft log")
    for column in ("kind", "events", "expected", "amount", "ok"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    ok = True
    found = {r["kind"]: r for r in rows}
    for kind in KINDS:
        got = found.get(kind, {"events": 0, "amount": 0.0})
        good = got["events"] == generated.by_kind[kind] and \
            abs((got["amount"] or 0.0) - generated.amount[kind]) < 1e-6
        ok &= good
        table.add_row(kind, f"{got['events']:,}", f"{generated.by_kind[kind]:,}",
                      f"{got['amount'] or 0.0:,.2f}", "yes" if good else "NO")
    console.print(table)
    ok &= distinct == generated.events
    console.print(f"{distinct:,} distinct events read back for {generated.events:,} generated: "
                  + ("[bold green]every event exactly once[/]" if ok else "[bold red]MISMATCH[/]"))
    return ok


def _wait_started(query, deadline: float) -> None:
    """Until the query's sources are up (it waits for data or a trigger), or it failed."""
    while query.status["message"] == "Initializing sources" and query.isActive:
        if time.monotonic() > deadline:
            raise RuntimeError(f"query {query.name} did not start in time")
        time.sleep(0.1)   # polling Spark's query status
    if query.exception() is not None:
        raise RuntimeError(f"query {query.name} failed: {query.exception()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="garlicfarm demo", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000, help="events to generate")
    parser.add_argument("--files", type=int, default=12, help="files (micro-batches) to write")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between files")
    parser.add_argument("--nodes", type=int, default=3, help="Raft nodes in the local farm")
    parser.add_argument("--kill-leader", action="store_true",
                        help="SIGKILL the farm's leader half way (and restart it)")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after seconds")
    args = parser.parse_args(argv)
    console = Console()

    from pyspark.sql import SparkSession, functions as F
    from . import LocalFarm, spark_session
    owned = SparkSession.getActiveSession() is None
    console.print("[bold]starting Spark[/] (local[2]) and a local farm of "
                  f"{args.nodes} Raft nodes ...")
    warnings.filterwarnings("ignore", category=FutureWarning)   # pyspark on pandas 3
    spark = spark_session("garlicfarm-demo", "local[2]",
                          conf={"spark.ui.enabled": "false", "spark.log.level": "ERROR"})
    if owned:
        spark.sparkContext.setLogLevel("ERROR")
    stop = threading.Event()
    generated = Generated()
    with tempfile.TemporaryDirectory(prefix="garlicfarm-demo-") as tmp, \
            LocalFarm(nodes=args.nodes) as farm:
        root = Path(tmp)
        inbox = root / "events"
        inbox.mkdir()
        console.print(f"farm endpoints: [cyan]{farm.endpoints}[/]")
        first = farm.client()
        start = first.last_applied() + 1
        reader = (spark.readStream.format("garlicfarm").options(**farm.options)
                  .option("startingOffsets", json.dumps({"index": start}))
                  .option("valueFormat", "json").option("valueSchema", EVENT_SCHEMA)
                  .load()
                  .groupBy("kind").agg(F.count("*").alias("events"),
                                       F.sum("amount").alias("amount"))
                  .writeStream.format("memory").queryName("demo_totals").outputMode("complete")
                  .option("checkpointLocation", str(root / "chk-reader"))
                  .trigger(processingTime="500 milliseconds").start())
        # The reader's source starts first, on a quiet Spark: Spark gives the Python process
        # that plans a streaming source 10 s to connect back, which a busy machine can miss.
        console.print("starting the [bold]reader[/] query (raft source) ...")
        try:
            _wait_started(reader, time.monotonic() + args.timeout)
        except BaseException:
            reader.stop()
            raise
        console.print("starting the [bold]writer[/] query (exactly-once sink) and the generator")
        writer = (spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1)
                  .json(str(inbox))
                  .select(F.to_json(F.struct("*")).alias("value"))
                  .writeStream.format("garlicfarm").options(**farm.options)
                  .option("checkpointLocation", str(root / "chk-writer"))
                  .trigger(processingTime="500 milliseconds").queryName("writer").start())
        producer = threading.Thread(target=generate, daemon=True, name="demo-generator",
                                    args=(inbox, args.events, args.files, args.pause,
                                          generated, stop))
        producer.start()
        killed = False
        deadline = time.monotonic() + args.timeout
        ok = False
        try:
            with Live(console=console, refresh_per_second=4, transient=False) as live:
                while time.monotonic() < deadline:
                    for query in (writer, reader):
                        if query.exception() is not None:
                            raise RuntimeError(f"query {query.name} failed: {query.exception()}")
                    totals = [r.asDict() for r in spark.sql(
                        "select kind, events from demo_totals order by kind").collect()]
                    read = sum(r["events"] for r in totals)
                    applied = first.last_applied()
                    live.update(_table(generated, writer, reader,
                                       f"log index {applied:,}", totals))
                    if args.kill_leader and not killed and generated.files * 2 >= args.files:
                        leader = first.get_servers().leader_id
                        farm.kill(leader)
                        console.print(f"[yellow]killed the leader (node {leader})[/]")
                        farm.wait_for_leader()
                        farm.restart(leader)
                        killed = True
                    if generated.done.is_set() and read >= generated.events:
                        break
                    time.sleep(0.25)   # the display's refresh pace, not a wait for a result
            writer.processAllAvailable()
            reader.processAllAvailable()
            rows = [r.asDict() for r in spark.sql("select * from demo_totals").collect()]
            distinct = (spark.read.format("garlicfarm").options(**farm.options)
                        .option("startingOffsets", json.dumps({"index": start}))
                        .option("valueFormat", "json").option("valueSchema", EVENT_SCHEMA)
                        .load().select("id").distinct().count())
            ok = _result(rows, generated, distinct, console)
        finally:
            stop.set()
            for query in (writer, reader):
                query.stop()
            producer.join(timeout=10)
            first.close()
            if owned:
                spark.stop()
    console.print("farm and Spark stopped.")
    return 0 if ok else 1
