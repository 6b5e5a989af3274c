"""Log reads (read_entries, read_journal, entry_rows, query_snapshot) served by reader
threads, so that the event loop's turn never grows with a reader's page.

A page costs the loop O(1): it checks the bounds, captures what the page may see (the
applied index, the state machine's `Verdicts`), and hands the job over; a reader thread
reads the segments (`DiskStorage.read_applied`), judges the entries, builds and encodes
the answer frame; the loop queues the finished bytes on the connection.

Bounds and backpressure: at most `threads` pages are being built per node; a connection
has at most one, and the next one starts only once the bytes of the answers before it
have left (the connection's output is below `LOW_WATER`), so a slow reader holds one
page of memory, not a backlog of them. Calls beyond that wait, `waiting_per_connection`
per connection and `waiting` per node; past those the call is refused with Unavailable
(retry), so a flood of reads costs a bounded amount of memory and loop time.

The loop goes first: from the end of its wait to the next wait a turn runs
(`turn_begins`, `turn_ends`), and a reader passes `pause()` every `PAUSE_EVERY` entries
of its work, where it waits for the turn that runs to end. A reader then holds the GIL
in a turn for at most one such step, instead of taking it back every switch interval:
on a machine short of CPU a reader that holds the GIL may be off the CPU for a whole
scheduler period, and the loop would wait for it at each of its system calls (tick
lags of 100-300 ms measured, benchmarks/RESULTS.md). It waits for that turn only, not
for the loop to be idle: a loop busy turn after turn still lets each reader take a
step per turn.

Threads or a process (`--log-readers`): a page's verdicts come from the state machine,
which lives in the node process and changes every turn; threads share it safely
(`machines.Verdicts`), and the work that dominates (pread, CRC, msgpack of large
buffers) runs in C. The cost is the GIL: a reader thread in Python code gives the loop
the GIL at each switch interval, which this module lowers to `SWITCH_INTERVAL`
(benchmarks/read_under_load.py measures the turn times). With a reader process
(reader_process.py) the threads here only hand read_entries and read_journal pages to
it and wait for the bytes, with the same bounds.
"""
from __future__ import annotations

import logging
import queue
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from consensus.common.errors import FarmError, Unavailable

if TYPE_CHECKING:
    from consensus.runtime.connection import Connection

log = logging.getLogger("garlicfarm.reads")

#: a connection's next page starts once fewer bytes than this wait to be written
LOW_WATER = 256 << 10
#: the GIL switch interval (s) of a node process: a reader thread in Python code hands
#: the loop the GIL this often (CPython's default, 5 ms, would add up per turn)
SWITCH_INTERVAL = 0.001

#: builds the answer frame (runs on a reader thread)
Work = Callable[[], bytes]
#: the frame of an error for a call (runs on a reader thread)
Failure = Callable[[FarmError], bytes]


@dataclass(slots=True)
class _Job:
    conn: "Connection"
    work: Work
    failure: Failure
    frame: bytes = b""
    #: who queues the frame (a group's: the node's groups share the readers)
    reply: Callable[["Connection", bytes], None] | None = None


