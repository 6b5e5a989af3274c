"""Paper tests, in the style of etcd-io/raft's raft_paper_test.go: each checks one rule of
the Raft paper (Ongaro & Ousterhout, "In Search of an Understandable Consensus
Algorithm", extended version) and names the section or figure it comes from. Pre-vote
and CheckQuorum are off here (plain Raft); they have their own tests."""
from __future__ import annotations

import pytest

from consensus.raft import (AppendEntries, AppendEntriesResponse, Configuration, Entry,
                            EntryType, HardState, InstallSnapshot, MemoryStorage, RaftNode,
                            RequestVote, RequestVoteResponse, Role, Snapshot)

from .harness import OPTIONS, Cluster, take

pytestmark = pytest.mark.timeout(30)


def storage_with(terms: list[int], term: int, vote: int | None = None) -> MemoryStorage:
    """A log whose entry i+1 has term terms[i] (distinct data per entry)."""
    storage = MemoryStorage()
    storage.append([Entry(t, i + 1, EntryType.APPLICATION, f"e{i + 1}t{t}".encode())
                    for i, t in enumerate(terms)])
    storage.set_hard_state(HardState(term, vote, 0))
    return storage


def lone(node_id: int = 1, voters=(1, 2, 3), storage: MemoryStorage | None = None, **kw) -> RaftNode:
    from dataclasses import replace
    return RaftNode(node_id, storage or MemoryStorage(), replace(OPTIONS, **kw),
                    configuration=Configuration.of(voters))


def of_type(msgs, cls):
    return [m for m in msgs if isinstance(m, cls)]


# -- §5.1 basics ---------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["follower", "candidate", "leader"])
def test_5_1_higher_term_makes_any_node_a_follower(role):
    """§5.1: if a server sees a larger term, it updates its term and reverts to follower."""
    if role == "follower":
        node = lone()
    else:
        node = lone(voters=(1,)) if role == "leader" else lone()
        for _ in range(OPTIONS.election_timeout_max):
            node.tick()
        take(node)
        assert node.role is (Role.LEADER if role == "leader" else Role.CANDIDATE)
    new_term = node.term + 5
    node.step(AppendEntries(term=new_term, source=2, destination=1, prev_log_index=0, prev_log_term=0, entries=[], commit=0))
    assert node.term == new_term and node.vote is None
    assert node.role is Role.FOLLOWER and node.leader_id == 2
    take(node)
    assert node.log.storage.initial_state().term == new_term     # persisted


def test_5_1_stale_term_requests_are_refused():
    """§5.1: a request with a stale term is rejected (and tells the sender our term)."""
    node = lone(storage=storage_with([1, 2], term=3))
    node.step(AppendEntries(term=2, source=2, destination=1, prev_log_index=2, prev_log_term=2, entries=[Entry(2, 3, EntryType.APPLICATION, b"x")], commit=0))
    replies = of_type(take(node), AppendEntriesResponse)
    assert len(replies) == 1 and not replies[0].success and replies[0].term == 3
    assert node.last_index == 2


# -- §5.2 leader election ---------------------------------------------------------------------
def test_5_2_servers_start_as_followers():
    """§5.2: when servers start up, they begin as followers."""
    assert lone().role is Role.FOLLOWER


def test_5_2_leader_sends_heartbeats_every_interval():
    """§5.2: leaders send periodic heartbeats (empty AppendEntries) to all followers."""
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    leader.tick()           # the no-op's commit index goes out at the first tick
    notices = of_type(cluster.process(1), AppendEntries)
    assert sorted(m.destination for m in notices) == [2, 3]
    assert all(m.commit == leader.commit_index and not m.entries for m in notices)
    cluster.deliver()
    cluster.queue.clear()
    for _ in range(OPTIONS.heartbeat_interval - 2):
        leader.tick()
    assert not of_type(cluster.process(1), AppendEntries)
    leader.tick()
    beats = of_type(cluster.process(1), AppendEntries)
    assert sorted(m.destination for m in beats) == [2, 3]
    assert all(not m.entries for m in beats)


def test_5_2_follower_times_out_and_campaigns():
    """§5.2: a follower that hears nothing for an election timeout increments its term,
    votes for itself and sends RequestVote to every other server."""
    node = lone(voters=(1, 2, 3, 4, 5))
    msgs: list = []
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
        msgs += take(node)
    assert node.role is Role.CANDIDATE and node.term == 1 and node.vote == 1
    votes = of_type(msgs, RequestVote)
    assert sorted(m.destination for m in votes) == [2, 3, 4, 5]
    assert all(m.term == 1 and not m.pre_vote for m in votes)


