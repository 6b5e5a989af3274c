"""One established, non-blocking connection owned by a node's event loop.

Bytes in go through the wire's incremental decoder; bytes out collect in `out` and are
written when the socket takes them. For JRaft's paired responses the connection keeps
the `Echo` of every request it sent (initiator side) and a `ResponseSlot` per request
received (receiver side), answered strictly in order (`flush_slots`).
"""
from __future__ import annotations

import socket
import ssl
from collections import deque
from typing import Any

from consensus.runtime.jraft_mapping import Echo, ResponseSlot

READ_CHUNK = 256 << 10
MAX_READ_PER_TURN = 8 << 20


class Connection:
    __slots__ = ("sock", "fd", "kind", "outgoing", "peer_id", "label", "out", "echoes",
                 "slots", "extensions", "subscriptions", "closed", "writing", "decoder",
                 "client_id", "username", "marker_state", "last_answer")

    def __init__(self, sock: socket.socket, kind: str, decoder: Any, *, outgoing: bool,
                 peer_id: int | None, label: str, username: str | None = None) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()
        self.kind = kind                 #: "garlicfarm", "jraft" or "marker"
        self.outgoing = outgoing         #: we dialed it: we send requests on it
        self.peer_id = peer_id           #: the node at the other end, when known
        self.label = label               #: "node 2 (127.0.0.1:9002)" or an address
        self.decoder = decoder
        self.out = bytearray()
        self.echoes: deque[Echo] = deque()
        self.slots: deque[ResponseSlot] = deque()
        self.extensions = False          #: a client said Hello: answer in extension frames
        self.subscriptions: set[str] = set()
        self.closed = False
        self.writing = False             #: registered for write readiness
        self.client_id: bytes | None = None
        self.username = username
        self.marker_state: Any = None    #: the marker wire's per-connection state
        self.last_answer = b""           #: the last answer written (marker: R repeats it)

    def __repr__(self) -> str:
        return f"<Connection {self.kind} {'out' if self.outgoing else 'in'} {self.label}>"

    def receive(self) -> tuple[bytes, bool]:
        """What the socket has now, and whether the peer closed."""
        chunks = []
        total = 0
        recv = self.sock.recv
        while total < MAX_READ_PER_TURN:
            try:
                data = recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError,
                    ssl.SSLWantWriteError):
                break
            except OSError:
                return b"".join(chunks), True
            if not data:
                return b"".join(chunks), True
            chunks.append(data)
            total += len(data)
            if len(data) < READ_CHUNK and not isinstance(self.sock, ssl.SSLSocket):
                break
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), False

    def flush(self) -> bool:
        """Write what the socket takes; True when nothing is left. Raises OSError when the
        connection broke."""
        out = self.out
        while out:
            try:
                sent = self.sock.send(out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError,
                    ssl.SSLWantReadError):
                return False
            del out[:sent]
        return True

    def flush_slots(self) -> None:
        """Queue the answers owed, in request order, up to the first one not known yet."""
        slots, out = self.slots, self.out
        while slots and slots[0].data is not None:
            self.last_answer = data = slots.popleft().data
            out += data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_quietly(self.sock)


def close_quietly(sock: socket.socket) -> None:
    """Close a socket whose peer may already be gone."""
    try:
        sock.close()
    except OSError:
        pass
