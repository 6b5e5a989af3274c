"""CHP replicated mode against a standalone CHP server, in the same run.

A 3-node farm (LocalCluster, fsync=batch) with a replicated CHP server next to each node,
and a standalone `garlicfarm chp server` (memory only) for the baseline. For each case a
`CloneClient` sends N KVSETs (100-byte values over 1,000 keys, a fresh UUID each) without
waiting, then one with ``confirm=True``: a server publishes a client's KVSETs in the order
it got them, so the confirmation of the last means all N were applied. Then `--latency`
sequential confirmed sets give the round trip KVSET -> KVPUB.

* standalone: the baseline (one server, memory only);
* replicated, 1 server: the client knows one replicated server;
* replicated, 3 servers: the client knows all three (as it must to fail over), so each
  KVSET reaches every server and is proposed three times (the map applies it once).

    .venv/bin/python benchmarks/chp_replicated.py [--messages 20000] [--latency 200]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.chp.client import CloneClient  # noqa: E402
from consensus.torture import LocalCluster  # noqa: E402
from tests.chp.support import free_port_span  # noqa: E402

KEYS = 1_000
VALUE = b"v" * 100


def start_server(log_dir: str, name: str, *args: str, env: dict | None = None):
    port = free_port_span()
    log = open(os.path.join(log_dir, f"{name}.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "garlicfarm", "chp", "server", "--port",
                             str(port), *args], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    return proc, f"127.0.0.1:{port}"


def throughput(servers: list[str], n: int, prefix: str) -> float:
    with CloneClient(servers, server_timeout=10.0) as client:
        client.wait_synced(60)
        started = time.perf_counter()
        for i in range(n):
            client.set(f"/{prefix}/{i % KEYS}", VALUE)
        client.set(f"/{prefix}/last", VALUE, confirm=True, timeout=120)
        return (n + 1) / (time.perf_counter() - started)


def latency(servers: list[str], n: int, prefix: str) -> float:
    with CloneClient(servers, server_timeout=10.0) as client:
        client.wait_synced(60)
        took = []
        for i in range(n):
            started = time.perf_counter()
            client.set(f"/{prefix}/{i % KEYS}", VALUE, confirm=True, timeout=30)
            took.append(time.perf_counter() - started)
        return statistics.median(took) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--latency", type=int, default=200)
    args = parser.parse_args()
    procs = []
    with tempfile.TemporaryDirectory() as logs, LocalCluster(3) as farm:
        farm.wait_for_leader(60)
        try:
            proc, standalone = start_server(logs, "standalone")
            procs.append(proc)
            replicated = []
            for node in farm.node_ids:
                members = [farm.endpoint_of(node)] + [farm.endpoint_of(n) for n in
                                                      farm.node_ids if n != node]
                proc, address = start_server(
                    logs, f"replicated-{node}", "--replicated", ",".join(members),
                    "--farm-user", farm.username, env={"GARLICFARM_PASSWORD": farm.password})
                procs.append(proc)
                replicated.append(address)
            cases = [("standalone", [standalone]), ("replicated, 1 server", replicated[:1]),
                     ("replicated, 3 servers", replicated)]
            rows = []
            for number, (name, servers) in enumerate(cases):
                rate = throughput(servers, args.messages, f"t{number}")
                p50 = latency(servers, args.latency, f"l{number}")
                rows.append((name, rate, p50))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)
    base_rate, base_p50 = rows[0][1], rows[0][2]
    print(f"{args.messages} KVSETs then {args.latency} confirmed ones; load average "
          f"{os.getloadavg()[0]:.1f}\n")
    print("| case | updates/s | vs standalone | p50 KVSET -> KVPUB | vs standalone |")
    print("|---|---:|---:|---:|---:|")
    for name, rate, p50 in rows:
        print(f"| {name} | {rate:,.0f} | {rate / base_rate:.2f}x | {p50:.2f} ms | "
              f"{p50 / base_p50:.1f}x |")


if __name__ == "__main__":
    main()
