"""The idle cost of many Raft groups per node: CPU-seconds per second and RSS of each node
process of an idle 3-node farm of N partitions (issue 28), with --observers observers
(nodes 4..), after every partition has a leader and (with quiescing) the idle ones have
quiesced.

Run it from the checkout whose code is measured, with that checkout on PYTHONPATH (the
node processes start with `python -m`, which puts the working directory first on their
path), e.g. main's code against a branch's:

    cd /path/to/checkout && PYTHONPATH=$PWD python /path/to/idle_groups.py \
        --partitions 100 1000 [--tick 0.05] [--fsync never] [--window 10] [--deadline 180] \
        [--shared-fsync-groups N] [--observers 1]

Each size prints one JSON line: partitions, seconds until every partition had a leader
(`led_s`, null if not all did within --deadline) and until the node-reported quiesced
count settled (`settled_s`), then per node `cpu` (CPU-s per wall second over --window)
and `rss_mib`, the quiesced count per node (null where the node has no such metric),
`pulls_per_s` per node (PullEntries it sent per second over the window, all partitions;
null where its `partitions` call does not count them), and the 1-minute load average
(the machine is shared: read the CPU figures with it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request

from consensus.common.errors import FarmError
from consensus.torture import LocalCluster


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def metric(farm: LocalCluster, node: int, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{farm.metrics_port(node)}/metrics", timeout=10).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def led(farm: LocalCluster, partitions: int) -> bool:
    """Every partition has a member that says it leads it."""
    found: set[int] = set()
    try:
        with farm.client(timeout=10) as client:
            for node in farm.node_ids:
                for part in client.partitions(farm.endpoint_of(node))["partitions"]:
                    if part["role"] == "leader":
                        found.add(part["partition"])
    except FarmError:
        return False
    return len(found) == partitions


def pulls(farm: LocalCluster) -> list[int | None]:
    """Per node, the PullEntries it sent so far in all partitions (None: not counted)."""
    found: list[int | None] = []
    with farm.client(timeout=10) as client:
        for node in farm.node_ids:
            parts = client.partitions(farm.endpoint_of(node))["partitions"]
            counts = [p.get("pulls") for p in parts]
            found.append(None if None in counts else sum(counts))
    return found


def measure(partitions: int, args: argparse.Namespace) -> dict:
    extra = ["--tick", str(args.tick)] if args.tick else []
    if args.shared_fsync_groups is not None:
        extra += ["--shared-fsync-groups", str(args.shared_fsync_groups)]
    started = time.monotonic()
    with LocalCluster(3, partitions=partitions, metrics=True, extra_args=extra,
                      status_interval=5.0, fsync=args.fsync,
                      observers=args.observers) as farm:
        led_s = settled_s = None
        deadline = started + args.deadline
        while time.monotonic() < deadline:
            if led(farm, partitions):
                led_s = time.monotonic() - started
                break
            time.sleep(1.0)
        last = None
        while time.monotonic() < deadline:     # the quiesced counts stop moving
            counts = [metric(farm, n, "garlicfarm_server_quiesced_groups")
                      for n in farm.node_ids]
            if counts == last:
                settled_s = time.monotonic() - started
                break
            last = counts
            time.sleep(2.0)
        pids = [farm.pid(n) for n in farm.node_ids]
        pulled = pulls(farm)
        before, t0 = [cpu_seconds(p) for p in pids], time.monotonic()
        time.sleep(args.window)
        took = time.monotonic() - t0
        cpu = [round((cpu_seconds(p) - b) / took, 4) for p, b in zip(pids, before)]
        pull_rates = [None if a is None or b is None else round((b - a) / took, 1)
                      for a, b in zip(pulled, pulls(farm))]
        return {"partitions": partitions, "observers": args.observers, "tick": args.tick,
                "fsync": args.fsync, "shared_fsync_groups": args.shared_fsync_groups,
                "shared_flushes": [metric(farm, n, "garlicfarm_disk_shared_flushes_total")
                                   for n in farm.node_ids],
                "led_s": led_s and round(led_s, 1),
                "settled_s": settled_s and round(settled_s, 1), "cpu": cpu,
                "rss_mib": [round(rss_mib(p), 1) for p in pids],
                "quiesced": [metric(farm, n, "garlicfarm_server_quiesced_groups")
                             for n in farm.node_ids],
                "pulls_per_s": pull_rates,
                "load1": round(os.getloadavg()[0], 2), "window_s": round(took, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--window", type=float, default=10.0,
                        help="seconds of idle CPU measured (default 10)")
    parser.add_argument("--deadline", type=float, default=180.0,
                        help="seconds to wait for leaders and quiescing (default 180)")
    parser.add_argument("--tick", type=float, default=None,
                        help="the nodes' --tick (default: theirs, 0.01)")
    parser.add_argument("--fsync", choices=("always", "batch", "never"), default="batch",
                        help="the nodes' --fsync (default batch; an idle farm writes "
                             "nothing, but the first elections of 1,000 groups wait for "
                             "one fsync per group and vote round with batch)")
    parser.add_argument("--shared-fsync-groups", type=int, default=None, metavar="N",
                        help="the nodes' --shared-fsync-groups (default: theirs, 8; 0: "
                             "one fsync per group and vote round)")
    parser.add_argument("--observers", type=int, default=0,
                        help="observers beside the 3 voters (default 0)")
    args = parser.parse_args()
    if any(p < 1 or p > 4096 for p in args.partitions):
        parser.error("--partitions: each count must be 1..4096 (the nodes' limit)")
    if not 0 <= args.observers <= 16:
        parser.error("--observers: 0 to 16")
    if args.window <= 0 or args.deadline <= 0:
        parser.error("--window and --deadline must be positive")
    for partitions in args.partitions:
        print(json.dumps(measure(partitions, args)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
