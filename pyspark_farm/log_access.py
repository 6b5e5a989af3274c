"""Reading a farm's committed log from Spark, in both places it runs (the raft source,
and the chp source, which reads the journal its capture writes).

Driver side (planning): the committed end of the log, the first index still kept, the row
counts of entries (`size_pages`, as arrays from the members' row index; `entry_sizes`,
an entry at a time; optionally only one query's committed batches), which members serve
reads (`reading_members`), one lazy pass over entry sizes (`SizeScan`) and the planning
steps of a reader (`LogPlanner`).
Executor side: `PieceReader` turns planned `Piece`s into visible entries, at the member a
task was given, falling back to the leader when that one is behind or gone, and to any
member that still holds them when entries were compacted away where it asked; the same
committed range gives the same entries at every member, and a committed batch comes out
whole or not at all.
"""
from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from pyspark.sql.datasource import InputPartition

from .compat import ReadLimit

from .admission import choose_end
from .errors import DataLossError
from .members import (PROBE_SECONDS, EntriesGone, farm_members, member_firsts,
                      read_anywhere)
from .planning import EntrySize, Piece, Sizes, plan_tasks

if TYPE_CHECKING:
    from consensus.client import ClusterView, FarmClient, LogRecord
    from consensus.wire.journal_pages import JournalPage

    from .connection import FarmClientOptions

log = logging.getLogger("pyspark_farm.log")
ROWS_PER_TASK = 1 << 19

READ_FROM = ("leader", "followers", "observers", "any")
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Visible:
    """(Part of) a committed batch's payloads with their content types, at its commit
    entry (journal entries are read as columns: `JournalPage`)."""
    index: int
    term: int
    timestamp_ms: int
    type: str
    records: list[bytes]
    content_types: tuple[str, ...] = ()


def log_end(client: "FarmClient") -> int:
    """One past the last entry applied at the leader that readers may see: what a new
    batch may read up to (in a partition of several, it stops before a batch that
    partition 0 has not decided: docs/exactly-once.md, "Partitions")."""
    return client.last_applied(stable=True) + 1


def first_index(client: "FarmClient") -> int:
    return client.log_bounds()[0]


def committed_rows(metadata: dict, staged: Sequence[int]) -> tuple[int, ...]:
    """The row count of each staged payload of a commit, from the metadata the garlicfarm
    sink writes; a commit from another writer counts one row per payload."""
    rows = metadata.get("rows") if isinstance(metadata, dict) else None
    if isinstance(rows, list) and len(rows) == len(staged) and all(
            isinstance(r, int) and r >= 0 for r in rows):
        return tuple(rows)
    return (1,) * len(staged)


def _supports_headers_only(client: "FarmClient") -> bool:
    try:
        return "payloads" in inspect.signature(client.read_entries).parameters
    except (TypeError, ValueError):
        return False


def entries_of(start: int, stop: int, **options: object
               ) -> Callable[["FarmClient", str | None], list["LogRecord"]]:
    """What readers ask a member by default: read_entries of [start, stop), a page of
    CHUNK_BYTES at most (`options`: payloads)."""
    def ask(member: "FarmClient", endpoint: str | None) -> list["LogRecord"]:
        return member.read_entries(start, stop, max_bytes=CHUNK_BYTES, endpoint=endpoint,
                                   **options)
    return ask


def read_held(client: "FarmClient", start: int, stop: int, *,
              probe: "FarmClient | None" = None, ask: "Callable | None" = None,
              **options: object) -> list["LogRecord"]:
    """read_entries at the leader, or, where its log starts after `start`, at a member
    that still holds it (asked with `probe`; EntriesGone when no member does). Entries
    the leader has not applied yet (a new leader a little behind the log's end that its
    predecessor reported) are waited for, with backoff, up to the client's timeout.
    `ask(member, endpoint)` asks something else of the member (entry_rows)."""
    from consensus.client import IndexOverflow, IndexUnderflow
    ask = ask or entries_of(start, stop, **options)
    deadline = time.monotonic() + client.timeout
    delay = 0.01
    while True:
        try:
            return ask(client, None)
        except IndexUnderflow:
            return read_anywhere(client, probe or client, start,
                                 deadline=time.monotonic() + client.timeout, ask=ask)[1]
        except IndexOverflow:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)       # the leader applying what it committed
            delay = min(delay * 2, 0.2)


