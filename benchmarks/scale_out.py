"""Scale-out on one machine, honestly: every node process of a farm gets the same CPU quota
(a cgroup each), low enough that the quota binds rather than the shared machine; then
each node stands for a machine of that speed.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_out.py [--nodes 3] [--partitions 1,3,6]
        [--farm local|placed] [--layouts 3x3,6x6] [--idle 5]
        [--quotas 20,50,unlimited] [--period-ms 10] [--rounds 2] [--seconds 10]
        [--writers 64] [--records 100] [--value-bytes 100] [--json FILE]
        [--load client|spark] [--spark-rows 20000]

As root, with cgroup v1 (`cpu.cfs_quota_us`, `cpuacct.usage`) or v2 (`cpu.max`,
`cpu.stat`): benchmarks/cpu_cgroups.py makes one group per node and removes them on exit,
whatever ends the run. Where it cannot (not root, no cpu controller) the run prints why,
measures nothing and exits 0.

The load, per partition: one client process (outside the quotas) with `--writers`
closed-loop writers on one FarmClient, each appending an entry of `--records` records of
`--value-bytes` bytes and sending its next when that one is committed. `--load spark`
instead: one Spark process (local[2], outside the quotas) streaming rows of
`--value-bytes` (keyed where the farm has several partitions) into the whole farm with
`format("garlicfarm")`, `--spark-rows` rows a micro-batch, the next when the sink has
committed the last (benchmarks/spark_load.py); its figures are rows, not entries (L and
F: CPU per committed row). Each window starts
once every client has committed an entry and warmed up; rounds run the quotas in rotating
order. Per quota: entries/s and records/s (median round), the ratio to the unlimited run
(median of the rounds' own ratios) and, from each node's cgroup, CPU seconds per
committed entry: L, the leader's, and F, a follower's (the mean of the followers). A node
that leads one of three groups still follows the other two, so partitions over 3 nodes
spend (L + 2F) / 3 of each node per entry instead of the single leader's L: their gain is
bounded by 3L / (L + 2F), printed per quota (the one where the quota binds is the bound
that counts).

`--partitions 1,3,6` runs one farm per count, in that order, and then compares them per
quota: each count's entries/s, its gain on the first (median of the rounds' own ratios)
and the first's bound. Every partition is loaded at once, by its own client process;
L and F are only attributed on one partition (with several, a node's CPU is its
leaderships' and followerships' together). The farm comes from a factory (`FARMS`,
`--farm`): `local` is LocalCluster's node processes on loopback, each hosting every
partition, its leaders spread by the balancer; another farm plugs in as a `FarmFactory`
returning a `FarmUnderTest` (its node processes, each partition's leader, the FarmClient
settings of a writer to a partition). `placed` (benchmarks/placed_farm.py) gives each
partition 3 of the nodes as members (the nodes' own `--replicas 3`), spread so that with
as many partitions as nodes each node is a member of 3 and leads one: `--farm placed --layouts 3x3,6x6` compares 6
machines with 3 at the same replication factor. `--idle` first measures each node's CPU
with no load.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Protocol

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cpu_cgroups import Cgroups, CpuGroups, find_cgroups  # noqa: E402
from spark_load import spark_writer  # noqa: E402

_spawn = mp.get_context("spawn")


@dataclass(frozen=True)
class Layout:
    nodes: int
    partitions: int


@dataclass(frozen=True)
class Load:
    writers: int          # closed-loop writers per partition
    records: int          # records per entry
    value_bytes: int
    warmup: float
    seconds: float
    kind: str = "client"  # "client": FarmClient writers per partition; "spark": the sink
    spark_rows: int = 20_000  # rows per micro-batch of the Spark load

    @property
    def unit(self) -> str:
        return "rows" if self.kind == "spark" else "entries"

    @property
    def records_per_unit(self) -> int:
        return 1 if self.kind == "spark" else self.records


class FarmUnderTest(Protocol):
    """What the harness needs of a running farm."""

    def node_pids(self) -> dict[int, int]:
        """node id -> the pid of its process."""

    def leaders(self) -> dict[int, int]:
        """partition -> the node id leading it now."""

    def client_options(self, partition: int) -> dict[str, Any]:
        """FarmClient keyword arguments of a writer to `partition` (picklable)."""

    def close(self) -> None: ...


FarmFactory = Callable[[Layout], FarmUnderTest]


class LocalGroupsFarm:
    """`layout.nodes` node processes on loopback, each hosting `layout.partitions` Raft
    groups (LocalCluster, fsync per batch as the farm's default), started and waited for
    until every partition has a leader and the balancer has spread them (no node leads
    more than its share, ceil(partitions / nodes); 60 s at most, then as they are)."""

    def __init__(self, layout: Layout) -> None:
        from consensus.torture import LocalCluster
        self.layout = layout
        self._cluster = LocalCluster(nodes=layout.nodes, fsync="batch",
                                     partitions=layout.partitions)
        self._cluster.__enter__()
        try:
            share = -(-layout.partitions // layout.nodes)
            deadline = time.monotonic() + 60
            while max(Counter(self.leaders().values()).values()) > share \
                    and time.monotonic() < deadline:
                time.sleep(0.5)      # the balancer moves leaderships every 0.5-2 s
        except BaseException:
            self.close()
            raise

    def node_pids(self) -> dict[int, int]:
        pids = {node: self._cluster.pid(node) for node in self._cluster.node_ids}
        gone = [node for node, pid in pids.items() if pid is None]
        if gone:
            raise RuntimeError(f"nodes {gone} exited:\n{self._cluster.describe_nodes()}")
        return pids  # type: ignore[return-value]

    def leaders(self) -> dict[int, int]:
        return {partition: self._cluster.wait_for_leader(timeout=30, partition=partition)
                for partition in range(self.layout.partitions)}

    def client_options(self, partition: int) -> dict[str, Any]:
        return dict(endpoints=self._cluster.endpoints, cluster=self._cluster.cluster,
                    username=self._cluster.username, password=self._cluster.password,
                    partition=partition)

    def close(self) -> None:
        self._cluster.__exit__(None, None, None)


from placed_farm import PlacedFarm  # noqa: E402

FARMS: dict[str, FarmFactory] = {"local": LocalGroupsFarm, "placed": PlacedFarm}


def _writer(options: dict[str, Any], load: Load, conn: Connection) -> None:
    """One client process loading one partition: ready once an entry is committed, then
    `load.writers` closed-loop writers; sends back the entries committed (and the writes
    failed) within the window the parent sends."""
    from consensus.client import FarmClient

    entry = [b"v" * load.value_bytes] * load.records
    counts: dict[str, float] = {"entries": 0, "errors": 0, "cpu": 0.0}
    with FarmClient(**options, timeout=30.0) as client:
        client.append(entry)
        conn.send("ready")
        start, end = conn.recv()
        live = [load.writers]
        done = threading.Event()

        def stop_one() -> None:
            live[0] -= 1
            if live[0] == 0:
                done.set()

        def send() -> None:
            try:
                client.append_async(entry).add_done_callback(completed)
            except Exception:   # the client closed under us: this writer stops, counted
                counts["errors"] += 1
                stop_one()

        def completed(future) -> None:
            now = time.monotonic()
            if start <= now < end:
                counts["entries" if future.exception() is None else "errors"] += 1
            if now >= end:
                stop_one()
            else:
                send()

        for _ in range(load.writers):     # the warm-up, then the window
            send()
        time.sleep(max(0.0, start - time.monotonic()))
        began = time.process_time()
        time.sleep(max(0.0, end - time.monotonic()))
        counts["cpu"] = time.process_time() - began     # the client's own, in the window
        if not done.wait(end - time.monotonic() + 60):
            counts["errors"] += live[0]
    conn.send(counts)


@dataclass
class Window:
    """One measured window at one quota."""
    quota: float | None
    seconds: float
    entries: int
    errors: int
    cpu: dict[int, float]          # node id -> CPU seconds in the window
    client_cpu: float              # the client processes' CPU seconds in the window
    leaders: dict[int, int]        # partition -> leader, at the start
    leaders_moved: bool
    load_average: float = 0.0      # the machine's (1 min), at the window's end
    unit: str = "entries"          # what `entries` counts: "rows" under the Spark load

    @property
    def rate(self) -> float:
        return self.entries / self.seconds

    def leader_follower(self) -> tuple[float, float] | None:
        """(L, F): CPU seconds per committed entry of the (one) leader and of a follower
        (the followers' mean); None where it is not attributable (no entries, leadership
        moved, or several partitions)."""
        if self.entries == 0 or self.leaders_moved or len(self.leaders) != 1:
            return None
        leader = next(iter(self.leaders.values()))
        followers = [cpu for node, cpu in self.cpu.items() if node != leader]
        if not followers:
            return None
        return self.cpu[leader] / self.entries, statistics.mean(followers) / self.entries


def measure(farm: FarmUnderTest, groups: CpuGroups, quota: float | None, period_us: int,
            layout: Layout, load: Load) -> Window:
    """One window at `quota`: every partition loaded by its own client process."""
    groups.quota(quota, period_us)
    leaders = farm.leaders()
    pipes, procs = [], []
    if load.kind == "spark":        # one query, routed over every partition by the sink
        loads = [(spark_writer, (farm.client_options(0), load.spark_rows, load.value_bytes,
                                 layout.partitions > 1))]
    else:
        loads = [(_writer, (farm.client_options(partition), load))
                 for partition in range(layout.partitions)]
    try:
        for target, args in loads:
            parent, child = _spawn.Pipe()
            proc = _spawn.Process(target=target, daemon=True, args=(*args, child))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        for pipe, proc in zip(pipes, procs):
            if not pipe.poll(120):
                raise RuntimeError(f"a client process (pid {proc.pid}) committed nothing "
                                   "in 120 s")
            if (said := pipe.recv()) != "ready":
                raise RuntimeError(str(said))
        start = time.monotonic() + load.warmup
        end = start + load.seconds
        for pipe in pipes:
            pipe.send((start, end))
        time.sleep(max(0.0, start - time.monotonic()))
        before = groups.usage()
        time.sleep(max(0.0, end - time.monotonic()))
        after = groups.usage()
        counts = []
        for pipe in pipes:
            if not pipe.poll(180):
                raise RuntimeError("a client process did not report its window in 180 s")
            if not isinstance(said := pipe.recv(), dict):
                raise RuntimeError(str(said))
            counts.append(said)
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return Window(quota, load.seconds, sum(c["entries"] for c in counts),
                  sum(c["errors"] for c in counts),
                  {node: after[node] - before[node] for node in after},
                  sum(c["cpu"] for c in counts), leaders,
                  farm.leaders() != leaders, os.getloadavg()[0], load.unit)


def run(factory: FarmFactory, layout: Layout, load: Load, quotas: list[float | None],
        period_us: int, rounds: int, where: Cgroups, idle: float = 0.0) -> list[Window]:
    """Every quota `rounds` times (rotating order) on one farm whose every node process is
    in a CPU group of its own; the groups are removed before this returns. `idle`: first
    a window of that many seconds without load (each node's idle CPU, printed)."""
    farm = factory(layout)
    try:
        if hasattr(farm, "describe"):
            print(f"  {farm.describe()}", flush=True)
        pids = farm.node_pids()
        with CpuGroups(where, f"garlicfarm-scale-{os.getpid()}", sorted(pids)) as groups:
            for node, pid in pids.items():
                groups.add(node, pid)
            if idle:
                before = groups.usage()
                time.sleep(idle)
                after = groups.usage()
                print("  idle, CPU % per node: " + ", ".join(
                    f"n{n} {(after[n] - before[n]) / idle:.1%}" for n in sorted(after)),
                    flush=True)
            windows = []
            for number in range(rounds):
                shift = number % len(quotas)
                for quota in quotas[shift:] + quotas[:shift]:
                    windows.append(measure(farm, groups, quota, period_us, layout, load))
                    print(f"  round {number + 1}: {describe(windows[-1])}", flush=True)
            groups.quota(None)
            return windows
    finally:
        farm.close()


def quota_name(quota: float | None) -> str:
    return "unlimited" if quota is None else f"{quota:.0%}"


def describe(window: Window) -> str:
    cpu = ", ".join(f"n{node} {s:.2f}" for node, s in sorted(window.cpu.items()))
    moved = " (leadership moved)" if window.leaders_moved else ""
    return (f"{quota_name(window.quota)}: {window.rate:,.0f} {window.unit}/s, "
            f"{window.errors} errors, CPU s {cpu}, clients {window.client_cpu:.2f}, load "
            f"{window.load_average:.1f}{moved}")


def bound(leader: float, follower: float) -> float:
    """The most that partitions over 3 nodes can gain on one group (module docstring)."""
    return 3 * leader / (leader + 2 * follower)


def report(windows: list[Window], quotas: list[float | None], load: Load) -> list[str]:
    each = "row" if load.unit == "rows" else "entry"
    lines = [f"  {'quota':<10} {f'{load.unit}/s':>10} {'records/s':>11} {'vs unlimited':>13} "
             f"{f'L us/{each}':>11} {f'F us/{each}':>11} {'3L/(L+2F)':>10}"]
    by_quota = {q: [w for w in windows if w.quota == q] for q in quotas}
    unlimited = by_quota.get(None)
    for quota, mine in by_quota.items():
        rate = statistics.median(w.rate for w in mine)
        ratio = "-"
        if unlimited and quota is not None:
            ratios = [w.rate / u.rate for w, u in zip(mine, unlimited) if u.rate]
            ratio = f"{statistics.median(ratios):.2f}x" if ratios else "-"
        shares = [s for s in (w.leader_follower() for w in mine) if s is not None]
        if shares:
            leader = statistics.median(s[0] for s in shares)
            follower = statistics.median(s[1] for s in shares)
            places = 1 if load.unit == "rows" else 0      # a row costs a few us
            figures = (f"{leader * 1e6:>11.{places}f} {follower * 1e6:>11.{places}f} "
                       f"{bound(leader, follower):>10.2f}")
        else:
            figures = f"{'-':>11} {'-':>11} {'-':>10}"
        lines.append(f"  {quota_name(quota):<10} {rate:>10,.0f} {rate * load.records_per_unit:>11,.0f} "
                     f"{ratio:>13} {figures}")
    return lines


def parse_quotas(text: str) -> list[float | None]:
    """'20,50,unlimited' -> [0.2, 0.5, None] (percent of one CPU per node)."""
    quotas: list[float | None] = []
    for item in text.split(","):
        item = item.strip().rstrip("%")
        if item == "unlimited":
            quotas.append(None)
            continue
        try:
            percent = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--quotas: {item!r} is neither a percent of a CPU nor 'unlimited'") from None
        if not 1 <= percent <= 100 * (os.cpu_count() or 1):
            raise argparse.ArgumentTypeError(
                f"--quotas: {percent:g}% is outside 1% to {100 * (os.cpu_count() or 1)}% "
                "(the machine's CPUs)")
        quotas.append(percent / 100)
    if len(set(quotas)) != len(quotas):
        raise argparse.ArgumentTypeError(f"--quotas: {text!r} names a quota twice")
    return quotas


def compare(layouts: list[Layout], results: dict[Layout, list[Window]],
            quotas: list[float | None]) -> list[str]:
    """Per quota, each layout's entries/s and its gain on the first layout (median of the
    rounds' own ratios), beside the bound of the first layout's L and F."""
    first = layouts[0]
    lines = [f"  {'quota':<10} " + " ".join(f"{f'{l.partitions}p/{l.nodes}n':>16}"
                                             for l in layouts) + f" {'3L/(L+2F)':>10}"]
    for quota in quotas:
        base = [w for w in results[first] if w.quota == quota]
        cells = []
        for layout in layouts:
            mine = [w for w in results[layout] if w.quota == quota]
            rate = statistics.median(w.rate for w in mine)
            gains = [w.rate / b.rate for w, b in zip(mine, base) if b.rate]
            gain = f" {statistics.median(gains):.2f}x" if layout != first and gains else ""
            cells.append(f"{f'{rate:,.0f}{gain}':>16}")
        shares = [s for s in (w.leader_follower() for w in base) if s is not None]
        limit = bound(statistics.median(s[0] for s in shares),
                      statistics.median(s[1] for s in shares)) if shares else None
        lines.append(f"  {quota_name(quota):<10} " + " ".join(cells)
                     + f" {'-' if limit is None else f'{limit:.2f}':>10}")
    return lines


def parse_layouts(text: str) -> list[Layout]:
    """'3x3,6x6' -> [Layout(3, 3), Layout(6, 6)] (nodes x partitions)."""
    layouts = []
    for item in text.split(","):
        nodes, _, partitions = item.strip().partition("x")
        try:
            layout = Layout(int(nodes), int(partitions))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--layouts: {item!r} is not NODESxPARTITIONS (e.g. 3x3,6x6)") from None
        if not 1 <= layout.nodes <= 64 or not 1 <= layout.partitions <= 1000:
            raise argparse.ArgumentTypeError(
                f"--layouts: {item!r}: 1 to 64 nodes and 1 to 1,000 partitions")
        layouts.append(layout)
    if len(set(layouts)) != len(layouts):
        raise argparse.ArgumentTypeError(f"--layouts: {text!r} names a layout twice")
    return layouts


def parse_counts(text: str) -> list[int]:
    """'1,3,6' -> [1, 3, 6] (partition counts, each 1 to 1,000)."""
    try:
        counts = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--partitions: {text!r} is not a comma-separated list of counts") from None
    if not all(1 <= c <= 1000 for c in counts) or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(
            f"--partitions: {text!r}: each count 1 to 1,000, none twice")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--farm", choices=sorted(FARMS), default="local")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=parse_counts, default=[1],
                        help="partition counts, one farm each, in this order (e.g. 1,3,6)")
    parser.add_argument("--layouts", type=parse_layouts,
                        help="NODESxPARTITIONS farms, one each, in this order (e.g. 3x3,6x6 "
                             "with --farm placed); instead of --nodes and --partitions")
    parser.add_argument("--idle", type=float, default=0.0,
                        help="seconds of an unloaded window first, per farm (its idle CPU)")
    parser.add_argument("--quotas", type=parse_quotas, default=parse_quotas("20,50,unlimited"),
                        help="CPU quota of each node process, percent of one CPU")
    parser.add_argument("--period-ms", type=float, default=10.0,
                        help="the quota's period: each node gets its share of every period "
                             "(1-1000 ms; the kernel's default is 100)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--writers", type=int, default=64, help="closed-loop writers per partition")
    parser.add_argument("--records", type=int, default=100, help="records per entry")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--json", help="also write the windows and the report to this file")
    parser.add_argument("--load", choices=("client", "spark"), default="client",
                        help="client: FarmClient writers per partition; spark: one Spark "
                             "query streaming rows into the farm with the raft sink")
    parser.add_argument("--spark-rows", type=int, default=20_000,
                        help="rows per micro-batch of --load spark (1,000-1,000,000)")
    args = parser.parse_args(argv)
    for name, least in (("nodes", 1), ("rounds", 1), ("writers", 1), ("records", 1),
                        ("value_bytes", 1)):
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}")
    if not 1 <= args.seconds <= 600 or not 0 <= args.warmup <= 60:
        parser.error("--seconds must be 1-600 and --warmup 0-60")
    if not 1 <= args.period_ms <= 1000:
        parser.error("--period-ms must be 1 to 1000")
    period_us = int(args.period_ms * 1000)
    for quota in args.quotas:   # the kernel grants at least 1 ms a period: no lower quota
        if quota is not None and quota * period_us < 1_000:
            parser.error(f"--quotas {quota:.0%} at --period-ms {args.period_ms:g} is less than "
                         "the 1 ms a period the kernel grants at least (it would run at "
                         f"{1_000 / period_us:.0%}): raise --period-ms to "
                         f"{math.ceil(1 / quota)} or more")
    if args.load == "spark" and args.farm != "local":
        parser.error("--load spark needs --farm local: the sink routes rows over every "
                     "partition of the farm, and the placed farm's group 0 is kept unloaded")
    if not 1_000 <= args.spark_rows <= 1_000_000:
        parser.error("--spark-rows must be 1,000 to 1,000,000")
    if args.records * args.value_bytes > 16 << 20:
        parser.error("--records x --value-bytes must stay within 16 MiB an entry")

    where = find_cgroups()
    if isinstance(where, str):
        print(f"scale_out: skipped, no CPU quotas here: {where}")
        return 0
    if not 0 <= args.idle <= 600:
        parser.error("--idle must be 0-600 s")
    layouts = args.layouts or [Layout(args.nodes, count) for count in args.partitions]
    load = Load(args.writers, args.records, args.value_bytes, args.warmup, args.seconds,
                args.load, args.spark_rows)
    what = (f"a Spark query of {load.spark_rows:,} rows x {load.value_bytes} B a "
            "micro-batch into the farm" if load.kind == "spark" else
            f"entries of {load.records} records x {load.value_bytes} B, {load.writers} "
            "writers per partition")
    # a SIGTERM runs the finally blocks too: the cgroups and the farm go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    header = (f"scale-out: farm {args.farm}, "
              f"{', '.join(f'{l.nodes} nodes x {l.partitions} partitions' for l in layouts)}; "
              f"{what}; "
              f"{args.rounds} rounds of {load.seconds:g} s; quota period "
              f"{args.period_ms:g} ms, cgroup v{where.version}; {os.cpu_count()} CPUs")
    print(header, flush=True)
    lines = [header]
    results: dict[Layout, list[Window]] = {}
    for layout in layouts:
        print(f"{layout.partitions} partition(s) on {layout.nodes} nodes:", flush=True)
        results[layout] = run(FARMS[args.farm], layout, load, args.quotas, period_us,
                              args.rounds, where, args.idle)
        lines += [f"{layout.partitions} partition(s) on {layout.nodes} nodes",
                  *report(results[layout], args.quotas, load)]
    if len(layouts) > 1:
        lines += [f"{load.unit}/s by layout (gain on the first), and the first's bound",
                  *compare(layouts, results, args.quotas)]
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"lines": lines, "windows": {
                f"{layout.nodes}x{layout.partitions}": [asdict(w) for w in results[layout]]
                for layout in layouts}}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
