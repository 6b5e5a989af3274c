"""The node's reader process (`--log-readers process`): builds the pages of read_entries
and read_journal in a process of its own, apart from the Raft loop's GIL.

Why a process: a reader thread shares the GIL with the loop, and on a machine short of
CPU a reader holding it mid-step keeps the loop waiting (ticks 300-500 ms late measured,
benchmarks/RESULTS.md); a process has its own GIL and may run at a lower priority
(`--log-reader-nice`), which a thread must not (holding the GIL, it would stall the
loop).

Who does what. The loop checks a call's bounds and captures what its page may see: the
verdict facts new since the last capture (verdict_feed.py) and the process generation
they belong to (`capture`: O(what applied since)). A reader thread (log_reads.py, as
for the thread readers: same bounds and backpressure) then pins the page's records in
the segments (`DiskStorage.pin_applied`: their offsets and a duplicate of each segment's
descriptor, so a compaction meanwhile cannot disturb the read, and a page compacted away
before it fails as the threads' does) and hands the job to the process (`build`): the
descriptors travel over a socketpair (SCM_RIGHTS), the process reads and checks the
records, judges them by its verdict mirror, builds and encodes the answer frame
(log_pages.py: the threads' code) and sends the bytes back. The reader thread waits
for them in `recv` (without the GIL) and LogReads queues them on the connection.
The loop goes first, as with the threads: the node shares its turns with the process
(`turn`: a memfd the process maps) and the process waits at its pauses while a turn
runs (page_builder.LoopTurns).
The frame comes back rather than being written by the process to the client's socket
(a descriptor it could be given once): a connection also carries the loop's own
answers and events, framed and possibly encrypted (TLS) by the node, so one writer.

Supervision: a thread waits for the process; when it dies its exit is logged (ERROR),
the verdicts sent to it are void (`generation`: the next capture of each machine is
full), the page in flight is answered Unavailable (a client retries), and a new one
starts after a backoff (0.1 s doubling to 5 s; reset after a minute alive). `close`
stops it with the node.
"""
from __future__ import annotations

import logging
import mmap
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import msgpack

from consensus.common.errors import Unavailable
from consensus.net.backoff import Backoff
from consensus.runtime.verdict_feed import Delta, VerdictFeed, wire_delta

if TYPE_CHECKING:
    from consensus.runtime.machines import FarmStateMachine
    from consensus.storage.segment import PinnedRecords

log = logging.getLogger("garlicfarm.reads")

#: the loop's turns as the process sees them: turns begun (u64), a turn runs (u8)
TURN = struct.Struct("<QB")
#: the longest a page waits at a pause for one loop turn (a loop stopped in a turn,
#: e.g. SIGSTOPped, must not stop the pages of the other nodes' clients forever)
TURN_WAIT = 0.5
#: a job's header: the length of its msgpack body (or of an answer frame)
HEAD = struct.Struct(">Q")
#: segments (descriptors) one page may span: one SCM_RIGHTS message carries them
MAX_PIECES = 64
#: the largest answer frame accepted from the process (a page is at most 64 MiB plus
#: one entry); anything larger means the process is broken
MAX_FRAME = 1 << 31
#: seconds a page may take in the process before it is deemed stuck (and killed)
JOB_TIMEOUT = 60.0
#: verdict request ids waiting to be sent at most; past it the captures start over
#: (full) rather than grow (reads whose connections all closed send none)
MAX_PENDING_IDS = 1 << 20
#: a process alive this long resets the restart backoff
HEALTHY_SECONDS = 60.0


