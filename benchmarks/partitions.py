"""Partitions on one machine (issue 28, a first look; the CPU-quota scale-out is
another benchmark's): write throughput of a 3-node farm with 1, 3, 6 partitions, each
partition loaded by its own client process (closed-loop `append_async` of entries of
100 records of 100 B), the nodes' CPU seconds, and the idle cost (CPU, memory) of a
node hosting many groups.

Without CPU quotas the nodes and the clients share this machine's cores, so more
partitions spread the leaders' work but cannot exceed the machine: read the figures
with `nproc` in mind.

    PYTHONPATH=$PWD python benchmarks/partitions.py [--partitions 1,3,6] [--seconds 8]
        [--idle 1,10,100] [--tick 0.01]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import psutil

from consensus.torture.local import LocalCluster
from raft_throughput import Window, async_clients

RECORDS = [bytes(100)] * 100


def _load(endpoints: str, password: str, partition: int, clients: int, warmup: float,
          seconds: float, conn) -> None:
    """One client process: `clients` closed-loop writers to one partition."""
    from consensus.client.client import FarmClient
    client = FarmClient(endpoints, username="farm", password=password, partition=partition,
                        timeout=30)
    load = async_clients(client, RECORDS, clients, Window(warmup, seconds), seconds)
    conn.send((load.ops, load.errors))


def node_cpu(farm: LocalCluster) -> dict[int, float]:
    out = {}
    for node in farm.node_ids:
        times = psutil.Process(farm.pid(node)).cpu_times()
        out[node] = times.user + times.system
    return out


def wait_all_led(farm: LocalCluster, partitions: int) -> None:
    for p in range(partitions):
        farm.wait_for_leader(timeout=60, partition=p)


def throughput(partitions: int, seconds: float, clients: int) -> dict:
    warmup = 2.0
    with LocalCluster(nodes=3, partitions=partitions, username="farm",
                      status_interval=5.0) as farm:
        wait_all_led(farm, partitions)
        time.sleep(3.0)                     # the balancer settles
        ctx = mp.get_context("spawn")
        pipes, procs = [], []
        for p in range(partitions):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_load, args=(farm.endpoints, farm.password, p,
                                                   clients, warmup, seconds, child))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        time.sleep(warmup + 1.0)            # the client processes start (spawn) meanwhile
        before = node_cpu(farm)
        time.sleep(seconds - 1.0)
        cpu = {n: c - before[n] for n, c in node_cpu(farm).items()}
        results = [pipe.recv() for pipe in pipes]
        for proc in procs:
            proc.join()
        with farm.client() as client:
            leaders = {}
            for node in farm.node_ids:
                for part in client.partitions(farm.endpoint_of(node))["partitions"]:
                    if part["role"] == "leader":
                        leaders[part["partition"]] = node
    entries = sum(r[0] for r in results)
    return {"partitions": partitions, "writers": clients * partitions,
            "entries_s": round(entries / seconds),
            "records_s": round(entries * len(RECORDS) / seconds),
            "errors": sum(r[1] for r in results),
            "node_cpu_s": {n: round(c, 2) for n, c in cpu.items()},
            "leaders": leaders}


def idle(groups: int, seconds: float = 5.0, tick: float = 0.01) -> dict:
    with LocalCluster(nodes=3, partitions=groups, username="farm", status_interval=5.0,
                      extra_args=["--tick", str(tick)]) as farm:
        wait_all_led(farm, groups)
        time.sleep(3.0)
        before = node_cpu(farm)
        time.sleep(seconds)
        cpu = {n: c - before[n] for n, c in node_cpu(farm).items()}
        rss = {n: psutil.Process(farm.pid(n)).memory_info().rss for n in farm.node_ids}
        threads = {n: psutil.Process(farm.pid(n)).num_threads() for n in farm.node_ids}
    return {"groups": groups, "tick": tick, "cpu_per_node": round(sum(cpu.values()) / 3 / seconds, 3),
            "rss_mib_per_node": round(sum(rss.values()) / 3 / 2**20, 1),
            "threads_per_node": max(threads.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1,3,6")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=24,
                        help="closed-loop writers in all, shared evenly by the partitions "
                        "(one client process per partition)")
    parser.add_argument("--idle", default="1,10,100",
                        help="groups per node for the idle cost ('' to skip)")
    parser.add_argument("--tick", type=float, default=0.01,
                        help="the nodes' --tick in the idle cases (heartbeats every 10 ticks)")
    args = parser.parse_args()
    for p in [int(x) for x in args.partitions.split(",") if x]:
        print(throughput(p, args.seconds, max(1, args.clients // p)), flush=True)
    for g in [int(x) for x in args.idle.split(",") if x]:
        print(idle(g, tick=args.tick), flush=True)


if __name__ == "__main__":
    main()
