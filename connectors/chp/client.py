"""The CHP client: a live replica of a subtree of a clone server's map, plus updates.

Usage (the API later code programs against)::

    from connectors.chp.client import CloneClient

    with CloneClient(["127.0.0.1:5556", "127.0.0.1:5566"], subtree=b"/orders/") as chp:
        chp.wait_synced(timeout=10)                  # -> the sequence synced at
        chp.get(b"/orders/1")                        # -> bytes | None
        chp.entry(b"/orders/1")                      # -> Entry | None (sequence, uuid, ...)
        chp.items()                                  # -> [(key, value)] under the subtree
        snap = chp.snapshot(b"/orders/")             # -> MapSnapshot(sequence, entries)
        chp.set(b"/orders/2", b"v", ttl=30)          # -> SetReceipt(uuid, sequence=None)
        chp.set(b"/orders/3", b"v", uuid=my_uuid, properties={b"origin": b"spark"},
                confirm=True)                        # waits for the KVPUB: receipt.sequence
        chp.delete(b"/orders/2")
        chp.set_many([Update(b"/orders/4", b"a"), Update(b"/orders/5", b"b", uuid=u)])
                                                     # -> {uuid: sequence}, all published
        for entry in chp.watch(include_snapshot=True):   # Entry per change, in order
            ...
        chp.watch(callback=handle)                   # handle(entry) on the client's thread
        chp.watch(resyncs=True)                      # a Resync before each whole snapshot

`Entry` (from `kvmap`) is what the replica stores: key, sequence of the update that set
it, the setter's UUID, properties (a ttl in them is absolute, epoch milliseconds) and
body; a delete is an `Entry` whose body is empty (`entry.deleted`). `snapshot()` and the
watch stream are consistent: a watch opened with ``include_snapshot=True`` first yields
the entries of the snapshot it was registered at, then every later change. A watch
opened with ``resyncs=True`` gets, in place of the differences of each whole snapshot
(the first sync, a failover, a server that went backwards), a `Resync` holding the
snapshot's entries and its sequence, then the updates that followed it: for a consumer
that keeps its own copy (e.g. across its own restarts) and diffs against that.

How it works, as the zguide clone client (clone.py), and more: a background thread
(`agent.Agent`) owns the sockets and the mirror of the map. It subscribes (SUB to P+1, to the subtree and HUGZ), waits until the
subscription is live, asks for the snapshot (DEALER to P, ICANHAZ?), then applies the
KVPUBs whose sequence is above the last one (`mirror.Mirror`). Silence (no HUGZ, no
update) for `server_timeout` means the server failed: the client moves to the next
server and resynchronises; after a resync the watch stream carries the differences.
Between servers of one replicated map (`replicated_server`) it resumes instead: the new
server sends every update the client missed, so the watch stream has no gap and no
repeat.
A server whose sequence goes backwards (it restarted without its data) or, for a replica
of the whole map, a skipped sequence (a lost update) also triggers a resync.

KVSETs go to every server's collector (P+2), as Binary Star needs, each through its own
XPUB, so that a KVSET is held until that server's collector has subscribed rather than
dropped by ZeroMQ as a PUB would (a short-lived `garlicfarm chp set` then loses nothing).
With ``confirm=True`` `set` returns once the server's KVPUB of that UUID came back, with
its sequence; the key must then be inside the client's subtree.

Snapshots come in bulk from our own servers (`bulk`: the snapshot DEALER's routing id
asks for KVBULK column messages; any other server answers with KVSYNCs, taken as well).
`read_snapshot` takes one snapshot and nothing else (no subscription, no replica): the
entries as KVBULK columns, for readers that turn them into Arrow arrays.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid as uuid_module
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import zmq

from consensus.wire.errors import ProtocolError

from . import bulk as bulk_module
from .address import ServerAddress, parse_address
from .agent import SET, STOP, Agent, Resync
from .errors import ChpError, ChpTimeout, ClientFailed, ChpConfigError
from .kvmap import Entry
from .proto import (DEFAULT_LIMITS, MAX_TTL_SECONDS, RESERVED_KEYS, TTL, UUID_LENGTH,
                    Channel, Icanhaz, Kthxbai, KvBulk, Kvsync, ChpLimits, decode, decode_bulk,
                    encode, encode_bulk, format_properties, pack_sequence)
from .zmqio import drain, send_frames

log = logging.getLogger("garlicfarm.chp.client")

SERVER_TTL = 5.0          # seconds of silence before failing over (zguide SERVER_TTL)
PIPE_WAIT = 0.1           # seconds a call blocks on a full pipe before looking at the agent

Bytesish = bytes | str


@dataclass(frozen=True, slots=True)
class MapSnapshot:
    """The replica's entries under a subtree, as of `sequence`."""
    sequence: int
    entries: dict[bytes, Entry]


