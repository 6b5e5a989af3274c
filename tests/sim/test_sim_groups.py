"""The simulator with many Raft groups per server (issue 28): groups share each server's
disk, crashes and network links; each group is checked on its own and a violation names
its group."""
from __future__ import annotations

import random

import pytest

from consensus.raft import AppendEntries, Entry, EntryType, Ready
from consensus.raft.log import RaftLog
from consensus.sim.__main__ import main
from consensus.sim.cluster import SimCluster, SimSettings, run_seed
from consensus.sim.disk import NodeDisk
from consensus.sim.host import SimHost
from consensus.sim.network import LinkFaults, Packet, SimNetwork


def _entries(*indexes: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, EntryType.APPLICATION, b"") for i in indexes]


@pytest.mark.timeout(60)
def test_many_groups_under_faults_find_no_violation_and_every_group_commits():
    settings = SimSettings(groups=4)
    crashes = messages = packets = 0
    for seed in (0, 1, 2):
        result = run_seed(seed, settings)
        assert result.violation is None, f"seed {seed}: {result.violation}\n" + \
            "\n".join(result.trace[-25:])
        stats = result.stats
        assert stats["groups_without_acks"] == 0, stats     # every group committed writes
        assert stats["acked"] > 4 * 20 and stats["elections"] >= 4, stats
        crashes += stats["crashes"]
        messages += stats["messages"]
        packets += stats["packets"]
    assert crashes > 0      # the servers did crash (taking every group down at once)
    assert messages > packets * 1.1     # packets carried several messages (coalesced)


@pytest.mark.timeout(60)
def test_quiescing_groups_under_faults_find_no_violation_and_every_group_commits():
    """--quiesce: idle groups stop ticking and wake again under every fault, by the
    runtime's rule (sim/quiet.py), and every group still commits and converges."""
    settings = SimSettings(groups=3, quiesce=True)
    quiesces = wakes = 0
    for seed in (0, 1, 2):
        result = run_seed(seed, settings)
        assert result.violation is None, f"seed {seed}: {result.violation}\n" + \
            "\n".join(result.trace[-25:])
        assert result.stats["groups_without_acks"] == 0, result.stats
        quiesces += result.stats["quiesces"]
        wakes += result.stats["wakes"]
    assert quiesces > 30 and wakes > 30, (quiesces, wakes)


@pytest.mark.timeout(60)
def test_a_bug_planted_in_one_group_is_reported_naming_that_group(monkeypatch, capsys):
    """Group 2's replicas skip the AppendEntries consistency check (the planted bug of
    test_sim_runs, in one group only): the run must fail with group 2 named."""
    original_start = SimHost.start

    def start(self):
        original_start(self)
        if self.group == 2:
            log, original = self.node.log, RaftLog.maybe_append

            def sloppy(prev_index, prev_term, commit, entries):
                if log.term(prev_index) is not None:
                    prev_term = log.term(prev_index)
                return original(log, prev_index, prev_term, commit, entries)
            log.maybe_append = sloppy

    monkeypatch.setattr(SimHost, "start", start)
    assert main(["--groups", "3", "--seeds", "20"]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("VIOLATION seed=") and " group 2: " in first, err
    assert any(prop in first for prop in ("Log Matching", "State Machine Safety",
                                          "Leader Completeness")), first
    assert "--groups 3" in err          # the replay command names the groups


@pytest.mark.timeout(60)
def test_same_seed_replays_the_same_run_with_groups():
    settings = SimSettings(groups=3, steps=120)
    first, second = run_seed(4, settings), run_seed(4, settings)
    assert first.trace == second.trace and first.stats == second.stats


def test_a_server_crash_stops_every_group_and_a_restart_boots_them_all():
    cluster = SimCluster(3, SimSettings(groups=3))
    cluster.crash(2)
    assert [g.hosts[2].up for g in cluster.groups] == [False] * 3
    cluster.restart(2)
    assert [g.hosts[2].up for g in cluster.groups] == [True] * 3


def test_groups_start_with_voters_on_different_servers():
    cluster = SimCluster(0, SimSettings(groups=3, nodes=3, spares=2))
    voters = [sorted(s for s, h in g.hosts.items() if h.bootstrap is not None)
              for g in cluster.groups]
    assert voters == [[1, 2, 3], [2, 3, 4], [3, 4, 5]]


def test_one_fsync_makes_every_group_durable():
    disk = NodeDisk(range(2))
    disk.write(0, Ready(entries=_entries(1, 2)))
    disk.write(1, Ready(entries=_entries(1)))
    disk.sync()
    disk.crash(random.Random(0))
    assert [disk.volumes[g].last_index() for g in (0, 1)] == [2, 1]


def test_a_crash_tears_the_shared_write_order_at_one_point():
    """Writes interleave g0:1, g1:1, g0:2, g1:2, g1:3; whatever survives is a prefix of
    that one order, for both groups at once."""
    order = [(0, 1), (1, 1), (0, 2), (1, 2), (1, 3)]
    outcomes = set()
    for seed in range(40):
        disk = NodeDisk(range(2))
        for group, index in order:
            disk.write(group, Ready(entries=_entries(index)))
        disk.crash(random.Random(seed))
        kept = (disk.volumes[0].last_index(), disk.volumes[1].last_index())
        prefixes = [tuple(max((i for g, i in order[:cut] if g == group), default=0)
                          for group in (0, 1)) for cut in range(len(order) + 1)]
        assert kept in prefixes, kept
        outcomes.add(kept)
    assert len(outcomes) >= 4       # tears at many points


def test_a_crash_keeps_the_rewritten_entries_in_their_write_order():
    """A group's truncation rewrites its entry; the older write of it does not count:
    the rewrite survives only with everything written before it."""
    outcomes = set()
    for seed in range(30):
        disk = NodeDisk(range(2))
        disk.write(0, Ready(entries=_entries(1, 2)))
        disk.write(1, Ready(entries=_entries(1)))
        disk.write(0, Ready(entries=_entries(2, term=2)))      # rewrites g0's entry 2
        disk.crash(random.Random(seed))
        v0, v1 = disk.volumes[0], disk.volumes[1]
        assert v0.last_index() < 2 or (v0.term(2) == 2 and v1.last_index() == 1)
        outcomes.add((v0.last_index(), v1.last_index()))
    assert outcomes == {(0, 0), (1, 0), (1, 1), (2, 1)}


def test_a_cut_link_loses_every_group_s_messages_in_the_packet():
    network = SimNetwork(random.Random(0), LinkFaults(coalesce=True))
    beat = [(g, AppendEntries(term=1, source=1, destination=2, prev_log_index=0, prev_log_term=0, entries=[], commit=0, ctx=b"")) for g in range(3)]
    network.send(Packet(1, 2, beat), 0)
    assert [m for p in network.due(1, False) for m in p.messages] == beat
    network.cut_one_way(1, 2)
    network.send(Packet(1, 2, beat), 1)
    assert network.due(2, False) == [] and network.dropped == 3 and network.sent == 6


@pytest.mark.parametrize("groups", ["0", "65"])
def test_cli_rejects_a_bad_group_count(groups, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--groups", groups])
    assert exit_.value.code == 2 and "--groups must be between 1 and 64" in capsys.readouterr().err
