"""Idle cost of a farm at replication factor 3 on 6 nodes (issue 28): the set-up time,
and the CPU-seconds per second, RSS and groups of each node process once the farm is
idle, of benchmarks/placed_farm.py's `PlacedFarm` - native placement (`--replicas 3`)
on this checkout, or the removal-based one of an older checkout (every node hosts
every group, the extra members removed per partition afterwards; the removed node
keeps a dormant group).

Run it with the measured checkout on PYTHONPATH (the node processes import it) and its
benchmarks directory, e.g. main's removal-based farm against this branch's native one:

    cd /work/main && PYTHONPATH=$PWD python BRANCH/benchmarks/placed_idle.py \
        --benchmarks /work/main/benchmarks
    cd BRANCH && PYTHONPATH=$PWD python benchmarks/placed_idle.py

One JSON line: `setup_s` (start to every loaded partition led on its place), per node
`groups` (the groups its `partitions` call lists: dormant ones included), `cpu` (CPU-s
per wall second over --window, after --settle idle seconds) and `rss_mib`, and the
1-minute load average (the machine is shared: read the CPU figures with it).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from types import SimpleNamespace

from idle_groups import cpu_seconds, rss_mib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmarks", default=os.path.dirname(os.path.abspath(__file__)),
                        help="the directory placed_farm.py is imported from")
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=6, help="loaded partitions")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="idle seconds before the window (groups quiesce)")
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    if not 3 <= args.nodes <= 12 or not 1 <= args.partitions <= 64:
        parser.error("--nodes 3 to 12, --partitions 1 to 64")
    sys.path.insert(0, args.benchmarks)
    placed_farm = importlib.import_module("placed_farm")
    started = time.monotonic()
    farm = placed_farm.PlacedFarm(SimpleNamespace(nodes=args.nodes, partitions=args.partitions))
    try:
        setup = time.monotonic() - started
        cluster = farm._cluster
        with cluster.client(timeout=10) as client:
            groups = {n: len(client.partitions(cluster.endpoint_of(n))["partitions"])
                      for n in cluster.node_ids}
        time.sleep(args.settle)
        pids = farm.node_pids()
        before, t0 = {n: cpu_seconds(p) for n, p in pids.items()}, time.monotonic()
        time.sleep(args.window)
        took = time.monotonic() - t0
        cpu = {n: round((cpu_seconds(p) - before[n]) / took, 4) for n, p in pids.items()}
        print(json.dumps({
            "placed_farm": os.path.abspath(placed_farm.__file__), "nodes": args.nodes,
            "partitions": args.partitions, "setup_s": round(setup, 1), "groups": groups,
            "cpu": cpu, "cpu_total": round(sum(cpu.values()), 4),
            "rss_mib": {n: round(rss_mib(p), 1) for n, p in pids.items()},
            "load1": round(os.getloadavg()[0], 2), "window_s": round(took, 1)}), flush=True)
    finally:
        farm.close()


if __name__ == "__main__":
    main()