@dataclass(frozen=True, slots=True)
class SetReceipt:
    """What `set` sent: the UUID, and the sequence the server gave it when confirmed."""
    uuid: bytes
    sequence: int | None = None


class Watch:
    """A stream of `Entry` changes, in order (and `Resync`s, if asked for). Iterate, or
    `get(timeout)`; `close()` ends it (iteration stops). Unread changes queue without
    bound."""

    def __init__(self, check: Callable[[], None], unwatch: Callable[["Watch"], None],
                 resyncs: bool = False) -> None:
        self._check = check             # raises what ended the client's thread
        self._unwatch = unwatch
        self._queue: queue.SimpleQueue[Entry | Resync | None] = queue.SimpleQueue()
        self.closed = False
        self.resyncs = resyncs

    def put(self, entry: Entry | Resync) -> None:
        self._queue.put(entry)

    def wake(self) -> None:
        """Wake a reader waiting for the next change (the client's thread ended)."""
        self._queue.put(None)

    def get(self, timeout: float | None = None) -> Entry | Resync | None:
        """The next change, or None after `timeout` seconds or once closed; raises
        `ClientFailed` once the client's thread has failed (no change will come)."""
        if self.closed and self._queue.empty():
            return None
        try:
            entry = self._queue.get(timeout=timeout)
        except queue.Empty:
            entry = None
        if entry is None:
            self._check()
        return entry

    def __iter__(self) -> Iterator[Entry | Resync]:
        while True:
            entry = self.get()
            if entry is None:
                return
            yield entry

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._unwatch(self)
            self._queue.put(None)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Callback:
    def __init__(self, fn: Callable[[Entry | Resync], None], resyncs: bool) -> None:
        self.fn = fn
        self.resyncs = resyncs

    def put(self, entry: Entry | Resync) -> None:
        try:
            self.fn(entry)
        except Exception:   # a watcher's bug must not kill the client
            log.exception("chp client: watch callback failed")

    def wake(self) -> None:
        """Nothing waits on a callback."""


