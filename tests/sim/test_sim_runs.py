"""The simulator: the CI run of 300 seeds, determinism, the CLI, and proof that its
checks bite (a planted bug is caught)."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from consensus.raft import Entry, EntryType, HardState, MemoryStorage, Ready
from consensus.raft.log import RaftLog
from consensus.sim.cluster import SimSettings, run_seed
from consensus.sim.disk import SimDisk

CI_SEEDS = 300


@pytest.mark.timeout(600)
def test_ci_seeds_find_no_violation():
    """The CI soak: 300 seeds of 5 voters + 2 spares under the full fault schedule."""
    settings = SimSettings()
    failures = []
    elections = acked = 0
    for seed in range(CI_SEEDS):
        result = run_seed(seed, settings)
        elections += result.stats["elections"]
        acked += result.stats["acked"]
        if result.violation is not None:
            failures.append(f"seed {seed}: {result.violation}\n" + "\n".join(result.trace[-25:]))
    assert not failures, failures[0]
    # The runs did real work: many elections and acknowledged writes.
    assert elections > CI_SEEDS * 5 and acked > CI_SEEDS * 20


@pytest.mark.timeout(60)
def test_same_seed_replays_the_same_run():
    settings = SimSettings(steps=150)
    first, second = run_seed(7, settings), run_seed(7, settings)
    assert first.trace == second.trace and first.stats == second.stats
    assert run_seed(8, settings).trace != first.trace


@pytest.mark.timeout(60)
def test_cli_prints_a_summary_line_and_exits_0():
    out = subprocess.run([sys.executable, "-m", "consensus.sim", "--nodes", "5", "--seeds", "2",
                          "--seed", "11", "--steps", "100"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("seeds=2 steps=") and "violations=0" in last


@pytest.mark.timeout(30)
def test_cli_rejects_bad_arguments():
    out = subprocess.run([sys.executable, "-m", "consensus.sim", "--seeds", "0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--seeds must be at least 1" in out.stderr


@pytest.mark.timeout(120)
def test_a_planted_bug_is_caught(monkeypatch):
    """Skip the AppendEntries consistency check (accept any prev entry that exists): the
    simulator must report a Log Matching violation, with the seed and a trace, and the
    CLI must exit 1."""
    original = RaftLog.maybe_append

    def sloppy(self, prev_index, prev_term, commit, entries):
        if self.term(prev_index) is not None:
            prev_term = self.term(prev_index)
        return original(self, prev_index, prev_term, commit, entries)

    monkeypatch.setattr(RaftLog, "maybe_append", sloppy)
    settings = SimSettings()
    results = [run_seed(seed, settings) for seed in range(20)]
    caught = [r for r in results if r.violation is not None]
    assert caught, "the simulator missed a log-matching bug in 20 seeds"
    assert caught[0].violation.prop in ("Log Matching", "State Machine Safety",
                                        "Leader Completeness")
    assert caught[0].trace


@pytest.mark.timeout(120)
def test_catching_members_up_with_the_latest_snapshot_loses_staged_entries(monkeypatch):
    """Issue 18's defect, planted: a lagging member gets the latest snapshot (as before
    raft/retention.py) and its log starts after staged entries its batches need. The
    whole-batches check must see it (it did in 80 of seeds 0-299)."""
    monkeypatch.setattr(SimDisk, "catch_up_snapshot", MemoryStorage.snapshot)
    settings = SimSettings()
    caught = [r for r in (run_seed(seed, settings) for seed in range(40))
              if r.violation is not None]
    assert caught, "the simulator missed members that lack staged entries in 40 seeds"
    assert {r.violation.prop for r in caught} == {"Whole batches"}


@pytest.mark.timeout(120)
def test_announcing_the_whole_commit_index_to_lagging_followers_is_caught(monkeypatch):
    """Issue 13.1's defect, planted: heartbeats and appends carry the leader's whole
    commit index (a JRaft follower with an empty log trusts it)."""
    from consensus.raft import AppendEntries
    from consensus.raft.replication import Replicator

    def uncapped(self, peer, pr, prev, prev_term, entries):
        state = self.state
        self.outbox.now.append(AppendEntries(term=state.term, source=state.id, destination=peer, prev_log_index=prev, prev_log_term=prev_term,
                                             entries=entries, commit=self.log.committed, ctx=self.reads.stamp()))
    monkeypatch.setattr(Replicator, "emit_append", uncapped)
    caught = [r for r in (run_seed(seed, SimSettings()) for seed in range(5))
              if r.violation is not None]
    assert caught and {r.violation.prop for r in caught} == {"JRaft-safe commit"}


def test_disk_crash_keeps_synced_entries_and_a_prefix_of_the_rest():
    rng = random.Random(5)
    outcomes = set()
    for _ in range(30):
        disk = SimDisk()
        disk.write(Ready(entries=[Entry(1, i, EntryType.APPLICATION, b"") for i in (1, 2)]))
        disk.sync()
        disk.save_hard_state(HardState(1, 1, 0), urgent=True)
        disk.write(Ready(entries=[Entry(1, i, EntryType.APPLICATION, b"") for i in (3, 4, 5)]))
        disk.crash(rng)
        assert 2 <= disk.last_index() <= 5
        assert disk.initial_state() == HardState(1, 1, 0)
        outcomes.add(disk.last_index())
    assert len(outcomes) > 2            # sometimes all, sometimes some, sometimes none


def test_disk_saves_a_lone_commit_index_lazily_as_the_runtime_does():
    disk = SimDisk()
    disk.write(Ready(entries=[Entry(1, i, EntryType.APPLICATION, b"") for i in (1, 2, 3)]))
    disk.sync()
    disk.save_hard_state(HardState(1, 1, 0), urgent=True)
    disk.save_hard_state(HardState(1, 1, 2), urgent=False)
    assert disk.initial_state() == HardState(1, 1, 0)       # not saved yet
    disk.crash(random.Random(0))
    assert disk.initial_state() == HardState(1, 1, 0)       # lost with the crash
    disk.save_hard_state(HardState(1, 1, 3), urgent=False)
    disk.sync()
    assert disk.initial_state() == HardState(1, 1, 3)       # saved with the next sync


def test_disk_never_saves_a_commit_beyond_its_durable_log():
    disk = SimDisk()
    disk.write(Ready(entries=[Entry(1, i, EntryType.APPLICATION, b"") for i in (1, 2)]))
    disk.sync()
    disk.write(Ready(entries=[Entry(1, i, EntryType.APPLICATION, b"") for i in (3, 4)]))
    disk.save_hard_state(HardState(2, 1, 4), urgent=True)
    assert disk.initial_state() == HardState(2, 1, 2)


def test_disk_truncation_is_durable_at_once():
    disk = SimDisk()
    disk.write(Ready(entries=[Entry(1, i, EntryType.APPLICATION, b"") for i in (1, 2, 3)]))
    disk.sync()
    disk.write(Ready(entries=[Entry(2, 2, EntryType.APPLICATION, b"new")]))
    disk.crash(random.Random(0))
    assert disk.last_index() <= 2 and (disk.last_index() < 2 or disk.term(2) == 2)


@pytest.mark.timeout(120)
def test_stale_reads_fail_the_linearizability_check(monkeypatch):
    """The clients' history goes through consensus.linearizability: a state machine that
    answers reads from an older state must be flagged."""
    from consensus.sim.kv import KvMachine

    def stale(self, key):
        return self.previous.get(key) if hasattr(self, "previous") else None

    original_apply = KvMachine.apply

    def remember(self, entry):
        self.previous = dict(getattr(self, "data", {}))
        return original_apply(self, entry)

    monkeypatch.setattr(KvMachine, "query", stale)
    monkeypatch.setattr(KvMachine, "apply", remember)
    results = [run_seed(seed, SimSettings(steps=200)) for seed in range(10)]
    props = {r.violation.prop for r in results if r.violation is not None}
    assert "Linearizability" in props
