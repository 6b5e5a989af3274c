"""`garlicfarm demo` (`make demo`): Spark streaming exactly once through all three kinds.

1. starts a LocalFarm (three `garlicfarm node` processes on loopback), its live status
   page (printed: open it in a browser) and a local Spark;
2. for each kind (raft, dafka, chp; demo_kinds.py): a generator drops files of JSON
   events into a folder, a few per second; a **writer** query streams them into the
   kind's system through its exactly-once sink and a **reader** query streams them back
   out with the kind's source; a live table shows the queries' progress;
3. each kind's verdict is computed from the output data (every event id exactly once,
   plus the kind's own checks) and printed, then a summary; everything is shut down.
   `--kill-leader` SIGKILLs the farm's leader half way through each kind.
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

from .demo_kinds import KINDS, STAGES, DemoStage, DemoVerdict


@dataclass
class Generated:
    """What the generator wrote: the expected result."""
    events: int = 0
    files: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: {k: 0 for k in KINDS})
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
    try:
        for number in range(files):
            if stop.is_set():
                break
            batch = [event(i) for i in range(number * per_file,
                                             min(events, (number + 1) * per_file))]
            staging = folder.parent / f".{number:05d}.json"
            staging.write_text("".join(json.dumps(e) + "\n" for e in batch))
            staging.rename(folder / f"{number:05d}.json")
            for e in batch:
                out.by_kind[e["kind"]] += 1
            out.events += len(batch)
            out.files += 1
            stop.wait(pause)
    finally:
        out.done.set()


def _progress(query) -> tuple[int, int]:
    """(batches done, rows so far) of a streaming query."""
    progress = query.recentProgress
    return len(progress), sum(p.get("numInputRows", 0) for p in progress)


def _table(stage: DemoStage, generated: Generated, read: int, farm_line: str) -> Table:
    table = Table(title=f"garlicfarm demo, {stage.kind}: {stage.title}", expand=False)
    table.add_column("stage")
    table.add_column("batches", justify="right")
    table.add_column("rows", justify="right")
    table.add_row("generator (JSON files)", str(generated.files), f"{generated.events:,}")
    for name, query in stage.queries:
        batches, rows = _progress(query)
        table.add_row(name, str(batches), f"{rows:,}")
    table.add_row("events in the output", "", f"{read:,}")
    table.add_row("farm", "", farm_line)
    return table


def _summary(verdicts: list[DemoVerdict], console: Console) -> bool:
    table = Table(title="exactly-once verdicts, computed from each kind's output")
    for column in ("kind", "generated", "read back", "distinct ids", "verdict"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for v in verdicts:
        table.add_row(v.kind, f"{v.expected:,}", f"{v.events:,}", f"{v.distinct:,}",
                      "[green]exactly once[/]" if v.ok else "[red]MISMATCH[/]")
    console.print(table)
    return all(v.ok for v in verdicts)


class Demo:
    """One run: the farm, Spark, the status page; `run_kind` streams one kind."""

    def __init__(self, args: argparse.Namespace, console: Console, spark, farm,
                 root: Path) -> None:
        self.args, self.console, self.spark, self.farm, self.root = \
            args, console, spark, farm, root
        self.client = farm.client()

    def run_kind(self, kind: str) -> DemoVerdict:
        args, console = self.args, self.console
        folder = self.root / kind
        inbox = folder / "events"
        inbox.mkdir(parents=True)
        console.rule(f"[bold]{kind}")
        stage = STAGES[kind](self.spark, self.farm, folder, inbox, args.timeout)
        stop = threading.Event()
        generated = Generated()
        producer = threading.Thread(target=generate, daemon=True, name=f"demo-{kind}",
                                    args=(inbox, args.events, args.files, args.pause,
                                          generated, stop))
        producer.start()
        try:
            self._follow(stage, generated)
            for _, query in stage.queries:
                query.processAllAvailable()
            verdict = stage.verdict(generated.events)
        finally:
            stop.set()
            producer.join(timeout=10)
            stage.close()
        colour = "green" if verdict.ok else "red"
        console.print(f"[bold {colour}]{kind}: {verdict.distinct:,} distinct events read "
                      f"back ({verdict.events:,} rows) for {verdict.expected:,} generated: "
                      + ("every event exactly once" if verdict.ok else "MISMATCH")
                      + f"[/] ({verdict.detail})")
        return verdict

    def _follow(self, stage: DemoStage, generated: Generated) -> None:
        """The live table until the output holds every generated event (or timeout)."""
        try:
            self._follow_live(stage, generated)
        finally:
            if not self.console.is_terminal:
                # off a terminal (`garlicfarm demo > file`) rich's Live writes its last
                # table without a newline: what comes next would be glued to its border
                self.console.line()

    def _follow_live(self, stage: DemoStage, generated: Generated) -> None:
        args = self.args
        killed = False
        deadline = time.monotonic() + args.timeout
        with Live(console=self.console, refresh_per_second=4, transient=False) as live:
            while True:
                for _, query in stage.queries:
                    if query.exception() is not None:
                        raise RuntimeError(f"query {query.name} failed: {query.exception()}")
                read = stage.read_count()
                live.update(_table(stage, generated, read,
                                   f"log index {self.client.last_applied():,}"))
                if args.kill_leader and not killed and generated.files * 2 >= args.files:
                    leader = self.client.get_servers().leader_id
                    self.farm.kill(leader)
                    self.console.print(f"[yellow]killed the farm's leader (node {leader})[/]")
                    self.farm.wait_for_leader()
                    self.farm.restart(leader)
                    killed = True
                if generated.done.is_set() and read >= generated.events:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{stage.kind}: the output did not reach "
                                       f"{generated.events:,} events in {args.timeout:.0f} s")
                time.sleep(0.25)   # the display's refresh pace, not a wait for a result


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in STAGES]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(STAGES)}")
    return kinds


def _number(kind, *, positive: bool):
    """An argparse type: a number of `kind`, positive (or else at least 0)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(
                f"{text!r} must be {'positive' if positive else 'at least 0'}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="garlicfarm demo", description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", type=_kinds, default=list(STAGES),
                        help="kinds to stream, in order (default raft,dafka,chp)")
    parser.add_argument("--events", type=_number(int, positive=True), default=8_000,
                        help="events to generate per kind")
    parser.add_argument("--files", type=_number(int, positive=True), default=4,
                        help="files (micro-batches) to write per kind")
    parser.add_argument("--pause", type=_number(float, positive=False), default=0.4,
                        help="seconds between files")
    parser.add_argument("--nodes", type=_number(int, positive=True), default=3,
                        help="Raft nodes in the local farm")
    parser.add_argument("--kill-leader", action="store_true",
                        help="SIGKILL the farm's leader half way through each kind (and "
                             "restart it)")
    parser.add_argument("--status-page", default="127.0.0.1:0", metavar="HOST:PORT",
                        help="where to serve the farm's status page (port 0: any free)")
    parser.add_argument("--timeout", type=_number(float, positive=True), default=120.0,
                        help="give up on a kind after seconds")
    args = parser.parse_args(argv)
    console = Console()

    from pyspark.sql import SparkSession

    from consensus.admin.farm_target import FarmTarget
    from consensus.admin.status_page import StatusPage
    from . import LocalFarm, spark_session
    owned = SparkSession.getActiveSession() is None
    console.print(f"[bold]starting Spark[/] (local[2]) and a local farm of {args.nodes} "
                  "Raft nodes ...")
    warnings.filterwarnings("ignore", category=FutureWarning)   # pyspark on pandas 3
    spark = spark_session("garlicfarm-demo", "local[2]",
                          conf={"spark.ui.enabled": "false", "spark.log.level": "ERROR"})
    if owned:
        spark.sparkContext.setLogLevel("ERROR")
    verdicts: list[DemoVerdict] = []
    with tempfile.TemporaryDirectory(prefix="garlicfarm-demo-") as tmp, \
            LocalFarm(nodes=args.nodes) as farm:
        page = StatusPage(args.status_page, {farm.cluster_name: FarmTarget(
            farm.endpoints.split(","), farm.cluster_name, farm.username, farm.password,
            timeout=2.0)})
        demo = Demo(args, console, spark, farm, Path(tmp))
        try:
            console.print(f"farm endpoints: [cyan]{farm.endpoints}[/]")
            console.print(f"status page: [cyan]{page.url}/farm/{farm.cluster_name}[/] "
                          "(open it in a browser while the demo runs)")
            for kind in args.kinds:
                verdicts.append(demo.run_kind(kind))
            ok = _summary(verdicts, console)
        finally:
            demo.client.close()
            page.close()
            if owned:
                spark.stop()
    console.print("farm and Spark stopped.")
    return 0 if ok else 1
