"""What a connection may make a node hold, by how far it is trusted, and one budget for
the bytes all clients hold together (docs/runtime.md, "Bounded memory per connection").

* **Outsiders** (plain JRaft, which has no authentication, and a marker connection before
  its ConnectRequest is accepted) may buffer one small message (`OUTSIDER_FRAME`): a
  header announcing a large body is refused before the body is buffered.
* **Clients** (past the Garlic Farm handshake) get the limits of their calls: one log
  entry of 32 MiB and its headers.
* **Peers** (connections we dialed; an incoming connection once it showed it is a
  configured member) get the wire's full limits, are read first and never wait for the
  budget: no client load may stall heartbeats and votes.

`ClientBudget` counts, for clients and outsiders, the bytes their decoders hold or have
been promised (a message whose head is in will be read to its end) plus their unwritten
output. A connection that would take the total past the budget stops being read
(backpressure) and holds only what it has; it is read again once its claim fits.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from consensus.wire.jraft import DEFAULT_LIMITS, JRaftLimits
from consensus.wire.marker import MarkerLimits

if TYPE_CHECKING:
    from consensus.runtime.connection import Connection

MiB = 1 << 20


class Trust(enum.Enum):
    OUTSIDER = "outsider"
    CLIENT = "client"
    PEER = "peer"


#: the largest message an outsider may send: a vote, a status entry, a 64 KiB snapshot
#: chunk with its configuration (what a peer may send before its first request shows
#: who it is)
OUTSIDER_FRAME = 128 << 10
#: a client's largest call: one 32 MiB entry (`JRaftLimits.max_value_size`) and headers
CLIENT_FRAME = DEFAULT_LIMITS.max_value_size + (64 << 10)

#: bytes read from all clients and outsiders in one loop turn (the rest waits a turn)
CLIENT_READ_PER_TURN = 256 << 10
#: bytes read from one client (outsider) in a turn, so that one cannot take the turn's share
CLIENT_QUANTUM = 64 << 10
OUTSIDER_QUANTUM = 16 << 10
#: bytes read from one peer in a turn
PEER_READ_PER_TURN = 8 * MiB

DEFAULT_CLIENT_BUDGET = 256 * MiB
#: the least budget: a client's largest call must fit twice
MIN_CLIENT_BUDGET = 2 * CLIENT_FRAME
#: a client whose unwritten answers and events pass this is not reading them: closed
MAX_CLIENT_UNWRITTEN = 64 * MiB

_OUTSIDER_JRAFT = JRaftLimits(max_log_data_size=OUTSIDER_FRAME,
                              max_value_size=OUTSIDER_FRAME,
                              max_log_pack_size=OUTSIDER_FRAME,
                              max_snapshot_data=OUTSIDER_FRAME)
_CLIENT_JRAFT = JRaftLimits(max_log_data_size=CLIENT_FRAME)
_OUTSIDER_MARKER = MarkerLimits(max_append_size=OUTSIDER_FRAME,
                                max_entry_size=OUTSIDER_FRAME,
                                max_chunk_size=OUTSIDER_FRAME)
_PEER_MARKER = MarkerLimits()


def jraft_limits(trust: Trust) -> JRaftLimits:
    if trust is Trust.PEER:
        return DEFAULT_LIMITS
    return _CLIENT_JRAFT if trust is Trust.CLIENT else _OUTSIDER_JRAFT


def marker_limits(trust: Trust) -> MarkerLimits:
    return _PEER_MARKER if trust is Trust.PEER else _OUTSIDER_MARKER


def check_client_budget(budget: int) -> int:
    """The `--client-buffer-budget` value, validated (ValueError says why not)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or \
            budget < MIN_CLIENT_BUDGET:
        raise ValueError(f"must be at least {MIN_CLIENT_BUDGET} bytes (two of a client's "
                         f"largest calls), not {budget!r}")
    return budget


class ClientBudget:
    """The bytes clients and outsiders hold, against one budget (see the module doc).

    Each such connection counts its `Connection.reserved` bytes: what its decoder has
    claimed plus its unwritten output while it is read, what it holds while it is paused.
    Sans-I/O: it says which connections to pause and resume; the transport does it.
    """

    def __init__(self, budget: int = DEFAULT_CLIENT_BUDGET) -> None:
        self.budget = check_client_budget(budget)
        self.total = 0
        self.paused: dict["Connection", None] = {}     # in the order they were paused
        self._freed = False

    def account(self, conn: "Connection") -> bool:
        """Count `conn`'s bytes again (after it was read or written); True when it must
        stop being read because its claim does not fit."""
        decoder, out = conn.decoder, len(conn.out)
        if conn.paused:
            new = decoder.held + out
        else:
            new = decoder.claimed + out
            if new > conn.reserved and self.total - conn.reserved + new > self.budget:
                conn.paused = True
                self.paused[conn] = None
                new = decoder.held + out
        self._set(conn, new)
        return conn.paused

    def release(self, conn: "Connection") -> None:
        """`conn` closed, or became a peer: it no longer counts."""
        self._set(conn, 0)
        self.paused.pop(conn, None)
        conn.paused = False

    def resumable(self) -> list["Connection"]:
        """The paused connections whose claims fit now (they count them from here)."""
        if not self._freed or not self.paused:
            return []
        self._freed = False
        resumed = []
        for conn in list(self.paused):
            want = conn.decoder.claimed + len(conn.out)
            if self.total - conn.reserved + want <= self.budget:
                del self.paused[conn]
                conn.paused = False
                self._set(conn, want)
                resumed.append(conn)
        return resumed

    def _set(self, conn: "Connection", new: int) -> None:
        if new < conn.reserved:
            self._freed = True
        self.total += new - conn.reserved
        conn.reserved = new