class ReaderProcess:
    """The node's reader process and the node's side of its channel."""

    def __init__(self, *, node_id: int, nice: int = 0, name: str = "reader-process") -> None:
        self.node_id = node_id
        self.nice = nice                    #: the process's niceness above the node's
        # The loop's turns, shared with the process (TURN: turns begun, a turn runs): it
        # pauses while one runs, as the reader threads do (LogReads.pause).
        self._turn_fd = os.memfd_create("garlicfarm-loop-turn")
        os.ftruncate(self._turn_fd, TURN.size)
        self._turn = mmap.mmap(self._turn_fd, TURN.size)
        self._turns = 0
        self._state = threading.Lock()      # generation, pending (the loop takes it briefly)
        self._channel = threading.Lock()    # one job at a time on the socket
        self.generation = 0
        self._pending: list[Delta] = []
        self._pending_ids = 0
        self._feeds = 0
        self.restarts = 0                   #: processes started after the first
        self._stopping = threading.Event()
        self._backoff = Backoff(0.1, 5.0)
        self._sock, self.process = self._spawn()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name=f"{name}-supervisor")
        self._supervisor.start()

    # -- the loop's side ------------------------------------------------------------------
    def feed(self) -> VerdictFeed:
        """A feed for one state machine (a group's)."""
        self._feeds += 1
        return VerdictFeed(self._feeds)

    def capture(self, feed: VerdictFeed, machine: "FarmStateMachine") -> int:
        """What a page asked now may see: queue the verdicts new since the last capture
        (loop thread); the ticket for `build`."""
        with self._state:
            generation = self.generation
            delta = feed.capture(machine, fresh=feed.generation != generation)
            feed.generation = generation
            if delta is not None:
                self._pending.append(delta)
                self._pending_ids += len(delta["ids"])
                if self._pending_ids > MAX_PENDING_IDS:
                    self._void()
            return generation

    def turn(self, running: bool) -> None:
        """The loop's turn begins (True) or ends (False): the process pauses meanwhile."""
        if running:
            self._turns += 1
        TURN.pack_into(self._turn, 0, self._turns, running)

    # -- a reader thread's side -----------------------------------------------------------
    def build(self, job: dict, ticket: int, pins: list["PinnedRecords"]) -> bytes:
        """The answer frame of `job` (LogCalls._page's fields), built by the process from
        the pinned records (closed here); Unavailable when the process failed or
        restarted since the capture (the client retries). A page over more than
        `MAX_PIECES` segments (tiny --segment-bytes) ends after them, as a page may."""
        if len(pins) > MAX_PIECES:
            for pin in pins[MAX_PIECES:]:
                pin.close()
            pins = pins[:MAX_PIECES]
            job = {**job, "stop": job["start"] + sum(len(p.starts) for p in pins)}
        try:
            with self._channel:
                with self._state:
                    if ticket != self.generation:
                        raise Unavailable(f"node {self.node_id}'s reader process restarted "
                                          f"while the read waited: retry")
                    deltas, self._pending, self._pending_ids = self._pending, [], 0
                sock = self._sock
                try:
                    job = {**job, "deltas": [wire_delta(d) for d in deltas], "pieces": [
                        [p.path, p.starts.tobytes(), p.ends.tobytes()] for p in pins]}
                    body = msgpack.packb(job, use_bin_type=True)
                    socket.send_fds(sock, [HEAD.pack(len(body))], [p.fd for p in pins])
                    for pin in pins:
                        pin.close()         # the process holds its own copies
                    sock.sendall(body)
                    size, = HEAD.unpack(_receive(sock, HEAD.size))
                    if size > MAX_FRAME:
                        raise OSError(f"the process announced a frame of {size} bytes")
                    return _receive(sock, size)
                except OSError as exc:
                    with self._state:
                        self._void()
                    if not isinstance(exc, ConnectionError):  # alive, out of step
                        log.error("node %d: the reader process (pid %d) failed a page "
                                  "(%s; %.0f s allowed): killing it", self.node_id,
                                  self.process.pid, exc or type(exc).__name__, JOB_TIMEOUT)
                        self.process.kill()
                    raise Unavailable(f"node {self.node_id}'s reader process failed "
                                      f"({exc or type(exc).__name__}): retry") from None
                except BaseException:
                    with self._state:
                        self._void()        # the deltas taken may not have arrived
                    raise
        finally:
            for pin in pins:
                pin.close()

    def _void(self) -> None:
        """Forget the verdicts sent or waiting (under _state): each feed starts over."""
        self.generation += 1
        self._pending, self._pending_ids = [], 0

    # -- supervision ----------------------------------------------------------------------
    def _spawn(self) -> tuple[socket.socket, subprocess.Popen]:
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen([sys.executable, "-m", "consensus.runtime.page_builder",
                                        str(theirs.fileno()), str(self.nice),
                                        str(self._turn_fd)],
                                       pass_fds=(theirs.fileno(), self._turn_fd),
                                       stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(JOB_TIMEOUT)
        log.info("node %d: reader process started (pid %d)", self.node_id, process.pid)
        return ours, process

    def _supervise(self) -> None:
        """Restart the process whenever it dies (with backoff), until `close`."""
        while True:
            began = time.monotonic()
            code = self.process.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - began >= HEALTHY_SECONDS:
                self._backoff = Backoff(0.1, 5.0)
            pause = self._backoff.pause()
            log.error("node %d: the reader process (pid %d) died (exit code %d): pages "
                      "being built are answered Unavailable; a new one starts in %.1f s",
                      self.node_id, self.process.pid, code, pause)
            with self._state:
                self._void()
            while not self._stopping.wait(pause):
                try:
                    with self._channel:
                        self._sock.close()
                        self._sock, self.process = self._spawn()
                        with self._state:
                            self._void()
                    self.restarts += 1
                    break
                except OSError as exc:
                    pause = self._backoff.pause()
                    log.error("node %d: the reader process could not start (%s): trying "
                              "again in %.1f s", self.node_id, exc, pause)
            if self._stopping.is_set():
                return

    def close(self) -> None:
        """Stop the process (it ends at the end of its channel) and its supervisor."""
        self._stopping.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)   # ends a page in flight at once
        except OSError:
            pass
        with self._channel:
            self._sock.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._supervisor.join(timeout=5)
        self._turn.close()
        os.close(self._turn_fd)


def _receive(sock: socket.socket, size: int) -> bytearray:
    """Exactly `size` bytes (OSError at the end of the stream)."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:], min(size - got, 4 << 20))
        if not n:
            raise ConnectionResetError("the reader process closed its channel")
        got += n
    return buffer