class LogReads:
    """Reader threads and the loop's side of them (`submit`, `pump`: loop thread only)."""

    def __init__(self, *, wake: Callable[[], None], threads: int = 2,
                 waiting: int = 256, waiting_per_connection: int = 8,
                 name: str = "reader") -> None:
        if threads < 1:
            raise ValueError(f"reader threads: {threads}; need at least 1")
        self._wake = wake
        self.threads = threads
        self.waiting_limit, self.per_connection = waiting, waiting_per_connection
        self._waiting: deque[_Job] = deque()
        self._waiting_of: dict["Connection", int] = {}
        self._busy: set["Connection"] = set()   # connections with a page being built
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._done: deque[_Job] = deque()       # appended by readers, taken by the loop
        self.served = self.refused = 0
        #: held by the loop during its turns (`turn_begins`/`turn_ends`); see `pause`
        self._turn = threading.Condition(threading.Lock())
        self.turn_running = False           # a loop turn runs (readers pause)
        self._turns = 0                     # turns begun: a pause waits for one to end
        self._loop: int | None = None       # the loop's thread (never pauses)
        #: told of each turn's start (True) and end (False): the reader process's flag
        self.turn_listeners: list[Callable[[bool], None]] = []
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    @property
    def in_flight(self) -> int:
        """Pages being built or waiting (the metrics)."""
        return len(self._busy) + len(self._waiting)

    # -- the loop's side -------------------------------------------------------------------
    def turn_begins(self) -> None:
        """The loop's turn starts (its wait is over): readers stop at their next pause."""
        with self._turn:
            self.turn_running = True
            self._turns += 1
        self._loop = threading.get_ident()
        for listener in self.turn_listeners:
            listener(True)

    def turn_ends(self) -> None:
        """The loop waits again: readers go on."""
        with self._turn:
            self.turn_running = False
            self._turn.notify_all()
        for listener in self.turn_listeners:
            listener(False)

    def submit(self, conn: "Connection", work: Work, failure: Failure,
               reply: Callable[["Connection", bytes], None] | None = None) -> None:
        """Build `work`'s frame on a reader thread and queue it on `conn` (with `reply`
        when given, else `pump`'s), after the connection's earlier pages. Unavailable
        when too many wait."""
        waiting = self._waiting_of.get(conn, 0)
        if waiting >= self.per_connection or len(self._waiting) >= self.waiting_limit:
            self.refused += 1
            raise Unavailable(f"this member has {len(self._waiting)} log reads waiting "
                              f"({waiting} of this connection): retry later")
        self._waiting.append(_Job(conn, work, failure, reply=reply))
        self._waiting_of[conn] = waiting + 1
        self._start_waiting()

    def pump(self, reply: Callable[["Connection", bytes], None]) -> bool:
        """Queue the finished frames on their connections (`reply`) and start the pages
        that may start now; True when a frame was queued."""
        delivered = False
        done = self._done
        while done:
            job = done.popleft()
            self._busy.discard(job.conn)
            if not job.conn.closed:
                (job.reply or reply)(job.conn, job.frame)
                delivered = True
            self.served += 1
        if self._waiting:
            self._start_waiting()
        return delivered

    def _start_waiting(self) -> None:
        busy = self._busy
        if len(busy) >= self.threads:
            return
        kept: deque[_Job] = deque()
        waiting, counts = self._waiting, self._waiting_of
        while waiting:
            job = waiting.popleft()
            conn = job.conn
            if conn.closed:
                self._forget(conn)
                continue
            if len(busy) >= self.threads or conn in busy or len(conn.out) >= LOW_WATER:
                kept.append(job)
                continue
            busy.add(conn)
            counts[conn] -= 1
            if not counts[conn]:
                del counts[conn]
            self._jobs.put(job)
        self._waiting = kept

    def _forget(self, conn: "Connection") -> None:
        count = self._waiting_of.get(conn, 0) - 1
        if count > 0:
            self._waiting_of[conn] = count
        else:
            self._waiting_of.pop(conn, None)

    def close(self) -> None:
        """Stop the reader threads (after the pages they are building)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        self._waiting.clear()
        self._waiting_of.clear()

    # -- reader threads -------------------------------------------------------------------
    def pause(self) -> None:
        """A reader's step is over: wait for the loop's turn that runs, if one does, to
        end (without the GIL). Nothing on the loop's own thread."""
        if not self.turn_running or threading.get_ident() == self._loop:
            return
        with self._turn:
            turn = self._turns
            while self.turn_running and self._turns == turn:
                self._turn.wait()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.frame = job.work()
            except FarmError as exc:
                job.frame = job.failure(exc)
            except Exception as exc:    # noqa: BLE001 - answered, logged: the thread goes on
                log.exception("a log read failed")
                job.frame = job.failure(FarmError(
                    f"the member failed to read the log ({type(exc).__name__}: {exc}); "
                    f"its log says more"))
            self._done.append(job)
            self._wake()