def _bytes(value: Bytesish, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise ChpConfigError(f"{what} must be bytes or str, not {type(value).__name__}")


def _kvset_frames(key: Bytesish, value: Bytesish, ttl: float | None, uuid: bytes | None,
                  properties: Mapping[Bytesish, Bytesish] | Iterable[tuple[Bytesish, Bytesish]]
                  ) -> list[bytes]:
    """The frames of a KVSET, checked (`ChpConfigError` names what is wrong)."""
    key_b = _bytes(key, "key")
    if not key_b or key_b in RESERVED_KEYS:
        raise ChpConfigError(f"key {key_b!r} is reserved by the protocol; choose another")
    uuid_b = uuid_module.uuid4().bytes if uuid is None else bytes(uuid)
    if len(uuid_b) != UUID_LENGTH:
        raise ChpConfigError(f"uuid must be 16 bytes, got {len(uuid_b)}")
    pairs = list(properties.items() if isinstance(properties, Mapping) else properties)
    props = [(_bytes(n, "property name"), _bytes(v, "property value")) for n, v in pairs]
    if ttl is not None:
        check_ttl(ttl)
        props = [p for p in props if p[0] != TTL]
        props.append((TTL, b"%d" % ttl if float(ttl).is_integer() else repr(ttl).encode()))
    try:
        props_raw = format_properties(props)
    except ProtocolError as exc:
        raise ChpConfigError(f"properties: {exc.reason}") from None
    return [key_b, pack_sequence(0), uuid_b, props_raw, _bytes(value, "value")]


def check_ttl(ttl: float) -> float:
    """`ttl` if it is a number of seconds a server can store, else `ChpConfigError`."""
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or \
            not 0 < ttl <= MAX_TTL_SECONDS:
        raise ChpConfigError(f"--ttl: {ttl!r} is not a number of seconds in 0 < S <= "
                          f"{MAX_TTL_SECONDS} (at most about 31,700 years; leave it out for "
                          "no expiry)")
    return ttl


@dataclass(frozen=True, slots=True)
class Update:
    """One KVSET for `CloneClient.set_many` (the arguments of `set`)."""
    key: Bytesish
    value: Bytesish
    uuid: bytes | None = None
    properties: Mapping[Bytesish, Bytesish] | Iterable[tuple[Bytesish, Bytesish]] = ()
    ttl: float | None = None


class CloneClient:
    """A replica of `subtree` of the map served by `servers` (tried in order)."""

    def __init__(self, servers: Sequence[str] | str = "127.0.0.1:5556",
                 subtree: Bytesish = b"", *, server_timeout: float = SERVER_TTL,
                 limits: ChpLimits = DEFAULT_LIMITS, bulk: bool = True) -> None:
        if isinstance(servers, str):
            servers = [servers]
        if not servers:
            raise ChpConfigError("--server: name at least one server as HOST:PORT")
        self.servers: list[ServerAddress] = [parse_address(s) for s in servers]
        self.subtree = _bytes(subtree, "subtree")
        if len(self.subtree) > limits.max_subtree_bytes:
            raise ChpConfigError(f"subtree: {len(self.subtree)} bytes, servers refuse a "
                              f"subscription over {limits.max_subtree_bytes} "
                              f"(ChpLimits.max_subtree_bytes): subscribe to a shorter prefix")
        if not server_timeout > 0:
            raise ChpConfigError(f"server_timeout must be positive, got {server_timeout!r}")
        self.server_timeout = server_timeout
        self._ctx = zmq.Context()
        self._pipe_lock = threading.Lock()
        self._pipe = self._ctx.socket(zmq.PAIR)
        self._pipe.linger = 0
        self._pipe.sndtimeo = round(PIPE_WAIT * 1000)
        address = f"inproc://chp-client-{id(self):x}"
        self._pipe.bind(address)
        self._agent = Agent(self._ctx, address, servers=self.servers, subtree=self.subtree,
                            server_timeout=server_timeout, limits=limits, bulk=bulk)
        self._thread = threading.Thread(target=self._agent.run, name="chp-client",
                                        daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- reading
    @property
    def sequence(self) -> int:
        return self._agent.sequence

    @property
    def server(self) -> ServerAddress:
        """The server the client is (or is trying to get) in sync with."""
        return self._agent.server

    @property
    def failovers(self) -> int:
        """How often the client moved on to the next server."""
        return self._agent.failovers

    @property
    def synced(self) -> bool:
        return self._agent.synced

    def wait_synced(self, timeout: float | None = None) -> int:
        """Block until the replica is live; returns its sequence."""
        synced = self._agent.wait_synced(timeout)
        self._check()
        if not synced:
            raise ChpTimeout(f"no snapshot from {', '.join(map(str, self.servers))} within "
                             f"{timeout}s: are the servers up, and is --server their "
                             "snapshot port?")
        return self.sequence

    def _first_sync(self, timeout: float | None) -> None:
        self._check()
        if not self._agent.ever_synced:
            self.wait_synced(self.server_timeout * 2 if timeout is None else timeout)

    def _check(self) -> None:
        """Raise what ended the background thread, if anything did: the replica is
        frozen from then on, and a call must not answer from it as if it were live."""
        failure = self._agent.failure
        if failure is not None:
            raise ClientFailed(f"the chp client's background thread failed ({failure!r}); "
                               "its replica is no longer updated: close this client and "
                               "make a new one") from failure

    def entry(self, key: Bytesish, *, timeout: float | None = None) -> Entry | None:
        """The stored entry of `key`. Waits for the first sync (`timeout`, default
        twice the server timeout); later, during a failover, answers from the last
        synchronised state."""
        self._first_sync(timeout)
        return self._agent.entry(_bytes(key, "key"))

    def get(self, key: Bytesish, default: bytes | None = None, *,
            timeout: float | None = None) -> bytes | None:
        found = self.entry(key, timeout=timeout)
        return default if found is None else found.body

    def snapshot(self, subtree: Bytesish = b"", *, timeout: float | None = None
                 ) -> MapSnapshot:
        """The entries under `subtree` and the sequence they are consistent with."""
        self._first_sync(timeout)
        prefix = _bytes(subtree, "subtree")
        return MapSnapshot(*self._agent.view(prefix))

    def items(self, subtree: Bytesish = b"", *, timeout: float | None = None
              ) -> list[tuple[bytes, bytes]]:
        """(key, value) under `subtree`, sorted by key."""
        entries = self.snapshot(subtree, timeout=timeout).entries
        return sorted((key, e.body) for key, e in entries.items())

    # ----------------------------------------------------------------- watching
    def watch(self, callback: Callable[[Entry | Resync], None] | None = None, *,
              include_snapshot: bool = False, resyncs: bool = False) -> Watch | None:
        """Changes from now on (after the current entries, with `include_snapshot`):
        as a `Watch` iterator, or passed to `callback` on the client's thread. With
        `resyncs`, each whole snapshot comes as a `Resync` instead of differences."""
        self._check()
        watcher: Watch | _Callback = (Watch(self._check, self._agent.unwatch, resyncs)
                                      if callback is None else _Callback(callback, resyncs))
        self._agent.watch(watcher, include_snapshot=include_snapshot)
        return watcher if isinstance(watcher, Watch) else None

    # ----------------------------------------------------------------- writing
    def set(self, key: Bytesish, value: Bytesish, *, ttl: float | None = None,
            uuid: bytes | None = None,
            properties: Mapping[Bytesish, Bytesish] | Iterable[tuple[Bytesish, Bytesish]] = (),
            confirm: bool = False, timeout: float | None = None) -> SetReceipt:
        """Send a KVSET to every server. `ttl`: seconds until the server deletes the
        key. `uuid`: 16 bytes (default: a fresh uuid4). `properties`: extra name=value
        pairs. `confirm`: wait (up to `timeout`, default the server timeout) for the
        KVPUB and return its sequence. An empty value deletes the key."""
        frames = _kvset_frames(key, value, ttl, uuid, properties)
        key_b, uuid_b = frames[0], frames[2]
        if not confirm:
            self._to_agent([SET, *frames])
            return SetReceipt(uuid_b)
        self._check_seen(key_b)
        waiter = self._agent.expect([uuid_b])[uuid_b]
        wait = self.server_timeout if timeout is None else timeout
        try:
            self._to_agent([SET, *frames])
            published = waiter.event.wait(wait)
            self._check()
            if not published:
                raise ChpTimeout(f"no server published the update of {key_b!r} within "
                                 f"{wait}s; it may or may not have been applied")
        finally:
            self._agent.forget([uuid_b])
        return SetReceipt(uuid_b, waiter.entry.sequence)

    def set_many(self, updates: Iterable[Update], *, timeout: float | None = None
                 ) -> dict[bytes, int]:
        """Send one KVSET per `Update`, in order, and wait until the server published
        the last update of each key (an earlier one of the same key was applied before
        it: one connection, in order): up to `timeout` seconds in all (default the
        server timeout) or `ChpTimeout`, naming how many are unconfirmed. Returns
        {uuid: sequence} of the confirmed updates. Every key must be in the subtree."""
        last: dict[bytes, bytes] = {}
        batch = []
        for update in updates:
            frames = _kvset_frames(update.key, update.value, update.ttl, update.uuid,
                                   update.properties)
            self._check_seen(frames[0])
            last[frames[0]] = frames[2]
            batch.append(frames)
        waiters = self._agent.expect(last.values())
        try:
            for frames in batch:
                self._to_agent([SET, *frames])
            deadline = time.monotonic() + (self.server_timeout if timeout is None else timeout)
            for waiter in waiters.values():
                published = waiter.event.wait(max(0.0, deadline - time.monotonic()))
                self._check()
                if not published:
                    missing = sum(not w.event.is_set() for w in waiters.values())
                    raise ChpTimeout(f"{missing} of {len(waiters)} updates were not published "
                                     "within the timeout; they may or may not have been "
                                     "applied (sending them again is safe)")
        finally:
            self._agent.forget(waiters)
        return {uuid_b: w.entry.sequence for uuid_b, w in waiters.items()}

    def _to_agent(self, frames: list[bytes]) -> None:
        """Hand `frames` to the agent thread; raises `ClientFailed` rather than block for
        ever on a pipe whose reader has died (a full pipe waits `PIPE_WAIT` at a time)."""
        with self._pipe_lock:
            while True:
                self._check()
                try:
                    send_frames(self._pipe, frames)
                    return
                except zmq.Again:
                    continue

    def _check_seen(self, key: bytes) -> None:
        if not key.startswith(self.subtree):
            raise ChpConfigError(f"confirming needs key {key!r} inside the client's subtree "
                              f"{self.subtree!r}, where its KVPUB is seen")

    def delete(self, key: Bytesish, **kwargs) -> SetReceipt:
        """A KVSET with an empty value (same options as `set`, but no ttl)."""
        return self.set(key, b"", **kwargs)
    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Stop the background thread and close every socket; ends open watches."""
        if self._ctx.closed:
            return
        with self._pipe_lock:
            while self._thread.is_alive():
                try:
                    self._pipe.send(STOP)
                    break
                except zmq.Again:
                    continue
        self._thread.join()
        for watcher in self._agent.unwatch_all():
            if isinstance(watcher, Watch):
                watcher.close()
        self._pipe.close(0)
        self._ctx.term()

    def __enter__(self) -> "CloneClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

@dataclass(frozen=True, slots=True)
class BulkSnapshot:
    """One snapshot of a subtree as `server` sent it: the entries as KVBULK columns
    (`parts`, in the server's order; a classic answer is packed the same way) and the
    sequence the map was at (KTHXBAI's). `bulk` says whether the server sent KVBULK."""
    sequence: int
    parts: list[KvBulk]
    server: str
    bulk: bool

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)


class _Packer:
    """KVSYNCs of a classic answer, packed into KVBULK columns as they arrive."""

    def __init__(self, subtree: bytes, limits: ChpLimits) -> None:
        self.subtree = subtree
        self.limits = limits
        self.pending: list[Kvsync] = []
        self.parts: list[KvBulk] = []

    def add(self, msg: Kvsync) -> None:
        if msg.key.startswith(self.subtree) and msg.body:
            self.pending.append(msg)
            if len(self.pending) >= bulk_module.SLICE_ENTRIES:
                self.flush()

    def flush(self) -> None:
        for part in bulk_module.slices(self.pending, self.limits):
            self.parts.append(decode_bulk(encode_bulk(part), self.limits))
        self.pending = []


def read_snapshot(servers: Sequence[str] | str, subtree: Bytesish = b"", *,
                  server_timeout: float = SERVER_TTL, timeout: float | None = None,
                  limits: ChpLimits = DEFAULT_LIMITS, bulk: bool = True) -> BulkSnapshot:
    """One snapshot of `subtree` from the first of `servers` that answers: ICANHAZ?
    from a DEALER that asks for KVBULK (unless `bulk` is False); a server that answers
    with KVSYNCs (a zguide one, ours with ``--no-bulk``) is read as well. A server
    silent for `server_timeout` (down, a passive Binary Star server) is left for the
    next; `ChpTimeout` after `timeout` (default twice the server timeout, at least 10
    s). A malformed message raises `ChpError`: a snapshot with a hole is no snapshot.

    No subscription is needed: the entries are the map at the returned sequence."""
    if isinstance(servers, str):
        servers = [servers]
    if not servers:
        raise ChpConfigError("--server: name at least one server as HOST:PORT")
    addresses = [parse_address(s) for s in servers]
    prefix = _bytes(subtree, "subtree")
    wait = max(10.0, 2 * server_timeout) if timeout is None else timeout
    deadline = time.monotonic() + wait
    ctx = zmq.Context()
    try:
        for attempt in range(1 << 30):
            server = addresses[attempt % len(addresses)]
            found = _snapshot_from(ctx, server, prefix, server_timeout, deadline, limits, bulk)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                break
            log.warning("chp client: no snapshot from %s within %.1fs; trying %s", server,
                        server_timeout, addresses[(attempt + 1) % len(addresses)])
    finally:
        ctx.destroy(linger=0)
    raise ChpTimeout(f"no snapshot from {', '.join(map(str, addresses))} within {wait}s: "
                     "are the servers up, and is --server their snapshot port?")


def _snapshot_from(ctx: zmq.Context, server: ServerAddress, subtree: bytes,
                   server_timeout: float, deadline: float, limits: ChpLimits,
                   bulk: bool) -> BulkSnapshot | None:
    """The snapshot `server` sends, or None when it falls silent first."""
    dealer = ctx.socket(zmq.DEALER)
    try:
        dealer.linger = 0
        # A zguide server sends its KVSYNCs from a ROUTER with the default high-water
        # mark (1,000), which drops what does not fit: a snapshot read more slowly than
        # it is sent lost keys with no sign (2,948 or 2,791 of 3,000, measured against
        # clonesrv6.py). Taking everything into our own queue at once keeps its pipe
        # empty; the snapshot is the map, which the caller wants whole anyway.
        dealer.rcvhwm = 0
        dealer.setsockopt(zmq.MAXMSGSIZE, limits.max_snapshot_frame_bytes)
        if bulk:
            dealer.setsockopt(zmq.ROUTING_ID, bulk_module.routing_id())
        dealer.connect(server.snapshot)
        send_frames(dealer, encode(Icanhaz(subtree)))
        packer = _Packer(subtree, limits)
        bulk_parts: list[KvBulk] = []
        while True:
            now = time.monotonic()
            silence = min(now + server_timeout, deadline)
            if not dealer.poll(max(0.0, silence - now) * 1000):
                return None
            for frames in drain(dealer):
                try:
                    msg = decode(frames, Channel.SNAPSHOT_REPLY, limits)
                except ProtocolError as exc:
                    raise ChpError(f"a malformed snapshot message from {server}: {exc}"
                                   ) from exc
                if type(msg) is KvBulk:
                    bulk_parts.append(msg)
                elif type(msg) is Kvsync:
                    packer.add(msg)
                elif type(msg) is Kthxbai:
                    packer.flush()
                    return BulkSnapshot(msg.sequence, bulk_parts + packer.parts, str(server),
                                        bool(bulk_parts))
    finally:
        dealer.close(0)


__all__ = ["BulkSnapshot", "CloneClient", "MapSnapshot", "Resync", "SERVER_TTL", "SetReceipt",
           "Update", "Watch", "read_snapshot"]
