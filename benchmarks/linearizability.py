"""Linearizability checker speed: the 108 vector histories and large synthetic ones.

Baseline, measured in the same run: the same search without the models' lookahead
pruning (`guard` returning None), which is Porcupine's algorithm (Wing & Gong with
Lowe's memo) plus our two exact symmetry rules. Ratios are baseline time / our time; a
baseline history that runs out of its budget counts at the budget (so the ratio is a
lower bound) and the keys it left undecided are reported.

    .venv/bin/python benchmarks/linearizability.py [--budget S] [--ops N]
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from consensus.linearizability import (History, KVModel, RegisterModel, Verdict, check,
                                       read_history)

VECTORS = Path(__file__).resolve().parent.parent / "tests" / "vectors" / "linearizability"


class Unpruned:
    """Wrap a model with its lookahead pruning switched off."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def guard(self, target):
        return None


def run(histories, budget: float, prune: bool) -> tuple[float, int, int]:
    """(seconds, wrong verdicts, keys out of budget) over `histories`."""
    total, wrong, unknown = 0.0, 0, 0
    for ops, model, expected in histories:
        result = check(ops, model if prune else Unpruned(model), timeout=budget)
        total += result.elapsed
        unknown += sum(p.verdict is Verdict.UNKNOWN for p in result.partitions)
        wrong += result.verdict is not Verdict.UNKNOWN and \
            (result.verdict is Verdict.LINEARIZABLE) != expected
    return total, wrong, unknown


def synthetic(model_name: str, ops: int, clients: int, keys: int, seed: int) -> History:
    """Clients against a real sequential store, 5% of them giving up (info)."""
    rng = random.Random(seed)
    now = 0

    def clock() -> int:
        return now

    h, store, pending = History(clock=clock), {}, {}
    invoked = 0
    while invoked < ops or pending:
        now += 1
        c = rng.randrange(clients)
        if c not in pending:
            if invoked >= ops:
                continue
            key = f"k{rng.randrange(keys)}" if model_name == "kv" else None
            f = rng.choice(["get", "put", "append"] if model_name == "kv" else ["read", "write"])
            value = None if f in ("get", "read") else f"{c}.{invoked}" if model_name == "kv" \
                else rng.randrange(5)
            pending[c] = [h.invoke(c, f, key, value), f, key, value, False, None]
            invoked += 1
        elif not pending[c][4]:            # take effect now
            op = pending[c]
            state = store.get(op[2], "" if model_name == "kv" else None)
            op[5] = state
            store[op[2]] = (op[3] if op[1] in ("put", "write") else
                            state + op[3] if op[1] == "append" else state)
            op[4] = True
        else:
            op_id, f, *_, result = pending.pop(c)
            if rng.random() < 0.05:
                h.complete(op_id, "info")
            else:
                h.complete(op_id, "ok", result if f in ("get", "read") else None)
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds per history for the baseline (default 20)")
    parser.add_argument("--ops", type=int, default=10_000, help="synthetic kv operations")
    args = parser.parse_args()

    verdicts = json.loads((VECTORS / "verdicts.json").read_text())["linearizable"]
    start = time.perf_counter()
    loaded = {name: read_history(VECTORS / name) for name in sorted(verdicts)}
    parse = time.perf_counter() - start
    groups = {
        "jepsen (102 etcd register histories)": [n for n in verdicts if n.startswith("jepsen/")],
        "kv c01+c10 (4)": [n for n in verdicts if n.startswith("kv/c0") or n.startswith("kv/c1")],
        "kv c50-ok": ["kv/c50-ok.txt"],
        "kv c50-bad": ["kv/c50-bad.txt"],
    }
    print(f"parsing all 108 files: {parse:.2f} s "
          f"({sum(map(len, loaded.values()))} operations)")
    print(f"{'histories':40} {'ours s':>8} {'baseline s':>11} {'ratio':>7}  notes")
    ours_total = 0.0
    for label, names in groups.items():
        batch = [(loaded[n], KVModel() if n.startswith("kv/") else RegisterModel(), verdicts[n])
                 for n in names]
        ours, wrong, unknown = run(batch, 600.0, prune=True)
        base, base_wrong, base_unknown = run(batch, args.budget, prune=False)
        ours_total += ours
        notes = f"wrong={wrong} unknown={unknown}; baseline wrong={base_wrong} " \
                f"keys out of budget={base_unknown}"
        bound = ">=" if base_unknown else "  "
        print(f"{label:40} {ours:8.2f} {base:11.2f} {bound}{base / ours:5.1f}x  {notes}")
    print(f"all 108 vector histories, checking only: {ours_total:.2f} s; "
          f"with parsing: {ours_total + parse:.2f} s")

    for name, model, ops, clients, keys in [("kv", KVModel(), args.ops, 20, 5),
                                            ("kv", KVModel(), args.ops // 5, 10, 1),
                                            ("register", RegisterModel(), 2000, 10, 1)]:
        h = synthetic(name, ops, clients, keys, seed=1)
        result = check(h, model, timeout=600)
        base = check(h, Unpruned(model), timeout=args.budget)
        bound = ">=" if base.verdict is Verdict.UNKNOWN else "  "
        print(f"synthetic {name}: {ops} ops, {clients} clients, {keys} key(s), 5% info: "
              f"{result.verdict.value} in {result.elapsed:.2f} s "
              f"({ops / result.elapsed:,.0f} ops/s); baseline {base.elapsed:.2f} s "
              f"({base.verdict.value}) {bound}{base.elapsed / result.elapsed:.1f}x")


if __name__ == "__main__":
    main()
