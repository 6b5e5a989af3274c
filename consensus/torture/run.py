"""``garlicfarm torture``: a real farm of node processes on loopback, KV clients, faults,
a recorded history, and a verdict.

    garlicfarm torture --nodes 5 --wire garlicfarm --duration 60 \\
        --faults kill,partition,restart,pause --clients 5 --history run.edn

1. Start `--nodes` node processes (`LocalCluster`); with partition or delay faults, every
   link between two nodes goes through the fault-injecting proxy (`faultproxy`).
2. Run `--clients` client threads (`workload`): gets, puts, appends and
   compare-and-sets on rotating keys, each recorded with invoke and completion times
   and outcome (ok / fail / info) as EDN lines (`--history`, written as they happen;
   nemesis lines are ``:process :nemesis`` and skipped by checkers).
3. Inject faults one at a time (`nemesis`) for `--duration` seconds; membership
   faults start fresh nodes (`LocalCluster.spawn`) and change the configuration with
   the client API (`TortureFarm.membership_apply` / `membership_heal`).
4. Heal everything (the configuration back to the original voters), restart what is
   down, wait for a leader, read every key.
5. Check: the history with the linearizability checker (kv model), and every
   acknowledged append against the final values (nothing lost, nothing twice).

Exit 0 only when the history is linearizable, nothing acknowledged was lost, the farm
recovered, and no client call failed in an unexpected way; 1 when any of that failed;
2 when the check could not decide (its time ran out, or no write was acknowledged at
all); 3 for bad options or a farm that could not be started. The seed printed with the
verdict replays the same fault schedule choices (not the same timing).
"""
from __future__ import annotations

import argparse
import contextlib
import enum
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TextIO

from consensus.admin import progress_bars as progress_bar
from consensus.admin.admin import console_for, print_json, print_table
from consensus.common.partitions import MAX_PARTITIONS
from consensus.linearizability import CheckResult, History, KVModel, Verdict, check
from consensus.torture.farm import TortureFarm
from consensus.torture.nemesis import MEMBERSHIP_SCHEMES, Fault, Nemesis, NemesisLog
from consensus.torture.workload import (Audit, ClientPool, ClientStats, SharedSink, Workload,
                                        audit_appends, final_reads)

EXIT_PASS, EXIT_FAIL, EXIT_UNKNOWN, EXIT_SETUP = 0, 1, 2, 3
EXPLAIN_LINES = 40          # of the checker's explanation in the text report
DEFAULT_FAULTS = (Fault.KILL, Fault.PARTITION, Fault.RESTART)


class TortureSetupError(Exception):
    """Bad options, or a farm that could not be started; names what to fix."""


@dataclass(frozen=True)
class TortureOptions:
    nodes: int = 5
    wire: str = "garlicfarm"
    duration: float = 60.0
    faults: tuple[Fault, ...] = DEFAULT_FAULTS
    clients: int = 5
    history: Path | None = None
    seed: int | None = None
    keys: int = 3                       # active keys per family
    ops_per_key: int = 200
    quiet: tuple[float, float] = (0.5, 1.5)
    hold: tuple[float, float] = (1.0, 4.0)
    client_timeout: float = 1.0
    recovery_timeout: float = 30.0
    check_timeout: float = 120.0
    fsync: str = "batch"
    partitions: int = 1                 # Raft groups per node; keys spread over them
    reads: str = "lease"                # kv_get consistency of the clients
    cluster: str = "torture"
    data_dir: Path | None = None
    json: bool = False


