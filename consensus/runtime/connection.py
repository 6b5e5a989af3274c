"""One established, non-blocking connection owned by a node's event loop.

Bytes in go through the wire's incremental decoder; bytes out collect in `out` and are
written when the socket takes them. For JRaft's paired responses the connection keeps
the `Echo` of every request it sent (initiator side) and a `ResponseSlot` per request
received (receiver side), answered strictly in order (`flush_slots`).
"""
from __future__ import annotations

import selectors
import socket
import ssl
from collections import deque
from typing import Any

from consensus.net.dial import close_quietly
from consensus.runtime.budget import Trust
from consensus.wire.extensions import group_select_frame
from consensus.wire.jraft_mapping import Echo, ResponseSlot

READ_CHUNK = 256 << 10


WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def read_available(sock: socket.socket, limit: int) -> tuple[bytes, bool]:
    """What a non-blocking socket has now, up to `limit` bytes, and whether the peer
    closed (the loop's connections and the handshake gate read alike)."""
    chunks = []
    total = 0
    recv = sock.recv
    while total < limit:
        try:
            data = recv(min(READ_CHUNK, limit - total))
        except WOULD_BLOCK:
            break
        except OSError:
            return b"".join(chunks), True
        if not data:
            return b"".join(chunks), True
        chunks.append(data)
        total += len(data)
        if len(data) < READ_CHUNK and total < limit and not isinstance(sock, ssl.SSLSocket):
            break                   # a short read drained it: spare the EAGAIN syscall
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), False


class Connection:
    __slots__ = ("sock", "fd", "kind", "outgoing", "peer_id", "label", "out", "echoes",
                 "slots", "extensions", "subscriptions", "closed", "writing", "decoder",
                 "client_id", "username", "marker_state", "last_answer", "trust",
                 "reserved", "paused", "served", "events", "in_group", "out_group")

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
        #: how far it is trusted (budget.py): we dialed peers; past the handshake a
        #: client; plain JRaft and marker connections are outsiders until they show
        #: they are configured members
        self.trust = Trust.PEER if outgoing else \
            Trust.CLIENT if kind == "garlicfarm" else Trust.OUTSIDER
        self.reserved = 0                #: bytes it counts in the client budget
        self.paused = False              #: not read: its claim does not fit the budget
        self.served = 0                  #: the loop turn it was last read in (fairness)
        self.events = selectors.EVENT_READ   #: what the selector watches it for
        #: the Raft group of the frames read / written now (GroupSelect switches them)
        self.in_group = 0
        self.out_group = 0

    def __repr__(self) -> str:
        return f"<Connection {self.kind} {'out' if self.outgoing else 'in'} {self.label}>"

    def receive(self, limit: int) -> tuple[bytes, bool]:
        """What the socket has now, up to `limit` bytes, and whether the peer closed."""
        return read_available(self.sock, limit)

    def more_to_read(self, received: int, limit: int) -> bool:
        """Whether a read that took `received` of `limit` bytes may have left some (a
        TLS socket's decrypted bytes do not make the selector report it again)."""
        if received >= limit:
            return True
        return isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0

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

    def select_out(self, group: int, source: int) -> None:
        """Switch the outgoing direction to `group` (a GroupSelect frame) unless it is
        in that group already."""
        if group != self.out_group:
            self.out_group = group
            self.out += group_select_frame(source, group)

    def flush_slots(self, source: int = 0) -> None:
        """Queue the answers owed, in request order, up to the first one not known yet
        (each in its request's group)."""
        slots, out = self.slots, self.out
        while slots and slots[0].data is not None:
            slot = slots.popleft()
            if slot.group != self.out_group:
                self.select_out(slot.group, source)
            self.last_answer = data = slot.data
            out += data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_quietly(self.sock)
