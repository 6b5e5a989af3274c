"""Writes in flight: farm commands on one connection to the leader, each answered by a
WriteResult carrying its request id, each sent again (same request id, so applied once)
until its deadline when the leader changes, refuses for now, loses the write, dies or
stalls.

`WritePipe` is driven in one of two ways:

- in the caller's thread, until its writes are answered (`run`): `FarmClient.append`,
  `append_many` and the other writes. No thread hand-off: one write costs one round
  trip, and the connection is the client's, kept for the next call;
- in a background thread for the client's lifetime (`start`): `FarmClient.append_async`
  returns a `concurrent.futures.Future` at once, many writes share the connection, and
  the futures complete (their callbacks run) in that thread. Writes submitted from the
  callbacks go out together at the end of the batch being handled.

Failure handling, per write:
- NOT_LEADER: the member names the leader (or the configuration); the pipe finishes
  reading what it sent there, then connects to the leader and sends the writes again;
- RETRY (the leader lost the entry to a leader change): sent again at once, and it may
  still be applied (another member may hold the entry) until a later copy is answered;
  UNAVAILABLE (a transfer under way, too many entries awaiting commit): again shortly;
- no answer within `answer_timeout` (a dead or stalled member), or the connection
  broke: the member is tried last for a while, the writes go to the next member (who
  answers NOT_LEADER naming the leader, or is it); connection attempts are bounded by
  `connect_timeout` (links.py);
- its deadline passed: the write fails with `Unavailable`, whose `maybe_applied` says
  whether any copy of it reached a member without a definite answer (R4); a member's
  definite refusal (FAILED) keeps the same flag;
- its deadline is closer than twice the time members have been taking to answer (at
  most `_LAST_CALL_CAP`): it is not sent *again* (a first attempt always goes out), and
  fails at once: an attempt that cannot be answered in time can only turn a definite
  outcome into an unknown one (after NOT_LEADERs from a member that leads nobody, the
  caller is told the write certainly did not happen).
"""
from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Iterable

from consensus.client.links import Link, LinkPool, NoAnswer, foreign_leader_text
from consensus.common.errors import (ErrorCode, FarmError, ProtocolMismatch,
                                     Unavailable, error_from_wire)
from consensus.net.backoff import Backoff
from consensus.wire import extensions as ext

MAX_IN_FLIGHT = 1024                #: writes sent and not answered, per connection
_UNAVAILABLE_PAUSE = 0.05           #: before sending again what the leader refused for now
_LAST_CALL_CAP = 0.25               #: at most this long before its deadline a write stops


class PendingWrite:
    """One write: its request id, its ClientRequest frame, its deadline, its outcome."""
    __slots__ = ("request_id", "frame", "deadline", "future", "result", "error",
                 "maybe_applied", "sent_at")

    def __init__(self, request_id: bytes, frame: bytes, deadline: float,
                 future: Future | None = None) -> None:
        self.request_id = request_id
        self.frame = frame
        self.deadline = deadline
        self.future = future
        self.result: ext.WriteResult | None = None
        self.error: FarmError | None = None
        self.maybe_applied = False      #: a copy went out and got no definite answer
        self.sent_at = 0.0              #: when the last copy went out

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None


