"""Dialing peers off the loop: a short thread per attempt (TLS, proxies and the digest
handshake block), a backoff per peer, and a bounded queue for the messages that wait
for the connection. The loop owns the state; the threads only hand their result back
(`hand_off`), which the loop takes with `dialed`."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from consensus.net.backoff import Backoff
from consensus.net.dial import Dialed, dial
from consensus.net.security import Security
from consensus.raft import Message

log = logging.getLogger("garlicfarm.transport")

MAX_QUEUED_PER_PEER = 4096
DIAL_TIMEOUT = 5.0

#: (peer id, wire kind): a node may be dialed once per wire it speaks
PeerKey = tuple[int, str]


@dataclass
class _Dialing:
    queue: deque = field(default_factory=deque)
    in_progress: bool = False
    next_attempt: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(0.05, 1.0, jitter=False))
    error: str | None = None        #: why the last attempt failed (None: it succeeded)


class PeerDialer:
    """The attempts to connect to peers (see the module docstring)."""

    def __init__(self, *, node_id: int, security: Security,
                 address_of: Callable[[int], str | None],
                 hand_off: Callable[[tuple], None]) -> None:
        self.node_id = node_id
        self.security = security
        self.address_of = address_of
        self.hand_off = hand_off
        self.closing = False
        self._dialing: dict[PeerKey, _Dialing] = {}

    def queue(self, key: PeerKey, msg: Message, group: int) -> None:
        """Keep `msg` for the connection being dialed (the oldest go past the bound; with
        no dial under way, while backing off, Raft retries on its own)."""
        state = self._dialing.get(key)
        if state is None or not state.in_progress:
            return
        if len(state.queue) >= MAX_QUEUED_PER_PEER:
            state.queue.popleft()
        state.queue.append((msg, group))

    def start(self, key: PeerKey) -> None:
        """Dial `key` unless an attempt runs or its backoff has not passed."""
        state = self._dialing.setdefault(key, _Dialing())
        if state.in_progress or time.monotonic() < state.next_attempt or self.closing:
            return
        address = self.address_of(key[0])
        if address is None:
            return
        state.in_progress = True
        threading.Thread(target=self._attempt, args=(key, address), daemon=True,
                         name=f"dial-{key[0]}").start()

    def _attempt(self, key: PeerKey, address: str) -> None:
        try:
            result: object = dial(address, self.security, wire=key[1], timeout=DIAL_TIMEOUT,
                                  node_id=self.node_id)
        except Exception as exc:   # handed to the loop, which logs and backs off
            result = exc
        self.hand_off(("dialed", key, address, result))

    def dialed(self, key: PeerKey, address: str, result: object) -> deque | None:
        """An attempt ended (on the loop): None when it failed (logged once per run of
        failures, backed off, its queue dropped), else the messages that waited for it."""
        state = self._dialing.setdefault(key, _Dialing())
        state.in_progress = False
        if not isinstance(result, Dialed):
            state.error = str(result)
            if state.backoff.fresh:
                log.info("cannot reach node %d at %s: %s", key[0], address, result)
            state.next_attempt = time.monotonic() + state.backoff.pause()
            state.queue.clear()
            return None
        state.backoff.reset()
        state.error = None
        queued, state.queue = state.queue, deque()
        return queued

    def error_of(self, peer_id: int) -> str | None:
        """Why our last attempt to connect to `peer_id` failed (None: it has not failed,
        or it succeeded since)."""
        for (peer, _), state in self._dialing.items():
            if peer == peer_id and state.error is not None:
                return state.error
        return None
