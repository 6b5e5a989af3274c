"""The gate: one thread, with its own selector, that lets connections into a node.

It owns the listening socket. For every pending connection it does, non-blocking, what
used to take a thread each: the first-byte sniff (`accept.py`), the TLS handshake
(``do_handshake`` on a non-blocking socket) and the Garlic Farm digest handshake (the
sans-I/O `HandshakeReceiver`); then it hands the established stream to the Raft loop
through the transport's queue and wake-up socket, as the dialer threads do. The
decisions (pools, deadlines, tarpit, max-connections, what to log) are `admission.py`'s.

Why a thread and not the loop: a hostile connection must cost the Raft loop nothing -
no accept, no parsing, no hashing, no log line on its turn. Why one thread and not one
per connection: 50 threads busy with handshakes took the GIL from the loop thread (the
leader was deposed); one thread competes as one, and it paces itself: when it used more
than `CPU_SHARE` of a `CPU_WINDOW` of CPU time it sleeps for the rest of the window
(the kernel's listen backlog and socket buffers hold the rest meanwhile).
"""
from __future__ import annotations

import enum
import heapq
import itertools
import logging
import resource
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from consensus.net.security import Security
from consensus.runtime.accept import (TLS_RECORD, AcceptedStream, Opening, WrongOpening,
                                      claimed_node, sniff, tls_failure)
from consensus.runtime.admission import (AdmissionLimits, Established, Pending, Pool,
                                         Reason, RefusalLog, Tarpit)
from consensus.runtime.connection import WOULD_BLOCK, read_available
from consensus.wire.handshake import (BUSY_RESPONSE, Accepted, Challenged, HandshakeReceiver,
                                      NeedData, Refused)

log = logging.getLogger("garlicfarm.gate")

ACCEPTS_PER_TURN = 64       #: then the pending connections get their turn
MAX_OPENING = 64 << 10      #: bytes a connection may send before it is let in
SNIFF_READ = 4096           #: bytes read at a time until the first bytes decide
CPU_WINDOW = 0.1            #: seconds
CPU_SHARE = 0.25            #: of each window, at most, on the gate's CPU time
_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE


def fit_fd_limit(limits: AdmissionLimits, spare: int = 256) -> None:
    """Raise the soft limit of open files to what the limits may hold at once (a common
    default is 1,024, below max-connections plus the pools); warn when the hard limit is
    lower, naming the option to lower instead."""
    need = limits.max_connections + limits.pending_clients + limits.tarpit_held + spare
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < need:
        log.warning("open-file limit %d is below the %d that --max-connections %d and the "
                    "handshake pools may need: raise it (ulimit -n) or lower "
                    "--max-connections", target, need, limits.max_connections)


