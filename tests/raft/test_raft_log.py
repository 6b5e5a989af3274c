"""The log view (unstable tail over Storage), MemoryStorage, options, the Ready contract."""
from __future__ import annotations

import pytest

from consensus.raft import (AppendEntries, CompactedError, Configuration, Entry, EntryType,
                            HardState, MemoryStorage, OptionsError, RaftError, RaftNode,
                            RaftOptions, Snapshot, StorageStateError, UnavailableError)
from consensus.raft.log import RaftLog

from .test_raft_paper import lone, storage_with

pytestmark = pytest.mark.timeout(30)


def entries(first: int, terms: list[int]) -> list[Entry]:
    return [Entry(t, first + i, EntryType.APPLICATION, b"%d" % (first + i)) for i, t in enumerate(terms)]


def test_log_reads_across_storage_and_the_unstable_tail():
    log = RaftLog(storage_with([1, 1, 2], term=2))
    log.append(entries(4, [2, 3]))
    assert log.last_index() == 5 and [e.index for e in log.slice(2, 6)] == [2, 3, 4, 5]
    assert log.term(3) == 2 and log.term(5) == 3 and log.term(6) is None and log.term(0) == 0
    assert [e.index for e in log.slice(1, 6, max_bytes=1)] == [1]     # at least one


def test_truncating_the_unstable_tail_rolls_back_persisted_and_configuration():
    log = RaftLog(storage_with([1, 1], term=1))
    config = Configuration.of([1, 2])
    log.append([Entry(1, 3, EntryType.CONFIGURATION, config.encode())])
    assert log.configuration == config and log.configuration_index == 3
    log.append(entries(2, [2]))                  # conflict at 2: cut 2 and 3
    assert log.last_index() == 2 and log.persisted == 1
    assert log.configuration_index == 0


def test_log_refuses_gaps_and_overwriting_committed_entries():
    log = RaftLog(storage_with([1, 1, 1], term=1))
    with pytest.raises(RaftError, match="gap"):
        log.append(entries(6, [1]))
    log.commit_to(2)
    with pytest.raises(RaftError, match="committed"):
        log.append(entries(2, [2]))
    with pytest.raises(RaftError, match="beyond"):
        log.commit_to(9)


def test_stable_to_ignores_entries_replaced_meanwhile():
    log = RaftLog(MemoryStorage())
    log.append(entries(1, [1, 1]))
    log.append(entries(2, [2]))                  # replaced before the first was persisted
    log.stable_to(2, 1)
    assert log.persisted == 0 and log.unstable_offset == 1


def test_memory_storage_compaction_and_snapshots():
    storage = storage_with([1, 1, 2, 2], term=2)
    with pytest.raises(RaftError, match="needs a snapshot"):
        storage.compact(2)
    storage.create_snapshot(Snapshot(3, 2, Configuration.of([1]), b"s"))
    storage.compact(2)
    assert storage.first_index() == 3 and storage.term(2) == 1
    with pytest.raises(CompactedError):
        storage.term(1)
    with pytest.raises(CompactedError):
        storage.entries(2, 4)
    with pytest.raises(UnavailableError):
        storage.term(5)
    storage.apply_snapshot(Snapshot(10, 4, Configuration.of([1]), b"t"))
    assert (storage.first_index(), storage.last_index(), storage.term(10)) == (11, 10, 4)


def test_restart_rejects_a_log_that_lost_committed_entries():
    storage = storage_with([1, 1], term=1)
    storage.set_hard_state(HardState(1, None, 5))
    with pytest.raises(StorageStateError, match="lost durable entries"):
        lone(storage=storage)


@pytest.mark.parametrize("kwargs,option", [
    ({"election_timeout_min": 0}, "election_timeout_min"),
    ({"election_timeout_max": 10, "election_timeout_min": 10}, "election_timeout_max"),
    ({"heartbeat_interval": 20}, "heartbeat_interval"),
    ({"lease_ticks": 15}, "lease_ticks"),
])
def test_options_name_the_bad_setting(kwargs, option):
    with pytest.raises(OptionsError) as info:
        RaftOptions(**kwargs)
    assert info.value.option == option and option in str(info.value)


