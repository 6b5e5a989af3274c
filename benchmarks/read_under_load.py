"""A Spark batch read of a large backlog while a writer runs on a busy machine (issue 26):
does the farm keep its leader and its writer's latency while a reader catches up?

    PYTHONPATH=<checkout> .venv/bin/python benchmarks/read_under_load.py [--rows 1000000]
        [--backlog journal|sink] [--rows-per-entry 10] [--value-bytes 100] [--runs 3]
        [--partitions 2] [--rate 40] [--burners 2] [--quiet-seconds 0]
        [--log-readers threads|process] [--log-reader-nice N]

The code under test is the one on PYTHONPATH (the driver, the Spark workers and the
nodes all import it): run the script once with this checkout and once with another to
compare (the script imports nothing from its own checkout).

One `local[P]` Spark session and one 3-node farm (LocalFarm, fsync batch, every node with
--metrics). The backlog, --rows rows of --value-bytes, is written once, untimed:
`journal` (default): by FarmClient.append_many, --rows-per-entry rows an entry, the log
a steady writer leaves (many small entries: what makes a member work per entry); `sink`:
SHA-512 hex digits (as benchmarks/spark_raft.py) through the garlicfarm sink (few large
staged entries, whose pages are mostly bytes to copy). A first, unmeasured read of a few
entries warms Spark's JVM and Python workers. Then,
per run: `--burners` processes spin on the CPU (a shared cluster), a FarmClient appends one
record --rate times a second at the leader, and Spark reads the backlog
(format garlicfarm, kind raft, startingOffsets/endingOffsets its index range) into the
`noop` sink. Reported per run: the read's rows/s; term changes (the highest term any
member reports, after minus before); the writer's latency p50/p99/max during the read;
the loop's turns during the read from each node's garlicfarm_server_loop_turn_duration_seconds histogram
and how late its ticks came (garlicfarm_server_loop_tick_lag_seconds: time between turns
waiting for the CPU or the GIL counts there) (count, p99 and the largest bucket, "n/a"
where the code has none), the turns each node logged as slow (over 100 ms: how many, the
longest), its late-tick lines and role changes. With --quiet-seconds S, each run
first records the writer alone for S seconds (burners on, no read): the latency the
machine's load gives without the read, to tell the read's share apart.
"""
from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import re
import statistics
import threading
import time
import urllib.request

from pyspark_farm import LocalFarm, spark_session
from spark_raft import value_frame        # benchmarks/ is the script's directory

_TURN = re.compile(r"a loop turn took (\d+) ms \((\d+) ms of CPU")
_ROLE = re.compile(r"node \d+: (?:follower|pre-candidate|candidate|leader) -> .*")
_METRICS = re.compile(r"metrics on (http://\S+/metrics)")
_LATE = re.compile(r"the loop's ticks came (\d+) ms late")
_BUCKET = re.compile(r'^garlicfarm_server_loop_(turn_duration|tick_lag)_seconds_bucket'
                     r'\{le="([^"]+)"\} (\S+)$', re.M)


def burn() -> None:
    while True:
        pass


def write_journal(farm: LocalFarm, rows: int, per_entry: int, value_bytes: int) -> None:
    """`rows` rows as journal entries of `per_entry` rows, 500 entries a call."""
    value = b"v" * value_bytes
    with farm.client(timeout=60) as client:
        written = 0
        while written < rows:
            batch = []
            while written < rows and len(batch) < 500:
                count = min(per_entry, rows - written)
                batch.append([value] * count)
                written += count
            client.append_many(batch)


class Writer(threading.Thread):
    """One record `rate` times a second at the leader; latencies (ms) while `recording`."""

    def __init__(self, farm: LocalFarm, rate: int) -> None:
        super().__init__(daemon=True)
        self.farm, self.rate = farm, rate
        self.latencies: list[float] = []
        self.failures = 0
        self.recording = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        with self.farm.client() as client:
            began, tick = time.monotonic(), 0
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    client.append([b"w" * 100])
                except Exception:       # noqa: BLE001 - counted, reported
                    self.failures += 1
                if self.recording.is_set():
                    self.latencies.append((time.monotonic() - sent) * 1000)
                tick += 1
                pause = began + tick / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)


