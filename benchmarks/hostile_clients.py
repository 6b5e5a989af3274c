"""Hostile clients at a 3-node farm's leader, at the size of issue 26's figures.

    PYTHONPATH=$PWD python benchmarks/hostile_clients.py [--seconds 30] [--clients 50]

A farm of real node processes (LocalCluster, the CLI's `garlicfarm node`) with a writer
pacing ~40 appends/s; then, one after the other:

1. `--clients` threads logging in with a wrong password for `--seconds` at the leader;
2. 200 slowloris connections (one request byte per second) for `--seconds`;
3. `--clients` threads sending a wrong login and hanging up at once (the tarpit cannot
   slow them) for `--seconds`;
4. 5,000 logins against a node with `--max-connections 256`.

During 1-3, a fresh single-attempt honest login every 0.5 s. Reported: leader
changes (terms), the writer's appends and latency, honest logins, the leader's log
growth, refusals by reason (the node's metrics); for 3, connections held, the node's
fds and RSS growth. The tests (tests/runtime/test_admission.py) are the short versions.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from consensus.common.errors import FarmError  # noqa: E402
from consensus.net.dial import dial  # noqa: E402
from consensus.net.security import Security  # noqa: E402
from consensus.torture.local import LocalCluster  # noqa: E402
from consensus.torture.flood import Flood, FloodShape  # noqa: E402
from tests.hostile import HonestLogins, ImpatientFlood  # noqa: E402
from tests.operators import logged_url, scrape  # noqa: E402

PASSWORD = "bench-pass"
METRICS_LINE = r"metrics on (http://\S+)/metrics"


class Writer:
    """One append every 1/rate s; the latency of each, and the failures."""

    def __init__(self, farm: LocalCluster, rate: float = 40.0) -> None:
        self.farm, self.pause = farm, 1.0 / rate
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Writer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with self.farm.client(timeout=5) as client:
            next_at = time.monotonic()
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    client.append([b"w" * 100])
                    self.latencies.append(time.monotonic() - started)
                except FarmError:
                    self.failures += 1
                next_at += self.pause
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def summary(self) -> str:
        lat = sorted(self.latencies) or [0.0]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        return (f"writer {len(self.latencies)} appends ({self.failures} failed), latency "
                f"p50 {statistics.median(lat) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
                f"max {lat[-1] * 1000:.0f} ms")


def terms(urls: dict[int, str]) -> dict[int, int]:
    return {i: int(scrape(u)["garlicfarm_server_term"]) for i, u in urls.items()}


def refusals(url: str) -> dict[str, int]:
    prefix = 'garlicfarm_network_connections_refused_total{reason="'
    return {k[len(prefix):-2]: int(v) for k, v in scrape(url).items() if k.startswith(prefix)}


def slow_turns(url: str, limit: float = 0.1) -> tuple[int, int]:
    """(loop turns so far, those longer than about `limit` s: the first bucket >= it)."""
    samples = scrape(url)
    name = "garlicfarm_server_loop_turn_duration_seconds"
    bounds = sorted(float(k.split('le="')[1].rstrip('"}')) for k in samples
                    if k.startswith(name + "_bucket") and "+Inf" not in k)
    bound = next(b for b in bounds if b >= limit)
    count = int(samples[name + "_count"])
    within = next(int(v) for k, v in samples.items()
                  if k.startswith(name + "_bucket") and "+Inf" not in k
                  and float(k.split('le="')[1].rstrip('"}')) == bound)
    return count, count - within


def attack(name: str, farm: LocalCluster, urls: dict[int, str], hostile, seconds: float
           ) -> None:
    leader = farm.wait_for_leader(30)
    url, endpoint = urls[leader], farm.endpoint_of(leader)
    before, refused_before = terms(urls), refusals(url)
    log_before = os.path.getsize(farm.log_path(leader))
    turns_before = slow_turns(url)
    with Writer(farm) as writer, hostile(endpoint), \
            HonestLogins(endpoint, PASSWORD, pause=0.5) as logins:
        time.sleep(seconds)
    after, refused_after = terms(urls), refusals(url)
    turns_after = slow_turns(url)
    turns, slow = (a - b for a, b in zip(turns_after, turns_before))
    grown = os.path.getsize(farm.log_path(leader)) - log_before
    refused = {k: v - refused_before.get(k, 0) for k, v in refused_after.items()
               if v - refused_before.get(k, 0)}
    ok = sum(logins.results)
    print(f"{name}: leader {leader}, terms {before} -> {after} "
          f"(leader changes: {max(after.values()) - max(before.values())} terms)\n"
          f"  {writer.summary()}\n"
          f"  honest fresh logins {ok}/{len(logins.results)} "
          f"({100 * ok / max(1, len(logins.results)):.0f}%), slowest "
          f"{max(logins.seconds or [0]) * 1000:.0f} ms\n"
          f"  leader's loop: {turns:,} turns, {slow} over 100 ms\n"
          f"  leader's log grew {grown:,} bytes; refused by reason {refused}", flush=True)


def max_connections(limit: int = 256, attempts: int = 5000) -> None:
    with LocalCluster(1, username="farm", password=PASSWORD, status_interval=5.0,
                      extra_args=["--metrics", "127.0.0.1:0", "--max-connections",
                                  str(limit)]) as farm:
        farm.wait_for_leader(30)
        url = logged_url(farm.log_path(1), METRICS_LINE) + "/metrics"
        pid, endpoint = farm.pid(1), farm.endpoint_of(1)

        def fds() -> int:
            return len(os.listdir(f"/proc/{pid}/fd"))

        def rss() -> int:
            with open(f"/proc/{pid}/status") as f:
                return next(int(line.split()[1]) << 10 for line in f
                            if line.startswith("VmRSS:"))
        fds0, rss0, peak = fds(), rss(), [0]
        held, busy, lock = [], [0], threading.Lock()
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], fds())
                done.wait(0.05)

        def run(count: int) -> None:
            security = Security(username="farm", password=PASSWORD)
            for _ in range(count):
                try:
                    sock = dial(endpoint, security, timeout=10).sock
                except FarmError:
                    with lock:
                        busy[0] += 1
                    continue
                with lock:
                    held.append(sock)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.monotonic()
        workers = [threading.Thread(target=run, args=(attempts // 10,)) for _ in range(10)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        took = time.monotonic() - started
        done.set()
        watcher.join()
        clients = scrape(url)['garlicfarm_network_connections{kind="client"}']
        print(f"max-connections {limit}: {attempts} logins in {took:.1f} s: {len(held)} held, "
              f"{busy[0]} refused; node fds {fds0} -> peak {peak[0]}; RSS "
              f"{rss0 >> 20} -> {rss() >> 20} MiB; metric clients "
              f"{clients:.0f}; "
              f"refused {refusals(url)}", flush=True)
        for sock in held:
            sock.close()


def flood(farm: LocalCluster, endpoint: str, shape: FloodShape) -> Flood:
    return Flood(endpoint, cluster=farm.cluster, username="farm", password=PASSWORD,
                 shape=shape)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--clients", type=int, default=50)
    args = p.parse_args()
    if args.seconds <= 0 or args.clients <= 0:
        p.error("--seconds and --clients must be positive")
    with LocalCluster(3, username="farm", password=PASSWORD, status_interval=5.0,
                      extra_args=["--metrics", "127.0.0.1:0"]) as farm:
        farm.wait_for_leader(30)
        urls = {i: logged_url(farm.log_path(i), METRICS_LINE) + "/metrics"
                for i in farm.node_ids}
        attack(f"{args.clients} wrong-password clients for {args.seconds:.0f} s", farm,
               urls, lambda ep: flood(farm, ep, FloodShape(args.clients, 0, 0)), args.seconds)
        attack(f"200 slowloris connections for {args.seconds:.0f} s", farm, urls,
               lambda ep: flood(farm, ep, FloodShape(0, 200, 0)), args.seconds)
        attack(f"{args.clients} impatient wrong-password clients (hang up without "
               f"waiting for the 401) for {args.seconds:.0f} s", farm, urls,
               lambda ep: ImpatientFlood(ep, threads=args.clients), args.seconds)
    max_connections()


if __name__ == "__main__":
    main()