def test_default_timing_mimics_the_paper_at_a_10ms_tick():
    opts = RaftOptions()
    assert (opts.election_timeout_min * 10, opts.election_timeout_max * 10) == (150, 300)
    assert opts.heartbeat_interval * 10 == 50 and opts.lease < opts.election_timeout_min


def test_ready_must_be_advanced_before_the_next_one():
    node = lone(voters=(1,))
    rd = node.ready()
    with pytest.raises(RaftError, match="advance"):
        node.ready()
    with pytest.raises(RaftError, match="advance"):
        node.advance(type(rd)())
    node.advance(rd)
    node.ready()


def test_misrouted_message_is_refused():
    from consensus.raft import AppendEntries
    with pytest.raises(RaftError, match="for node 7"):
        lone().step(AppendEntries(term=1, source=2, destination=7, prev_log_index=0, prev_log_term=0, entries=[], commit=0))


def test_node_id_must_be_positive():
    with pytest.raises(ValueError, match="node_id"):
        RaftNode(0, MemoryStorage())


def test_entries_that_do_not_follow_prev_are_refused_untouched():
    from consensus.raft import AppendEntries, InvalidMessage
    node = lone(2, storage=storage_with([1, 1], term=1))
    bad = AppendEntries(term=1, source=1, destination=2, prev_log_index=2, prev_log_term=1, entries=[Entry(1, 5, EntryType.APPLICATION, b"x")], commit=0)
    with pytest.raises(InvalidMessage) as info:
        node.step(bad)
    assert info.value.field == "entries" and "follow index 2" in str(info.value)
    assert node.last_index == 2 and node.leader_id is None


def test_no_application_snapshot_while_a_leaders_snapshot_is_pending():
    """A leader's snapshot that arrives between ready() and advance() replaces the log;
    until it is persisted, snapshot_at refuses (found by the 10,000-seed soak)."""
    from consensus.raft import InstallSnapshot
    node = lone(2, storage=storage_with([1, 1, 1], term=1))
    node.step(AppendEntries(term=1, source=1, destination=2, prev_log_index=3, prev_log_term=1, entries=[], commit=3))
    rd = node.ready()
    node.step(InstallSnapshot(term=1, source=1, destination=2, snapshot_index=10, snapshot_term=1, configuration=Configuration.of([1, 2, 3]), offset=0, data=b"s", done=True, commit=10))
    node.log.storage.persist(rd)
    node.advance(rd)
    assert node.applied_index == 3 and node.installing_snapshot
    with pytest.raises(RaftError, match="installing_snapshot"):
        node.snapshot_at(3, b"state")
    rd = node.ready()
    assert rd.snapshot.index == 10
    node.log.storage.persist(rd)
    node.advance(rd)
    assert not node.installing_snapshot and node.applied_index == 10


def test_a_snapshot_with_an_empty_configuration_keeps_the_receivers():
    """A node that joined without the bootstrap configuration labels its snapshots below
    its first configuration entry with the empty one (the 10,000-seed soak's seed 5609:
    an observer installed one and then knew nobody to pull from). The receiver keeps its
    own configuration; the configuration entries after the snapshot replace it."""
    from consensus.raft import InstallSnapshot
    node = lone(2)
    node.step(InstallSnapshot(term=1, source=1, destination=2, snapshot_index=10, snapshot_term=1, configuration=Configuration.of(()), offset=0, data=b"s", done=True, commit=10))
    rd = node.ready()
    assert rd.snapshot.index == 10 and rd.snapshot.configuration == Configuration.of([1, 2, 3])
    node.log.storage.persist(rd)
    node.advance(rd)
    assert node.configuration == Configuration.of([1, 2, 3])
    assert node.last_index == 10
    node.step(InstallSnapshot(term=1, source=1, destination=2, snapshot_index=20, snapshot_term=1, configuration=Configuration.of([1, 2]), offset=0, data=b"t", done=True, commit=20))
    rd = node.ready()
    assert rd.snapshot.configuration == Configuration.of([1, 2])   # a real one is taken
