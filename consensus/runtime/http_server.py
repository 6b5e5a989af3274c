"""A bounded HTTP/1.1 server for the operators' endpoints (`http_endpoint`): one thread,
one `selectors` loop, h11 for the protocol and `ssl.MemoryBIO` for TLS.

Why one selector thread and not a worker pool: the cost of an HTTP client here must not
depend on what the client does. A thread per connection (the stdlib's
`ThreadingHTTPServer`, and `prometheus_client.start_http_server`, which is built on it)
held 966 threads for 1,000 idle connections; a fixed pool would instead be held by its
first few idle keep-alive connections, and a scrape would wait behind them. A selector
holds an idle connection for a few hundred bytes and one file descriptor, and the
routes (a metrics scrape, a status page) read state in milliseconds, so running them on
the loop's thread costs nothing worth a second thread. h11 (a dependency already: the
digest handshake speaks it) parses and frames; TLS goes through memory BIOs so that the
socket I/O stays plain non-blocking sends and receives.

Bounds, each counted (`HttpServer.stats`) and logged as one summary line per minute at
most (`Tally`), never as a traceback:

* at most `HttpLimits.max_connections` open: a new connection beyond it closes the
  least recently active one (an idle flood cannot lock a scraper out);
* `HttpLimits.timeout` seconds for each step: a TLS handshake and a whole request head
  (slowloris: a byte now and then does not extend it), the next request on a kept-alive
  connection, and sending an answer to a client that does not read;
* a request head of `HttpLimits.max_head_bytes` (431 beyond), GET and HEAD only, no
  request bodies (405, 413), one answer buffered per connection (a pipelining client is
  read again once it has read its answer);
* a listen backlog of `HttpLimits.backlog`.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Callable

import h11

log = logging.getLogger("garlicfarm.http")

RECV_BYTES = 65536
ACCEPTS_PER_TURN = 128      #: then the established connections get a turn
TLS_RECORD_HANDSHAKE = 0x16  #: the first byte a TLS client sends


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = 64
    timeout: float = 10.0           #: seconds per handshake + request head, idle wait, answer
    max_head_bytes: int = 16384     #: request line and headers
    backlog: int = 128
    summary_interval: float = 60.0  #: seconds between two summary lines at most

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_head_bytes", "backlog"):
            if getattr(self, name) < 1:
                raise ValueError(f"HttpLimits.{name} must be positive")
        if self.timeout <= 0 or self.summary_interval < 0:
            raise ValueError("HttpLimits.timeout must be positive, summary_interval not "
                             "negative")


@dataclass(frozen=True)
class Response:
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]       #: lower-case names (the last of repeated ones)


Handler = Callable[[Request], Response]

#: why connections were closed by us or lost, as the summary line and the metrics name them
HUNG_UP, TIMED_OUT, EVICTED, BAD_REQUEST, TLS_FAILED, PLAIN_TO_TLS = (
    "hung up", "timed out", "evicted", "bad request", "tls failed", "plain http to tls")


class Tally:
    """Counts of what clients did to us; `flush` logs the news as one line per
    `interval` at most (the first event at once), so a flood costs a line a minute."""

    def __init__(self, name: str, interval: float, explain: dict[str, str]) -> None:
        self.name, self.interval, self.explain = name, interval, explain
        self.pending: Counter[str] = Counter()
        self.totals: Counter[str] = Counter()
        self._since = time.monotonic()
        self._last = float("-inf")

    def add(self, reason: str, count: int = 1) -> None:
        self.pending[reason] += count
        self.totals[reason] += count

    def flush(self, now: float, force: bool = False) -> None:
        if not self.pending or (now - self._last < self.interval and not force):
            return
        parts = ", ".join(f"{n:,} {self.explain.get(r, r)}" for r, n in
                          sorted(self.pending.items(), key=lambda kv: -kv[1]))
        log.info("%s: in the last %.1f s: %s", self.name, now - self._since, parts)
        self.pending.clear()
        self._last = self._since = now


class _Conn:
    """One client: its socket, h11 state, TLS objects, output and deadline."""

    def __init__(self, sock: socket.socket, limits: HttpLimits,
                 context: ssl.SSLContext | None, now: float) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        self.tls: ssl.SSLObject | None = None
        self.tls_in = self.tls_out = None
        self.handshaken = context is None
        self.first_bytes = True
        if context is not None:
            self.tls_in, self.tls_out = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = context.wrap_bio(self.tls_in, self.tls_out, server_side=True)
        self.out = bytearray()
        self.request: h11.Request | None = None
        self.close_when_sent = False
        self.deadline = now + limits.timeout
        self.mask = 0

    @property
    def busy(self) -> bool:
        """Whether a request or an answer is under way (closing now loses it)."""
        return bool(self.out) or bool(self.h11.trailing_data[0]) or \
            self.h11.their_state is not h11.IDLE or not self.handshaken


class HttpServer:
    """Serves `handler` on the listening `sock` from one daemon thread until `close()`."""

    def __init__(self, sock: socket.socket, handler: Handler, *, name: str,
                 limits: HttpLimits = HttpLimits(),
                 context: ssl.SSLContext | None = None) -> None:
        self.sock, self.handler, self.name = sock, handler, name
        self.limits, self.context = limits, context
        self.tally = Tally(name, limits.summary_interval, {
            HUNG_UP: "clients hung up mid-request", TIMED_OUT: f"timed out ({limits.timeout:g} s"
            " per request head or answer)", EVICTED: f"closed to make room (over "
            f"{limits.max_connections} connections)", BAD_REQUEST: "bad requests",
            TLS_FAILED: "failed TLS handshakes", PLAIN_TO_TLS: "plain HTTP requests to TLS",
            "accept failed": "accept() errors (out of file descriptors?)"})
        self.accepted = 0
        self.requests = 0
        self._conns: OrderedDict[socket.socket, _Conn] = OrderedDict()   # least recent first
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stopping = False
        self._accept_paused_until = 0.0
        sock.setblocking(False)
        self._sel.register(sock, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    @property
    def stats(self) -> dict[str, int]:
        """Connections closed by reason (see the module constants), since the start."""
        return dict(self.tally.totals)

    def close(self) -> None:
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join()
        for conn in list(self._conns.values()):
            self._drop(conn)
        self.tally.flush(time.monotonic(), force=True)     # the last news, not lost
        self._sel.close()
        for s in (self.sock, self._wake_r, self._wake_w):
            s.close()

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except Exception:       # noqa: BLE001 - never silently: say the endpoint is gone
            log.exception("%s: the HTTP server stopped", self.name)

    def _loop(self) -> None:
        next_sweep = 0.0
        while not self._stopping:
            now = time.monotonic()
            if self._accept_paused_until and now >= self._accept_paused_until:
                self._accept_paused_until = 0.0
                self._sel.register(self.sock, selectors.EVENT_READ, None)
            for key, events in self._sel.select(max(0.0, min(1.0, next_sweep - now))):
                if key.fileobj is self._wake_r:
                    continue
                if key.fileobj is self.sock:
                    self._accept()
                    continue
                conn = key.data
                if conn.sock not in self._conns:    # dropped earlier in this turn
                    continue
                try:
                    if events & selectors.EVENT_WRITE:
                        self._flush(conn, resume=True)
                    if events & selectors.EVENT_READ and conn.sock in self._conns:
                        self._receive(conn)
                except Exception:   # noqa: BLE001 - one connection's bug, not the server's
                    log.exception("%s: dropping a connection after an error", self.name)
                    self._drop(conn)
            now = time.monotonic()
            if now >= next_sweep:
                self._expire(now)
                self.tally.flush(now)
                next_sweep = now + 0.1

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self.tally.add(TIMED_OUT)
            self._drop(conn)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self.tally.add("accept failed")
                self._sel.unregister(self.sock)     # back in 0.1 s: no busy loop
                self._accept_paused_until = time.monotonic() + 0.1
                return
            self.accepted += 1
            while len(self._conns) >= self.limits.max_connections:
                self.tally.add(EVICTED)
                self._drop(next(iter(self._conns.values())))
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, self.limits, self.context, time.monotonic())
            self._conns[sock] = conn
            self._want(conn, selectors.EVENT_READ)

    # -- one connection -----------------------------------------------------------------
    def _want(self, conn: _Conn, mask: int) -> None:
        if mask != conn.mask:
            if conn.mask:
                self._sel.modify(conn.sock, mask, conn)
            else:
                self._sel.register(conn.sock, mask, conn)
            conn.mask = mask

    def _drop(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        if conn.mask:
            self._sel.unregister(conn.sock)
        conn.sock.close()

    def _lost(self, conn: _Conn) -> None:
        """The client went away: a hang-up if something was under way, else a goodbye."""
        if conn.busy:
            self.tally.add(HUNG_UP)
        self._drop(conn)

    def _receive(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:             # reset by the peer (what it sent may be lost with it)
            self.tally.add(HUNG_UP)
            self._drop(conn)
            return
        if not data:
            self._lost(conn)
            return
        self._conns.move_to_end(conn.sock)
        if conn.first_bytes:
            conn.first_bytes = False
            if conn.tls is not None and data[0] != TLS_RECORD_HANDSHAKE:
                self._refuse_plain(conn)
                return
        if conn.tls is not None:
            data = self._decrypt(conn, data)
            if not data:            # dropped, or nothing yet (b"" would tell h11 EOF)
                return
        conn.h11.receive_data(data)
        self._process(conn)

    def _decrypt(self, conn: _Conn, data: bytes) -> bytes | None:
        """Plain text of `data` (b"" while the handshake goes on); None: dropped."""
        conn.tls_in.write(data)
        if not conn.handshaken:
            try:
                conn.tls.do_handshake()
                conn.handshaken = True
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ValueError):
                self.tally.add(TLS_FAILED)
                self._send_raw(conn, conn.tls_out.read(), close=True)   # the alert
                return None
        chunks = []
        while conn.handshaken:
            try:
                chunk = conn.tls.read(RECV_BYTES)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._lost(conn)
                return None
            except ssl.SSLError:
                self.tally.add(TLS_FAILED)
                self._drop(conn)
                return None
            if not chunk:
                break
            chunks.append(chunk)
        self._send_raw(conn, conn.tls_out.read())
        return b"".join(chunks) if conn.sock in self._conns else None

    def _refuse_plain(self, conn: _Conn) -> None:
        """Plain HTTP on a TLS endpoint: say so in plain text, serve nothing."""
        self.tally.add(PLAIN_TO_TLS)
        body = b"this endpoint speaks HTTPS only: use https://\n"
        self._send_raw(conn, b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                       b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body), close=True)

    def _process(self, conn: _Conn) -> None:
        """Answer the complete requests h11 has, one answer in flight at most."""
        while conn.sock in self._conns and not conn.out and not conn.close_when_sent:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self.tally.add(BAD_REQUEST)
                self._answer_error(conn, exc.error_status_hint, f"bad request: {exc}")
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                self._lost(conn)
                return
            if isinstance(event, h11.Request):
                conn.request = event
                head = len(event.method) + len(event.target) + sum(
                    len(name) + len(value) + 4 for name, value in event.headers)
                if head > self.limits.max_head_bytes:     # came whole: h11 let it through
                    self.tally.add(BAD_REQUEST)
                    self._answer_error(conn, 431, "request head too large")
                    return
                if event.method not in (b"GET", b"HEAD"):
                    self.tally.add(BAD_REQUEST)
                    self._answer_error(conn, 405, "GET or HEAD only", ("Allow", "GET, HEAD"))
                    return
                if any(name in (b"content-length", b"transfer-encoding") and value != b"0"
                       for name, value in event.headers):
                    self.tally.add(BAD_REQUEST)
                    self._answer_error(conn, 413, "requests have no body here")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._answer(conn)

    def _answer(self, conn: _Conn) -> None:
        request = conn.request
        self.requests += 1
        headers = {name.decode("latin-1").lower(): value.decode("latin-1")
                   for name, value in request.headers}
        try:
            answer = self.handler(Request(request.method.decode("ascii"),
                                          request.target.decode("latin-1"), headers))
        except Exception as exc:    # noqa: BLE001 - the handler should have; answered anyway
            log.exception("%s: %s failed", self.name, request.target.decode("latin-1"))
            answer = Response(f"{type(exc).__name__}\n".encode(), status=500)
        self._respond(conn, answer, head_only=request.method == b"HEAD")

    def _answer_error(self, conn: _Conn, status: int, text: str,
                      *headers: tuple[str, str]) -> None:
        conn.close_when_sent = True
        if conn.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self._drop(conn)
            return
        self._respond(conn, Response(f"{text}\n".encode(), status=status,
                                     headers=(("Connection", "close"), *headers)))

    def _respond(self, conn: _Conn, answer: Response, head_only: bool = False) -> None:
        headers = [("Content-Type", answer.content_type),
                   ("Content-Length", str(len(answer.body))),
                   ("Cache-Control", "no-store"), *answer.headers]
        data = conn.h11.send(h11.Response(status_code=answer.status, headers=headers))
        if not head_only:
            data += conn.h11.send(h11.Data(data=answer.body))
        data += conn.h11.send(h11.EndOfMessage())
        if conn.h11.our_state is h11.MUST_CLOSE:
            conn.close_when_sent = True
        elif conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
        conn.deadline = time.monotonic() + self.limits.timeout     # to send it
        if conn.tls is not None:
            conn.tls.write(data)
            data = conn.tls_out.read()
        self._send_raw(conn, data, close=conn.close_when_sent)

    def _send_raw(self, conn: _Conn, data: bytes, close: bool = False) -> None:
        conn.out += data
        conn.close_when_sent |= close
        self._flush(conn)

    def _flush(self, conn: _Conn, resume: bool = False) -> None:
        """Send what is buffered; once all is sent, read again (and with `resume`,
        answer a pipelined request that waited for it)."""
        if conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:         # broken pipe, reset: the client left mid-answer
                self._lost(conn)
                return
            del conn.out[:sent]
        if conn.out:
            self._want(conn, selectors.EVENT_WRITE)
            return
        if conn.close_when_sent:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._drop(conn)
            return
        self._want(conn, selectors.EVENT_READ)
        if conn.request is not None and conn.h11.our_state is h11.IDLE:   # answered
            conn.request = None
            conn.deadline = time.monotonic() + self.limits.timeout     # the next request
        if resume:
            self._process(conn)
