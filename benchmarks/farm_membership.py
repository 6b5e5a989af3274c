"""How long `garlicfarm add-server` / `remove-server` take on a farm of 1 and of 3
partitions (every partition changed, one after the other), with some data in each
partition for the new node to catch up. Run by hand:

    PYTHONPATH=$PWD python benchmarks/farm_membership.py [--rounds 3] [--entries 2000]

Each round: a fresh LocalCluster(3, partitions=P), E appended entries of 100 bytes per
partition, a fourth node spawned (--join), then the CLI's add-server timed until it
returns (every partition's AddServer: catch-up, then the joint change), and remove-server
timed likewise; on a farm of several partitions, `transfer-leader --from L` (L: partition
0's leader) timed until L leads no partition, then `--release L`."""
from __future__ import annotations

import argparse
import io
import statistics
import time

from consensus.torture.local import LocalCluster
from consensus.admin.admin import EXIT_OK, command_main


def run(name: str, argv: list[str]) -> float:
    started = time.monotonic()
    out, err = io.StringIO(), io.StringIO()
    code = command_main(name, argv, out=out, err=err)
    if code != EXIT_OK:
        raise SystemExit(f"{name} exited {code}: {out.getvalue()} {err.getvalue()}")
    return time.monotonic() - started


def one_round(partitions: int, entries: int) -> tuple[float, float, float | None]:
    with LocalCluster(3, partitions=partitions, fsync="never", status_interval=0.5) as farm:
        for p in range(partitions):
            farm.wait_for_leader(timeout=30, partition=p)
            with farm.client(partition=p, timeout=30) as client:
                client.append_many([[b"x" * 100] * 100] * (entries // 100))
        base = ["--endpoints", farm.endpoints, "--cluster", farm.cluster, "--user",
                farm.username, f"--password={farm.password}", "--timeout", "60"]
        four = farm.spawn()
        add = run("add-server", base + [str(four), farm.endpoint_of(four)])
        remove = run("remove-server", base + [str(four)])
        drain = None
        if partitions > 1:
            leader = farm.wait_for_leader(timeout=30, partition=0)
            drain = run("transfer-leader", base + ["--from", str(leader)])
            run("transfer-leader", base + ["--release", str(leader)])
        return add, remove, drain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--entries", type=int, default=2000)
    args = parser.parse_args()
    print("| partitions | add-server s (median; all) | remove-server s (median; all) | "
          "transfer-leader --from s (all) |")
    print("|---|---|---|---|")
    for partitions in (1, 3):
        rounds = [one_round(partitions, args.entries) for _ in range(args.rounds)]
        adds, removes = [r[0] for r in rounds], [r[1] for r in rounds]
        print(f"| {partitions} | {statistics.median(adds):.2f}; "
              f"{', '.join(f'{a:.2f}' for a in adds)} | {statistics.median(removes):.2f}; "
              f"{', '.join(f'{r:.2f}' for r in removes)} | "
              f"{', '.join(f'{r[2]:.2f}' for r in rounds if r[2] is not None) or '-'} |",
              flush=True)


if __name__ == "__main__":
    main()
