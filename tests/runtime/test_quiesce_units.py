"""Quiescing's two pure parts (issue 28): the core's query `RaftNode.can_quiesce` and the
runtime's clock of a quiesced group (`GroupClock`, `Quiescer.wake`), on the in-memory
cluster of the core's tests: when a group may stop ticking, and that a woken leader's
lease is judged by a clock that caught up with the time it slept."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from consensus.raft import PullEntries, Role
from consensus.runtime.group import TurnTicks
from consensus.runtime.quiesce import GroupClock, Quiescer
from tests.raft.harness import OPTIONS, Cluster


class Sleeper:
    """What `Quiescer.wake` touches of a group: its clock, its wake flag and the
    observers' pulls it parked (none)."""

    def __init__(self) -> None:
        self.clock = GroupClock(TurnTicks())
        self.wake_due = False
        self.quiet_observers: set[int] = set()


def quiescer() -> Quiescer:
    """The default node's policy: 10 ms ticks, 30 election ticks, heartbeats every 10."""
    return Quiescer(1, SimpleNamespace(heard={}), tick=0.01, election_ticks=30,
                    heartbeat_ticks=10, peers=lambda: [])


def idle_three():
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.tick(OPTIONS.heartbeat_interval)     # the commit index reaches the followers
    return cluster, leader


def test_an_idle_leader_and_its_followers_may_quiesce_and_asking_changes_nothing():
    cluster, leader = idle_three()
    assert leader.can_quiesce()
    assert all(cluster.nodes[i].can_quiesce() for i in (2, 3))
    before = (leader.status(), leader.has_ready())
    assert leader.can_quiesce() and (leader.status(), leader.has_ready()) == before


def test_a_write_a_read_or_a_transfer_keeps_the_leader_ticking():
    cluster, leader = idle_three()
    leader.propose(b"x")
    assert not leader.can_quiesce()              # appended, not committed
    cluster.deliver()
    assert not leader.can_quiesce()              # committed; the followers not told yet
    cluster.tick(OPTIONS.heartbeat_interval)
    assert leader.can_quiesce()
    leader.read_index(b"r")                      # a read waits for a heartbeat round
    assert not leader.can_quiesce()
    cluster.deliver()
    assert leader.can_quiesce()
    leader.transfer_leader(2)
    assert not leader.can_quiesce()


def test_a_follower_without_a_leader_or_behind_its_commit_may_not_quiesce():
    cluster, leader = idle_three()
    cluster.isolate(1)
    leader.propose(b"lost")
    cluster.tick(OPTIONS.election_timeout_max * 2, ids=[2, 3])
    others = [cluster.nodes[i] for i in (2, 3)]
    assert any(n.role is not Role.FOLLOWER or n.leader_id is None for n in others)
    assert not all(n.can_quiesce() for n in others)


def test_an_observer_may_quiesce_only_caught_up_with_no_pull_in_flight():
    cluster = Cluster([1, 2, 3, 4], replace(OPTIONS, observer_pull_interval=1),
                      voters=[1, 2, 3])
    observer = cluster.start(4, observer=True)
    leader = cluster.elect(1)
    leader.update_observers(add=[4])
    leader.propose(b"a")
    cluster.tick(10)
    assert observer.last_index == observer.commit_index == leader.commit_index
    assert observer.can_quiesce()
    cluster.drop = lambda m: isinstance(m, PullEntries)
    cluster.tick(2, ids=[4])                     # a pull leaves and is lost
    assert not observer.can_quiesce()


def test_a_woken_leader_catches_up_its_clock_and_its_lease_is_over():
    """Quiesced for 1 s at a 10 ms tick, the leader's core saw no tick; waking delivers
    the missed ticks (capped) before anything is stepped, so the lease it held when it
    went quiet - granted by acknowledgements now 1 s old - no longer serves reads."""
    cluster, leader = idle_three()
    assert leader.lease_valid()
    group, policy = Sleeper(), quiescer()
    clock = group.clock
    clock.quiesced_at = 100.0
    policy.quiesced.add(group)
    assert clock.due() == 0                      # quiesced: no ticks whatever came due
    policy.wake(group, 101.0)
    assert clock.quiesced_at is None and group not in policy.quiesced
    due = clock.due()
    assert due == policy.cap >= OPTIONS.lease  # 100 ticks missed, capped at 70
    leader.tick(due)
    assert not leader.lease_valid()
    assert clock.due() == 0                      # the catch-up is delivered once


def test_a_leader_woken_at_once_still_heartbeats_at_once():
    """Woken right after quiescing, a group gets at least a heartbeat interval of ticks:
    the leader's heartbeat round goes out in that turn."""
    group, policy = Sleeper(), quiescer()
    group.clock.quiesced_at = 100.0
    policy.wake(group, 100.001)
    assert group.clock.due() == 10


class IdleLeader(Sleeper):
    """What `Quiescer.after_turn` reads of a group led here (a one-voter group, so its
    quorum is live), and the Quiesce frames it would send."""

    def __init__(self) -> None:
        super().__init__()
        self.group, self.notice, self.quiet_pulls = 1, None, []
        self.idle_since, self.quiet_parent = None, None
        self.inbox, self.client_inbox = [], []
        self.quiescable = True
        self.service = SimpleNamespace(waits_for_time=False)
        self.driver = SimpleNamespace(busy=lambda: False)
        self.raft = SimpleNamespace(
            role=Role.LEADER, removed=False, term=3, last_index=9, progress={1: None},
            configuration=SimpleNamespace(voters={1}), can_quiesce=lambda: self.quiescable)


def test_a_leader_quiesces_only_after_staying_idle_for_two_heartbeat_intervals():
    """Idle at a tick between two writes of a trickle, a leader used to quiesce at once
    and be woken by the next write (a Quiesce and a heartbeat round each time): it now
    waits until it has been idle at its ticks for LINGER_HEARTBEATS intervals, and any
    turn that is not idle starts the wait again."""
    group, policy = IdleLeader(), quiescer()
    sent = []
    policy.transport = SimpleNamespace(heard={}, send_quiesce=lambda *a: sent.append(a))
    assert policy.linger == 2 * 10 * 0.01
    policy.after_turn(group, 100.00, ticked=True)
    policy.after_turn(group, 100.15, ticked=True)
    assert group.clock.quiesced_at is None and not sent
    group.quiescable = False                          # a write: not idle for a turn
    policy.after_turn(group, 100.16, ticked=False)
    group.quiescable = True
    policy.after_turn(group, 100.25, ticked=True)     # 0.25 s after the first idle tick
    assert group.clock.quiesced_at is None and not sent
    policy.after_turn(group, 100.45, ticked=True)     # 0.2 s idle since 100.25
    assert group.clock.quiesced_at == 100.45 and group in policy.quiesced
    assert sent == [(1, 1, 3, 9)]                     # peer, group, term, index
