"""A loop turn's time with and without a client flood (issue 26: peers apart from clients).

A 3-node farm (LocalCluster, --fsync never); first QUIET seconds with one paced writer,
then FLOOD seconds with CLIENTS connections each keeping INFLIGHT writes of SIZE bytes
pipelined at the leader (FarmClient.append_many). For each phase, the leader's loop
turns: from its --metrics histogram (garlicfarm_server_loop_turn_duration_seconds) when
the code has it, and from its "a loop turn took N ms" warnings (> 100 ms) either way; the
terms seen; the flood's write rate.

Run from the checkout to measure (the node processes import the code of the current
directory: ``python -m`` puts it first on their path):

    cd CHECKOUT && PYTHONPATH=$PWD .venv/bin/python benchmarks/client_flood.py \
        [--clients 16 --size 2MiB --inflight 4]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
import urllib.request

from consensus.torture import LocalCluster

TURN = re.compile(rb"a loop turn took (\d+) ms")
METRICS = re.compile(rb"metrics on (http://\S+)/metrics")
BUCKET = re.compile(r'garlicfarm_server_loop_turn_duration_seconds_bucket\{le="([^"]+)"\} (\S+)')


def size_arg(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "k": 1 << 10, "m": 1 << 20}
    m = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip())
    if not m or m.group(2).lower() not in ("", *units):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 2MiB)")
    return int(m.group(1)) * units.get(m.group(2).lower(), 1)


def histogram(url: str | None) -> dict[float, float] | None:
    if url is None:
        return None
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return {float(le): float(count) for le, count in BUCKET.findall(text)}


def quantile(before: dict, after: dict, q: float) -> str:
    """The bucket bound under which a share q of the turns between the two scrapes fell."""
    counts = sorted((le, after[le] - before.get(le, 0)) for le in after)
    total = counts[-1][1]
    if not total:
        return "-"
    for le, count in counts:
        if count >= q * total:
            return f"<= {le * 1000:.1f} ms" if le != float("inf") else "> 3.3 s"
    return "?"


class Phase:
    def __init__(self, farm: LocalCluster, leader: int, url: str | None) -> None:
        self.farm, self.leader, self.url = farm, leader, url
        self.log = farm.log_path(leader)

    def __enter__(self) -> "Phase":
        self.offset = os.path.getsize(self.log)
        self.hist = histogram(self.url)
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.monotonic() - self.started
        with open(self.log, "rb") as f:
            f.seek(self.offset)
            self.slow = [int(ms) for ms in TURN.findall(f.read())]
        after = histogram(self.url)
        self.turns = None
        if after and self.hist:             # the code has the turn histogram
            self.turns = {"turns": int(after[float("inf")] - self.hist[float("inf")]),
                          "p50": quantile(self.hist, after, 0.5),
                          "p99": quantile(self.hist, after, 0.99),
                          "p100": quantile(self.hist, after, 1.0)}

    def report(self, name: str, extra: dict) -> dict:
        row = {"phase": name, "seconds": round(self.seconds, 1),
               "turns > 100 ms": len(self.slow), "slowest turn ms": max(self.slow, default=0),
               **(self.turns or {}), **extra}
        print(json.dumps(row))
        return row


def terms(farm: LocalCluster) -> dict[int, int]:
    seen = {}
    for node in farm.node_ids:
        try:
            seen[node] = farm.client(timeout=5).ping(endpoint=farm.endpoint_of(node))["term"]
        except Exception as exc:       # reported, not fatal: the term is what we look at
            seen[node] = f"unreachable: {exc}"
    return seen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--size", type=size_arg, default=2 << 20)
    p.add_argument("--inflight", type=int, default=4)
    p.add_argument("--quiet", type=float, default=5.0)
    p.add_argument("--flood", type=float, default=10.0)
    p.add_argument("--data-dir", help="keep the farm's data and logs there")
    args = p.parse_args()
    with LocalCluster(3, fsync="never", extra_args=("--metrics", "127.0.0.1:0"),
                      data_dir=args.data_dir) as farm:
        leader = farm.wait_for_leader(timeout=30)
        with open(farm.log_path(leader), "rb") as f:
            found = METRICS.search(f.read())
        url = found.group(1).decode() if found else None
        client = farm.client()
        client.append([b"warm-up"])
        before = terms(farm)
        with Phase(farm, leader, url) as quiet:
            deadline = time.monotonic() + args.quiet
            while time.monotonic() < deadline:
                client.append([b"x" * 100])
                time.sleep(0.02)
        quiet.report("quiet", {"terms": before})
        stop = threading.Event()
        written = [0] * args.clients
        failures: list[str] = []
        payload = os.urandom(args.size)

        def flood(i: int) -> None:
            c = farm.client(timeout=60)
            try:
                while not stop.is_set():
                    c.append_many([[payload]] * args.inflight)
                    written[i] += args.inflight
            except Exception as exc:   # counted: a flood client that gave up
                failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                c.close()

        threads = [threading.Thread(target=flood, args=(i,), daemon=True)
                   for i in range(args.clients)]
        with Phase(farm, leader, url) as flooded:
            for t in threads:
                t.start()
            time.sleep(args.flood)
            stop.set()
            for t in threads:
                t.join(60)
        after = terms(farm)
        flooded.report("flood", {
            "clients": args.clients, "size": args.size, "inflight": args.inflight,
            "writes": sum(written), "MiB/s": round(sum(written) * args.size / (1 << 20) /
                                                   flooded.seconds, 1),
            "client failures": failures[:3], "terms": after})


if __name__ == "__main__":
    main()