def unknown_call(exc: Exception, name: str) -> bool:
    """Is `exc` a member's refusal of call `name` as unknown (a node older than it)?"""
    return str(exc).startswith(f"unknown call {name!r}")


def size_pages(client: "FarmClient", start: int, stop: int, *,
               query_id: str | None = None, probe: "FarmClient | None" = None
               ) -> Iterator[Sizes]:
    """Row counts of the entries in [start, stop), a page at a time, lazily: from
    `entry_rows` (docs/runtime-requests.md S7), or from entry headers where the member
    does not know that call (headers only when the farm supports it: S1); at the leader
    or a member that still holds them (`read_held`). With `query_id`, only the committed
    batches of that query (journal entries show none)."""
    from consensus.client import FarmError
    cursor = start
    by_rows = hasattr(client, "entry_rows")
    while cursor < stop:
        if by_rows:
            try:
                counts = read_held(client, cursor, stop, probe=probe,
                                   ask=lambda member, endpoint, at=cursor: member.entry_rows(
                                       at, stop, endpoint=endpoint))
            except FarmError as exc:
                if not unknown_call(exc, "entry_rows"):
                    raise
                by_rows = False         # a member older than the call: read headers
                continue
            if counts.stop <= cursor:
                return
            commits = [s for s in map(_size_of, counts.commits)
                       if s is not None and query_id in (None, s.query_id)]
            rows = np.frombuffer(counts.rows, dtype="<u4")
            yield Sizes.journal(cursor, rows if query_id is None else np.zeros_like(rows),
                                [s.size for s in commits])
            cursor = counts.stop
            continue
        extra = {"payloads": False} if _supports_headers_only(client) else {}
        records = read_held(client, cursor, stop, probe=probe, **extra)
        if not records:
            return
        page_stop = records[-1].index + 1
        yield Sizes.of(cursor, page_stop, _header_sizes(records, query_id))
        cursor = page_stop


@dataclass(frozen=True, slots=True)
class _CommitSize:
    query_id: str
    size: EntrySize


def _size_of(record: "LogRecord") -> _CommitSize | None:
    """An effective commit's row counts, from its header."""
    commit = record.commit
    if record.type != "commit" or commit is None or not commit.effective:
        return None
    parts = committed_rows(commit.metadata, commit.staged)
    return _CommitSize(commit.query_id, EntrySize(record.index, sum(parts), parts,
                                                  min(commit.staged, default=record.index)))


def _header_sizes(records: Sequence["LogRecord"], query_id: str | None
                  ) -> Iterator[EntrySize]:
    for record in records:
        commit = _size_of(record)
        if commit is not None:
            if query_id in (None, commit.query_id):
                yield commit.size
        elif query_id is None and record.type == "journal" \
                and not getattr(record, "duplicate", False):
            count = getattr(record, "count", None)
            yield EntrySize(record.index, len(record.records or ()) if count is None else count)


def entry_sizes(client: "FarmClient", start: int, stop: int, *,
                query_id: str | None = None, probe: "FarmClient | None" = None
                ) -> Iterator[EntrySize]:
    """`size_pages`, an entry at a time: the entries of [start, stop) that show rows."""
    for page in size_pages(client, start, stop, query_id=query_id, probe=probe):
        yield from page.entries()


def reading_members(client: "FarmClient", probe: "FarmClient", read_from: str, stop: int,
                    low: int) -> list[str | None]:
    """The endpoints tasks read [low, stop) from, for `readFrom`; None stands for "the
    member the client picks" (the leader). Members the leader does not know to hold the
    range yet (match index below stop - 1: lagging, or down) are left out, so a task is
    not sent to wait for them; so are members whose log starts after `low` (the lowest
    entry the tasks read, a commit's staged entries included), which each member is
    asked (with `probe`): the leader's view does not tell where a member's log starts."""
    if read_from == "leader":
        return [None]
    view = client.get_servers()
    caught_up = {node_id: endpoint for node_id, endpoint in farm_members(view).items()
                 if node_id != view.leader_id and _caught_up(view, node_id, stop)}
    return choose_members(view, read_from, stop, member_firsts(probe, caught_up), low)