class TortureOutcome(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


@dataclass
class TortureResult:
    outcome: TortureOutcome
    reasons: list[str]
    seed: int
    elapsed: float
    check: CheckResult | None
    audit: Audit
    clients: ClientStats
    faults: NemesisLog
    history: str | None
    explain: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {TortureOutcome.PASS: EXIT_PASS, TortureOutcome.FAIL: EXIT_FAIL,
                TortureOutcome.UNKNOWN: EXIT_UNKNOWN}[self.outcome]


# --- a run ----------------------------------------------------------------------------------

def run(options: TortureOptions, *, progress: TextIO | None = None) -> TortureResult:
    """One torture run, start to verdict. `progress` gets a line per phase."""
    from consensus.common.errors import FarmError

    seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)

    def say(text: str) -> None:
        if progress is not None:
            progress.write(text + "\n")
            progress.flush()

    started = time.monotonic()
    history_file = open(options.history, "w", encoding="utf-8") if options.history else None
    sink = SharedSink(history_file) if history_file else None
    history = History(sink=sink)
    workload = Workload(random.Random(rng.getrandbits(64)), keys=options.keys,
                        ops_per_key=options.ops_per_key)
    notes: list[str] = []
    try:
        say(f"starting {options.nodes} nodes ({options.wire}, fsync {options.fsync}"
            + (f", {options.partitions} partitions" if options.partitions > 1 else "")
            + f"), seed {seed}")
        with contextlib.closing(TortureFarm(options)) as farm:
            farm.wait_for_leader(timeout=options.recovery_timeout)
            pool = ClientPool(farm.client, history, workload, options.clients, FarmError)
            nemesis = Nemesis(farm, options.faults, random.Random(rng.getrandbits(64)),
                              quiet=options.quiet, hold=options.hold,
                              note=sink.note if sink else None)
            say(f"{options.clients} clients, faults {','.join(f.value for f in options.faults)}"
                f" for {options.duration:g} s")
            pool.start()
            nemesis.start()
            try:
                progress_bar.wait(options.duration, "torture", progress,   # the run itself
                                  status=lambda: _running_status(pool, nemesis))
            finally:
                nemesis.stop()                                 # heals everything
                if not pool.stop(timeout=options.client_timeout * 6 + 10):
                    notes.append("some client threads did not stop in time")
            say("healed; waiting for the farm to recover")
            deadline = time.monotonic() + options.recovery_timeout
            try:
                farm.wait_for_leader(timeout=options.recovery_timeout)
            except Exception as exc:        # noqa: BLE001 - reported as no recovery
                notes.append(f"no leader after healing: {exc}")
            finals = final_reads(lambda: farm.final_client(options.client_timeout),
                                 history, workload.keys, deadline, expected=FarmError)
    except TortureSetupError:
        raise
    except FarmError as exc:
        raise TortureSetupError(f"the farm did not start or answer: {exc}") from exc
    finally:
        if history_file:
            history_file.flush()
            os.fsync(history_file.fileno())
            history_file.close()
    say(f"checking {len(history.events) // 2} operations")
    operations = history.operations()
    audit = audit_appends(operations, finals)
    result = check(operations, KVModel(), timeout=options.check_timeout)
    return judge(TortureResult(
        TortureOutcome.PASS, [], seed, time.monotonic() - started, result, audit, pool.stats,
        nemesis.log, str(options.history) if options.history else None,
        result.explain(KVModel(), limit=5) if result.verdict is not Verdict.LINEARIZABLE
        else "", notes))


def _running_status(pool: ClientPool, nemesis: Nemesis) -> str:
    """The progress bar's text: operations answered so far and faults applied."""
    outcomes = dict(pool.stats.outcomes)
    ok = sum(n for (_, kind), n in outcomes.items() if kind == "ok")
    return f"{ok:,} ok / {sum(outcomes.values()):,} ops, {len(nemesis.log.records)} faults"


def judge(result: TortureResult) -> TortureResult:
    """Fill in the outcome and the reasons from the findings."""
    reasons, unknown = [], []
    if result.check is not None and result.check.verdict is Verdict.NOT_LINEARIZABLE:
        keys = [str(v.key) for v in result.check.violations]
        reasons.append(f"not linearizable (keys {', '.join(keys)})")
    if result.audit.lost:
        reasons.append(f"{len(result.audit.lost)} acknowledged append(s) lost: "
                       + ", ".join(f"{k}:{t}" for k, t in result.audit.lost[:10]))
    if result.audit.duplicated:
        reasons.append(f"{len(result.audit.duplicated)} append(s) applied twice: "
                       + ", ".join(f"{k}:{t}" for k, t in result.audit.duplicated[:10]))
    if result.audit.unreadable:
        reasons.append(f"the farm did not recover: {len(result.audit.unreadable)} key(s) "
                       f"unreadable after healing")
    if result.clients.bugs:
        reasons.append(f"{len(result.clients.bugs)} client call(s) raised an unexpected "
                       f"exception (first: {result.clients.bugs[0].strip().splitlines()[-1]})")
    if result.faults.errors():
        reasons.append("faults could not be applied or healed: "
                       + "; ".join(result.faults.errors()[:3]))
    if result.check is not None and result.check.verdict is Verdict.UNKNOWN:
        unknown.append("the linearizability check ran out of time (--check-timeout)")
    acknowledged = sum(n for (f, kind), n in result.clients.outcomes.items()
                       if kind == "ok" and f in ("put", "append", "cas"))
    if acknowledged == 0:
        unknown.append("no write was acknowledged: nothing was tested")
    result.reasons = reasons or unknown
    result.outcome = (TortureOutcome.FAIL if reasons else
                      TortureOutcome.UNKNOWN if unknown else TortureOutcome.PASS)
    return result


# --- report ---------------------------------------------------------------------------------