def test_5_2_election_timeouts_are_randomized():
    """§5.2: election timeouts are chosen randomly from a fixed interval."""
    timeouts = []
    for seed in range(40):
        node = lone(seed=seed)
        elapsed = 0
        while node.role is not Role.CANDIDATE and elapsed < 3 * OPTIONS.election_timeout_max:
            node.tick()
            elapsed += 1
        timeouts.append(elapsed)
    # every node campaigned within [min, max) ticks, and not all at the same moment
    assert all(OPTIONS.election_timeout_min <= t < OPTIONS.election_timeout_max
               for t in timeouts), timeouts
    assert len(set(timeouts)) > 3


@pytest.mark.parametrize("granted,rejected,expected", [
    ({2}, set(), Role.LEADER),                 # 2 of 3
    (set(), {2, 3}, Role.FOLLOWER),            # lost
    (set(), {2}, Role.CANDIDATE),              # undecided
])
def test_5_2_candidate_wins_with_a_majority(granted, rejected, expected):
    """§5.2: a candidate wins with votes from a majority; loses when a majority refuses."""
    node = lone()
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
    take(node)
    for voter in sorted(granted | rejected):
        node.step(RequestVoteResponse(term=node.term, source=voter, destination=1, granted=voter in granted))
    assert node.role is expected


def test_5_2_each_server_votes_once_per_term():
    """§5.2: each server votes for at most one candidate in a term, first come first served."""
    node = lone(voters=(1, 2, 3))
    node.step(RequestVote(term=1, source=2, destination=1, last_log_index=0, last_log_term=0))
    node.step(RequestVote(term=1, source=3, destination=1, last_log_index=0, last_log_term=0))
    node.step(RequestVote(term=1, source=2, destination=1, last_log_index=0, last_log_term=0))      # the same candidate again: yes again
    replies = of_type(take(node), RequestVoteResponse)
    assert [(m.destination, m.granted) for m in replies] == [(2, True), (3, False), (2, True)]
    assert node.hard_state().vote == 2


def test_5_2_candidate_steps_down_for_a_leader_of_its_term():
    """§5.2: a candidate that receives AppendEntries from a leader of its term returns to
    follower."""
    node = lone()
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
    take(node)
    node.step(AppendEntries(term=node.term, source=3, destination=1, prev_log_index=0, prev_log_term=0, entries=[], commit=0))
    assert node.role is Role.FOLLOWER and node.leader_id == 3


# -- §5.3 log replication --------------------------------------------------------------------------
def test_5_3_leader_appends_and_replicates_a_proposal():
    """§5.3: the leader appends the command to its log, then sends AppendEntries with it
    (and the index/term of the entry before it) to every follower."""
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    last, term = leader.last_index, leader.term
    index = leader.propose(b"cmd")
    assert index == last + 1 and leader.log.term(index) == term
    sent = of_type(cluster.process(1), AppendEntries)
    assert sorted(m.destination for m in sent) == [2, 3]
    for msg in sent:
        assert (msg.prev_log_index, msg.prev_log_term) == (last, term)
        assert [(e.index, e.data) for e in msg.entries] == [(index, b"cmd")]


def test_5_3_entry_commits_on_a_majority_and_followers_learn_it():
    """§5.3: an entry is committed once the leader has replicated it on a majority; the
    leader includes its commit index in later AppendEntries so followers apply it."""
    cluster = Cluster([1, 2, 3, 4, 5])
    leader = cluster.elect(1)
    cluster.deliver()
    cluster.cut |= {(1, 3), (1, 4), (1, 5)}
    index = leader.propose(b"x")
    cluster.deliver()
    assert leader.commit_index < index                  # only 2 of 5 have it
    cluster.cut -= {(1, 3)}
    leader.tick(), leader.tick()                        # a heartbeat round: 3 answers
    cluster.deliver()
    for _ in range(OPTIONS.retry):
        cluster.tick(1, ids=[1])
    assert leader.commit_index >= index                 # 3 of 5
    assert [e.data for e in cluster.applied[1]] == [b"x"]
    assert [e.data for e in cluster.applied[3]] == [b"x"]
    assert cluster.applied[4] == []                     # never got it


