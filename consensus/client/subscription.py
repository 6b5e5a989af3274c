"""Events from the farm (`FarmClient.subscribe`): one member's stream of leader, state
and voter changes over a connection of its own, moving to another member when that one
goes away, so that a watcher never holds one of the client's call links."""
from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from consensus.client.links import Link
from consensus.common.errors import ProtocolMismatch, Unavailable, error_from_wire
from consensus.common.results import Event
from consensus.wire import extensions as ext
from consensus.wire.extensions import GARLICFARM_REGISTRY
from consensus.wire.jraft import encode

if TYPE_CHECKING:
    from consensus.client.client import FarmClient


class Subscription:
    """The iterator `FarmClient.subscribe` returns; `close()` ends it (from any thread)."""

    def __init__(self, client: FarmClient, events: tuple[str, ...]) -> None:
        self.client = client
        self.events = events
        self.link: Link | None = None
        self.closed = False

    def __iter__(self) -> "Subscription":
        return self

    def _connect(self) -> Link:
        client = self.client
        deadline = time.monotonic() + client.timeout
        last: Exception | None = None
        for endpoint in client.directory.attempts(deadline, leader=False):
            link = None
            try:
                link = client.links.open(endpoint, deadline)
                link.send(encode(ext.Call(0, 0, 0, 1, "subscribe", {"events": list(self.events)}),
                                 GARLICFARM_REGISTRY))
                answer_by = min(deadline, time.monotonic() + client.answer_timeout)
                while True:
                    frame = link.next_frame(answer_by)
                    if isinstance(frame, ext.Reply) and frame.call_id == 1:
                        if frame.code:
                            raise error_from_wire(frame.code, frame.message, frame.detail)
                        return link
            except (Unavailable, ProtocolMismatch) as exc:
                if link is not None:
                    link.close()
                last = exc
        raise Unavailable(f"no member accepted the subscription (last: {last})")

    def __next__(self) -> Event:
        while True:
            if self.closed:
                raise StopIteration
            if self.link is None or self.link.closed:
                self.link = self._connect()
            try:
                frame = self.link.next_frame(time.monotonic() + 3600.0)
            except (Unavailable, ProtocolMismatch):
                self.link.close()
                continue
            if isinstance(frame, ext.EventMessage):
                return Event(frame.name, frame.source, frame.term, frame.leader_id,
                             dict(frame.data))

    def close(self) -> None:
        self.closed = True
        if self.link is not None:
            try:
                self.link.sock.shutdown(socket.SHUT_RDWR)   # wakes a reader blocked in recv
            except OSError:
                pass
            self.link.close()