def result_document(result: TortureResult) -> dict[str, Any]:
    check_ = result.check
    return {
        "outcome": result.outcome.value, "reasons": result.reasons, "seed": result.seed,
        "elapsed": round(result.elapsed, 3), "history": result.history,
        "linearizability": None if check_ is None else {
            "verdict": check_.verdict.value, "operations": check_.operations,
            "keys": len(check_.partitions), "seconds": round(check_.elapsed, 3),
            "explain": result.explain},
        "client_bugs": result.clients.bugs,
        "appends": {"checked": result.audit.checked, "lost": list(result.audit.lost),
                    "duplicated": list(result.audit.duplicated),
                    "unreadable": list(result.audit.unreadable)},
        "operations": {f"{f}:{kind}": n for (f, kind), n in
                       sorted(result.clients.outcomes.items())},
        "errors": dict(result.clients.errors),
        "faults": [{"fault": r.action.fault.value, "what": r.action.description,
                    "error": r.error, "detail": r.detail} for r in result.faults.records],
        "notes": result.notes,
    }


def render(result: TortureResult, out: TextIO) -> None:
    console = console_for(out)
    functions = sorted({f for f, _ in result.clients.outcomes})
    print_table(console, "operations", ["f", "ok", "fail", "info"],
                ([f, *(result.clients.outcomes.get((f, k), 0) for k in ("ok", "fail", "info"))]
                 for f in functions), right=("ok", "fail", "info"))
    counts = result.faults.counts()
    print_table(console, f"faults ({len(result.faults.records)})", ["fault", "count"],
                sorted(counts.items()), right=("count",))
    if result.clients.errors:
        print_table(console, "client errors", ["error", "count"],
                    result.clients.errors.most_common(), right=("count",))
    check_ = result.check
    if check_ is not None:
        console.print(f"linearizability: {check_.verdict.value} ({check_.operations} "
                      f"operations, {len(check_.partitions)} keys, {check_.elapsed:.2f} s)")
    console.print(f"appends: {result.audit.checked} acknowledged, "
                  f"{len(result.audit.lost)} lost, {len(result.audit.duplicated)} "
                  f"duplicated, {len(result.audit.unreadable)} keys unreadable")
    if result.explain:
        lines = result.explain.splitlines()
        shown = lines[:EXPLAIN_LINES] + ([f"... ({len(lines) - EXPLAIN_LINES} more lines: "
                                          "check the --history file with `python -m "
                                          "consensus.linearizability FILE`)"]
                                         if len(lines) > EXPLAIN_LINES else [])
        console.print("\n".join(shown), markup=False)
    if result.clients.bugs:
        console.print("first unexpected exception of a client call:\n"
                      + result.clients.bugs[0].rstrip(), markup=False)
    for note in result.notes:
        console.print(f"note: {note}", markup=False)
    if result.history:
        console.print(f"history: {result.history}", markup=False)
    verdict = f"{result.outcome.value}: " + ("; ".join(result.reasons) or
                                              "linearizable, nothing acknowledged lost")
    console.print(f"{verdict} (seed {result.seed}, {result.elapsed:.1f} s)", markup=False)


# --- command line ---------------------------------------------------------------------------

