"""Raft throughput and latency of a 3-node farm against PySyncObj, in the same run.

    .venv/bin/python benchmarks/raft_throughput.py [--seconds 8] [--clients 64]
        [--rounds 2] [--latency-ops 2000] [--only farm|pysyncobj] [--wire garlicfarm]

The shape, the same on both sides: 3 node processes on 127.0.0.1, 100-byte writes,
`--clients` concurrent closed-loop clients (each waits for its write to commit before
sending the next), then one client alone for the latency percentiles.

  farm never   LocalCluster(fsync="never"). The `--clients` logical clients are spread
               over `--client-procs` client processes, one FarmClient each; each logical
               client is one write in flight on that client's connection to the leader
               (`append_async([100 B])` = one log entry, its own request id and answer),
               and sends its next write when its last one is answered (the completion
               callback sends it). `--client-mode threads`: one thread and FarmClient
               per logical client calling `append` instead (the old shape).
               The single client of the latency run calls `append` in a loop.
  farm batch   the same with fsync="batch" (group commit)
  pysyncobj *  PySyncObj (PyPI) with a replicated dict: `set(i % 1000, 100 B)`. It has
               no client protocol, so its clients run *inside the leader's process* as
               `--clients` callbacks in flight (the cheapest possible client), and its
               log never fsyncs (in memory; `--pysyncobj-journal` uses its mmap journal,
               which does not fsync either). Its speed depends on one setting, so it runs
               in three tunings: its defaults (AppendEntries batched every 100 ms),
               batched every 0.5 ms (its best throughput here), and unbatched (one
               AppendEntries per command: its best latency here). The baseline of the
               ratios is the best PySyncObj rate and the best PySyncObj p50.

Rates are commits/s over the measured window (after a warm-up), acknowledged writes
only; latencies are per write of the single client. Rounds alternate the systems and the
best round of each counts (the machine is shared; the spread between runs is large).
PySyncObj logs CRITICAL "truncating already-applied log entries" under load (it truncates
on stale AppendEntries); the report counts those lines.
The goals (issue): farm never >= 3x pysyncobj, farm batch >= 1x pysyncobj, farm never
single-client p50 <= 0.3 ms.
"""
from __future__ import annotations

import argparse
import itertools
import logging
import multiprocessing as mp
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from consensus.admin.progress_bars import track  # noqa: E402

SIZE = 100
KEYS = 1000
WARMUP = 1.0          # seconds of load before the window opens
_spawn = mp.get_context("spawn")


@dataclass
class Load:
    """What clients did in one measured window."""

    ops: int = 0
    errors: int = 0
    seconds: float = 0.0
    anomalies: int = 0    # PySyncObj's CRITICAL log lines during the run
    latencies: list[float] = field(default_factory=list)   # seconds, when recorded

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    def merge(self, other: "Load") -> "Load":
        return Load(self.ops + other.ops, self.errors + other.errors,
                    max(self.seconds, other.seconds), self.anomalies + other.anomalies,
                    self.latencies + other.latencies)

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Window:
    """Counts the operations that complete between `open` and `close` (the warm-up and
    the drain after the window do not count)."""

    def __init__(self, warmup: float, seconds: float) -> None:
        now = time.monotonic()
        self.start = now + warmup
        self.end = self.start + seconds

    def counts(self, t: float) -> bool:
        return self.start <= t < self.end

    def over(self, t: float) -> bool:
        return t >= self.end


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------------------ PySyncObj
def _pysyncobj_node(index: int, addresses: list[str], journal_dir: str | None,
                    tuning: dict, conn: Connection) -> None:
    """One PySyncObj node; answers commands from the parent on `conn`."""
    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf
    from pysyncobj.batteries import ReplDict

    critical = _Counter(logging.CRITICAL)
    logging.getLogger("pysyncobj").addHandler(critical)
    logging.getLogger("pysyncobj").propagate = False

    journal = os.path.join(journal_dir, f"node{index}.journal") if journal_dir else None
    conf = SyncObjConf(journalFile=journal, dynamicMembershipChange=False, **tuning)
    state = ReplDict()
    others = [a for i, a in enumerate(addresses) if i != index]
    node = SyncObj(addresses[index], others, conf=conf, consumers=[state])
    value = b"v" * (SIZE - 1) + b"\n"
    try:
        while True:
            cmd, arg = conn.recv()
            if cmd == "leader?":
                conn.send(node._isLeader())
            elif cmd == "anomalies":
                conn.send(critical.count)
            elif cmd == "load":
                clients, warmup, seconds = arg
                conn.send(_pysyncobj_load(state, value, clients, Window(warmup, seconds),
                                          FAIL_REASON.SUCCESS))
            elif cmd == "latency":
                conn.send(_pysyncobj_latency(state, value, *arg))
            else:
                break
    finally:
        node.destroy()


