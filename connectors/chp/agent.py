"""The CHP client's background thread (`Agent`): every socket but the application's end of
the pipe, and the mirror of the map it keeps in sync (`mirror.Mirror`).

`CloneClient` (client.py) talks to it through the methods marked "any thread": it reads
the mirror (`sequence`, `entry`, `view`), registers watchers and waiters, waits for the
first sync and learns what ended the thread (`failure`). KVSETs reach the agent over an
inproc PAIR (``SET`` + frames; ``STOP`` ends it). Deliveries to watchers and waiters run
on the agent's thread under its lock, so a watch registered with the map's entries
misses no change and sees none twice.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Iterable, Iterator, Protocol

import zmq

from connectors.subscriptions import publisher_maxmsgsize
from consensus.wire.errors import ProtocolError

from . import bulk as bulk_module
from .address import ServerAddress
from .kvmap import Entry
from .mirror import BulkEntries, Mirror, MirrorPhase, Synced
from .proto import KVBULK, Channel, Hugz, ChpLimits, Message, decode, encode
from .zmqio import drain, drain_decoded, send_frames

log = logging.getLogger("garlicfarm.chp.client")

MAX_HELD = 100_000        # KVSETs held per server while its collector is not subscribed
SET, STOP = b"SET", b"STOP"


class Resync:
    """In a `watch(resyncs=True)` stream: the client took a whole snapshot of `server`
    at `sequence`; `entries` is the map then (under the subtree). Changes between the
    previous item of the stream and this one were not seen one by one.

    When the snapshot came in KVBULK columns, `bulk` holds them as they came
    (`mirror.BulkEntries`: `parts` and the subtree, keys outside it and empty bodies
    still in): a consumer that reads the columns never has `entries` built (they are
    made when first read)."""
    __slots__ = ("sequence", "server", "bulk", "_entries")

    def __init__(self, sequence: int, entries: list[Entry] | None, server: str, *,
                 bulk: BulkEntries | None = None) -> None:
        if entries is None and bulk is None:
            raise ValueError("a Resync needs its entries or their columns")
        self.sequence = sequence
        self.server = server
        self.bulk = bulk
        self._entries = entries

    @property
    def entries(self) -> list[Entry]:
        if self._entries is None:
            assert self.bulk is not None
            self._entries = self.bulk.entries()
        return self._entries

    def __repr__(self) -> str:
        return f"Resync(sequence={self.sequence}, server={self.server!r})"


class Watcher(Protocol):
    """What the agent delivers to: changes in order (`put`), and a wake-up when the
    thread ends (`wake`: a reader blocked for the next change then learns why)."""
    resyncs: bool

    def put(self, item: Entry | Resync) -> None: ...

    def wake(self) -> None: ...


class Waiter:
    """A `set` waiting for the KVPUB of its UUID: `entry` once `event` is set."""
    __slots__ = ("event", "entry")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.entry: Entry | None = None


class Outlet:
    """One server's collector, fed through its own XPUB so we know when it listens.

    While it does not (not yet connected, or gone), KVSETs are held for at most
    `hold_for` seconds, then dropped: a server that comes back later must not receive
    stale updates (a passive one would hold them as pending and might apply them after
    newer ones). ZMQ_IMMEDIATE keeps libzmq itself from queueing for a missing peer."""

    def __init__(self, sock: zmq.Socket, hold_for: float) -> None:
        self.sock = sock
        self.hold_for = hold_for
        self.subscribed = False
        self.held: collections.deque[tuple[float, list[bytes]]] = \
            collections.deque(maxlen=MAX_HELD)

    def send(self, frames: list[bytes]) -> None:
        if self.subscribed:
            send_frames(self.sock, frames)
        else:
            self.held.append((time.monotonic(), frames))

    def on_subscription(self) -> None:
        """Read (un)subscriptions; send what is held, if still fresh, once subscribed."""
        for frames in drain(self.sock):
            self.subscribed = frames[0][:1] == b"\x01"
        oldest = time.monotonic() - self.hold_for
        while self.held and (self.subscribed or self.held[0][0] < oldest):
            held_at, frames = self.held.popleft()
            if held_at >= oldest:
                send_frames(self.sock, frames)


class Agent:
    """See the module docstring."""

    def __init__(self, ctx: zmq.Context, pipe_address: str, *, servers: list[ServerAddress],
                 subtree: bytes, server_timeout: float, limits: ChpLimits, bulk: bool) -> None:
        self.ctx = ctx
        self.servers = servers
        self.subtree = subtree
        self.server_timeout = server_timeout
        self.limits = limits
        self.bulk = bulk          # ask for KVBULK snapshots (our servers honour it)
        self.failovers = 0
        self.failure: BaseException | None = None    # what ended the thread
        self._mirror = Mirror(subtree)
        self._lock = threading.Lock()   # the mirror's map and the watchers, across threads
        self._watchers: list[Watcher] = []
        self._waiters: dict[bytes, Waiter] = {}
        self._synced = threading.Event()
        self._ever_synced = threading.Event()
        self.pipe = ctx.socket(zmq.PAIR)
        self.pipe.linger = 0
        self.pipe.connect(pipe_address)
        self.outlets = []
        for server in servers:
            sock = self._socket(zmq.XPUB)
            sock.maxmsgsize = publisher_maxmsgsize(0)   # the collector's b"" only
            sock.xpub_verbose = 1
            sock.immediate = 1
            sock.sndhwm = MAX_HELD   # a burst waits for a slow server instead of being dropped
            sock.connect(server.collector)
            self.outlets.append(Outlet(sock, server_timeout))
        self.current = 0
        self.bulk_ok = True   # False once a KVBULK could not be read: KVSYNCs from then on
        self.sub: zmq.Socket | None = None
        self.dealer: zmq.Socket | None = None
        self.expiry = 0.0
        self.poller = zmq.Poller()
        for sock in (self.pipe, *(o.sock for o in self.outlets)):
            self.poller.register(sock, zmq.POLLIN)

    # ----------------------------------------------------------------- any thread
    @property
    def server(self) -> ServerAddress:
        """The server the mirror is (or is trying to get) in sync with."""
        return self.servers[self.current]

    @property
    def sequence(self) -> int:
        return self._mirror.map.sequence

    @property
    def synced(self) -> bool:
        return self._synced.is_set() and self.failure is None

    @property
    def ever_synced(self) -> bool:
        return self._ever_synced.is_set()

    def wait_synced(self, timeout: float | None) -> bool:
        """Whether the mirror went live (or the thread ended) within `timeout`."""
        return self._synced.wait(timeout)

    def entry(self, key: bytes) -> Entry | None:
        return self._mirror.map.get(key)

    def view(self, prefix: bytes) -> tuple[int, dict[bytes, Entry]]:
        """The entries under `prefix` and the sequence they are consistent with."""
        with self._lock:
            clone = self._mirror.map
            return clone.sequence, {e.key: e for e in clone.entries(prefix)}

    def watch(self, watcher: Watcher, *, include_snapshot: bool) -> None:
        """Deliver every later change to `watcher` (first the map's entries under the
        subtree, with `include_snapshot`)."""
        with self._lock:
            if include_snapshot:
                for entry in self._mirror.map.entries(self.subtree):
                    watcher.put(entry)
            self._watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    def unwatch_all(self) -> list[Watcher]:
        """Stop every delivery; the watchers that had them."""
        with self._lock:
            watchers, self._watchers = self._watchers, []
        return watchers

    def expect(self, uuids: Iterable[bytes]) -> dict[bytes, Waiter]:
        """A `Waiter` per UUID, set when its KVPUB comes (`forget` them after)."""
        waiters = {uuid: Waiter() for uuid in uuids}
        self._waiters.update(waiters)
        return waiters

    def forget(self, uuids: Iterable[bytes]) -> None:
        for uuid in uuids:
            self._waiters.pop(uuid, None)

    # ----------------------------------------------------------------- the thread
    def _socket(self, kind: int) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, self.limits.max_frame_bytes)
        return sock

    def run(self) -> None:
        try:
            self._connect(self.current)
            while self._turn():
                pass
        except zmq.ContextTerminated:
            pass
        except Exception as exc:   # raised by the client's next call, not lost
            log.exception("chp client: the background thread failed")
            self._failed(exc)
        finally:
            for sock in (self.pipe, self.sub, self.dealer, *(o.sock for o in self.outlets)):
                if sock is not None:
                    sock.close(0)

    def _failed(self, exc: BaseException) -> None:
        """The thread is ending with `exc`: every waiting call wakes up to raise it."""
        self.failure = exc
        self._synced.set()
        self._ever_synced.set()
        for waiter in list(self._waiters.values()):
            waiter.event.set()
        with self._lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.wake()

    def _replace(self, old: zmq.Socket | None, new: zmq.Socket | None) -> zmq.Socket | None:
        """Swap a polled socket for another (or none)."""
        if old is not None:
            self.poller.unregister(old)
            old.close(0)
        if new is not None:
            self.poller.register(new, zmq.POLLIN)
        return new

    def _connect(self, index: int) -> None:
        """(Re)start with server `index`: subscribe, then wait for the subscription."""
        self.current = index
        server = self.servers[index]
        sub = self._socket(zmq.SUB)
        sub.rcvhwm = 0   # never drop an update we subscribed to
        sub.subscribe(self.subtree)
        if self.subtree:
            sub.subscribe(b"HUGZ")
        sub.connect(server.publisher)
        self.sub = self._replace(self.sub, sub)
        self.dealer = self._replace(self.dealer, None)
        self._synced.clear()
        self._mirror.restart()
        self.expiry = time.monotonic() + self.server_timeout

    def _request_snapshot(self) -> None:
        """A fresh DEALER per request, so no late reply to an older one mixes in."""
        dealer = self._socket(zmq.DEALER)
        dealer.rcvhwm = 0   # as read_snapshot: a reference server drops what we do not take
        if self.bulk and self.bulk_ok:
            dealer.setsockopt(zmq.ROUTING_ID, bulk_module.routing_id())
            dealer.setsockopt(zmq.MAXMSGSIZE, self.limits.max_snapshot_frame_bytes)
        dealer.connect(self.server.snapshot)
        self.dealer = self._replace(self.dealer, dealer)
        send_frames(self.dealer, encode(self._mirror.snapshot_request()))
        self.expiry = time.monotonic() + self.server_timeout

    def _turn(self) -> bool:
        wait = max(0.0, self.expiry - time.monotonic())
        ready = dict(self.poller.poll(wait * 1000))
        if self.pipe in ready and not self._on_pipe():
            return False
        for outlet in self.outlets:
            if outlet.sock in ready or outlet.held:
                outlet.on_subscription()
        if self.sub in ready:
            self._on_updates()
        if self.dealer is not None and self.dealer in ready:
            self._on_snapshot()
        if self._mirror.wants_snapshot:
            self._request_snapshot()
        if time.monotonic() >= self.expiry:
            self._failover()
        return True

    def _failover(self) -> None:
        nxt = (self.current + 1) % len(self.servers)
        log.warning("chp client: no word from %s for %.1fs; failing over to %s",
                    self.server, self.server_timeout, self.servers[nxt])
        self.failovers += 1
        self._connect(nxt)

    def _on_pipe(self) -> bool:
        for frames in drain(self.pipe):
            if frames[0] == STOP:
                return False
            kvset = frames[1:]
            for outlet in self.outlets:
                outlet.send(kvset)
        return True

    def _on_updates(self) -> None:
        mirror = self._mirror
        now = time.time()
        applied = []
        with self._lock:
            for msg in self._drain(self.sub, Channel.PUBLISHER):
                if type(msg) is Hugz:
                    mirror.on_hugz(msg)
                else:
                    entry = mirror.on_update(msg, now)
                    if entry is not None:
                        applied.append(entry)
            if applied:
                self._deliver(applied)
        if mirror.live:   # while syncing, only the snapshot's arrival counts
            self.expiry = time.monotonic() + self.server_timeout

    def _on_snapshot(self) -> None:
        mirror = self._mirror
        for frames in drain(self.dealer, 4096):
            try:
                msg = decode(frames, Channel.SNAPSHOT_REPLY, self.limits)
            except ProtocolError as exc:
                if frames[0] != KVBULK or len(frames) == 5:
                    self._malformed(exc)   # one KVSYNC: dropped, as ever
                    continue
                # A whole slice lost is no snapshot: ask again, with KVSYNCs this time
                # (a server whose KVBULKs we cannot read would make us ask forever).
                log.warning("chp client: a malformed KVBULK from %s (%s); asking for the "
                            "snapshot again, without bulk", self.server, exc)
                self.bulk_ok = False
                if mirror.phase is MirrorPhase.SYNCING:
                    mirror.resync()
                break
            with self._lock:
                synced = mirror.on_snapshot(msg, time.time())
                if synced is not None:
                    self._deliver_synced(synced)
            if synced is not None:
                self._on_synced(synced)
        self.expiry = time.monotonic() + self.server_timeout

    def _drain(self, sock: zmq.Socket, channel: Channel) -> Iterator[Message]:
        """The messages waiting on `sock`, decoded; malformed ones logged and dropped."""
        return drain_decoded(sock, channel, self._malformed, limits=self.limits, limit=4096)

    def _malformed(self, exc: ProtocolError) -> None:
        log.warning("chp client: dropped a malformed message from %s: %s", self.server, exc)

    def _on_synced(self, synced: Synced) -> None:
        if self._mirror.live:
            log.info("chp client: synced with %s at sequence %d (%s)", self.server,
                     synced.sequence,
                     f"{len(synced.bulk)} entries in bulk" if synced.bulk is not None
                     else f"{len(synced.changes)} changes")
            self._synced.set()
            self._ever_synced.set()

    # ----------------------------------------------------------------- deliveries (lock held)
    def _deliver(self, entries: Iterable[Entry]) -> None:
        """Hand applied changes to watchers and confirm waiters."""
        watchers = self._watchers
        for entry in entries:
            for watcher in watchers:
                watcher.put(entry)
        self._confirm(entries)

    def _deliver_synced(self, synced: Synced) -> None:
        """A completed snapshot: its differences, or a `Resync` and the updates after it
        for watchers that asked for resyncs."""
        server = str(self.server)
        whole = synced.bulk is not None or synced.snapshot is not None
        for watcher in self._watchers:
            if watcher.resyncs and whole:
                # bulk: the columns as they came; `entries` only if the watcher reads them
                watcher.put(Resync(synced.at, None if synced.bulk else synced.snapshot,
                                   server, bulk=synced.bulk))
                entries = synced.updates
            else:
                entries = synced.changes
            for entry in entries:
                watcher.put(entry)
        if self._waiters:
            self._confirm(synced.changes)

    def _confirm(self, entries: Iterable[Entry]) -> None:
        """Wake the `set`s waiting for these updates' KVPUBs."""
        waiters = self._waiters
        if not waiters:
            return
        for entry in entries:
            waiter = waiters.get(entry.uuid)
            if waiter is not None and entry.key.startswith(self.subtree):
                waiter.entry = entry
                waiter.event.set()


__all__ = ["Agent", "Outlet", "Resync", "SET", "STOP", "Waiter", "Watcher"]