def test_5_3_committing_an_entry_commits_the_entries_before_it():
    """§5.3: committing an entry also commits all preceding entries, including those of
    previous leaders."""
    storages = {1: storage_with([1, 1], term=1), 2: storage_with([1], term=1),
                3: storage_with([1], term=1)}
    cluster = Cluster([1, 2, 3], storages=storages)
    leader = cluster.elect(1)
    cluster.deliver()
    assert leader.commit_index == leader.last_index == 3
    assert cluster.log_terms(2) == [1, 1, 2]


def test_5_3_follower_refuses_entries_without_a_matching_predecessor():
    """§5.3: the consistency check: a follower refuses AppendEntries unless it holds an
    entry at prev_log_index with prev_log_term."""
    node = lone(storage=storage_with([1, 1, 2], term=2))
    node.step(AppendEntries(term=2, source=2, destination=1, prev_log_index=3, prev_log_term=1, entries=[Entry(2, 4, EntryType.APPLICATION, b"x")], commit=0))
    node.step(AppendEntries(term=2, source=2, destination=1, prev_log_index=5, prev_log_term=2, entries=[Entry(2, 6, EntryType.APPLICATION, b"y")], commit=0))
    node.step(AppendEntries(term=2, source=2, destination=1, prev_log_index=3, prev_log_term=2, entries=[Entry(2, 4, EntryType.APPLICATION, b"z")], commit=0))
    replies = of_type(take(node), AppendEntriesResponse)
    assert [m.success for m in replies] == [False, False, True]
    assert node.last_index == 4 and node.log.slice(4, 5)[0].data == b"z"


def test_5_3_follower_deletes_conflicts_and_appends():
    """§5.3: if an existing entry conflicts with a new one (same index, different term),
    delete it and all that follow, then append the new entries."""
    node = lone(storage=storage_with([1, 1, 2, 2, 2], term=3))
    node.step(AppendEntries(term=3, source=2, destination=1, prev_log_index=2, prev_log_term=1, entries=[Entry(3, 3, EntryType.APPLICATION, b"n3"),
                                            Entry(3, 4, EntryType.APPLICATION, b"n4")], commit=0))
    take(node)
    assert [node.log.term(i) for i in range(1, node.last_index + 1)] == [1, 1, 3, 3]


def test_5_3_follower_applies_what_the_leader_committed():
    """§5.3: once a follower learns an entry is committed, it applies it in log order."""
    node = lone(storage=storage_with([1, 1, 1], term=1))
    node.step(AppendEntries(term=1, source=2, destination=1, prev_log_index=3, prev_log_term=1, entries=[], commit=2))
    rd = node.ready()
    assert [e.index for e in rd.committed_entries] == [1, 2]
    node.advance(rd)


# Figure 7: the leader's log, then the six follower logs (a)-(f) it must bring in line.
FIGURE_7_LEADER = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6]
FIGURE_7_FOLLOWERS = {
    "a": [1, 1, 1, 4, 4, 5, 5, 6, 6],
    "b": [1, 1, 1, 4],
    "c": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
    "d": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
    "e": [1, 1, 1, 4, 4, 4, 4],
    "f": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
}


@pytest.mark.parametrize("case", sorted(FIGURE_7_FOLLOWERS))
def test_figure_7_leader_brings_any_follower_log_in_line(case):
    """Figure 7 / §5.3: whatever a follower's log looks like (missing entries, extra
    uncommitted ones, both), the leader's AppendEntries make it identical to its own."""
    storages = {1: storage_with(FIGURE_7_LEADER, term=7),
                2: storage_with(FIGURE_7_FOLLOWERS[case], term=7),
                3: storage_with([], term=7)}     # votes for 1, whose log is longer
    cluster = Cluster([1, 2, 3], storages=storages)
    leader = cluster.elect(1)
    assert leader.term == 8
    leader.propose(b"new")
    cluster.tick(OPTIONS.heartbeat_interval * 2)
    assert cluster.log_terms(2) == cluster.log_terms(1) == FIGURE_7_LEADER + [8, 8]


# -- §5.4 safety ---------------------------------------------------------------------------------------
def test_5_4_1_vote_requests_carry_the_last_log_position():
    """§5.4.1: RequestVote includes the index and term of the candidate's last entry."""
    node = lone(storage=storage_with([1, 1, 3], term=3))
    msgs = []
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
        msgs += take(node)
    votes = of_type(msgs, RequestVote)
    assert votes and all((m.last_log_index, m.last_log_term) == (3, 3) for m in votes)


