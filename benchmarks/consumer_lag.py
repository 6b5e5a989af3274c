"""What a consumer's position report costs (docs/operations.md, "Consumers").

A 3-node farm (LocalCluster) with a backlog of `--entries` journal entries of `--records`
records. One client reports a consumer at the log's start (the leader then counts the
backlog's rows, COUNTED_PER_REFRESH entries per report or refresh: the report that
counts is the slowest the loop ever sees), then `--reports` reports of a caught-up
consumer (the raft source's per-batch cost). Prints round-trip times and the leader's
slowest loop turns from its histogram.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/consumer_lag.py --entries 200000
"""
from __future__ import annotations

import argparse
import statistics
import time

from consensus.torture import LocalCluster
from tests.operators import scrape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--reports", type=int, default=2000)
    args = parser.parse_args()
    with LocalCluster(3, fsync="never", metrics=True, status_interval=60.0) as cluster:
        leader = cluster.wait_for_leader(timeout=30)
        with cluster.client(timeout=60) as client:
            start = client.last_applied() + 1
            batch = [[b"x" * 16] * args.records] * 1000
            for _ in range(args.entries // 1000):
                client.append_many(batch)
            end = client.last_applied() + 1
            counting = []
            while True:
                began = time.perf_counter()
                answer = client.report_consumer("far behind", start)
                counting.append(time.perf_counter() - began)
                if answer["lag_rows"] is not None:
                    break
            print(f"backlog {end - start} entries, {answer['lag_rows']} rows: counted in "
                  f"{len(counting)} reports, each {min(counting) * 1e3:.1f}-"
                  f"{max(counting) * 1e3:.1f} ms (sum {sum(counting) * 1e3:.0f} ms): "
                  f"{[round(c * 1e3) for c in counting]}")
            times = []
            for _ in range(args.reports):
                began = time.perf_counter()
                client.report_consumer("caught up", end)
                times.append(time.perf_counter() - began)
            times.sort()
            print(f"{args.reports} reports of a caught-up consumer: p50 "
                  f"{statistics.median(times) * 1e3:.2f} ms, p99 "
                  f"{times[int(len(times) * 0.99)] * 1e3:.2f} ms")
        samples = scrape(f"http://127.0.0.1:{cluster.metrics_port(leader)}/metrics")
        buckets = sorted((float(k.split('le="')[1].split('"')[0]), v) for k, v in
                         samples.items()
                         if k.startswith("garlicfarm_server_loop_turn_duration_seconds_bucket")
                         and "+Inf" not in k)
        total = samples["garlicfarm_server_loop_turn_duration_seconds_count"]
        p99 = next(le for le, count in buckets if count >= 0.99 * total)
        print(f"leader loop turns: {total:.0f}, p99 <= {p99 * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
