"""A replicated CHP server's link to its farm: proposing records, following the log.

Three threads, each with its own `FarmClient` connection, so a slow call of one never
holds up another; the server's loop only exchanges Python objects with them:

* the **proposer** sends the records the server queued (`submit`) as farm journal
  entries, one entry per round with everything queued meanwhile (so batches grow with
  the load), **one round at a time**: a round is retried with the same request id until
  the farm has it, and only then does the next one start, so the records of one server
  enter the log in the order it received them (a client's KVSETs keep their order);
* the **follower** reads the committed log in order from the leader and hands each page
  of entries to the server (`take`); on request it also runs a *barrier*: it asks the
  leader for its ReadIndex-confirmed applied index and says when everything up to it
  has been handed over, which is what makes a snapshot answer no older than anything
  any server has published;
* the **waker** holds a subscription to the farm's state-changed events and wakes the
  follower when entries are applied (the event's applied index is committed, so the
  follower reads up to it at once); the follower also polls every `poll_interval`
  (a missed event costs at most that much latency, and the poll tells the server the
  farm is reachable: `last_contact`).

The server is woken through `notify` (it writes to a socket the server polls).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from consensus.client import (AuthenticationError, FarmClient, FarmError, IndexOverflow,
                              IndexUnderflow, LogRecord)
from consensus.wire.envelope import new_request_id

log = logging.getLogger("garlicfarm.chp.farmlink")

PAGE_ENTRIES = 4096             # entries read per call
PAGE_BYTES = 4 << 20
MAX_ROUND_RECORDS = 4096        # records per journal entry
MAX_ROUND_BYTES = 1 << 20       # ... and bytes (a larger record goes alone)
MAX_QUEUED = 100_000            # records waiting for the proposer before KVSETs are refused
_BACKOFF = (0.05, 1.0)


@dataclass(frozen=True, slots=True)
class Entries:
    """Committed entries, in log order, following the previous ones."""
    records: list[LogRecord]


@dataclass(frozen=True, slots=True)
class Barrier:
    """Every entry committed before barrier `ticket` was asked for has been handed over."""
    ticket: int


@dataclass(frozen=True, slots=True)
class Fatal:
    """The link cannot go on (the log was compacted past us, bad credentials)."""
    message: str


class FarmLink:
    """Proposer, follower and waker threads for one server. `connect()` makes a new
    `FarmClient`; `first_index` is the first log entry the server has not applied."""

    def __init__(self, connect: Callable[[], FarmClient], first_index: int,
                 notify: Callable[[], None], *, poll_interval: float = 0.25,
                 max_queued: int = MAX_QUEUED) -> None:
        self._notify = notify
        self.poll_interval = poll_interval
        self.max_queued = max_queued
        self.next_index = first_index
        self.last_contact = 0.0          # time.monotonic() of the last answer from the farm
        self.proposed = 0                # records the farm has taken
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._queued: deque[bytes] = deque()
        self._queue_ready = threading.Condition()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._barrier_wanted = 0
        self._applied_hint = 0           # an index some member has applied (from events)
        self._subscription = None
        bodies = (("chp-proposer", self._propose), ("chp-follower", self._follow),
                  ("chp-waker", self._watch_events))
        # made here, so a bad option fails the caller rather than a thread
        self._clients = [connect() for _ in bodies]
        self._threads = [threading.Thread(target=self._guarded, args=(fn, client),
                                          name=name, daemon=True)
                         for (name, fn), client in zip(bodies, self._clients)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._queue_ready:
            self._queue_ready.notify_all()
        subscription = self._subscription
        if subscription is not None:
            subscription.close()
        for client in self._clients:
            client.close()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)

    # ----------------------------------------------------------------- server side
    def submit(self, record: bytes) -> bool:
        """Queue a record for the log; False (refused) when `max_queued` are waiting."""
        with self._queue_ready:
            if len(self._queued) >= self.max_queued:
                return False
            self._queued.append(record)
            self._queue_ready.notify()
        return True

    @property
    def queued(self) -> int:
        return len(self._queued)

    def request_barrier(self, ticket: int) -> None:
        """Answer `Barrier(ticket)` once everything committed by now is handed over."""
        self._barrier_wanted = max(self._barrier_wanted, ticket)
        self._wake.set()

    def take(self) -> list[Entries | Barrier | Fatal]:
        """What the threads handed over since the last call, in order."""
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                return out

    def _hand(self, item: Entries | Barrier | Fatal) -> None:
        self._out.put(item)
        self._notify()

    # ----------------------------------------------------------------- threads
    def _guarded(self, body: Callable[[FarmClient], None], client: FarmClient) -> None:
        try:
            body(client)
        except AuthenticationError as exc:
            self._hand(Fatal(f"the farm refused our credentials ({exc}): check "
                             "--farm-user and --farm-password (or --farm-credentials)"))
        except Exception as exc:   # a bug must stop the server, not leave it half alive
            if not self._stop.is_set():
                log.exception("chp farm link: %s failed", threading.current_thread().name)
                self._hand(Fatal(f"{threading.current_thread().name} failed: {exc!r}"))
        finally:
            client.close()

    def _retry_later(self, failures: int, what: str, exc: FarmError) -> int:
        """After a failed call: log the first failure and every 20th, back off; returns
        the new count. Refused credentials are not retried."""
        if isinstance(exc, AuthenticationError):
            raise exc
        failures += 1
        if failures == 1 or failures % 20 == 0:
            log.warning("chp farm link: %s (%s); retrying", what, exc)
        self._stop.wait(min(_BACKOFF[1], _BACKOFF[0] * 2 ** min(failures, 5)))
        return failures

    def _next_round(self) -> list[bytes]:
        """Wait for records; take a round's worth, in order."""
        with self._queue_ready:
            while not self._queued and not self._stop.is_set():
                self._queue_ready.wait()
            queued = self._queued
            batch, size = [], 0
            while queued and len(batch) < MAX_ROUND_RECORDS:
                if batch and size + len(queued[0]) > MAX_ROUND_BYTES:
                    break
                record = queued.popleft()
                batch.append(record)
                size += len(record)
            return batch

    def _propose(self, client: FarmClient) -> None:
        while not self._stop.is_set():
            batch = self._next_round()
            if not batch:
                continue
            request_id, failures = new_request_id(), 0
            while not self._stop.is_set():
                try:
                    index, _ = client.append(batch, request_id=request_id)
                    self.last_contact = time.monotonic()
                    self.proposed += len(batch)
                    if index > self._applied_hint:   # applied at the leader: read it now
                        self._applied_hint = index
                        self._wake.set()
                    break
                except FarmError as exc:
                    failures = self._retry_later(
                        failures, f"{len(batch)} records not in the log yet", exc)

    def _follow(self, client: FarmClient) -> None:
        failures = handed_barrier = 0
        while not self._stop.is_set():
            self._wake.clear()
            wanted = self._barrier_wanted
            try:
                if wanted > handed_barrier:
                    target = client.last_applied()
                elif self._applied_hint >= self.next_index:
                    target = self._applied_hint   # committed: no need to ask
                else:
                    target = client.log_bounds()[1]
                self.last_contact = time.monotonic()
                self._read_to(client, target)
            except IndexUnderflow as exc:
                self._hand(Fatal(
                    f"the farm compacted its log past entry {self.next_index}, which this "
                    f"server has not applied (the oldest kept is {exc.first_available}): "
                    "start it with --bootstrap naming another replicated server of the "
                    "map, or with a --data-dir holding a recent checkpoint, or keep more "
                    "entries on the nodes (--retain-entries)"))
                return
            except IndexOverflow:   # the leader changed, or lags the member of the hint
                self._applied_hint = 0
                continue
            except FarmError as exc:
                failures = self._retry_later(failures, "cannot read the log", exc)
                continue
            failures = 0
            if wanted > handed_barrier:
                handed_barrier = wanted
                self._hand(Barrier(wanted))
            elif self.next_index > target:
                self._wake.wait(self.poll_interval)

    def _read_to(self, client: FarmClient, target: int) -> None:
        """Hand over every entry up to `target`, page by page."""
        while self.next_index <= target and not self._stop.is_set():
            page = client.read_entries(self.next_index,
                                       min(target + 1, self.next_index + PAGE_ENTRIES),
                                       max_bytes=PAGE_BYTES)
            self.last_contact = time.monotonic()
            if not page:
                return
            self.next_index = page[-1].index + 1
            self._hand(Entries(page))

    def _watch_events(self, client: FarmClient) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._subscription = client.subscribe(("state-changed",))
                if self._stop.is_set():
                    return
                for event in self._subscription:
                    applied = event.data.get("applied")
                    if isinstance(applied, int) and applied > self._applied_hint:
                        self._applied_hint = applied
                    self._wake.set()
                    failures = 0
            except FarmError as exc:
                failures = self._retry_later(failures, "no event subscription", exc)


__all__ = ["Barrier", "Entries", "Fatal", "FarmLink", "MAX_QUEUED"]