@pytest.mark.parametrize("last_index,last_term,granted", [
    (3, 2, True),     # same last term, same length
    (2, 2, False),    # same last term, shorter
    (4, 2, True),     # same last term, longer
    (1, 3, True),     # higher last term, even if shorter
    (9, 1, False),    # lower last term, even if longer
])
def test_5_4_1_votes_go_only_to_up_to_date_candidates(last_index, last_term, granted):
    """§5.4.1: a voter denies its vote if its own log is more up to date than the
    candidate's (compare last terms, then lengths)."""
    node = lone(storage=storage_with([1, 2, 2], term=2))
    node.step(RequestVote(term=3, source=2, destination=1, last_log_index=last_index, last_log_term=last_term))
    reply = of_type(take(node), RequestVoteResponse)[0]
    assert reply.granted is granted


def _acknowledge(leader: RaftNode, follower: int, index: int) -> None:
    """What a follower's success for the request [index] carries (a crafted reply)."""
    leader.step(AppendEntriesResponse(term=leader.term, source=follower, destination=leader.id, success=True, next_index=index + 1,
                                      log_index=index, entry_count=1))


def test_5_4_2_leader_commits_only_entries_of_its_own_term_by_counting():
    """§5.4.2: a leader never commits an entry of a previous term by counting replicas;
    it commits it indirectly, with an entry of its own term."""
    storages = {i: storage_with([1, 2], term=3) for i in (1, 2, 3)}
    cluster = Cluster([1, 2, 3], storages=storages)
    cluster.drop = lambda m: isinstance(m, AppendEntries) and m.source == 1
    leader = cluster.elect(1)           # term 4, appends its no-op at index 3
    _acknowledge(leader, 2, 2)
    _acknowledge(leader, 3, 2)
    assert leader.progress[2].match == 2
    assert leader.commit_index == 0     # index 2 is on all three, but it is of term 2
    cluster.drop = lambda m: False
    cluster.tick(OPTIONS.retry + 1, ids=[1])
    assert leader.commit_index == 3     # the no-op of term 4 committed, and 2 with it


def test_figure_8_an_entry_replicated_on_a_majority_can_still_be_overwritten():
    """Figure 8 (c)-(d): S1 leads term 4 and has replicated index 2 (term 2) on S1-S3,
    but not committed it. S1 crashes; S5 (index 2 of term 3) wins term 5 with S2-S4's
    votes and overwrites index 2 - which is why (c) must not count it committed."""
    storages = {1: storage_with([1, 2], term=3), 2: storage_with([1, 2], term=3),
                3: storage_with([1, 2], term=3), 4: storage_with([1], term=3),
                5: storage_with([1, 3], term=3)}
    cluster = Cluster([1, 2, 3, 4, 5], storages=storages)
    cluster.drop = lambda m: isinstance(m, AppendEntries) and m.source == 1 and bool(m.entries)
    s1 = cluster.elect(1)
    assert s1.term == 4
    for follower in (2, 3):
        _acknowledge(s1, follower, 2)
    assert s1.commit_index < 2
    cluster.isolate(1)                  # S1 crashes
    s5 = cluster.elect(5)
    assert s5.term == 5
    cluster.tick(OPTIONS.heartbeat_interval * 2, ids=[2, 3, 4, 5])
    for node_id in (2, 3, 4, 5):
        assert cluster.log_terms(node_id)[:2] == [1, 3]
    assert all(cluster.nodes[i].commit_index >= 2 for i in (2, 3, 4, 5))


def test_figure_8_an_entry_of_the_current_term_protects_the_older_ones():
    """Figure 8 (e): once S1 replicates an entry of its own term on a majority, index 2
    is committed and S5 can no longer win an election."""
    storages = {1: storage_with([1, 2], term=3), 2: storage_with([1, 2], term=3),
                3: storage_with([1, 2], term=3), 4: storage_with([1], term=3),
                5: storage_with([1, 3], term=3)}
    cluster = Cluster([1, 2, 3, 4, 5], storages=storages)
    cluster.cut |= {(1, 4), (1, 5)}
    s1 = cluster.elect(1)
    cluster.tick(OPTIONS.heartbeat_interval, ids=[1])
    assert s1.commit_index == 3 and cluster.log_terms(2) == [1, 2, 4]
    cluster.isolate(1)
    s5 = cluster.nodes[5]
    while s5.role is not Role.LEADER:      # S5 only wins once it holds index 2 and 3
        assert s5.term < 20
        s5.tick()
        cluster.deliver()
        assert s5.log.term(2) == 2 or s5.role is not Role.LEADER
    for node_id in (2, 3, 4, 5):
        assert cluster.log_terms(node_id)[:3] == [1, 2, 4]