class _Counter(logging.Handler):
    """Counts log records at or above its level instead of printing them."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.count = 0

    def emit(self, record) -> None:
        self.count += 1


def _pysyncobj_load(state, value: bytes, clients: int, window: Window, success) -> Load:
    """`clients` writes in flight: each completion (on PySyncObj's thread) sends the next."""
    load = Load(seconds=window.end - window.start)
    done = threading.Event()
    in_flight = [clients]
    lock = threading.Lock()
    counter = iter(range(1 << 62))

    def submit() -> None:
        state.set(next(counter) % KEYS, value, callback=completed)

    def completed(result, error) -> None:
        now = time.monotonic()
        with lock:
            if window.counts(now):
                if error == success:
                    load.ops += 1
                else:
                    load.errors += 1
            if window.over(now):
                in_flight[0] -= 1
                if in_flight[0] == 0:
                    done.set()
                return
        submit()

    for _ in range(clients):
        submit()
    done.wait(window.end - time.monotonic() + 30)
    return load


def _pysyncobj_latency(state, value: bytes, ops: int, seconds: float) -> Load:
    """Up to `ops` writes one at a time, for at most `seconds`."""
    load = Load()
    start = time.monotonic()
    for i in range(ops):
        if time.monotonic() - start > seconds:
            break
        t0 = time.perf_counter()
        state.set(i % KEYS, value, sync=True, timeout=10)
        load.latencies.append(time.perf_counter() - t0)
        load.ops += 1
    load.seconds = time.monotonic() - start
    return load


class PySyncObjCluster:
    """Three PySyncObj node processes; the load runs in the leader's."""

    def __init__(self, journal: bool = False, **tuning) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pso-") if journal else None
        addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
        self._pipes: list[Connection] = []
        self._procs = []
        for i in range(3):
            parent, child = _spawn.Pipe()
            proc = _spawn.Process(target=_pysyncobj_node, daemon=True,
                                  args=(i, addresses, self._tmp and self._tmp.name, tuning,
                                        child))
            proc.start()
            self._pipes.append(parent)
            self._procs.append(proc)

    def leader(self, timeout: float = 30.0) -> Connection:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pipe in self._pipes:
                pipe.send(("leader?", None))
                if pipe.recv():
                    return pipe
            time.sleep(0.05)
        raise RuntimeError("PySyncObj elected no leader in %.0f s" % timeout)

    def load(self, clients: int, seconds: float) -> Load:
        leader = self.leader()
        leader.send(("load", (clients, WARMUP, seconds)))
        return leader.recv()

    def latency(self, ops: int, seconds: float) -> Load:
        leader = self.leader()
        leader.send(("latency", (ops, seconds)))
        return leader.recv()

    def anomalies(self) -> int:
        """CRITICAL log lines of all three nodes so far."""
        total = 0
        for pipe in self._pipes:
            pipe.send(("anomalies", None))
            total += pipe.recv()
        return total

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(("quit", None))
            except OSError:
                pass
        for proc in self._procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
        if self._tmp:
            self._tmp.cleanup()

    def __enter__(self) -> "PySyncObjCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------- farm
def _farm_clients(options: dict, clients: int, warmup: float, seconds: float, mode: str,
                  conn: Connection) -> None:
    """One client process, one FarmClient, 100-byte `append`s (one log entry each):

    - "async": `clients` closed-loop logical clients as writes in flight on the client's
      connection (`append_async`): each logical client sends its next write from the
      completion of its last one, so at most `clients` writes are in flight;
    - "threads": `clients` threads, each with a FarmClient calling `append` in a loop;
    - "latency": one caller doing `append` one after the other, each latency recorded.
    """
    from consensus.client import FarmClient, FarmError

    value = b"v" * (SIZE - 1) + b"\n"
    window = Window(warmup, seconds)
    if mode == "async":
        conn.send(async_clients(FarmClient(**options), [value], clients, window, seconds))
        return
    results = [Load(seconds=seconds) for _ in range(clients)]

    def run(load: Load) -> None:
        with FarmClient(**options) as client:
            while True:
                t0 = time.perf_counter()
                try:
                    client.append([value])
                    ok = True
                except FarmError:
                    ok = False
                t1 = time.perf_counter()
                now = time.monotonic()
                if window.over(now):
                    return
                if window.counts(now):
                    if ok:
                        load.ops += 1
                        if mode == "latency":
                            load.latencies.append(t1 - t0)
                    else:
                        load.errors += 1

    workers = [threading.Thread(target=run, args=(r,)) for r in results]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = Load(seconds=seconds)
    for r in results:
        total = total.merge(r)
    conn.send(total)


def async_clients(client, records: list[bytes], clients: int, window: Window,
                  seconds: float) -> Load:
    """`clients` logical closed-loop clients over `client.append_async`, each write one
    entry of `records` (callbacks run in the client's background thread, one at a time;
    benchmarks/partitions.py loads each partition with it too)."""
    load = Load(seconds=seconds)
    done = threading.Event()
    live = [clients]

    def send() -> None:
        client.append_async(records).add_done_callback(completed)

    def completed(future) -> None:
        now = time.monotonic()
        if window.counts(now):
            if future.exception() is None:
                load.ops += 1
            else:
                load.errors += 1
        if window.over(now):
            live[0] -= 1
            if live[0] == 0:
                done.set()
            return
        send()

    with client:
        for _ in range(clients):
            send()
        done.wait(window.end - time.monotonic() + 60)
    return load


class FarmStartError(Exception):
    """The farm elected no leader in time (its node logs are kept and named)."""


class FarmBench:
    """A LocalCluster of 3 node processes and the client processes that load it."""

    def __init__(self, fsync: str, wire: str) -> None:
        from consensus.client import FarmError
        from consensus.torture import LocalCluster

        self._cluster = LocalCluster(nodes=3, wire=wire, fsync=fsync)
        self.farm = self._cluster.__enter__()
        try:
            self.farm.wait_for_leader(timeout=30)
        except FarmError as exc:
            kept = tempfile.mkdtemp(prefix="raft-throughput-logs-")
            for node_id in self.farm.node_ids:
                shutil.copy(self.farm.log_path(node_id), kept)
            self._cluster.__exit__(None, None, None)
            raise FarmStartError(f"{exc} (node logs copied to {kept})") from None
        except BaseException:
            self._cluster.__exit__(None, None, None)
            raise
        self.options = dict(endpoints=self.farm.endpoints, cluster=self._cluster_name(),
                            username=getattr(self.farm, "username", "farm"),
                            password=getattr(self.farm, "password", None), wire=wire)

    def _cluster_name(self) -> str:
        return getattr(self.farm, "cluster", "farm")

    def run(self, clients: int, procs: int, seconds: float, mode: str) -> Load:
        procs = max(1, min(procs, clients))
        shares = [clients // procs + (i < clients % procs) for i in range(procs)]
        pipes, workers = [], []
        for share in shares:
            parent, child = _spawn.Pipe()
            p = _spawn.Process(target=_farm_clients, daemon=True,
                               args=(self.options, share, WARMUP, seconds, mode, child))
            p.start()
            pipes.append(parent)
            workers.append(p)
        total = Load(seconds=seconds)
        try:
            for pipe in pipes:
                total = total.merge(pipe.recv())
        finally:
            for p in workers:
                p.join(30)
                if p.is_alive():
                    p.kill()
                    p.join()
        return total

    def close(self) -> None:
        self._cluster.__exit__(None, None, None)

    def __enter__(self) -> "FarmBench":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------- main
PYSYNCOBJ_TUNINGS: dict[str, dict] = {
    "pysyncobj defaults": {},
    "pysyncobj batch 0.5 ms": {"appendEntriesPeriod": 0.0005},
    "pysyncobj unbatched": {"appendEntriesUseBatch": False},
}
FARM_FSYNC = {"farm never": "never", "farm batch": "batch"}


@dataclass
class Row:
    system: str
    throughput: Load
    latency: Load

    @property
    def p50_ms(self) -> float:
        return self.latency.percentile(50) * 1e3    # nan when not measured

    @property
    def p99_ms(self) -> float:
        return self.latency.percentile(99) * 1e3


def latency_seconds(args: argparse.Namespace) -> float:
    """How long the single client writes (both sides alike)."""
    return max(2.0, args.seconds / 2)


def measure(system: str, args: argparse.Namespace) -> Row:
    if system in PYSYNCOBJ_TUNINGS:
        with PySyncObjCluster(journal=args.pysyncobj_journal,
                              **PYSYNCOBJ_TUNINGS[system]) as pso:
            load = pso.load(args.clients, args.seconds)
            latency = pso.latency(args.latency_ops, latency_seconds(args))
            load.anomalies = pso.anomalies()
            return Row(system, load, latency)
    for attempt in (1, 2):
        try:
            return _measure_farm(system, args)
        except FarmStartError as exc:
            print(f"{system}: {exc}; {'again' if attempt == 1 else 'giving up'}", flush=True)
    raise SystemExit(f"{system}: the farm did not start twice; see the messages above")


def _measure_farm(system: str, args: argparse.Namespace) -> Row:
    with FarmBench(FARM_FSYNC[system], args.wire) as farm:
        load = farm.run(args.clients, args.client_procs, args.seconds, args.client_mode)
        latency = farm.run(1, 1, latency_seconds(args), "latency")
        return Row(system, load, latency)


def best(rows: list[Row]) -> Row:
    """The round with the highest rate; the latency of the round with the lowest p50."""
    top = max(rows, key=lambda r: r.throughput.rate)
    fastest = min(rows, key=lambda r: r.p50_ms)
    return Row(top.system, top.throughput, fastest.latency)


def report(rows: dict[str, Row], args: argparse.Namespace) -> str:
    pso = [r for name, r in rows.items() if name in PYSYNCOBJ_TUNINGS]
    base_rate = max((r.throughput.rate for r in pso), default=0.0)
    base_p50 = min((r.p50_ms for r in pso), default=float("nan"))
    lines = [f"3 nodes, {SIZE}-byte writes, {args.clients} clients, {args.seconds:g} s "
             f"windows, best of {args.rounds} round(s); wire {args.wire}", "",
             "| system | commits/s | errors | vs best pysyncobj | 1-client p50 ms | "
             "p99 ms | p50 vs best pysyncobj |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, row in rows.items():
        rate = f"{row.throughput.rate / base_rate:.2f}x" if base_rate else "-"
        measured = bool(row.latency.latencies)
        p50 = f"{row.p50_ms / base_p50:.2f}x" if pso and measured else "-"
        p50_ms, p99_ms = ((f"{row.p50_ms:.3f}", f"{row.p99_ms:.3f}") if measured
                          else ("-", "-"))
        lines.append(f"| {name} | {row.throughput.rate:,.0f} | {row.throughput.errors} | "
                     f"{rate} | {p50_ms} | {p99_ms} | {p50} |")
    anomalies = sum(r.throughput.anomalies for r in pso)
    if pso:
        lines += ["", f"PySyncObj CRITICAL log lines (truncating applied entries): "
                      f"{anomalies}"]
    if base_rate and set(FARM_FSYNC) <= set(rows):
        never, batch = rows["farm never"], rows["farm batch"]
        goals = [("farm never >= 3x best pysyncobj", never.throughput.rate >= 3 * base_rate),
                 ("farm batch >= 1x best pysyncobj", batch.throughput.rate >= base_rate),
                 ("farm never 1-client p50 <= 0.3 ms", never.p50_ms <= 0.3)]
        lines += [""] + [f"- goal {g}: {'met' if ok else 'NOT met'}" for g, ok in goals]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="measured window per run (after a 1 s warm-up)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent writers")
    parser.add_argument("--client-procs", type=int, default=2,
                        help="processes the farm's logical clients are spread over")
    parser.add_argument("--client-mode", choices=("async", "threads"), default="async",
                        help="async: logical clients are writes in flight on one "
                             "connection per process (append_async); threads: one thread "
                             "and FarmClient each (append)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds (systems alternate; the best round counts)")
    parser.add_argument("--latency-ops", type=int, default=5000,
                        help="at most this many single-client writes for PySyncObj's "
                             "latency (and at most max(2, seconds/2) seconds, as the farm)")
    parser.add_argument("--wire", default="garlicfarm", choices=("garlicfarm", "marker", "jraft"))
    parser.add_argument("--only", choices=("farm", "pysyncobj"),
                        help="measure one side only (no ratios)")
    parser.add_argument("--pysyncobj-journal", action="store_true",
                        help="PySyncObj with its mmap journal file instead of in memory")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or args.rounds < 1 or args.latency_ops < 1:
        parser.error("--clients, --seconds, --rounds and --latency-ops must be positive")
    systems = [*PYSYNCOBJ_TUNINGS, *FARM_FSYNC]
    if args.only:
        systems = [s for s in systems if s.startswith(args.only)]
    results: dict[str, list[Row]] = {s: [] for s in systems}
    for r, system in track(itertools.product(range(args.rounds), systems), "raft_throughput",
                           args.rounds * len(systems)):
        row = measure(system, args)
        results[system].append(row)
        print(f"round {r + 1} {system}: {row.throughput.rate:,.0f} commits/s "
              f"({row.throughput.errors} errors), p50 {row.p50_ms:.3f} ms, "
              f"p99 {row.p99_ms:.3f} ms", flush=True)
    print()
    print(report({s: best(rows) for s, rows in results.items()}, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
