"""The capture: a CHP map's updates, appended to the farm's journal, so they can be replayed.

One capture runs per streaming query, in the driver's long-lived source process, on a
thread: a `CloneClient` (failing over between the servers of `endpoint`) watches the
subtree, `changelog.Changelog` turns what it sees into changes, and every `linger`
seconds (or `chunk_rows` changes) they become one **chunk**: Arrow payloads (a few MiB
each) staged in the farm and committed by the ledger as batch N of the capture's own id
(the "query id" of its commits). Executors read the chunks as any committed batch
(`log_access`); the ledger makes a chunk visible once, whoever retries it. A new
capture's first snapshot, when it came in KVBULK columns, goes into its chunk column-wise
(`rows.snapshot_table`); the changelog remembers it only when a later snapshot needs it.

What makes it resumable: every chunk's commit carries ``{"chp": {"last", "server",
"token"}}`` in its metadata; after a restart the capture reads its chunks back from the
farm (from `since`, the index where it began) into the changelog's memory, takes chunk
numbers on from the ledger's last committed one, and diffs the first snapshot against
that memory. A `latest` capture writes its first snapshot aside, as batch 0 of
``<id>#baseline`` (not shown as rows), so that memory survives too. Two captures with
one id (two queries on one checkpoint) meet at the ledger: the second commit of a chunk
number is a duplicate without our token, and the later capture stops with
`CaptureConflict`.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import pyarrow as pa

from connectors.chp.client import CloneClient, Resync

from ..connection import FarmClientOptions
from ..errors import DataLossError, GarlicFarmSparkError
from ..log_access import PieceReader, entry_sizes, log_end
from ..planning import Piece
from ..schema import PayloadError
from .changelog import Change, Changelog
from .rows import CHANGELOG_CONTENT, encode_payloads, payload_changes, snapshot_table

if TYPE_CHECKING:
    from consensus.client import FarmClient

log = logging.getLogger("pyspark_farm.chp.capture")
RETRY_FOR = 60.0      # seconds a chunk is retried against an unavailable farm
IDLE = 1.0            # longest sleep of an idle capture (flush and stop wake it sooner)
_WAKE = object()      # put in the inbox by flush() and stop(): look at the state now


class CaptureConflict(GarlicFarmSparkError):
    """Another capture with the same id wrote the chunk this one was writing."""


@dataclass(frozen=True)
class CaptureSettings:
    """What a capture follows and where it writes (picklable)."""
    connection: FarmClientOptions
    servers: tuple[str, ...]
    subtree: bytes
    server_timeout: float
    emit_snapshot: bool
    fail_on_data_loss: bool = True
    linger: float = 0.05
    chunk_rows: int = 10_000


def baseline_id(capture_id: str) -> str:
    return f"{capture_id}#baseline"


class Capture:
    """A running capture (`start`, `flush`, `check`, `stop`); see the module doc."""

    def __init__(self, settings: CaptureSettings, capture_id: str, since: int | None) -> None:
        """`since` None: a new capture (no history), started before the caller knows
        where the log ends; the caller sets `since` before anything reads it."""
        self.settings = settings
        self.capture_id = capture_id
        self._since = since
        self._since_known = threading.Event()   # nothing is written before it is set
        if since is not None:
            self._since_known.set()
        self.chunks_written = 0
        self.last_sequence: int | None = None   # the last sequence written to the farm
        self._stop = threading.Event()
        self._state = threading.Condition()
        self._error: BaseException | None = None
        self._asked = 0          # flush requests made
        self._done = 0           # flush requests served (everything received is written)
        # What the client saw (fed by its watch callback), and _WAKE tokens: a flush or a
        # stop wakes the thread at once instead of at its next poll.
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"chp-capture-{capture_id[:8]}")

    @property
    def since(self) -> int | None:
        """The log index where the capture began: its chunks are all at or after it."""
        return self._since

    @since.setter
    def since(self, index: int) -> None:
        self._since = index
        self._since_known.set()

    # ----------------------------------------------------------------- control
    def start(self) -> "Capture":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._inbox.put(_WAKE)
        self._thread.join(timeout=self.settings.connection.timeout + 5)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def check(self) -> None:
        """Raise what stopped the capture, if anything did."""
        if self._error is not None:
            raise self._error
        if not self.alive and not self._stop.is_set():
            raise GarlicFarmSparkError(f"the chp capture {self.capture_id} stopped")

    def flush(self, timeout: float) -> None:
        """Wait until the capture is in sync with a server and has written everything it
        received before this call (Trigger.AvailableNow's "now")."""
        with self._state:
            self._asked += 1
            ticket = self._asked
            self._inbox.put(_WAKE)
            served = self._state.wait_for(
                lambda: self._done >= ticket or self._error is not None or not self.alive,
                timeout)
        self.check()
        if not served:
            raise GarlicFarmSparkError(
                f"the chp capture got no snapshot from {', '.join(self.settings.servers)} "
                f"within {timeout:.0f}s: are the servers of the option 'endpoint' up?")

    # ----------------------------------------------------------------- the thread
    def _run(self) -> None:
        farm = None
        try:
            settings = self.settings
            # bulk: the first snapshot (and any resync) comes as KVBULK columns from our
            # servers, KVSYNCs from others (docs/protocol.md, "Bulk snapshot"). The client
            # starts first: the snapshot is on its way while the farm is reached and the
            # capture's history read (what it sees waits in the inbox meanwhile).
            with CloneClient(list(settings.servers), settings.subtree,
                             server_timeout=settings.server_timeout, bulk=True) as chp:
                chp.watch(self._inbox.put, include_snapshot=True, resyncs=True)
                farm = settings.connection.client()
                changelog, chunk = self._rebuild(farm)
                while not self._since_known.wait(0.05):   # set right after start
                    if self._stop.is_set():
                        return
                self._follow(farm, changelog, chunk)
        except BaseException as exc:   # handed to the query through check()
            if not self._stop.is_set():
                log.error("chp capture %s failed: %s", self.capture_id, exc)
                self._error = exc
        finally:
            if farm is not None:
                farm.close()
            with self._state:
                self._state.notify_all()

    def _follow(self, farm: "FarmClient", changelog: Changelog, chunk: int) -> None:
        settings = self.settings
        inbox = self._inbox
        pending: list[Change] = []
        head: pa.Table | None = None   # a first snapshot's rows, in columns: before `pending`
        oldest = 0.0
        server = ""
        synced = False
        more = False    # the last turn stopped at chunk_rows with items still queued
        while not self._stop.is_set():
            try:
                wait = 0 if more else settings.linger if pending or head is not None else IDLE
                item = inbox.get(timeout=wait)
            except queue.Empty:
                item = None
            more = False
            while item is not None:
                if isinstance(item, Resync):
                    server, synced = item.server, True
                    span = None
                    if item.bulk is not None and head is None and not pending:
                        span = changelog.take_whole(item.sequence, item.bulk.entries)
                    if span is not None:   # the whole map, straight from the KVBULK columns
                        head = snapshot_table(item.bulk.parts, item.bulk.subtree, span)
                        head = head if head.num_rows else None
                    else:
                        pending += changelog.resync(item.sequence, item.entries)
                    if changelog.baseline:
                        self._write(farm, baseline_id(self.capture_id), 0, changelog.baseline,
                                    item.sequence, server)
                        changelog.baseline = []
                elif item is not _WAKE:
                    change = changelog.update(item)
                    if change is not None:
                        pending.append(change)
                if len(pending) + (head.num_rows if head is not None else 0) \
                        >= settings.chunk_rows:
                    more = True
                    break
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    item = None
            now = time.monotonic()
            rows = len(pending) + (head.num_rows if head is not None else 0)
            if rows and not oldest:
                oldest = now
            with self._state:
                asked = self._asked
            if rows and (rows >= settings.chunk_rows or asked > self._done
                         or now - oldest >= settings.linger):
                self._write(farm, self.capture_id, chunk, pending, changelog.last, server,
                            head=head)
                chunk += 1
                pending, head, oldest = [], None, 0.0
                rows = 0
            if synced and not more and not rows and asked > self._done:
                with self._state:
                    self._done = asked
                    self._state.notify_all()

    def _write(self, farm: "FarmClient", query_id: str, batch: int, changes: Sequence[Change],
               last: int | None, server: str, *, head: pa.Table | None = None) -> None:
        """One chunk (the rows of `head`, then `changes`): stage its payloads (a few MiB
        each, `encode_payloads`), commit them as `batch` of `query_id`; retried while
        the farm is unavailable, at most RETRY_FOR seconds. Any other refusal (a
        payload over the entry limit, bad credentials) cannot pass by retrying: it stops
        the capture at once, and the query with it."""
        from consensus.common.errors import NotLeaderError, RetryableWrite, Unavailable
        token = uuid.uuid4().hex
        encoded = list(encode_payloads(changes, head))
        metadata = {"rows": [rows for _, rows in encoded], "writer": "pyspark_farm.chp",
                    "chp": {"last": last, "server": server, "token": token}}
        deadline = time.monotonic() + RETRY_FOR
        delay = 0.1
        while True:
            try:
                staged = [farm.stage(query_id, batch, part, 0, payload,
                                     content_type=CHANGELOG_CONTENT)
                          for part, (payload, _) in enumerate(encoded)]
                outcome = farm.commit_batch(query_id, batch, staged, metadata=metadata)
                break
            except (Unavailable, NotLeaderError, RetryableWrite) as exc:
                if time.monotonic() + delay > deadline or self._stop.is_set():
                    raise
                log.warning("chp capture %s: chunk %d not written yet (%s); retrying",
                            self.capture_id, batch, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)
        if outcome.duplicate and chp_metadata(outcome.metadata).get("token") != token:
            raise CaptureConflict(
                f"chunk {batch} of the chp capture {query_id} was written by another capture: "
                "two queries run with one checkpoint? Stop one of them.")
        if query_id == self.capture_id:
            self.chunks_written += 1
            self.last_sequence = last

    # ----------------------------------------------------------------- restart
    def _rebuild(self, farm: "FarmClient") -> tuple[Changelog, int]:
        """The changelog's memory and the next chunk number, from what this capture wrote
        before (nothing for a new capture)."""
        changelog = Changelog(emit_snapshot=self.settings.emit_snapshot)
        base = farm.batch_status(baseline_id(self.capture_id), 0)
        last_chunk = farm.last_committed_batch(self.capture_id)
        if base is None and last_chunk is None:
            return changelog, 0
        if self.since is None:
            raise GarlicFarmSparkError(f"the new chp capture {self.capture_id} found chunks "
                                       "already written under its id")
        reader = PieceReader(self.settings.connection, None, fail_on_data_loss=True)
        try:
            pieces = [] if base is None else [Piece(base.index, base.index + 1,
                                                    (0, len(base.staged)))]
            pieces += [Piece(size.index, size.index + 1, (0, len(size.parts)))
                       for size in entry_sizes(farm, self.since, log_end(farm),
                                               query_id=self.capture_id)]
            for piece in pieces:
                for visible in reader.read([piece]):
                    for payload in visible.records:
                        replay(changelog, payload, visible.index, self.capture_id)
        except DataLossError:
            if self.settings.fail_on_data_loss:
                raise
            log.warning("chp capture %s: its history was compacted away; the next snapshot "
                        "is emitted whole (failOnDataLoss is false)", self.capture_id)
            changelog = Changelog(emit_snapshot=True)
        finally:
            reader.close()
        if last_chunk is not None:
            status = farm.batch_status(self.capture_id, last_chunk)
            recorded = recorded_last(status.metadata if status else None)
            if recorded is not None and changelog.has_history:
                changelog.last = recorded
        self.chunks_written = 0 if last_chunk is None else last_chunk + 1
        log.info("chp capture %s resumed: %d keys known, chunk %d next", self.capture_id,
                 len(changelog.known), self.chunks_written)
        return changelog, self.chunks_written


def replay(changelog: Changelog, payload: bytes, index: int, capture_id: str) -> None:
    """Feed the changes of one committed chunk payload back into the changelog's
    memory. A payload the capture never writes (not Arrow, other columns, a null in a
    change) is skipped and logged, the same way at every restart: failing on it would
    stop the capture at each restart for good, since the chunk stays committed."""
    try:
        changes = payload_changes(payload, index)
    except PayloadError as exc:
        log.warning("chp capture %s: skipped a chunk payload it cannot read (%s)",
                    capture_id, exc)
        return
    for change in changes:
        changelog.replay(change)


def chp_metadata(metadata: object) -> dict:
    """The ``chp`` part of a chunk commit's metadata ({} when it has none that is a
    map: a commit under the capture's id by another writer)."""
    chp = metadata.get("chp") if isinstance(metadata, dict) else None
    return chp if isinstance(chp, dict) else {}


def recorded_last(metadata: object) -> int | None:
    """The sequence a chunk's commit recorded as emitted last (``chp.last``), or None
    when its metadata holds none that is a sequence."""
    last = chp_metadata(metadata).get("last")
    return last if type(last) is int else None


_running: dict[str, Capture] = {}
_running_lock = threading.Lock()


def obtain(settings: CaptureSettings, capture_id: str, since: int | None) -> Capture:
    """The running capture of `capture_id` in this process, started if needed (a query
    restarted in the same driver finds its capture, rather than starting a rival)."""
    with _running_lock:
        capture = _running.get(capture_id)
        if capture is None or not capture.alive:
            capture = _running[capture_id] = Capture(settings, capture_id, since).start()
        return capture


def release(capture: Capture) -> None:
    """Stop a capture and forget it."""
    with _running_lock:
        if _running.get(capture.capture_id) is capture:
            del _running[capture.capture_id]
    capture.stop()
