"""CPU time per round of the pure 3-node cluster (`raft_core.py`'s cluster case), for
comparing two trees of the core on a shared, loaded machine: process CPU time (not wall
time) over chunks of rounds, the best chunk per batch size.

    PYTHONPATH=TREE python TREE/benchmarks/raft_core_cpu.py [--chunks 7] [--rounds 3000]

Run it alternately on the two trees (base, branch, base, branch) and compare the bests;
`--rounds` is the chunk for one proposal per round (a tenth of it for 100).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from raft_core import ClusterCase  # noqa: E402


def best_cpu_per_round(batch: int, rounds: int, chunks: int) -> float:
    """Microseconds of process CPU time per round, the best of `chunks` chunks."""
    case = ClusterCase()
    for _ in range(rounds // 10):       # warm up
        case.round(batch)
    best = float("inf")
    for _ in range(chunks):
        start = time.process_time()
        for _ in range(rounds):
            case.round(batch)
        best = min(best, (time.process_time() - start) / rounds)
    return best * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=7, help="chunks per batch size (default 7)")
    parser.add_argument("--rounds", type=int, default=3000,
                        help="rounds per chunk at one proposal per round (default 3000)")
    args = parser.parse_args(argv)
    if args.chunks < 1 or args.rounds < 10:
        parser.error("--chunks must be at least 1 and --rounds at least 10")
    for batch, rounds in ((1, args.rounds), (100, args.rounds // 10)):
        print(f"{batch} proposals per round: {best_cpu_per_round(batch, rounds, args.chunks):.1f} "
              f"us CPU per round (best of {args.chunks} x {rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