class WritePipe:
    """See the module docstring. `links` gives connections (the calls' shared one in
    the caller's thread, one of its own in the background) and the directory of
    members; a member gets `answer_timeout` to answer before the pipe moves on."""

    def __init__(self, links: LinkPool, answer_timeout: float, *,
                 background: bool = False) -> None:
        self.links = links
        self.directory = links.directory
        self.answer_timeout = answer_timeout
        self.background = background
        self.link: Link | None = None
        self.waiting: dict[bytes, PendingWrite] = {}    # sent on `link`, unanswered
        self.unsent: deque[PendingWrite] = deque()      # to send (again)
        self._leaving = False           # a NOT_LEADER came: drain `link`, then switch
        self._progress = 0.0            # when `link` last answered (or was connected)
        self._resend_at = 0.0
        self._backoff = Backoff(0.02, 0.5)     # pauses of retries that made no progress
        self._answer_time = 0.0         # how long answers take lately (a moving average)
        self._finished: list[PendingWrite] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self._incoming: list[PendingWrite] = []         # background: from other threads
        self._lock = threading.Lock()
        self._wake_r = self._wake_w = None
        if background:
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)

    # -- the caller's thread ---------------------------------------------------------------
    def run(self, writes: Iterable[PendingWrite]) -> None:
        """Send `writes` and drive the pipe until every one is answered or expired."""
        batch = list(writes)
        self.unsent.extend(batch)
        try:
            while not all(w.done for w in batch):
                self._turn()
        finally:
            self._settle()
            for w in batch:                 # a write that left the pipe unanswered
                if not w.done:
                    self._fail(w, FarmError("the write was abandoned"))
            self.waiting.clear()
            self.unsent.clear()
            self._settle()

    # -- the background thread ----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._background, daemon=True,
                                        name="farm-write-pipe")
        self._thread.start()

    def submit(self, write: PendingWrite) -> None:
        """Queue a write (any thread); its future completes in the pipe's thread."""
        with self._lock:
            if self._closed:
                raise FarmError("this FarmClient is closed")
            self._incoming.append(write)
        if threading.current_thread() is not self._thread:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._thread is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
            self._thread.join(10)
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()

    def _background(self) -> None:
        try:
            while True:
                with self._lock:
                    closed = self._closed
                    incoming, self._incoming = self._incoming, []
                self.unsent.extend(incoming)
                if closed:
                    break
                if not self.unsent and not self.waiting:
                    self._idle()
                    continue
                self._turn()
                self._settle()
        finally:
            for w in [*self.waiting.values(), *self.unsent, *self._incoming]:
                self._fail(w, FarmError("the FarmClient was closed with the write in "
                                        "flight"), maybe=w.request_id in self.waiting)
            self.waiting.clear()
            self.unsent.clear()
            self._settle()
            self._drop_link(failed=False)

    def _idle(self) -> None:
        select.select([self._wake_r], [], [], 1.0)
        self._drain_wake()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    # -- one turn ----------------------------------------------------------------------------
    def _turn(self) -> None:
        now = time.monotonic()
        self._expire(now)
        if not self.unsent and not self.waiting:
            return
        if self.link is None:
            self._connect(now)
            return
        if self.unsent and not self._leaving and now >= self._resend_at:
            self._send()
            if self.link is None:
                return
        self._receive(now)

    def _expire(self, now: float) -> None:
        for w in [w for w in self.waiting.values() if w.deadline <= now]:
            del self.waiting[w.request_id]
            self._fail(w, Unavailable("no answer within the timeout (the write may still "
                                      "be applied)"), maybe=True)
        if self.unsent and any(w.deadline <= now for w in self.unsent):
            keep = deque()
            for w in self.unsent:
                if w.deadline > now:
                    keep.append(w)
                elif not w.done:
                    foreign = self.directory.foreign_leader()
                    self._fail(w, Unavailable(
                        foreign_leader_text(foreign) if foreign is not None else
                        f"no member of {', '.join(self.directory.seeds)} took the write "
                        f"within the timeout; check that a majority of the voters runs"))
            self.unsent = keep

    def _earliest_deadline(self) -> float:
        deadlines = [w.deadline for w in self.unsent]
        deadlines += [w.deadline for w in self.waiting.values()]
        return min(deadlines) if deadlines else time.monotonic() + 1.0

    def _connect(self, now: float) -> None:
        """A connection to the member believed to lead (or the next one)."""
        deadline = self._earliest_deadline()
        for endpoint in self.directory.candidates(leader=True):
            if time.monotonic() >= deadline:
                return
            try:
                self.link = self.links.acquire(endpoint, deadline, shared=not self.background)
            except (Unavailable, ProtocolMismatch):
                continue
            self._progress = time.monotonic()
            return
        self._sleep(min(self._backoff.pause(), max(0.0, deadline - time.monotonic())))

    def _sleep(self, seconds: float) -> None:
        if self._wake_r is not None:
            select.select([self._wake_r], [], [], seconds)
            self._drain_wake()
        else:
            time.sleep(seconds)

    def _send(self) -> None:
        room = MAX_IN_FLIGHT - len(self.waiting)
        if room <= 0:
            return
        batch = [self.unsent.popleft() for _ in range(min(room, len(self.unsent)))]
        now = time.monotonic()
        last_call = now + min(2 * self._answer_time, _LAST_CALL_CAP)
        for w in batch:                 # only again: a first attempt always goes out
            if w.sent_at and w.deadline <= last_call:
                self._fail(w, Unavailable(
                    "no answer could come back before the timeout; the last attempt was "
                    "not sent (raise the client's timeout if the farm is slow)"))
        batch = [w for w in batch if not w.done]
        if not batch:
            return
        if not self.waiting:
            self._progress = now                # the answer clock starts now
        for w in batch:
            self.waiting[w.request_id] = w
            w.sent_at = now
        try:
            self.link.send(b"".join([w.frame for w in batch]))
        except NoAnswer:
            self._lost(failed=True)

    def _receive(self, now: float) -> None:
        patience_end = self._progress + self.answer_timeout
        until = min(self._earliest_deadline(), patience_end if self.waiting else now + 1.0)
        if self.unsent and not self._leaving:
            until = min(until, max(self._resend_at, now + 0.001))
        try:
            got = self._wait_input(until)
        except (NoAnswer, ProtocolMismatch):
            self._lost(failed=True)
            return
        if got:
            self._progress = time.monotonic()
            frames = self.link.frames
            now = self._progress
            while frames:
                frame = frames.popleft()
                if isinstance(frame, ext.WriteResult):
                    self._answered(frame, now)
        elif self.waiting and time.monotonic() >= patience_end:
            self._lost(failed=True)         # dead or stalled: try the others
            return
        if self._leaving and not self.waiting:
            self._leaving = False
            self._drop_link(failed=False)

    def _wait_input(self, until: float) -> bool:
        link = self.link
        if self._wake_r is None:
            return link.receive(until)
        sock = link.sock
        if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            ready, _, _ = select.select([sock, self._wake_r], [], [],
                                        max(0.0, until - time.monotonic()))
            if self._wake_r in ready:
                self._drain_wake()
            if sock not in ready:
                return False
        return link.receive(time.monotonic() + 1.0)

    def _answered(self, frame: ext.WriteResult, now: float) -> None:
        w = self.waiting.pop(frame.request_id, None)
        if w is None:
            return                          # a late answer to a write given up on
        self._answer_time += 0.2 * (now - w.sent_at - self._answer_time)
        code = frame.code
        if code == 0:
            w.result = frame
            self._backoff = Backoff(0.02, 0.5)     # pauses of retries that made no progress
            self._finished.append(w)
            return
        if code == ErrorCode.NOT_LEADER:
            exc = error_from_wire(code, frame.message, frame.detail)
            directory = self.directory
            target = directory.redirect(exc)
            if target is None or target == self.link.endpoint or \
                    not directory.reachable(target):
                # nowhere better to go now (no leader, or one we cannot use): ask this
                # member again after a pause, on the same connection
                self._resend_at = max(self._resend_at, now + self._backoff.pause())
            else:
                self._leaving = True
            self.unsent.append(w)
        elif code == ErrorCode.RETRY:
            # The entry that carried it was replaced in that member's log, which does not
            # make it dead everywhere (another member may hold it and lead later): its
            # fate is unknown until a copy sent again is answered (the request id is
            # applied once, so the answer tells).
            w.maybe_applied = True
            self.unsent.append(w)
        elif code == ErrorCode.UNAVAILABLE:
            self._resend_at = time.monotonic() + _UNAVAILABLE_PAUSE
            self.unsent.append(w)
        else:                               # the state machine or the leader refused it
            self._fail(w, error_from_wire(code, frame.message, frame.detail))

    def _lost(self, *, failed: bool) -> None:
        """The connection broke or the member stopped answering: what it did not answer
        may have been applied; send it to the next member."""
        for w in self.waiting.values():
            w.maybe_applied = True
        self.unsent.extendleft(reversed(list(self.waiting.values())))
        self.waiting.clear()
        self._leaving = False
        self._drop_link(failed=failed)

    def _drop_link(self, *, failed: bool) -> None:
        if self.link is not None:
            self.links.release(self.link, failed=failed, shared=not self.background)
            self.link = None

    # -- outcomes --------------------------------------------------------------------------------
    def _fail(self, w: PendingWrite, error: FarmError, *, maybe: bool = False) -> None:
        if w.done:
            return
        w.maybe_applied = w.maybe_applied or maybe
        error.maybe_applied = w.maybe_applied
        w.error = error
        self._finished.append(w)

    def _settle(self) -> None:
        """Complete the futures of what finished (callbacks may submit more writes)."""
        finished, self._finished = self._finished, []
        for w in finished:
            future = w.future
            if future is None:
                continue
            if w.error is not None:
                future.set_exception(w.error)
            else:
                future.set_result((w.result.index, w.result.entry_term))


__all__ = ["PendingWrite", "WritePipe", "MAX_IN_FLIGHT"]