# -- §6 cluster membership changes -------------------------------------------------------------------
def test_6_joint_consensus_needs_majorities_of_both_configurations():
    """§6: in C_old,new, agreement (for elections and commits) requires separate
    majorities from both the old and the new configuration."""
    cluster = Cluster([1, 2, 3, 4, 5, 6], voters=[1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    cluster.cut |= {(1, 5), (1, 6)}         # C_new = {1, 4, 5, 6}: only 1 and 4 reachable
    index = leader.change_voters([1, 4, 5, 6])
    assert leader.configuration.is_joint
    cluster.tick(OPTIONS.heartbeat_interval * 3, ids=[1])
    assert leader.commit_index < index      # old majority yes, new majority no
    cluster.heal()
    cluster.tick(OPTIONS.heartbeat_interval * 3, ids=[1])
    assert leader.commit_index >= index + 1     # C_old,new, then C_new, committed
    assert not leader.configuration.is_joint
    assert leader.configuration.voters == {1, 4, 5, 6}


def test_6_a_leader_not_in_c_new_steps_down_once_c_new_commits():
    """§6: a leader that is not part of C_new manages the cluster until C_new commits,
    then steps down."""
    cluster = Cluster([1, 2, 3, 4])
    leader = cluster.elect(1)
    cluster.deliver()
    leader.change_voters([2, 3, 4])
    cluster.tick(OPTIONS.heartbeat_interval * 3, ids=[1])
    assert leader.role is Role.FOLLOWER
    assert leader.configuration.voters == {2, 3, 4}
    cluster.tick(OPTIONS.election_timeout_max * 2, ids=[2, 3, 4])
    assert any(cluster.nodes[i].role is Role.LEADER for i in (2, 3, 4))


def test_6_configuration_rolls_back_when_its_entry_is_truncated():
    """§6 (and JournalKeeper): a server uses the latest configuration in its log,
    committed or not; when that entry is truncated, it reverts to the previous one."""
    joint = Configuration(frozenset({1, 2, 4}), frozenset({1, 2, 3}))
    storage = storage_with([1], term=2)
    storage.append([Entry(2, 2, EntryType.CONFIGURATION, joint.encode())])
    node = lone(3, voters=(1, 2, 3), storage=storage)
    assert node.configuration.is_joint
    node.step(AppendEntries(term=3, source=1, destination=3, prev_log_index=1, prev_log_term=1, entries=[Entry(3, 2, EntryType.NOOP, b"")], commit=1))
    assert node.configuration == Configuration.of([1, 2, 3])


# -- §7 log compaction --------------------------------------------------------------------------------
def test_7_leader_sends_a_snapshot_to_a_follower_behind_its_log():
    """§7: when the entries a follower needs were compacted away, the leader sends its
    snapshot (InstallSnapshot, in chunks); the follower replaces its log with it."""
    from dataclasses import replace
    options = replace(OPTIONS, snapshot_chunk_bytes=4)
    cluster = Cluster([1, 2, 3], options)
    leader = cluster.elect(1)
    cluster.isolate(3)
    for k in range(5):
        leader.propose(b"v%d" % k)
    cluster.tick(2)
    applied = leader.applied_index
    snap = leader.snapshot_at(applied, b"state-after-%d" % applied)
    cluster.storages[1].create_snapshot(snap)
    cluster.storages[1].compact(applied)
    cluster.heal()
    chunks = []
    cluster.drop = lambda m: chunks.append(m) if isinstance(m, InstallSnapshot) else False
    cluster.tick(OPTIONS.heartbeat_interval * 4)
    assert len(chunks) == -(-len(snap.data) // 4) and chunks[-1].done
    follower = cluster.nodes[3]
    assert follower.log.first_index() == applied + 1
    assert cluster.storages[3].snapshot() == Snapshot(snap.index, snap.term,
                                                      snap.configuration, snap.data)
    assert follower.commit_index >= applied
