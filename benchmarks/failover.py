"""Failover time of a partitioned farm: kill (SIGKILL) the node that leads a third of the
partitions while a writer streams into every partition, and time until every partition
has a leader again; then restart the node, let the balancer spread the leaders again, and
kill again.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/failover.py [--nodes 3] [--partitions 6]
        [--kills 25] [--rate 100] [--inflight 8] [--records 10] [--settle 1]
        [--quota PERCENT] [--json FILE]

The farm: LocalCluster's node processes on loopback (fsync batch), each hosting every
partition. Before each kill the harness waits until the balancer has spread the leaders
(no node leads more than ceil(partitions / nodes)), every partition has committed a
write since the last restart, and `--settle` seconds have passed; the victim is the node
leading the most partitions (ties: rotating over the nodes). The failover time is from
the SIGKILL to the first look (every 10 ms at each live node, `partitions()`) at which
every partition has a live node that says it leads it.

The stream: one client process per partition (outside any quota) appending entries of
`--records` keyed records ("p<partition>:<seq>:<i>") at `--rate` entries a second with up
to `--inflight` in flight (FarmClient.append_async, which sends a write again after a
failure until the client's 10 s timeout). Per kill: the writers' gap, the longest time
between two acknowledged appends of a partition across the kill (the worst partition);
at the end: the writes that failed, and the journals read back: every acknowledged
record is there (lost: acknowledged but missing) and how many records were written twice.

`--quota` puts every node process in a cgroup with that CPU quota (benchmarks/
cpu_cgroups.py; as root, cgroup v1 or v2; the restarted node goes back into its group);
without it the nodes share the machine.
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
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cpu_cgroups import CpuGroups, find_cgroups  # noqa: E402

_spawn = mp.get_context("spawn")
POLL = 0.01          #: seconds between looks for every partition's leader


@dataclass(frozen=True)
class Stream:
    rate: float          # entries a second per partition
    inflight: int
    records: int


def _writer(options: dict[str, Any], partition: int, stream: Stream, conn: Connection) -> None:
    """One partition's stream until the parent says stop; sends back the acknowledged
    sequence numbers with their times and the failures."""
    from consensus.client import FarmClient

    acked: list[tuple[int, float]] = []
    errors: list[str] = []
    lock = threading.Lock()
    slots = threading.Semaphore(stream.inflight)
    stop = threading.Event()
    threading.Thread(target=lambda: (conn.recv(), stop.set()), daemon=True).start()
    with FarmClient(**options, partition=partition, timeout=10.0) as client:
        client.append([f"p{partition}:start".encode()])
        conn.send("ready")
        seq, step = 0, 1.0 / stream.rate
        due = time.monotonic()
        while not stop.is_set():
            if not slots.acquire(timeout=0.1):
                continue
            records = [f"p{partition}:{seq}:{i}".encode() for i in range(stream.records)]

            def done(future, seq=seq) -> None:
                now = time.monotonic()
                with lock:
                    if future.exception() is None:
                        acked.append((seq, now))
                    else:
                        errors.append(f"{type(future.exception()).__name__}: "
                                      f"{future.exception()}"[:200])
                slots.release()
            try:
                client.append_async(records).add_done_callback(done)
            except Exception as exc:      # the client closed under us: counted
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                slots.release()
            seq += 1
            due += step
            time.sleep(max(0.0, due - time.monotonic()))
        for _ in range(stream.inflight):          # the last ones in flight
            slots.acquire(timeout=15)
    with lock:
        conn.send({"acked": acked, "errors": errors, "sent": seq})


def all_led(farm, partitions: int) -> dict[int, int] | None:
    """partition -> the live node that says it leads it, once every partition has one."""
    found = farm.partition_leaders(timeout=1.0, answer_timeout=0.5)
    return found if len(found) == partitions else None


def wait_for(condition, timeout: float, what: str, interval: float = POLL):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s: {what}")
        time.sleep(interval)


@dataclass
class Kill:
    victim: int
    led: list[int]          # the partitions it led
    at: float               # monotonic time of the SIGKILL
    failover: float         # seconds until every partition had a leader
    gap: float = 0.0        # the writers' longest pause across it (worst partition)
    gap_partition: int = -1


def gaps(kills: list[Kill], acked: dict[int, list[float]]) -> None:
    """Each kill's gap: for each partition, the first acknowledgement after the kill
    minus the last one before it; the worst partition."""
    for kill in kills:
        for partition, times in acked.items():
            before = [t for t in times if t <= kill.at]
            after = [t for t in times if t > kill.at]
            if before and after and after[0] - before[-1] > kill.gap:
                kill.gap, kill.gap_partition = after[0] - before[-1], partition


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0-100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def read_back(farm, partition: int) -> list[bytes]:
    with farm.client(partition=partition, timeout=30) as client:
        start, applied, _ = client.log_bounds()
        records: list[bytes] = []
        while start <= applied:             # a page ends at max_bytes: read on after it
            page = client.read_entries(start, applied + 1)
            for entry in page:
                if entry.type == "journal" and not entry.duplicate:   # a retry ignored
                    records.extend(entry.records)
            start = page[-1].index + 1
        return records


def run(args: argparse.Namespace) -> dict[str, Any]:
    from consensus.torture import LocalCluster

    stream = Stream(args.rate, args.inflight, args.records)
    share = math.ceil(args.partitions / args.nodes)
    groups = None
    with LocalCluster(nodes=args.nodes, partitions=args.partitions, fsync="batch") as farm:
        wait_for(lambda: all_led(farm, args.partitions), 60, "a leader in every partition")
        if args.quota is not None:
            where = find_cgroups()
            if isinstance(where, str):
                raise SystemExit(f"failover: --quota needs CPU cgroups: {where}")
            groups = CpuGroups(where, f"garlicfarm-failover-{os.getpid()}", farm.node_ids)
            groups.__enter__()
            for node in farm.node_ids:
                groups.add(node, farm.pid(node))
            groups.quota(args.quota / 100)
        options = dict(endpoints=farm.endpoints, cluster=farm.cluster,
                       username=farm.username, password=farm.password)
        pipes, procs = [], []
        try:
            for partition in range(args.partitions):
                parent, child = _spawn.Pipe()
                proc = _spawn.Process(target=_writer, daemon=True,
                                      args=(options, partition, stream, child))
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            for pipe in pipes:
                if not pipe.poll(120):
                    raise RuntimeError("a writer committed nothing in 120 s")
                pipe.recv()
            kills: list[Kill] = []
            loads: list[float] = []
            for number in range(args.kills):
                leaders = wait_for(
                    lambda: (found := all_led(farm, args.partitions)) and max(
                        Counter(found.values()).values()) <= share and found,
                    60, f"leaders spread (no node leading more than {share})", 0.1)
                time.sleep(args.settle)
                counts = Counter(leaders.values())
                most = max(counts.values())
                candidates = sorted(n for n, c in counts.items() if c == most)
                victim = candidates[number % len(candidates)]
                led = sorted(p for p, n in leaders.items() if n == victim)
                at = time.monotonic()
                farm.kill(victim)
                wait_for(lambda: all_led(farm, args.partitions), 30,
                         f"a leader in every partition after killing n{victim}")
                kills.append(Kill(victim, led, at, time.monotonic() - at))
                loads.append(os.getloadavg()[0])
                print(f"  kill {number + 1}: n{victim} (led {led}): every partition led "
                      f"after {kills[-1].failover * 1000:.0f} ms; load {loads[-1]:.1f}",
                      flush=True)
                time.sleep(args.down)
                farm.restart(victim)
                if groups is not None:
                    groups.add(victim, farm.pid(victim))
            wait_for(lambda: all_led(farm, args.partitions), 60, "a leader in every partition")
            time.sleep(args.settle)
            for pipe in pipes:
                pipe.send("stop")
            results = []
            for pipe in pipes:
                if not pipe.poll(120):
                    raise RuntimeError("a writer did not report in 120 s")
                results.append(pipe.recv())
        finally:
            for proc in procs:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            if groups is not None:
                groups.close()
        gaps(kills, {p: sorted(t for _, t in r["acked"]) for p, r in enumerate(results)})
        lost = duplicated = 0
        for partition, result in enumerate(results):
            written = Counter(read_back(farm, partition))
            for seq, _ in result["acked"]:
                for i in range(args.records):
                    count = written.get(f"p{partition}:{seq}:{i}".encode(), 0)
                    lost += count == 0
                    duplicated += count > 1
    times = [k.failover for k in kills]
    gap_times = [k.gap for k in kills]
    errors = [e for r in results for e in r["errors"]]
    summary = {
        "kills": len(kills),
        "failover_s": {"p50": statistics.median(times), "p99": percentile(times, 99),
                       "max": max(times), "min": min(times)},
        "gap_s": {"p50": statistics.median(gap_times), "p99": percentile(gap_times, 99),
                  "max": max(gap_times)},
        "acked_entries": sum(len(r["acked"]) for r in results),
        "sent_entries": sum(r["sent"] for r in results),
        "errors": len(errors), "error_kinds": dict(Counter(e.split(":")[0] for e in errors)),
        "lost_records": lost, "duplicated_records": duplicated,
        "load_average": [min(loads), max(loads)],
    }
    return {"summary": summary, "kills": [asdict(k) for k in kills]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--rate", type=float, default=100.0,
                        help="entries a second per partition")
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--records", type=int, default=10, help="records per entry")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds after the leaders are spread before a kill")
    parser.add_argument("--down", type=float, default=0.5,
                        help="seconds the killed node stays down")
    parser.add_argument("--quota", type=float, default=None,
                        help="CPU quota per node process, percent of one CPU (as root)")
    parser.add_argument("--json", help="also write the kills and the summary to this file")
    args = parser.parse_args(argv)
    if args.nodes < 3 or not 1 <= args.partitions <= 1000:
        parser.error("--nodes must be at least 3 (a kill leaves a majority) and "
                     "--partitions 1 to 1,000")
    if args.kills < 1 or not 0 < args.rate <= 10_000 or not 1 <= args.inflight <= 1024 \
            or not 1 <= args.records <= 10_000:
        parser.error("--kills at least 1, --rate 0-10,000, --inflight 1-1,024, "
                     "--records 1-10,000")
    if not 0 <= args.settle <= 60 or not 0 <= args.down <= 60:
        parser.error("--settle and --down must be 0-60 s")
    if args.quota is not None and not 1 <= args.quota <= 100 * (os.cpu_count() or 1):
        parser.error("--quota must be 1 to 100 x the CPUs (percent of one CPU)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"failover: {args.nodes} nodes, {args.partitions} partitions, {args.kills} kills; "
          f"a writer per partition at {args.rate:g} entries/s of {args.records} records, "
          f"{args.inflight} in flight; quota "
          f"{'none' if args.quota is None else f'{args.quota:g}%'}; {os.cpu_count()} CPUs",
          flush=True)
    result = run(args)
    s = result["summary"]
    print(f"failover s: p50 {s['failover_s']['p50']:.3f}, p99 {s['failover_s']['p99']:.3f}, "
          f"max {s['failover_s']['max']:.3f} (min {s['failover_s']['min']:.3f}); writers' gap "
          f"s: p50 {s['gap_s']['p50']:.3f}, p99 {s['gap_s']['p99']:.3f}, max "
          f"{s['gap_s']['max']:.3f}; entries acknowledged {s['acked_entries']:,} of "
          f"{s['sent_entries']:,} sent, errors {s['errors']} {s['error_kinds']}; records "
          f"lost {s['lost_records']}, written twice {s['duplicated_records']}; load average "
          f"{s['load_average'][0]:.1f}-{s['load_average'][1]:.1f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
