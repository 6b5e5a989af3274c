"""`python -m consensus.sim --nodes 5 --seeds N [--seed S] [--steps K] [--groups G] [--verbose]`

Runs N seeds (S, S+1, ...). A violation prints the seed, the property, a short trace and
exits 1; the last line is always the summary `seeds=N steps=... violations=...`.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

from .cluster import MAX_GROUPS, SimSettings, run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m consensus.sim",
                                     description="Deterministic fault simulator of the Raft core.")
    parser.add_argument("--nodes", type=int, default=5,
                        help="initial voters of each group (default 5)")
    parser.add_argument("--spares", type=int, default=2,
                        help="extra servers for membership changes and observers (default 2)")
    parser.add_argument("--groups", type=int, default=1,
                        help=f"Raft groups hosted by every server, sharing its disk, clock, "
                             f"crashes and network links (1-{MAX_GROUPS}, default 1)")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=SimSettings.steps,
                        help=f"fault steps per seed (default {SimSettings.steps})")
    parser.add_argument("--quiesce", action="store_true",
                        help="idle groups quiesce by the runtime's rule, and each group's "
                             "clients pause every other spell (consensus/sim/quiet.py)")
    parser.add_argument("--verbose", action="store_true", help="print every seed's trace")
    args = parser.parse_args(argv)
    for name in ("nodes", "seeds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.spares < 0:
        parser.error("--spares must be 0 or more")
    if not 1 <= args.groups <= MAX_GROUPS:
        parser.error(f"--groups must be between 1 and {MAX_GROUPS}")
    if not args.verbose:    # the core's warnings (a follower refusing) are the faults' doing
        logging.getLogger("garlicfarm.raft").setLevel(logging.ERROR)
    settings = SimSettings(nodes=args.nodes, spares=args.spares, groups=args.groups,
                           steps=args.steps, quiesce=args.quiesce,
                           verbose=args.verbose)
    started = time.monotonic()
    total_steps = violations = 0
    stats: dict[str, int] = {}
    for seed in range(args.seed, args.seed + args.seeds):
        result = run_seed(seed, settings)
        total_steps += result.steps
        for key, value in result.stats.items():
            stats[key] = stats.get(key, 0) + value
        if result.violation is not None:
            violations += 1
            print(f"VIOLATION seed={seed} {result.violation}", file=sys.stderr)
            print("trace (last events):", file=sys.stderr)
            for line in result.trace[-40:]:
                print("  " + line, file=sys.stderr)
            print(f"replay: python -m consensus.sim --nodes {args.nodes} --spares {args.spares} "
                  f"--groups {args.groups} --steps {args.steps} --seeds 1 --seed {seed} "
                  f"{'--quiesce ' if args.quiesce else ''}--verbose", file=sys.stderr)
            break
    ran = seed - args.seed + 1
    extra = " ".join(f"{k}={v}" for k, v in sorted(stats.items()))
    print(f"seeds={ran} steps={total_steps} violations={violations} {extra} "
          f"seconds={time.monotonic() - started:.1f}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