def _caught_up(view: "ClusterView", node_id: int, stop: int) -> bool:
    member = view.members.get(node_id)
    return member is None or member.match_index is None or member.match_index >= stop - 1


def choose_members(view: "ClusterView", read_from: str, stop: int,
                   firsts: Mapping[int, int | None] | None = None, low: int = 0
                   ) -> list[str | None]:
    """`reading_members` on the leader's view of the farm and, when given, each member's
    first index (None: it did not answer; sans-I/O)."""
    if read_from == "leader":
        return [None]

    def ready(node_id: int) -> bool:
        if not _caught_up(view, node_id, stop):
            return False
        if firsts is None:
            return True
        first = firsts.get(node_id)
        return first is not None and first <= low

    followers = [e for i, e in sorted(view.voters.items())
                 if i != view.leader_id and ready(i)]
    observers = [e for i, e in sorted(view.observers.items()) if ready(i)]
    if read_from == "followers":
        chosen = followers
    elif read_from == "observers":
        chosen = observers or followers
    else:
        chosen = [None] + followers + observers
    return chosen or [None]


class PieceReader:
    """Reads planned pieces in an executor, at one member, with fallback and data-loss
    handling. `wait` bounds how long a lagging member is waited for, and how long the
    members are asked for entries compacted away where the reader asked. The staged
    payloads of a commit are fetched `prefetch` at a time by helper threads (each with its
    own client), so the farm serves the next ones while this thread converts one."""

    def __init__(self, connection: "FarmClientOptions", endpoint: str | None, *,
                 fail_on_data_loss: bool, prefetch: int = 2) -> None:
        self.connection = connection
        self.client = connection.client()
        self.endpoint = endpoint
        self.fail_on_data_loss = fail_on_data_loss
        self.wait = connection.timeout
        self.prefetch = prefetch
        self._local = threading.local()
        self._clients = [self.client]
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=prefetch,
                                        thread_name_prefix="garlicfarm-read")
        self._probe: "FarmClient | None" = None
        self._firsts: dict[str | None, int] = {}   # where members' logs started, when asked
        self._columns = True                # read_journal, until a member does not know it

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for client in self._clients:
            client.close()

    def read(self, pieces: Sequence[Piece]) -> Iterator["Visible | JournalPage"]:
        """The pieces' visible entries in order: runs of journal entries as JournalPages,
        committed batches as Visible."""
        for piece in pieces:
            if piece.parts is None:
                yield from self._range(piece.start, piece.stop)
            else:
                yield from self._slice(piece.start, *piece.parts)

    # -- internals -----------------------------------------------------------------------------
    def _prober(self) -> "FarmClient":
        """A client with a short timeout, to ask each member in turn."""
        with self._lock:
            if self._probe is None:
                self._probe = self.connection.client(timeout=min(PROBE_SECONDS, self.wait))
                self._clients.append(self._probe)
            return self._probe

    def _call(self, client: "FarmClient", start: int, stop: int,
              ask: "Callable | None" = None) -> list:
        """read_entries (or `ask(member, endpoint)`) at the assigned member; if it is
        behind (IndexOverflow) wait for it up to `wait` seconds, and if it is gone or
        still behind, ask the leader. Where the range was compacted away (at that member,
        or at the leader), read it from a member that still holds it, and read on there
        (EntriesGone when none does)."""
        from consensus.client import FarmError, IndexOverflow, IndexUnderflow
        ask = ask or entries_of(start, stop)
        endpoint = self.endpoint
        try:
            if endpoint is not None:
                deadline = time.monotonic() + self.wait
                delay = 0.01
                while True:
                    try:
                        return ask(client, endpoint)
                    except IndexOverflow:
                        if time.monotonic() + delay > deadline:
                            break
                        time.sleep(delay)    # a follower catching up: poll with backoff
                        delay = min(delay * 2, 0.2)
                    except IndexUnderflow:
                        raise
                    except FarmError:
                        break
                self.endpoint = endpoint = None  # the rest of the task reads from the leader
            return ask(client, None)
        except IndexUnderflow as exc:
            self._firsts[endpoint] = exc.first_available
            self.endpoint, records = read_anywhere(
                client, self._prober(), start, deadline=time.monotonic() + self.wait, ask=ask)
            return records

    def _holds(self, index: int) -> bool:
        """Does the member this reader reads at still hold `index`? Its first index is
        asked once: a log's start only moves up, and a compaction since then shows as
        IndexUnderflow on the read itself. A member that does not answer counts as holding
        it: the read then waits for it or goes to the leader."""
        from consensus.client import FarmError
        endpoint = self.endpoint
        first = self._firsts.get(endpoint)
        if first is None:
            try:
                first = self._firsts[endpoint] = self._prober().log_bounds(endpoint)[0]
            except FarmError:
                return True
        return index >= first

    def _range(self, start: int, stop: int) -> Iterator["JournalPage"]:
        """The visible journal entries of [start, stop), page by page, as columns (a
        retried append that the state machine ignored, `duplicate`, shows nothing: as in
        read_committed)."""
        while start < stop:
            try:
                page = self._journal(start, stop)
            except EntriesGone as gone:
                if self.fail_on_data_loss:
                    raise DataLossError(start, gone.kept, firsts=gone.firsts) from None
                log.warning("garlicfarm: entries [%d, %d) were compacted away at every member "
                            "before they were read; continuing at %d (failOnDataLoss is "
                            "false)", start, gone.kept, gone.kept)
                start = max(start + 1, gone.kept)
                continue
            if page.stop <= start:
                return
            if len(page):
                yield page
            start = page.stop

    def _journal(self, start: int, stop: int) -> "JournalPage":
        """One page of [start, stop): `read_journal`, or, from a member older than that
        call, read_entries turned into the same columns here."""
        from consensus.client import FarmError
        from consensus.wire.journal_pages import page_answer, page_from_answer
        if self._columns:
            try:
                return self._call(self.client, start, stop, ask=lambda member, endpoint:
                                  member.read_journal(start, stop, max_bytes=CHUNK_BYTES,
                                                      endpoint=endpoint))
            except FarmError as exc:
                if not unknown_call(exc, "read_journal"):
                    raise
                self._columns = False
        records = self._call(self.client, start, stop)
        end = records[-1].index + 1 if records else start
        return page_from_answer(start, stop, page_answer(records, end))

    def _slice(self, index: int, lo: int, hi: int) -> Iterator[Visible]:
        """Payloads [lo, hi) of the committed batch at `index`, one at a time, from a member
        that holds the lowest of them (a member keeps a suffix of the log, so none goes
        missing half-way). When no member holds them, the batch is skipped only if this
        piece is all of it and failOnDataLoss is false (the rest of a split batch may be
        read by other tasks), else DataLossError: never part of a batch."""
        try:
            (entry,) = self._call(self.client, index, index + 1)
        except EntriesGone as gone:
            raise DataLossError.commit_gone(index, gone.firsts) from None
        commit = entry.commit
        # Visible only when this entry made its batch visible (as read_committed says).
        if entry.type != "commit" or commit is None or not commit.effective:
            return
        wanted = commit.staged[lo:hi]
        whole = lo == 0 and hi >= len(commit.staged)
        started = False
        try:
            if wanted and not self._holds(min(wanted)):
                low = min(wanted)
                self.endpoint, _ = read_anywhere(
                    self.client, self._prober(), low, deadline=time.monotonic() + self.wait,
                    ask=entries_of(low, low + 1, payloads=False))
            for staged in self._in_order(wanted):
                content_type = staged.staged.content_type if staged.staged else "bytes"
                started = True
                yield Visible(entry.index, entry.term, entry.timestamp_ms, "commit",
                              [staged.payload], (content_type,))
        except EntriesGone as gone:
            if whole and not started and not self.fail_on_data_loss:
                log.warning("garlicfarm: %s (skipped: failOnDataLoss is false)",
                            DataLossError.batch(index, commit.query_id, commit.batch_id,
                                                commit.staged, gone.firsts))
                return
            raise DataLossError.batch(
                index, commit.query_id, commit.batch_id, commit.staged, gone.firsts,
                partial=started or not self.fail_on_data_loss) from None

    def _in_order(self, indexes: Sequence[int]) -> Iterator:
        """The entries at `indexes`, in that order, `prefetch` requests ahead."""
        pending: deque[Future] = deque()
        for staged_index in indexes:
            pending.append(self._pool.submit(self._one, staged_index))
            if len(pending) > self.prefetch:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def _one(self, index: int):
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.connection.client()
            with self._lock:
                self._clients.append(client)
        (entry,) = self._call(client, index, index + 1)
        return entry


