"""Where a benchmark case spends its CPU: the CPU seconds of this process and all its
descendants, grouped by what each process is (Spark's JVM, its Python workers, the farm's
nodes, Kafka's brokers...).

On a 2-core machine every side of a comparison competes for the same cores, so wall time
says who won and CPU seconds by process say why: a case that costs more CPU than the
other cannot win once the cores are busy, and the group that costs most is where to look.
psutil reads /proc; a worker that exits during a case loses its last CPU (Spark's Python
workers are reused, the farm's nodes and Kafka's brokers live across cases).
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Callable

import psutil

#: (group, test of "name + command line"), first match wins.
GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("columnar planner", lambda c: "pyspark_farm.jvm.planner" in c),
    ("kafka brokers", lambda c: "java" in c and "kafka.Kafka" in c),
    ("spark JVM", lambda c: "java" in c),
    ("python workers", lambda c: "pyspark" in c or "daemon" in c or "worker" in c),
    ("farm nodes", lambda c: "consensus" in c or "garlicfarm" in c),
)


def group_of(process: psutil.Process) -> str:
    command = process.name() + " " + " ".join(process.cmdline())
    for group, matches in GROUPS:
        if matches(command):
            return group
    return "driver python" if process.pid == psutil.Process().pid else "other"


def cpu_by_group() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and its descendants, by group."""
    me = psutil.Process()
    seconds: dict[str, float] = defaultdict(float)
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            seconds[group_of(process)] += times.user + times.system
        except psutil.Error:        # gone, or a zombie, since the listing
            continue
    return seconds


class CpuLedger:
    """The CPU seconds by group of each run of each case."""

    def __init__(self) -> None:
        self.runs: dict[str, list[dict[str, float]]] = defaultdict(list)

    def measure(self, case: str, action: Callable[[], object]) -> float:
        """Runs `action`, noting its CPU by group; its wall seconds."""
        before = cpu_by_group()
        began = time.perf_counter()
        action()
        seconds = time.perf_counter() - began
        after = cpu_by_group()
        self.runs[case].append({g: after[g] - before.get(g, 0.0) for g in after
                                if after[g] - before.get(g, 0.0) > 0.0005})
        return seconds

    def lines(self, rows: int) -> list[str]:
        """Per case: the median CPU seconds of each group and in all, per million rows."""
        found = []
        for case, runs in self.runs.items():
            groups = sorted({g for run in runs for g in run})
            per = {g: statistics.median(run.get(g, 0.0) for run in runs) * 1e6 / rows
                   for g in groups}
            total = statistics.median(sum(run.values()) for run in runs) * 1e6 / rows
            parts = ", ".join(f"{g} {s:.2f}" for g, s in sorted(per.items(),
                                                                 key=lambda kv: -kv[1]))
            found.append(f"  cpu {case:<16} {total:5.2f} s per 1M rows ({parts})")
        return found
