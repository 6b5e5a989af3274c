"""Reads: ReadIndex (confirmed by a heartbeat round), JournalKeeper's lease check,
reads forwarded by followers, and two-step reads over sparse snapshots."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from consensus.raft import (AppendEntries, AppendEntriesResponse, Entry, NotLeader,
                            PullStatus, ReadStatus, RequestVote, RequestVoteResponse, Role,
                            Snapshot)

from .harness import OPTIONS, Cluster, take
from .test_raft_paper import lone, of_type

pytestmark = pytest.mark.timeout(30)


def three(**kw) -> tuple[Cluster, object]:
    cluster = Cluster([1, 2, 3], replace(OPTIONS, **kw))
    leader = cluster.elect(1)
    cluster.deliver()
    return cluster, leader


def test_read_index_waits_for_a_quorum_round():
    cluster, leader = three()
    cluster.cut |= {(1, 2), (1, 3)}
    leader.read_index(b"r1")
    cluster.deliver()
    assert cluster.read_states[1] == []                 # nobody confirmed leadership
    cluster.heal()
    leader.read_index(b"r2")
    cluster.deliver()
    states = {s.ctx: s for s in cluster.read_states[1]}
    assert states[b"r1"].status is ReadStatus.OK and states[b"r2"].status is ReadStatus.OK
    assert states[b"r2"].index == leader.commit_index


def test_read_index_is_refused_by_a_deposed_leader():
    cluster, leader = three()
    cluster.isolate(1)
    leader.read_index(b"stale")
    for _ in range(OPTIONS.election_timeout_max):
        leader.tick()
        cluster.deliver()
    statuses = [s.status for s in cluster.read_states[1]]
    assert statuses == [ReadStatus.TIMEOUT]


def test_read_index_fails_when_leadership_is_lost():
    cluster, leader = three()
    cluster.isolate(1)
    leader.read_index(b"r")
    cluster.deliver()
    leader.step(AppendEntries(term=leader.term + 1, source=2, destination=1, prev_log_index=0, prev_log_term=0, entries=[], commit=0))
    cluster.process(1)
    assert [s.status for s in cluster.read_states[1]] == [ReadStatus.NOT_LEADER]


def test_new_leader_serves_reads_only_after_committing_in_its_term():
    """A new leader's commit index may lag writes acknowledged by its predecessor until
    its own no-op commits; reads wait for that."""
    cluster = Cluster([1, 2, 3])
    cluster.drop = lambda m: isinstance(m, AppendEntriesResponse)
    leader = cluster.elect(1)
    leader.read_index(b"early")
    cluster.deliver()
    assert cluster.read_states[1] == []
    cluster.drop = lambda m: False
    cluster.tick(OPTIONS.retry + 1, ids=[1])
    states = cluster.read_states[1]
    assert [s.ctx for s in states] == [b"early"] and states[0].index == leader.commit_index


def test_lease_read_answers_at_once_while_the_lease_holds():
    cluster, leader = three()
    cluster.tick(OPTIONS.heartbeat_interval)            # fresh acknowledgements
    assert leader.lease_valid()
    leader.read_index(b"fast", lease=True)
    rd = leader.ready()                                 # no round trip needed
    assert [s.ctx for s in rd.read_states] == [b"fast"]
    leader.log.storage.persist(rd)
    leader.advance(rd)


def test_lease_expires_without_fresh_acknowledgements():
    cluster, leader = three()
    cluster.tick(OPTIONS.heartbeat_interval)
    cluster.isolate(1)
    for _ in range(OPTIONS.lease):
        leader.tick()
        cluster.deliver()
    assert not leader.lease_valid()
    leader.read_index(b"slow", lease=True)             # falls back to a round: none comes
    cluster.deliver()
    assert cluster.read_states[1] == []


def test_follower_in_a_lease_refuses_to_vote():
    """The lease is safe because a follower that heard from the leader within the
    shortest election timeout ignores candidates (CheckQuorum's lease)."""
    node = lone(2, check_quorum=True)
    node.step(AppendEntries(term=1, source=1, destination=2, prev_log_index=0, prev_log_term=0, entries=[], commit=0))
    take(node)
    node.step(RequestVote(term=2, source=3, destination=2, last_log_index=5, last_log_term=1))
    assert node.term == 1 and not of_type(take(node), RequestVoteResponse)
    node.step(RequestVote(term=2, source=3, destination=2, last_log_index=5, last_log_term=1, leader_transfer=True))     # TimeoutNow's campaign
    assert of_type(take(node), RequestVoteResponse)[0].granted


def test_restarted_node_refuses_votes_for_a_while():
    """A node may have acknowledged a leader just before crashing: after a restart it
    waits out one election timeout before it votes for anyone new."""
    node = lone(2, check_quorum=True)
    node.step(RequestVote(term=1, source=3, destination=2, last_log_index=0, last_log_term=0))
    assert not take(node)
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
    take(node)
    node.step(RequestVote(term=node.term + 1, source=3, destination=2, last_log_index=0, last_log_term=0))
    assert of_type(take(node), RequestVoteResponse)[0].granted


def test_follower_read_is_forwarded_to_the_leader():
    cluster, leader = three()
    follower = cluster.nodes[2]
    follower.read_index(b"via-follower")
    cluster.deliver()
    assert [(s.ctx, s.status) for s in cluster.read_states[2]] == [(b"via-follower", ReadStatus.OK)]
    assert cluster.read_states[2][0].index == leader.commit_index
    lost = cluster.nodes[3]
    lost.leader_id = None
    with pytest.raises(NotLeader):
        lost.read_index(b"x")


class Register:
    """A tiny StateMachine: the last value put."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def apply(self, entry: Entry) -> None:
        self.values.append(entry.data)

    def snapshot(self) -> bytes:
        return json.dumps([v.decode() for v in self.values]).encode()

    def restore(self, data: bytes) -> None:
        self.values = [v.encode() for v in json.loads(data)]

    def query(self, query: str) -> list[bytes]:
        return list(self.values)


class Snapshots:
    def __init__(self) -> None:
        self.by_index: dict[int, Snapshot] = {}

    def nearest_at_or_below(self, index: int) -> Snapshot | None:
        below = [i for i in self.by_index if i <= index]
        return self.by_index[max(below)] if below else None


def test_two_step_read_answers_from_the_state_at_exactly_that_index():
    """JournalKeeper's querySnapshot: rebuild from the nearest sparse snapshot at or
    below the index, replay the log after it; OVERFLOW beyond what is applied,
    UNDERFLOW below what snapshots and log still cover."""
    cluster, leader = three()
    follower = cluster.nodes[3]
    machine, snapshots = Register(), Snapshots()
    for k in range(6):
        leader.propose(b"v%d" % k)
        cluster.deliver()
        cluster.tick(1)
        if k in (1, 3):
            applied = follower.applied_index
            machine.values = [e.data for e in cluster.applied[3]]
            snapshots.by_index[applied] = follower.snapshot_at(applied, machine.snapshot())
    leader.read_index(b"step1")
    cluster.deliver()
    index = cluster.read_states[1][0].index
    result = follower.query_snapshot(index, "all", snapshots, Register)
    assert result.status is PullStatus.SUCCESS
    assert result.result == [e.data for e in cluster.applied[3] if e.index <= index]
    middle = min(snapshots.by_index) + 1           # between two snapshots: replayed
    assert follower.query_snapshot(middle, "all", snapshots, Register).result == \
        [e.data for e in cluster.applied[3] if e.index <= middle]
    assert follower.query_snapshot(index + 5, "all", snapshots,
                                   Register).status is PullStatus.INDEX_OVERFLOW
    cluster.storages[3].create_snapshot(snapshots.by_index[max(snapshots.by_index)])
    cluster.storages[3].compact(max(snapshots.by_index))
    del snapshots.by_index[min(snapshots.by_index)]
    assert follower.query_snapshot(1, "all", snapshots, Register).status is \
        PullStatus.INDEX_UNDERFLOW


def test_a_stall_is_not_taken_for_silence():
    """A node starved of CPU gets the missed ticks at once (tick(count)), with nothing
    heard between them. Its leader must not step down at a CheckQuorum period that ended
    in the stall before its followers could answer, nor its follower time out: the same
    time ticked one by one (a leader cut off, a silent leader) does both."""
    options = replace(OPTIONS, pre_vote=True, check_quorum=True)
    cluster = Cluster([1, 2, 3], options)
    leader = cluster.elect(1)
    term = leader.term
    cluster.tick(options.heartbeat_interval)            # the followers answered
    stall = 3 * options.election_timeout_max
    for node in cluster.nodes.values():                 # the whole machine stalled
        node.tick(stall)
    cluster.deliver()
    assert [n.role for n in cluster.nodes.values()] == \
        [Role.LEADER, Role.FOLLOWER, Role.FOLLOWER] and leader.term == term
    cluster.tick(2 * options.election_timeout_max)      # and it goes on
    assert leader.role is Role.LEADER and leader.term == term

    cluster.isolate(1)                  # a leader stalled while cut off still steps down
    leader.tick(stall)                  # (the deferred verdict may still see the answers
    for _ in range(2 * options.heartbeat_interval + options.election_timeout_min):
        leader.tick()                   # from before: then at the next period)
    assert leader.role is not Role.LEADER

    follower = cluster.nodes[2]         # and a follower ticked one by one times out
    for _ in range(options.election_timeout_max):
        follower.tick()
    assert follower.role is not Role.FOLLOWER


def test_pre_vote_does_not_disturb_a_healthy_cluster():
    """PreVote (dissertation §9.6): a node that was partitioned away and comes back does
    not raise its term or depose the leader, since nobody grants its pre-vote."""
    cluster = Cluster([1, 2, 3], replace(OPTIONS, pre_vote=True, check_quorum=True))
    leader = cluster.elect(1)
    term = leader.term
    cluster.isolate(3)
    for _ in range(OPTIONS.election_timeout_max * 4):
        cluster.tick(1)
    assert cluster.nodes[3].term == term            # pre-votes failed: no term inflation
    cluster.heal()
    cluster.tick(OPTIONS.election_timeout_max * 2)
    assert leader.role is Role.LEADER and leader.term == term


def test_check_quorum_makes_a_cut_off_leader_step_down():
    cluster = Cluster([1, 2, 3], replace(OPTIONS, check_quorum=True))
    leader = cluster.elect(1)
    cluster.isolate(1)
    for _ in range(OPTIONS.election_timeout_min * 2):
        leader.tick()
        cluster.deliver()
    assert leader.role is not Role.LEADER
    with pytest.raises(NotLeader):
        leader.propose(b"x")


def test_lease_lapses_at_a_non_voter_that_stops_hearing_the_leader():
    """A node that cannot campaign (here: not a voter) still forgets a silent leader
    after an election timeout, or its stale lease would refuse every vote and keep a
    joint configuration that needs it from ever electing a leader (found by the
    10,000-seed soak)."""
    node = lone(2, voters=(1, 3), check_quorum=True)
    node.step(AppendEntries(term=1, source=1, destination=2, prev_log_index=0, prev_log_term=0, entries=[], commit=0))
    take(node)
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
    assert node.leader_id is None and node.role is Role.FOLLOWER
    node.step(RequestVote(term=2, source=3, destination=2, last_log_index=5, last_log_term=1))
    assert of_type(take(node), RequestVoteResponse)[0].granted