class Stage(enum.Enum):
    TLS_SNIFF = "waiting for the first byte (TLS required)"
    TLS = "TLS handshake"
    SNIFF = "waiting for the first bytes"
    HANDSHAKE = "digest handshake"
    SENDING = "sending the answer"
    TARPIT = "refusal held back (failed login)"
    DONE = "done"


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    address: str
    port: int
    stage: Stage
    timer_at: float = 0.0
    data: bytes = b""                   #: bytes received so far (bounded: MAX_OPENING)
    receiver: HandshakeReceiver | None = None
    peer_claim: int | None = None       #: the member node it named (peer pool)
    out: bytes = b""
    then: AcceptedStream | None = None  #: after `out`: hand this to the loop (else close)
    events: int = 0                     #: registered selector events

    @property
    def label(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else \
            f"{self.address}:{self.port}"


class Gate:
    """See the module docstring. `hand_off(stream)` runs on the gate thread and must only
    queue; `is_member(node_id)` may be called from it (a dict lookup)."""

    def __init__(self, listener: socket.socket, *, security: Security, wire: str,
                 limits: AdmissionLimits, hand_off: Callable[[AcceptedStream], None],
                 is_member: Callable[[int], bool],
                 on_refused: Callable[[str], None] = lambda reason: None) -> None:
        self.listener = listener
        self.security, self.wire, self.limits = security, wire, limits
        self.hand_off, self.is_member, self.on_refused = hand_off, is_member, on_refused
        self.context = security.server_context()
        fit_fd_limit(limits)
        self.pending = Pending(limits)
        self.tarpit = Tarpit(limits)
        self.established = Established(limits.max_connections)
        self.refusals = RefusalLog(limits.summary_interval)
        self._held: OrderedDict[_Conn, None] = OrderedDict()
        self._timers: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._conns: set[_Conn] = set()
        self._selector = selectors.DefaultSelector()
        listener.setblocking(False)
        self._selector.register(listener, _READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, _READ, "wake")
        self._stopping = False
        self._window = (0.0, 0.0)       # (wall start, thread CPU at start)
        self._quiet_until = 0.0         # gate errors logged at most every 10 s
        self._thread = threading.Thread(target=self._run, name="gate", daemon=True)

    @property
    def held(self) -> int:
        """Refusals held back by the tarpit now."""
        return len(self._held)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5.0)

    def release(self, peer: bool) -> None:
        """An established connection closed (called by the loop)."""
        self.established.release(peer)

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopping:
                try:
                    self._turn()
                except Exception:       # a bug: say so, keep the door working
                    self._complain("the gate's turn failed")
                    time.sleep(0.1)
        finally:
            for conn in list(self._conns):
                self._close(conn)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _complain(self, what: str) -> None:
        now = time.monotonic()
        if now >= self._quiet_until:
            self._quiet_until = now + 10.0
            log.exception("%s (the same is not logged again for 10 s)", what)

    def _turn(self) -> None:
        self._pace()
        now = time.monotonic()
        wake_at = min(self._timers[0][0] if self._timers else now + 1.0,
                      self.refusals.next_due or now + 1.0, now + 1.0)
        for key, _mask in self._selector.select(max(0.0, wake_at - now)):
            if key.data is None:
                self._accept()
            elif key.data == "wake":
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    pass
            elif key.data.stage is not Stage.DONE:
                self._step(key.data)
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            when, _, conn = heapq.heappop(self._timers)
            if conn.stage is Stage.DONE or when != conn.timer_at:
                continue
            if conn.stage is Stage.TARPIT:
                self._release(conn)
            elif conn.stage in (Stage.TLS_SNIFF, Stage.SNIFF):
                self._refuse(conn, Reason.TIMEOUT, "timed out before the connection said "
                             "what it is")
            else:
                self._refuse(conn, Reason.TIMEOUT, f"timed out in the {conn.stage.value}")
        for line in self.refusals.due(now):
            log.warning(line)

    def _pace(self) -> None:
        """Sleep out the window once the gate used its CPU share of it."""
        now, cpu = time.monotonic(), time.thread_time()
        start, start_cpu = self._window
        if now - start >= CPU_WINDOW:
            self._window = (now, cpu)
        elif cpu - start_cpu >= CPU_WINDOW * CPU_SHARE:
            time.sleep(start + CPU_WINDOW - now)
            self._window = (time.monotonic(), time.thread_time())

    def _set_timer(self, conn: _Conn, when: float) -> None:
        conn.timer_at = when
        heapq.heappush(self._timers, (when, next(self._seq), conn))

    def _register(self, conn: _Conn, events: int) -> None:
        if conn.events == events:
            return
        if conn.events:
            self._selector.modify(conn.sock, events, conn)
        else:
            self._selector.register(conn.sock, events, conn)
        conn.events = events

    def _unregister(self, conn: _Conn) -> None:
        if conn.events:
            self._selector.unregister(conn.sock)
            conn.events = 0

    # -- accepting --------------------------------------------------------------------------
    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:      # EMFILE and the like: wait a little, say it once
                now = time.monotonic()
                if now >= self._quiet_until:
                    self._quiet_until = now + 10.0
                    log.warning("accept failed: %s (not logged again for 10 s)", exc)
                time.sleep(0.05)
                return
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            conn = _Conn(sock, addr[0], addr[1],
                         Stage.TLS_SNIFF if self.context is not None else Stage.SNIFF)
            self._conns.add(conn)
            now = time.monotonic()
            self._set_timer(conn, self.pending.deadline(now))
            for old in self.pending.add(conn, conn.address):
                self._evict(old)
            self._register(conn, _READ)
            self._step(conn)

    def _evict(self, conn: _Conn) -> None:
        self._refuse(conn, Reason.EVICTED, "too many handshakes in progress (from its "
                     "address, or in all): the oldest incomplete one made room for a newer "
                     "connection")

    # -- one connection's progress ----------------------------------------------------------
    def _step(self, conn: _Conn) -> None:
        try:
            if conn.stage is Stage.SENDING:
                self._send(conn)
            elif conn.stage is Stage.TLS_SNIFF:
                self._tls_sniff(conn)
            elif conn.stage is Stage.TLS:
                self._tls(conn)
            elif conn.stage in (Stage.SNIFF, Stage.HANDSHAKE):
                self._receive(conn)
        except Exception as exc:        # a bug: this connection goes, the gate stays
            self._complain(f"handling a connection from {conn.address}:{conn.port}")
            self._refuse(conn, Reason.HANDSHAKE, f"internal error: {type(exc).__name__}")

    def _tls_sniff(self, conn: _Conn) -> None:
        try:
            first = conn.sock.recv(1, socket.MSG_PEEK)
        except WOULD_BLOCK:
            return
        except OSError as exc:
            self._refuse(conn, Reason.CLOSED, f"closed before TLS: {exc}")
            return
        if not first:
            self._close(conn)               # connected and left (a port probe)
            return
        if first[0] != TLS_RECORD:
            self._refuse(conn, Reason.TLS, "plain TCP to a node that requires TLS (it has "
                         "--tls-cert)")
            return
        self._unregister(conn)              # wrapping detaches the plain socket
        conn.sock = self.context.wrap_socket(conn.sock, server_side=True,
                                             do_handshake_on_connect=False)
        conn.stage = Stage.TLS
        self._tls(conn)

    def _tls(self, conn: _Conn) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._register(conn, _READ)
            return
        except ssl.SSLWantWriteError:
            self._register(conn, _WRITE)
            return
        except OSError as exc:
            self._refuse(conn, Reason.TLS, tls_failure(exc))
            return
        conn.stage = Stage.SNIFF
        self._register(conn, _READ)
        self._receive(conn)

    def _read(self, conn: _Conn, most: int) -> tuple[bytes, bool]:
        """At most about `most` bytes (what a socket has now), and whether it closed."""
        data, closed = read_available(conn.sock, most)
        if not closed and isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
            # the rest of a decrypted record, which no selector reports (16 KiB at most)
            data += conn.sock.recv(conn.sock.pending())
        return data, closed

    def _receive(self, conn: _Conn) -> None:
        # sniffing needs the first bytes only: a marker or JRaft stream goes to the loop
        # with what was read, and the loop's bounds apply to the rest
        data, eof = self._read(conn, SNIFF_READ if conn.stage is Stage.SNIFF
                               else MAX_OPENING + 1 - len(conn.data))
        conn.data += data
        if len(conn.data) > MAX_OPENING:
            self._refuse(conn, Reason.HANDSHAKE, f"sent more than {MAX_OPENING} bytes "
                         f"before the handshake ended")
            return
        if conn.stage is Stage.SNIFF:
            try:
                opening = sniff(conn.data, self.wire)
            except WrongOpening as exc:
                self._refuse(conn, Reason.WIRE, str(exc))
                return
            if opening is None:
                if eof and conn.data:
                    self._refuse(conn, Reason.CLOSED, f"closed after {len(conn.data)} bytes")
                elif eof:
                    self._close(conn)       # connected and left (a port probe)
                return
            if opening is not Opening.HANDSHAKE:
                # marker: only nodes speak it (the loop checks the id it names); JRaft:
                # not authenticated, nothing to tell a peer by: a client's place
                self._let_in(conn, AcceptedStream(conn.sock, opening.value, conn.data, None,
                                                  opening is Opening.MARKER, conn.label), b"")
                return
            conn.stage = Stage.HANDSHAKE
            conn.receiver = HandshakeReceiver(credentials=self.security.password_of,
                                              nonces=self.security.nonces,
                                              cluster=self.security.cluster)
            data = conn.data
        receiver = conn.receiver
        receiver.receive_data(data)
        if eof:
            receiver.receive_data(b"")
        if conn.peer_claim is None and self.pending.pool_of(conn) is Pool.CLIENTS:
            node = claimed_node(conn.data[:8192])          # the head's limit
            if node is not None and self.is_member(node):
                conn.peer_claim = node
                for old in self.pending.claim_peer(conn, node):
                    self._evict(old)
        self._answer(conn)

    def _answer(self, conn: _Conn) -> None:
        receiver = conn.receiver
        with self.security.nonce_lock:
            event = receiver.next_event(time.monotonic())
        if isinstance(event, NeedData):
            return
        if isinstance(event, Challenged):
            self._finish(conn, event.data, None)
        elif isinstance(event, Refused):
            text = f"handshake refused ({event.status or 'closed'}): {event.error}"
            if event.status == 401:
                self._refused(conn, Reason.AUTH, text, "handshakes")
                delay = self.tarpit.failed(conn.address, receiver.username or "",
                                           time.monotonic())
                self._hold(conn, event.data, delay)
            else:
                self._refused(conn, Reason.HANDSHAKE if event.status else Reason.CLOSED,
                              text)
                self._finish(conn, event.data, None)
        else:
            assert isinstance(event, Accepted)
            peer = conn.peer_claim is not None and \
                receiver.header(b"x-garlicfarm-node") == [str(conn.peer_claim)]
            self._let_in(conn, AcceptedStream(conn.sock, "garlicfarm", event.trailing_data,
                                              event.username, peer, conn.label), event.data)

    def _let_in(self, conn: _Conn, stream: AcceptedStream, answer: bytes) -> None:
        if not self.established.open(stream.peer):
            self._refused(conn, Reason.MAX_CONNECTIONS, f"max-connections: "
                          f"{self.limits.max_connections} client connections are open")
            self._finish(conn, BUSY_RESPONSE if stream.kind == "garlicfarm" else b"", None)
            return
        self._finish(conn, answer, stream)

    # -- answers, the tarpit, closing -------------------------------------------------------
    def _finish(self, conn: _Conn, data: bytes, then: AcceptedStream | None) -> None:
        """Send `data`, then hand `then` to the loop (or close)."""
        self.pending.remove(conn)
        conn.stage, conn.out, conn.then = Stage.SENDING, data, then
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except WOULD_BLOCK:
                self._register(conn, _WRITE)
                return
            except OSError:
                self._close(conn)
                return
            conn.out = conn.out[sent:]
        if conn.then is None:
            self._close(conn)
            return
        stream, conn.then = conn.then, None
        self._unregister(conn)
        conn.stage = Stage.DONE
        self._conns.discard(conn)
        self.hand_off(stream)

    def _hold(self, conn: _Conn, data: bytes, delay: float) -> None:
        """Answer a failed login after `delay`: a timer and a socket, nothing else."""
        self.pending.remove(conn)
        self._unregister(conn)
        conn.stage, conn.out = Stage.TARPIT, data
        self._held[conn] = None
        self._set_timer(conn, time.monotonic() + delay)
        while len(self._held) > self.limits.tarpit_held:
            self._release(next(iter(self._held)))

    def _release(self, conn: _Conn) -> None:
        del self._held[conn]
        conn.stage = Stage.SENDING
        self._send(conn)

    def _refused(self, conn: _Conn, reason: Reason, text: str,
                 noun: str = "connections") -> None:
        self.on_refused(reason.value)
        line = self.refusals.refused(conn.address, conn.port, text, time.monotonic(), noun)
        if line is not None:
            log.warning(line)

    def _refuse(self, conn: _Conn, reason: Reason, text: str) -> None:
        self._refused(conn, reason, text)
        self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.then is not None:           # let in, but it broke before the hand-off
            self.established.release(conn.then.peer)
            conn.then = None
        self.pending.remove(conn)
        self._held.pop(conn, None)
        try:
            self._unregister(conn)
        except (KeyError, ValueError, OSError):
            pass
        conn.stage = Stage.DONE
        self._conns.discard(conn)
        try:
            conn.sock.close()
        except OSError:
            pass
