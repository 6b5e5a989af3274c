"""The Binary Star state machine (zguide chapter 4), pure: events and time in, decisions out.

Two servers, a primary and a backup, tell each other their state every heartbeat (one
ASCII digit, `proto.BstarStatus`). Exactly one of them serves clients (ACTIVE); the
other follows it (PASSIVE). Failover needs two things at once: the peer silent for
`peer_timeout` *and* a client request arriving here, i.e. a client voting for this
server by switching to it. A server that cannot accept a request drops it, which is
how the reference peers behave, so clients keep failing over until one answers.

Transitions, identical to the zguide's Python and C `bstar`:

========= =============================== =======================================
state      event                           result
========= =============================== =======================================
PRIMARY    peer BACKUP                     ACTIVE
PRIMARY    peer ACTIVE                     PASSIVE
PRIMARY    client request                  ACTIVE if the peer is dead, else reject
BACKUP     peer ACTIVE                     PASSIVE
BACKUP     client request                  reject
ACTIVE     peer ACTIVE                     `SplitBrain` (both active)
PASSIVE    peer PRIMARY or BACKUP          ACTIVE (the peer restarted)
PASSIVE    peer PASSIVE                    `SplitBrain` (nobody active)
PASSIVE    client request                  ACTIVE if the peer is dead, else reject
========= =============================== =======================================

Times are monotonic seconds supplied by the caller.
"""
from __future__ import annotations

from .periodic import Periodic
from .proto import BstarState, BstarStatus

HEARTBEAT = 1.0      # seconds between state messages
PEER_TIMEOUT = 2.0   # the peer is dead after this much silence (two heartbeats)


class SplitBrain(RuntimeError):
    """Both servers are active, or both passive: the pair cannot go on safely. The
    reference peers abort; so does our server, naming the peer's state."""


class BinaryStar:
    """The FSM of one server of a Binary Star pair."""

    def __init__(self, primary: bool, now: float, *, heartbeat: float = HEARTBEAT,
                 peer_timeout: float = PEER_TIMEOUT) -> None:
        if heartbeat <= 0 or peer_timeout <= heartbeat:
            raise ValueError("bstar: need 0 < heartbeat < peer_timeout, got "
                             f"heartbeat={heartbeat} peer_timeout={peer_timeout}")
        self.state = BstarState.PRIMARY if primary else BstarState.BACKUP
        self.heartbeat = heartbeat
        self.peer_timeout = peer_timeout
        self.peer_expiry = now + peer_timeout
        self._heartbeats = Periodic(heartbeat, now)

    @property
    def active(self) -> bool:
        return self.state is BstarState.ACTIVE

    @property
    def passive(self) -> bool:
        return self.state is BstarState.PASSIVE

    def peer_alive(self, now: float) -> bool:
        return now < self.peer_expiry

    def on_peer_state(self, peer: BstarState, now: float) -> BstarState | None:
        """The peer told us its state. Returns our new state when it changed."""
        self.peer_expiry = now + self.peer_timeout
        state = self.state
        if state is BstarState.PRIMARY:
            if peer is BstarState.BACKUP:
                return self._become(BstarState.ACTIVE)
            if peer is BstarState.ACTIVE:
                return self._become(BstarState.PASSIVE)
        elif state is BstarState.BACKUP:
            if peer is BstarState.ACTIVE:
                return self._become(BstarState.PASSIVE)
        elif state is BstarState.ACTIVE:
            if peer is BstarState.ACTIVE:
                raise SplitBrain("both servers are ACTIVE (split brain): stopping, as the "
                                 "reference peers do; restart one of them")
        elif state is BstarState.PASSIVE:
            if peer in (BstarState.PRIMARY, BstarState.BACKUP):
                return self._become(BstarState.ACTIVE)
            if peer is BstarState.PASSIVE:
                raise SplitBrain("both servers are PASSIVE: stopping, as the reference "
                                 "peers do; restart one of them")
        return None

    def on_client_request(self, now: float) -> bool:
        """A client request (a vote) arrived: may it be served? It may make us ACTIVE;
        check `state` afterwards."""
        state = self.state
        if state is BstarState.ACTIVE:
            return True
        if state is BstarState.BACKUP:
            return False
        # PRIMARY or PASSIVE: take over only when the peer looks dead.
        if now >= self.peer_expiry:
            self._become(BstarState.ACTIVE)
            return True
        return False

    def heartbeat_due(self, now: float) -> BstarStatus | None:
        """The state message to send now, if a heartbeat is due."""
        return BstarStatus(self.state) if self._heartbeats.due(now) else None

    def next_deadline(self) -> float:
        """When `heartbeat_due` next has something to send."""
        return self._heartbeats.deadline

    def _become(self, state: BstarState) -> BstarState:
        self.state = state
        return state


__all__ = ["BinaryStar", "HEARTBEAT", "PEER_TIMEOUT", "SplitBrain"]
