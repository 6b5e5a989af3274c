"""The Binary Star FSM, driven with explicit times: every transition of the zguide table."""
from __future__ import annotations

import pytest

from connectors.chp.bstar import BinaryStar, SplitBrain
from connectors.chp.periodic import Periodic
from connectors.chp.proto import BstarState, BstarStatus

P, B, A, S = BstarState.PRIMARY, BstarState.BACKUP, BstarState.ACTIVE, BstarState.PASSIVE


def fsm(primary: bool = True, now: float = 100.0) -> BinaryStar:
    return BinaryStar(primary, now, heartbeat=1.0, peer_timeout=2.0)


@pytest.mark.parametrize("start, peer, result", [
    (P, B, A), (P, A, S), (P, P, None), (P, S, None),
    (B, A, S), (B, P, None), (B, B, None), (B, S, None),
    (A, P, None), (A, B, None), (A, S, None),
    (S, P, A), (S, B, A), (S, A, None),
])
def test_peer_state_transitions(start, peer, result):
    star = fsm(primary=start is not B)
    star.state = start
    assert star.on_peer_state(peer, 100.5) == result
    assert star.state == (result or start)


@pytest.mark.parametrize("start, peer", [(A, A), (S, S)])
def test_split_brain_is_fatal(start, peer):
    star = fsm()
    star.state = start
    with pytest.raises(SplitBrain):
        star.on_peer_state(peer, 100.5)


def test_primary_serves_a_client_alone_only_after_the_peer_timeout():
    star = fsm(now=100.0)
    assert not star.on_client_request(101.9) and star.state is P
    assert star.on_client_request(102.0) and star.state is A
    assert star.on_client_request(102.1)


def test_backup_never_serves_before_the_primary_showed_up():
    star = fsm(primary=False, now=100.0)
    assert not star.on_client_request(1000.0) and star.state is B


def test_passive_takes_over_on_a_vote_only_when_the_active_fell_silent():
    star = fsm(primary=False, now=100.0)
    star.on_peer_state(A, 100.0)
    star.on_peer_state(A, 101.0)                 # heartbeats keep it alive
    assert not star.on_client_request(102.9) and star.passive
    assert star.peer_alive(102.9) and not star.peer_alive(103.0)
    assert star.on_client_request(103.0) and star.active
    # the old primary comes back: it sees us active and goes passive, we stay active
    assert star.on_peer_state(P, 110.0) is None and star.active


def test_heartbeats_are_due_every_interval_without_bursts_after_a_stall():
    star = fsm(now=100.0)
    assert star.heartbeat_due(100.0) == BstarStatus(P)
    assert star.heartbeat_due(100.5) is None
    assert star.next_deadline() == 101.0
    assert star.heartbeat_due(101.0) == BstarStatus(P)
    assert star.heartbeat_due(107.3) is not None     # late by several intervals
    assert star.heartbeat_due(107.4) is None and star.next_deadline() == pytest.approx(108.3)


def test_timeouts_must_make_sense():
    with pytest.raises(ValueError, match="peer_timeout"):
        BinaryStar(True, 0.0, heartbeat=1.0, peer_timeout=1.0)


def test_periodic_deadlines():
    tick = Periodic(0.5, 10.0)
    assert not tick.due(9.99) and tick.due(10.0) and not tick.due(10.2)
    assert tick.deadline == 10.5 and tick.due(10.5)
    assert tick.due(13.2) and tick.deadline == pytest.approx(13.7)   # once, no burst
    with pytest.raises(ValueError):
        Periodic(0, 0.0)