def parse_faults(text: str) -> tuple[Fault, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {f.value: f for f in Fault}
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise TortureSetupError(f"--faults: {', '.join(bad) or 'nothing'} is not a fault; "
                                f"choose from {','.join(known)}")
    return tuple(dict.fromkeys(known[n] for n in names))


def _span(text: str, option: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    try:
        span = (float(low), float(high or low))
    except ValueError:
        raise TortureSetupError(f"{option}: {text!r} is not SECONDS or MIN:MAX") from None
    if span[0] < 0 or span[1] < span[0]:
        raise TortureSetupError(f"{option}: needs 0 <= MIN <= MAX, got {text!r}")
    return span


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="garlicfarm torture",
                                description="Start a farm of node processes on loopback, run "
                                            "KV clients while injecting faults, record the "
                                            "history and check it (linearizability, no lost "
                                            "acknowledged write).",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Exit codes: 0 pass, 1 fail, 2 undecided, 3 setup.")
    p.add_argument("--nodes", type=int, default=5, help="voters (default 5)")
    p.add_argument("--wire", default="garlicfarm", choices=("garlicfarm", "marker", "jraft"),
                   help="the peers' wire protocol")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of faults")
    p.add_argument("--faults", default=",".join(f.value for f in DEFAULT_FAULTS),
                   help=f"comma-separated, from {','.join(f.value for f in Fault)}")
    p.add_argument("--clients", type=int, default=5, help="concurrent client threads")
    p.add_argument("--history", metavar="FILE", help="write the history (EDN lines) here")
    p.add_argument("--seed", type=int, help="random seed of the workload and the faults")
    p.add_argument("--keys", type=int, default=3, help="active keys per family")
    p.add_argument("--ops-per-key", type=int, default=200,
                   help="operations before a key is retired for a fresh one")
    p.add_argument("--quiet", default="0.5:1.5", metavar="MIN:MAX",
                   help="seconds between two faults")
    p.add_argument("--hold", default="1:4", metavar="MIN:MAX", help="seconds a fault lasts")
    p.add_argument("--client-timeout", type=float, default=1.0,
                   help="seconds per client call before it counts as unknown (odd clients "
                        "wait three times as long)")
    p.add_argument("--recovery-timeout", type=float, default=30.0,
                   help="seconds the farm gets to recover after healing")
    p.add_argument("--check-timeout", type=float, default=120.0,
                   help="seconds for the linearizability check")
    p.add_argument("--fsync", default="batch", choices=("always", "batch", "never"))
    p.add_argument("--partitions", type=int, default=1,
                   help="Raft groups per node (default 1); each key lives in one of them, "
                        "so every partition's group is tortured (needs --wire garlicfarm; "
                        "not with membership faults)")
    p.add_argument("--reads", default="lease", choices=("lease", "read_index", "sequential"),
                   help="consistency of the clients' reads; 'sequential' lets a deposed "
                        "leader answer without checking its lease, which is not "
                        "linearizable: a run with it must FAIL (a self-test); the final "
                        "reads always use lease")
    p.add_argument("--cluster", default="torture", help="cluster name of the farm")
    p.add_argument("--data-dir", metavar="DIR", help="keep the nodes' data here "
                                                     "(default: a temporary directory)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def parse_options(argv: Sequence[str]) -> TortureOptions:
    """Options from the command line; `TortureSetupError` names the bad one."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    for name, minimum in (("nodes", 1), ("clients", 1), ("keys", 1), ("ops_per_key", 1)):
        if getattr(args, name) < minimum:
            raise TortureSetupError(f"--{name.replace('_', '-')}: must be at least {minimum}")
    for name in ("duration", "client_timeout", "recovery_timeout", "check_timeout"):
        if getattr(args, name) <= 0:
            raise TortureSetupError(f"--{name.replace('_', '-')}: must be positive seconds")
    faults = parse_faults(args.faults)
    if Fault.MEMBERSHIP in faults and not MEMBERSHIP_SCHEMES[args.wire]:
        raise TortureSetupError(f"--faults membership: not on --wire {args.wire} (its "
                                "leader cannot hand over leadership nor remove itself); "
                                "use --wire garlicfarm or marker")
    if not 1 <= args.partitions <= MAX_PARTITIONS:
        raise TortureSetupError(f"--partitions: must be 1 to {MAX_PARTITIONS}, got "
                                f"{args.partitions}")
    if args.partitions > 1 and args.wire != "garlicfarm":
        raise TortureSetupError(f"--partitions {args.partitions}: only --wire garlicfarm "
                                f"names a partition on the wire")
    if args.partitions > 1 and Fault.MEMBERSHIP in faults:
        raise TortureSetupError("--faults membership: not with --partitions > 1 (the "
                                "membership faults change partition 0 only); leave one out")
    if args.data_dir and os.path.isdir(args.data_dir) and os.listdir(args.data_dir):
        raise TortureSetupError(f"--data-dir: {args.data_dir} is not empty; a farm that "
                                "starts from an earlier run's state would make its history "
                                "meaningless: give a new or empty directory")
    return TortureOptions(
        nodes=args.nodes, wire=args.wire, duration=args.duration,
        faults=faults, clients=args.clients,
        history=Path(args.history) if args.history else None, seed=args.seed,
        keys=args.keys, ops_per_key=args.ops_per_key, quiet=_span(args.quiet, "--quiet"),
        hold=_span(args.hold, "--hold"), client_timeout=args.client_timeout,
        recovery_timeout=args.recovery_timeout, check_timeout=args.check_timeout,
        fsync=args.fsync, partitions=args.partitions, reads=args.reads, cluster=args.cluster,
        data_dir=Path(args.data_dir) if args.data_dir else None, json=args.json)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        try:
            options = parse_options(sys.argv[1:] if argv is None else argv)
        except SystemExit as exit_:
            return EXIT_PASS if exit_.code in (0, None) else EXIT_SETUP
        result = run(options, progress=None if options.json else err)
    except TortureSetupError as exc:
        err.write(f"garlicfarm torture: {exc}\n")
        return EXIT_SETUP
    if options.json:
        print_json(out, result_document(result))
    else:
        render(result, out)
    return result.exit_code