class LogPartition(InputPartition):
    """One task: pieces of the log, read at `endpoint` (None: any member)."""

    def __init__(self, pieces: Sequence[Piece], endpoint: str | None) -> None:
        super().__init__(None)
        self.pieces = tuple(pieces)
        self.endpoint = endpoint


class LogPlanner:
    """Driver-side state shared by the readers of a farm's log: lazily opened clients
    (never pickled) and the planning steps. `settings` needs `connection`,
    `fail_on_data_loss`, `min_partitions`, `read_from` and `limits`."""

    settings: object
    _client: "FarmClient | None" = None
    _probe: "FarmClient | None" = None    # short timeout: asks each member in turn
    _target: int | None = None          # Trigger.AvailableNow's end
    _last_batch_at: float | None = None  # for maxTriggerDelay
    _sizes: tuple[int, int, "SizeScan"] | None = None    # next_end's scan, for plan_batch
    cut: int | None = None      # a reader of several partitions: this one's end in its cut

    def end(self) -> int:
        """Where a batch may read up to: the log's (stable) end, or, in a read of several
        partitions, this partition's end in their consistent cut (raft/partitions.py)."""
        return self.cut if self.cut is not None else log_end(self.client())

    def client(self) -> "FarmClient":
        if self._client is None:
            self._client = self.settings.connection.client()
        return self._client

    def probe(self) -> "FarmClient":
        if self._probe is None:
            connection = self.settings.connection
            self._probe = connection.client(timeout=min(PROBE_SECONDS, connection.timeout))
        return self._probe

    def close(self) -> None:
        for client in (self._client, self._probe):
            if client is not None:
                client.close()
        self._client = self._probe = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in ("_client", "_probe", "_sizes"):
            state.pop(name, None)
        return state

    def checked_start(self, start: int) -> int:
        """`start`, or, when no member holds the entries from `start` any more and
        failOnDataLoss is false, the lowest index a member still holds."""
        client = self.client()
        leader_first = first_index(client)
        if start >= leader_first:
            return start
        firsts = member_firsts(self.probe(), farm_members(client.get_servers()))
        kept = min((f for f in firsts.values() if f is not None), default=leader_first)
        if start >= kept:
            return start            # a member still holds them: the reads go there
        if self.settings.fail_on_data_loss:
            raise DataLossError(start, kept, firsts=firsts)
        log.warning("garlicfarm: entries [%d, %d) were compacted away at every member before "
                    "they were read; continuing at %d (failOnDataLoss is false)",
                    start, kept, kept)
        return kept

    def next_end(self, begin: int, limit: ReadLimit, *, query_id: str | None = None) -> int:
        """The end of the next micro-batch from `begin` (a stream's latestOffset):
        admission control over the entries that show rows (only `query_id`'s commits,
        when given), up to the log's end or Trigger.AvailableNow's target."""
        client = self.client()
        now = time.monotonic()
        if self._last_batch_at is None:
            self._last_batch_at = now
        end = self.end()
        if self._target is not None:
            end = min(end, self._target)
        if end <= begin:
            return begin
        scan = SizeScan(size_pages(client, begin, end, query_id=query_id,
                                   probe=self.probe()))
        stop = choose_end(begin, end, scan.counts(), self.settings.limits.under(limit),
                          waited=now - self._last_batch_at,
                          available_now=self._target is not None)
        if stop > begin and not scan.rows_before(stop) and begin >= client.log_bounds()[2]:
            # Only entries without rows (status, staged, aborts...): no micro-batch to run.
            # Once a snapshot passes the start, move on, before compaction can drop it.
            stop = begin
        if stop > begin:
            self._last_batch_at = now
        self._sizes = (begin, stop, scan)
        return stop

    def plan_batch(self, begin: int, stop: int, *, query_id: str | None = None
                   ) -> list[LogPartition]:
        """The tasks of the micro-batch [begin, stop) that `next_end` admitted; its scan
        of entry sizes reads on from where `next_end` stopped (without limits that is after
        the first page: reading from `begin` again would read that page twice)."""
        if stop <= begin:
            return []
        checked = self.checked_start(begin)
        cached = self._sizes
        sizes = (cached[2].through(stop) if cached and cached[0] == begin and cached[1] == stop
                 else None)
        return self.plan([(checked, stop)], sizes, query_id=query_id)

    def forget_sizes(self) -> None:
        self._sizes = None

    def plan(self, ranges: Iterable[tuple[int, int]], sizes: Sizes | None = None, *,
             query_id: str | None = None) -> list[LogPartition]:
        """Tasks over `ranges` (`sizes` when already known; `query_id`: only that query's
        committed batches), sent to members that hold what they read."""
        client = self.client()
        tasks: list[list[Piece]] = []
        lows: list[int] = []
        for start, stop in ranges:
            if stop <= start:
                continue
            pages = [sizes] if sizes is not None else list(
                size_pages(client, start, stop, query_id=query_id, probe=self.probe()))
            known = self._whole(Sizes.joined(start, stop, pages))
            tasks += plan_tasks(start, stop, known, min_tasks=self.settings.min_partitions,
                                rows_per_task=ROWS_PER_TASK)
            low = known.first_needed()
            if low is not None:
                lows.append(low)
        if not tasks:
            return []
        last = max(p.stop for pieces in tasks for p in pieces)
        members = reading_members(client, self.probe(), self.settings.read_from, last,
                                  min(lows))
        return [LogPartition(pieces, members[i % len(members)])
                for i, pieces in enumerate(tasks)]

    def _whole(self, sizes: Sizes) -> Sizes:
        """`sizes` less the committed batches whose staged entries no member holds any
        more: DataLossError naming the first, or (failOnDataLoss false) each one skipped
        whole, with a warning. When a member does not answer, nothing is dropped: the
        tasks look for the entries themselves."""
        batches = list(sizes.commits.values())
        client = self.client()
        if not batches or min(s.first_needed for s in batches) >= first_index(client):
            return sizes                # the leader holds every payload
        firsts = member_firsts(self.probe(), farm_members(client.get_servers()))
        if None in firsts.values():
            return sizes
        kept = min(f for f in firsts.values() if f is not None)
        lost = sorted(s.index for s in batches if s.first_needed < kept)
        for index in lost:
            (header,) = read_held(client, index, index + 1, probe=self.probe(), payloads=False)
            commit = header.commit
            error = DataLossError.batch(index, commit.query_id, commit.batch_id,
                                        commit.staged, firsts)
            if self.settings.fail_on_data_loss:
                raise error
            log.warning("garlicfarm: %s (skipped: failOnDataLoss is false)", error)
        return sizes.without(lost)