class Node:
    """One node's metrics endpoint and log, read before and after a run."""

    def __init__(self, farm: LocalFarm, node_id: int) -> None:
        self.log_path = farm.cluster.log_path(node_id)
        self.auth = "Basic " + base64.b64encode(
            f"{farm.username}:{farm.password}".encode()).decode()
        deadline = time.monotonic() + 30
        self.url = None
        while self.url is None and time.monotonic() < deadline:
            found = _METRICS.search(self._log())
            self.url = found.group(1) if found else None
            if self.url is None:
                time.sleep(0.2)
        if self.url is None:
            raise SystemExit(f"node {node_id} logged no metrics endpoint")

    def _log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def mark(self) -> tuple[int, dict[tuple[str, float], float]]:
        return len(self._log()), self.buckets()

    def buckets(self) -> dict[tuple[str, float], float]:
        request = urllib.request.Request(self.url, headers={"Authorization": self.auth})
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
        return {(name, float(le)): float(n) for name, le, n in _BUCKET.findall(text)}

    def since(self, mark: tuple[int, dict[tuple[str, float], float]]) -> str:
        offset, before = mark
        text = self._log()[offset:]
        slow = sorted((int(ms), int(cpu)) for ms, cpu in _TURN.findall(text))
        logged = (f"{len(slow)} slow, longest {slow[-1][0]} ms ({slow[-1][1]} ms of CPU)"
                  if slow else "0 slow")
        late = [int(ms) for ms in _LATE.findall(text)]
        if late:
            logged += f", {len(late)} late ticks, latest {max(late)} ms"
        roles = _ROLE.findall(text)
        if roles:
            logged += "; roles: " + ", ".join(r.split(": ", 1)[1] for r in roles)
        after = self.buckets()
        parts = [_histogram(name, label, before, after) for name, label in
                 (("turn_duration", "turns"), ("tick_lag", "tick lags"))]
        return "; ".join(parts) + f"; logged {logged}"


def _histogram(name: str, label: str, before: dict, after: dict) -> str:
    """p99 and largest bucket of one histogram's observations between two scrapes."""
    counts = sorted((le, n - before.get((name, le), 0))
                    for (kind, le), n in after.items() if kind == name)
    if not counts or not counts[-1][1]:
        return f"{label} n/a"
    total = counts[-1][1]
    p99 = next(le for le, n in counts if n >= 0.99 * total)
    largest = next(le for le, n in counts if n >= total)
    return f"{int(total)} {label}, p99 <= {p99 * 1000:g} ms, all <= {largest * 1000:g} ms"


