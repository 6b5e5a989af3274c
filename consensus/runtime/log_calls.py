"""The log reads of the client service: read_entries, read_journal, entry_rows and
query_snapshot (docs/runtime.md, docs/runtime-requests.md S7, S8).

The loop checks a call's bounds (IndexUnderflow below the log's first entry,
IndexOverflow past what this member applied; a new leader waits for what it may have
acknowledged) and hands the page to the reader threads (log_reads.py), which read the
segments, judge the entries (`machines.Verdicts`), build and encode the answer: O(1) of
the loop's time per call, whatever the page. With `--log-readers process` the pages of
read_entries and read_journal are built by the node's reader process instead
(reader_process.py), with the same code (log_pages.py).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from consensus.common.errors import FarmError, IndexOverflow, IndexUnderflow
from consensus.raft import CompactedError, Entry, PullStatus, Role
from consensus.raft.reads import query_snapshot
from consensus.runtime.log_pages import PAUSE_EVERY, entries_page, journal_page, read_log
from consensus.runtime.log_reads import LogReads
from consensus.runtime.machines import CommandError, FarmStateMachine
from consensus.runtime.membership_calls import LATER, AdminWaits
from consensus.runtime.row_index import RowIndex, entry_shows

if TYPE_CHECKING:
    from consensus.runtime.node_view import NodeView
    from consensus.runtime.service import Service

#: the largest page a reader may ask for (read_entries, read_journal)
MAX_PAGE_BYTES = 64 << 20
#: entries of one read_entries / read_journal page at most: a page of small entries costs
#: ~20 us an entry of Python work, which a reader thread shares with a busy loop, and a
#: client gives a member `answer_timeout` (1 s) before it retries elsewhere
MAX_PAGE_ENTRIES = 8192


class LogCalls:
    """The log reads' calls, answered by the reader threads (`LogReads`), the pages of
    read_entries and read_journal by the node's reader process if it has one
    (reader_process.py; entry_rows and query_snapshot stay on the threads)."""

    #: the calls this class answers (methods of the same name)
    CALLS = ("read_entries", "read_journal", "entry_rows", "query_snapshot")

    def __init__(self, node: "NodeView", service: "Service", waits: AdminWaits) -> None:
        self.node, self.service, self.waits = node, service, waits
        self.rows = RowIndex(self._shown)
        self._rows_lock = threading.Lock()      # the row index is used by reader threads
        self._owns_reads = node.reads is None       # else the node's, shared by its groups
        self.reads = LogReads(wake=node.transport.wake) if node.reads is None else node.reads
        #: the verdicts this group's pages may see, fed to the node's reader process
        self._feed = node.reader.feed() if node.reader is not None else None

    def pump(self) -> None:
        """Queue the finished pages on their connections (the loop, every turn). Readers
        the node shares among its groups are pumped by the node, once per turn."""
        if self._owns_reads:
            self.reads.pump(self.node.transport.reply)

    def close(self) -> None:
        if self._owns_reads:
            self.reads.close()

    def query_snapshot(self, conn, call, args):
        """Two-step read, step two: restore and replay on a reader thread."""
        node = self.node
        index, query = int(args["index"]), args.get("query")
        if not isinstance(query, bytes):
            raise FarmError("query must be bytes")
        applied, first = node.machine.applied, node.log.first_index()
        if index > applied:
            raise IndexOverflow(f"node {node.id} has applied up to {applied}, not "
                                f"{index} yet: retry later or ask another member", applied)

        def underflow() -> IndexUnderflow:
            first = node.log.first_index()
            return IndexUnderflow(f"index {index} is compacted away at node {node.id} (its "
                                  f"log starts at {first})", first)

        def answer():
            try:
                result = query_snapshot(index, query, applied=applied, first_index=first,
                                        snapshots=node.snapshots,
                                        read_entries=node.read_applied,
                                        new_machine=node.new_machine)
            except (CompactedError, FileNotFoundError):    # compacted or pruned meanwhile
                raise underflow() from None
            except CommandError as exc:
                raise FarmError(str(exc)) from None
            if result.status is PullStatus.INDEX_UNDERFLOW:
                raise underflow()
            return result.result
        return self._off_loop(conn, call, answer)

    def read_entries(self, conn, call, args):
        max_bytes = _page_bytes(args)
        payloads = bool(args.get("payloads", True))
        return self._applied_range(conn, call, args, "read_entries", lambda start, stop:
                                   self._compacted_as_underflow(
                                       entries_page, self.node.read_applied,
                                       self.node.machine.verdicts, start,
                                       min(stop, start + MAX_PAGE_ENTRIES), max_bytes,
                                       payloads, self.reads.pause),
                                   {"kind": "entries", "max_bytes": max_bytes,
                                    "payloads": payloads})

    def read_journal(self, conn, call, args):
        """The visible journal entries of a page as columns (docs/runtime-requests.md
        S8): a backlog of small entries read without a record object per entry."""
        max_bytes = _page_bytes(args)

        def answer(start: int, stop: int) -> dict:
            return self._compacted_as_underflow(
                journal_page, self.node.read_applied, self.node.machine.verdicts, start,
                min(stop, start + MAX_PAGE_ENTRIES), max_bytes, self.reads.pause)
        return self._applied_range(conn, call, args, "read_journal", answer,
                                   {"kind": "journal", "max_bytes": max_bytes})

    def entry_rows(self, conn, call, args):
        """Each entry's journal rows and the effective commits' headers, from the row
        index (docs/runtime-requests.md S7): planning a backlog without its headers."""
        def answer(start: int, stop: int) -> dict:
            with self._rows_lock:
                self.rows.forget_before(self.node.log.first_index())
                end, rows, commits = self.rows.rows_of(start, stop)
            return {"stop": end, "rows": rows, "commits": commits}
        return self._applied_range(conn, call, args, "entry_rows", answer)

    def _shown(self, start: int, stop: int):
        """What entries [start, stop) show readers, for the row index (a reader thread)."""
        verdicts = self.node.machine.verdicts()
        while start < stop:
            page = self._read_log(start, min(stop, start + PAUSE_EVERY), 8 << 20)
            for entry, verdict in zip(page, verdicts.of(page)):
                yield (entry.index, *entry_shows(entry, lambda _, v=verdict: v))
            start = page[-1].index + 1

    def _read_log(self, start: int, stop: int, max_bytes: int | None) -> list[Entry]:
        """Applied entries [start, stop) on a reader thread: IndexUnderflow when they
        were compacted away after the call was checked."""
        return self._compacted_as_underflow(read_log, self.node.read_applied, start, stop,
                                            max_bytes, self.reads.pause)

    def _compacted_as_underflow(self, read: Callable[..., Any], *args: Any) -> Any:
        """`read(*args)`, whose entries may be compacted meanwhile: IndexUnderflow."""
        try:
            return read(*args)
        except CompactedError as exc:
            first = max(self.node.log.first_index(), getattr(exc, "first_index", 0))
            raise IndexUnderflow(f"entries before {first} are compacted away at node "
                                 f"{self.node.id}", first) from None

    def _off_loop(self, conn, call, answer: Callable[[], Any]) -> object:
        """Answer `call` with `answer()`, run and encoded on a reader thread; the frame
        is queued on `conn` by the loop (LogReads)."""
        result, failure = self.service.answer_frames(call.call_id)
        self.reads.submit(conn, lambda: result(answer()), failure, self.node.transport.reply)
        return LATER

    def _page(self, conn, call, answer: Callable[[int, int], Any], start: int, stop: int,
              job: dict | None) -> object:
        """`answer(start, stop)` on a reader thread, or, with a reader process, `job`'s
        page (log_pages.py, the same) built there: the loop captures the verdicts the
        page may see; a reader thread pins the records and waits for the frame. (A
        partition whose prepared commits await partition 0's decision is read on a
        thread: the process's mirror does not know the decisions.)"""
        reader = self.node.reader
        if job is None or reader is None or self._feed is None \
                or self.node.machine.awaits_decisions():
            return self._off_loop(conn, call, lambda: answer(start, stop))
        ticket = reader.capture(self._feed, self.node.machine)
        stop = min(stop, start + MAX_PAGE_ENTRIES)
        job = {**job, "g": self._feed.key, "call": call.call_id, "head": self.service.head(),
               "start": start, "stop": stop}
        pin = self.node.pin_applied

        def work() -> bytes:
            pins = [] if start == stop else \
                self._compacted_as_underflow(pin, start, stop, job["max_bytes"])
            return reader.build(job, ticket, pins)
        _, failure = self.service.answer_frames(call.call_id)
        self.reads.submit(conn, work, failure, self.node.transport.reply)
        return LATER

    def _applied_range(self, conn, call, args, name: str,
                       answer: Callable[[int, int], Any], job: dict | None = None) -> Any:
        """`answer(start, stop)` for applied entries [start, stop) of this member's log,
        on a reader thread (or `job` in the reader process: `_page`): IndexUnderflow
        below its first entry, IndexOverflow past what it applied and may show
        (`stable_applied`: never into a batch partition 0 has not decided; a new leader
        waits for what it may already have acknowledged). The loop checks the bounds
        only: O(1) per call (and per batch awaiting a decision)."""
        node = self.node
        start, stop = int(args["start"]), int(args["stop"])
        if start < 1 or stop < start:
            raise FarmError(f"{name}({start}, {stop}): need 1 <= start <= stop")
        first, applied = node.log.first_index(), node.machine.stable_applied()
        if start < first:
            raise IndexUnderflow(f"entries before {first} are compacted away at node "
                                 f"{node.id}", first)
        if stop - 1 > applied:
            raft = node.core
            if raft.role is Role.LEADER and not raft.committed_in_term and \
                    stop - 1 <= raft.last_index:
                # A new leader learns the commit index when its first entry commits: what
                # it holds may be acknowledged already (a client reading its own write),
                # so answer once that is applied here instead of "not there yet".
                return self.waits.add(
                    conn, call, args,
                    lambda: ((True, self._page(conn, call, answer, start, stop, job))
                             if node.machine.stable_applied() >= stop - 1 else (False, None)),
                    f"node {node.id}, a new leader, did not commit entry {stop - 1} in time")
            held = "" if applied == node.machine.applied else \
                f" ({_waiting(node.machine, applied + 1)})"
            raise IndexOverflow(f"node {node.id} has committed and applied up to {applied}"
                                f"{held}; entry {stop - 1} is not there yet", applied)
        return self._page(conn, call, answer, start, stop, job)


def _waiting(machine: FarmStateMachine, index: int) -> str:
    """What holds a partition's stable end at `index`: a prepared commit's batch."""
    query, batch = machine.ledger.prepared.get(index, ("?", "?"))[:2]
    return f"entry {index} is batch {batch} of query {query!r}, waiting for partition 0's " \
        f"decision"


def _page_bytes(args: dict) -> int:
    """A page's max_bytes, checked, and at most MAX_PAGE_BYTES (a larger one is taken as
    that much: a page may always end early; the JVM reader asks for 1 GiB to get one
    entry whole, and a page holds at least one entry whatever its size)."""
    value = args.get("max_bytes", 8 << 20)
    if type(value) is not int or value < 0:
        raise FarmError(f"max_bytes {value!r}: give a page size in bytes (0 or more)")
    return min(value, MAX_PAGE_BYTES)