class SizeScan:
    """One lazy pass over entry sizes, a page at a time, shared by the limit check and the
    idle check."""

    def __init__(self, pages: Iterator[Sizes]) -> None:
        self._pages = pages
        self.seen: list[Sizes] = []
        self.exhausted = False

    def _next(self) -> Sizes | None:
        page = next(self._pages, None)
        if page is None:
            self.exhausted = True
        else:
            self.seen.append(page)
        return page

    def counts(self) -> Iterator[tuple[int, int]]:
        """(index, rows) of the entries that show rows, reading pages as they are used."""
        for page in self.seen:
            yield from zip(page.index.tolist(), page.rows.tolist())
        while (page := self._next()) is not None:
            yield from zip(page.index.tolist(), page.rows.tolist())

    def rows_before(self, stop: int) -> bool:
        """Does any entry below `stop` show rows (reading on only as far as needed)?"""
        while True:
            if any(len(p) and p.index[0] < stop for p in self.seen):
                return True
            if self.covers(stop) or self._next() is None:
                return False

    def through(self, stop: int) -> Sizes:
        """The sizes of the entries below `stop`, reading on only past what was seen."""
        while not self.covers(stop):
            self._next()
        start = self.seen[0].start if self.seen else stop
        return Sizes.joined(start, stop, self.seen)

    def covers(self, stop: int) -> bool:
        """Has the scan seen every entry below `stop`?"""
        return self.exhausted or bool(self.seen) and self.seen[-1].stop >= stop