def highest_term(farm: LocalFarm) -> int:
    terms = []
    with farm.client(timeout=10) as client:
        for endpoint in farm.endpoints.split(","):
            try:
                terms.append(int(client.ping(endpoint)["term"]))
            except Exception:       # noqa: BLE001 - a member too busy to answer
                pass
    return max(terms, default=0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--backlog", choices=("journal", "sink"), default="journal")
    parser.add_argument("--rows-per-entry", type=int, default=10,
                        help="journal backlog: rows of each appended entry")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=int, default=40, help="writer appends per second")
    parser.add_argument("--burners", type=int, default=2, help="CPU burner processes")
    parser.add_argument("--quiet-seconds", type=float, default=0.0,
                        help="per run, record the writer this long without the read first")
    parser.add_argument("--log-readers", choices=("threads", "process"),
                        help="the nodes' --log-readers (who builds the log pages); default: "
                        "the nodes' default (and code without the option runs unchanged)")
    parser.add_argument("--log-reader-nice", type=int,
                        help="the nodes' --log-reader-nice (with --log-readers process)")
    args = parser.parse_args(argv)
    for name in ("rows", "value_bytes", "runs", "partitions", "rate", "rows_per_entry"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.burners < 0:
        parser.error("--burners must be at least 0")
    if not 0 <= args.quiet_seconds <= 600:
        parser.error("--quiet-seconds must be between 0 and 600")

    spark = spark_session("read-under-load", f"local[{args.partitions}]", conf={
        "spark.ui.enabled": "false", "spark.driver.memory": "4g"})
    spark.sparkContext.setLogLevel("ERROR")
    # the whole backlog stays in the log (a node keeps 100,000 entries below its latest
    # snapshot by default: a 10M-row journal backlog would be compacted before it is read)
    readers = (("--log-readers", args.log_readers) if args.log_readers else ()) + \
        (("--log-reader-nice", str(args.log_reader_nice))
         if args.log_reader_nice is not None else ())
    with LocalFarm(nodes=3, extra_args=("--metrics", "127.0.0.1:0",
                                        "--retain-entries", "1000000000", *readers)) as farm:
        nodes = [Node(farm, i) for i in farm.cluster.node_ids]
        with farm.client() as client:
            start = client.last_applied() + 1
        began = time.monotonic()
        if args.backlog == "sink":
            frame = value_frame(spark, args.rows, args.partitions, args.value_bytes)
            frame.write.format("garlicfarm").options(**farm.options).mode("append").save()
            frame.unpersist()
        else:
            write_journal(farm, args.rows, args.rows_per_entry, args.value_bytes)
        with farm.client() as client:
            end = client.last_applied() + 1
        warm = {**farm.options, "startingOffsets": json.dumps({"index": start}),
                "endingOffsets": json.dumps({"index": min(end, start + 3)})}
        spark.read.format("garlicfarm").options(**warm).load().write.format("noop") \
            .mode("overwrite").save()
        lines = [f"backlog ({args.backlog}): {args.rows:,} rows of {args.value_bytes} bytes, entries "
                 f"[{start}, {end}), written in {time.monotonic() - began:.0f} s; "
                 f"spark {spark.version} local[{args.partitions}], 3 nodes, fsync batch, "
                 f"writer {args.rate}/s, {args.burners} CPU burners, log readers: "
                 f"{args.log_readers or 'the default'}"
                 f"{'' if args.log_reader_nice is None else f' (nice {args.log_reader_nice})'}"]
        print(lines[0], flush=True)
        options = {**farm.options, "startingOffsets": json.dumps({"index": start}),
                   "endingOffsets": json.dumps({"index": end})}
        writer = Writer(farm, args.rate)
        writer.start()
        rates = []
        for run in range(1, args.runs + 1):
            burners = [multiprocessing.Process(target=burn, daemon=True)
                       for _ in range(args.burners)]
            for burner in burners:
                burner.start()
            try:
                if args.quiet_seconds:
                    marks = [node.mark() for node in nodes]
                    writer.latencies.clear()
                    writer.recording.set()
                    time.sleep(args.quiet_seconds)
                    writer.recording.clear()
                    quiet = list(writer.latencies)
                    lines.append(
                        f"run {run}, writer without the read ({args.quiet_seconds:g} s): p50 "
                        f"{percentile(quiet, 0.5):.1f} ms, p99 {percentile(quiet, 0.99):.1f} ms, "
                        f"max {max(quiet, default=float('nan')):.1f} ms ({len(quiet)} appends)")
                    lines += [f"  node {i}: {node.since(mark)}" for i, node, mark
                              in zip(farm.cluster.node_ids, nodes, marks)]
                    print("\n".join(lines[-4:]), flush=True)
                term = highest_term(farm)
                marks = [node.mark() for node in nodes]
                writer.latencies.clear()
                writer.recording.set()
                t0 = time.monotonic()
                rows = spark.read.format("garlicfarm").options(**options).load()
                rows.write.format("noop").mode("overwrite").save()
                seconds = time.monotonic() - t0
                writer.recording.clear()
                turns = [node.since(mark) for node, mark in zip(nodes, marks)]
                changes = highest_term(farm) - term
            finally:
                for burner in burners:
                    burner.terminate()
                    burner.join()
            latencies = list(writer.latencies)
            rates.append(args.rows / seconds)
            lines.append(
                f"run {run}: read {args.rows:,} rows in {seconds:.1f} s = "
                f"{args.rows / seconds:,.0f} rows/s; term changes {changes}; writer "
                f"p50 {percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f}"
                f" ms, max {max(latencies, default=float('nan')):.1f} ms ({len(latencies)} "
                f"appends, {writer.failures} failed so far)")
            lines += [f"  node {i}: {t}" for i, t in zip(farm.cluster.node_ids, turns)]
            print("\n".join(lines[-4:]), flush=True)
        writer.stop.set()
        writer.join(30)
        lines.append(f"median read: {statistics.median(rates):,.0f} rows/s")
    spark.stop()
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
