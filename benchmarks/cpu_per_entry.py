"""CPU per entry of a farm's nodes at a fixed write rate: the code's cost per entry,
apart from batching and from the machine's load.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/cpu_per_entry.py [--layout 3x3]
        [--farm placed|local] [--rate 100] [--seconds 10] [--rounds 3] [--idle 5]

Under a binding CPU quota (scale_out.py) the farm runs as fast as it can, so its CPU per
entry depends on how many entries each turn, append and fsync carries, which depends on
how the shared machine schedules the clients and the nodes: a quieter machine can spend
more per entry. Here every partition gets `--rate` entries a second (100 records x
100 B each) from an open-loop client process, a rate far below what the farm sustains,
so each entry travels mostly alone; the nodes' CPU seconds (user + system, from /proc)
over the window, less their idle CPU over the same time (an unloaded window first),
divided by the entries committed, is what the code spends per entry. Compare two
checkouts by running this from each (PYTHONPATH), alternating, and reading the medians.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scale_out import FARMS, Layout, parse_layouts  # noqa: E402

_spawn = mp.get_context("spawn")


def _open_loop(options: dict[str, Any], rate: float, conn: Connection) -> None:
    """Appends an entry every 1/rate s (not waiting for the last); "ready" once one is
    committed; then counts the entries sent in the parent's window that commit."""
    from consensus.client import FarmClient

    entry = [b"v" * 100] * 100
    with FarmClient(**options, timeout=30.0) as client:
        client.append(entry)
        conn.send("ready")
        start, end = conn.recv()
        futures = []
        due = time.monotonic()
        while due < end:
            time.sleep(max(0.0, due - time.monotonic()))
            if due >= start:
                futures.append(client.append_async(entry))
            else:
                client.append_async(entry)
            due += 1 / rate
        committed = sum(1 for f in futures if f.exception(timeout=60) is None)
        conn.send({"entries": committed, "errors": len(futures) - committed})


def node_cpu(pids: dict[int, int]) -> dict[int, float]:
    out = {}
    for node, pid in pids.items():
        times = psutil.Process(pid).cpu_times()
        out[node] = times.user + times.system
    return out


def window(farm, pids: dict[int, int], layout: Layout, rate: float, seconds: float,
           idle_rate: float) -> tuple[float, int, int]:
    """(node CPU-us per entry less idle, entries, errors) of one loaded window."""
    pipes, procs = [], []
    try:
        for partition in range(layout.partitions):
            parent, child = _spawn.Pipe()
            proc = _spawn.Process(target=_open_loop, daemon=True,
                                  args=(farm.client_options(partition), rate, child))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        for pipe in pipes:
            if not pipe.poll(120):
                raise RuntimeError("a client committed no entry in 120 s")
            pipe.recv()
        start = time.monotonic() + 2.0
        end = start + seconds
        for pipe in pipes:
            pipe.send((start, end))
        time.sleep(max(0.0, start - time.monotonic()))
        before = node_cpu(pids)
        time.sleep(max(0.0, end - time.monotonic()))
        after = node_cpu(pids)
        counts = [pipe.recv() for pipe in pipes if pipe.poll(120)]
        if len(counts) != len(pipes):
            raise RuntimeError("a client did not report its window in 120 s")
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    entries = sum(c["entries"] for c in counts)
    cpu = sum(after[n] - before[n] for n in after) - idle_rate * seconds
    return cpu / max(1, entries) * 1e6, entries, sum(c["errors"] for c in counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--farm", choices=sorted(FARMS), default="placed")
    parser.add_argument("--layout", type=parse_layouts, default=parse_layouts("3x3"))
    parser.add_argument("--rate", type=float, default=100.0,
                        help="entries per second per partition (1-2,000)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not 1 <= args.rate <= 2000 or not 1 <= args.seconds <= 600 \
            or not 1 <= args.rounds <= 100 or not 1 <= args.idle <= 600:
        parser.error("--rate 1-2,000, --seconds 1-600, --rounds 1-100, --idle 1-600")
    layout = args.layout[0]
    farm = FARMS[args.farm](layout)
    try:
        pids = farm.node_pids()
        before = node_cpu(pids)
        time.sleep(args.idle)
        idle_rate = sum(node_cpu(pids)[n] - before[n] for n in pids) / args.idle
        print(f"{layout.nodes} nodes x {layout.partitions} partitions ({args.farm}), "
              f"{args.rate:g} entries/s per partition; idle: {idle_rate:.1%} of a CPU "
              f"(all nodes); load {os.getloadavg()[0]:.1f}", flush=True)
        figures = []
        for number in range(args.rounds):
            us, entries, errors = window(farm, pids, layout, args.rate, args.seconds,
                                         idle_rate)
            figures.append(us)
            print(f"  round {number + 1}: {us:,.0f} node CPU-us per entry beyond idle, "
                  f"{entries} entries, {errors} errors, load {os.getloadavg()[0]:.1f}",
                  flush=True)
        print(f"median {statistics.median(figures):,.0f} us per entry; idle "
              f"{idle_rate:.1%}")
    finally:
        farm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
