"""The CHP clone server: the sockets and timers around the pure map, replica and bstar.

A server named by port P binds (RFC 12, zguide clonesrv6):

* SNAPSHOT, a ROUTER on P: ICANHAZ? subtree -> a KVSYNC per matching key, KTHXBAI;
  to our own clients (their DEALER's routing id asks for it, `bulk`) the same entries
  as a few KVBULK column messages, one per loop turn, then KTHXBAI (off: `bulk=False`,
  ``--no-bulk``).
* PUBLISHER, an XPUB on P+1: every KVPUB, and a HUGZ with the current sequence every
  `hugz_interval`. Being an XPUB (a PUB to every SUB peer) it also sees subscriptions
  arrive and greets each with an immediate HUGZ, which lets a new subscriber know its
  subscription is live without waiting for the next heartbeat.
* COLLECTOR, a SUB on P+2: KVSETs from clients.

Standalone it is always active. As one of a Binary Star pair (`role`) it also binds a
state PUB (`bstar_port`, default 5003 for the primary, 5004 for the backup, the zguide
ports) and connects to its peer's; while passive it follows the active like a client of
the whole map (`mirror.Mirror`), holds client KVSETs on the pending list
(`pending.PendingUpdates`) and answers no snapshot request until the FSM says it has
taken over (`bstar.BinaryStar`).

Beyond the reference servers: with `data_dir` every change is durable before it is
published and survives restarts (`persist.MapStore`); the ttl of a key is honoured to
the millisecond rather than at the next 1 s sweep; a passive server converts relative
ttls on receipt and publishes no expiries of its own (the active does); malformed
frames are counted, logged and dropped, never fatal.

Use `CloneServer(config).run()` (blocks; `stop()` from another thread or a signal
handler ends it) or `garlicfarm chp server`.
"""
from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator

import zmq

from connectors.subscriptions import (SubscriptionGuard, SubscriptionLimits,
                                      publisher_maxmsgsize)
from consensus.storage import StorageError
from consensus.wire.errors import ProtocolError

from .address import ServerAddress, check_port, endpoint
from .bstar import HEARTBEAT, PEER_TIMEOUT, BinaryStar, SplitBrain
from .bulk import BulkReply, wants_bulk
from .errors import ChpConfigError, DataDirError
from .kvmap import CloneMap
from .mirror import Mirror
from .pending import HORIZON, PendingUpdates
from .periodic import Periodic
from .persist import MapStore
from .proto import (DEFAULT_LIMITS, BstarState, Channel, Hugz, Kthxbai, Kvpub, Kvset,
                    ChpLimits, Message, decode, encode, pack_sequence)
from .zmqio import drain, drain_decoded, send_frames, send_kvmsg

log = logging.getLogger("garlicfarm.chp.server")

DEFAULT_PORT = 5556          # zguide primary; the backup uses 5566
DEFAULT_BSTAR_PORTS = {"primary": 5003, "backup": 5004}
MAX_LOOP_WAIT = 0.1          # seconds: how long stop() may take to be noticed
PUBLISHER_HWM = 100_000      # messages queued per subscriber before ZeroMQ drops
SUBSCRIPTION_DRAIN = 10_000  # subscription messages handled per loop turn
_LOG_FIRST_REJECTS = 10


class BstarRole(enum.Enum):
    """Which side of a Binary Star pair a server starts as (`BstarState` is where it is now)."""
    PRIMARY = "primary"
    BACKUP = "backup"


@dataclass
class ServerConfig:
    """Everything a server needs; `validate` names the option at fault."""
    port: int = DEFAULT_PORT
    bind: str = "127.0.0.1"
    data_dir: str | None = None
    fsync: str = "batch"                 # always | batch | never (see consensus.storage)
    role: BstarRole | None = None             # None: standalone
    peer: ServerAddress | None = None    # the other server of a Binary Star pair
    bstar_port: int | None = None        # our state PUB; default by role (5003 / 5004)
    peer_bstar_port: int | None = None   # the peer's state PUB; default the other one
    hugz_interval: float = 1.0
    bstar_heartbeat: float = HEARTBEAT
    peer_timeout: float = PEER_TIMEOUT
    pending_horizon: float = HORIZON
    sync_timeout: float = 5.0            # passive: ask the active again after this
    snapshot_every: int = 100_000        # log records between two map snapshots
    max_batch: int = 4096                # KVSETs handled per loop turn
    publisher_hwm: int = PUBLISHER_HWM
    bulk: bool = True                    # KVBULK answers to clients that ask (bulk.py)
    limits: ChpLimits = DEFAULT_LIMITS

    def validate(self) -> "ServerConfig":
        check_port(self.port, "--port")
        if self.fsync not in ("always", "batch", "never"):
            raise ChpConfigError(f"--fsync: {self.fsync!r} is not always, batch or never")
        for name in ("hugz_interval", "bstar_heartbeat", "peer_timeout", "pending_horizon",
                     "sync_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ChpConfigError(f"--{name.replace('_', '-')}: must be a positive number "
                                  f"of seconds, got {value!r}")
        for name, least, most in (("snapshot_every", 1, None), ("max_batch", 1, None),
                                  ("publisher_hwm", 0, (1 << 31) - 1)):
            value = getattr(self, name)
            if type(value) is not int or value < least or most is not None and value > most:
                bound = f" and at most {most}" if most is not None else ""
                raise ChpConfigError(f"{name}: must be a whole number of at least {least}"
                                  f"{bound}, got {value!r}")
        if self.peer_timeout <= self.bstar_heartbeat:
            raise ChpConfigError("--peer-timeout must be longer than --bstar-heartbeat "
                              f"({self.peer_timeout} <= {self.bstar_heartbeat})")
        if self.role is None:
            if self.peer is not None or self.bstar_port or self.peer_bstar_port:
                raise ChpConfigError("a Binary Star peer or state port needs --primary PEER "
                                  "or --backup PEER")
            return self
        if self.peer is None:
            raise ChpConfigError(f"--{self.role.value}: name the peer server as HOST:PORT")
        other = "backup" if self.role is BstarRole.PRIMARY else "primary"
        if self.bstar_port is None:
            self.bstar_port = DEFAULT_BSTAR_PORTS[self.role.value]
        if self.peer_bstar_port is None:
            self.peer_bstar_port = DEFAULT_BSTAR_PORTS[other]
        check_port(self.bstar_port, "--bstar-port", span=1)
        check_port(self.peer_bstar_port, "--peer-bstar-port", span=1)
        return self


@dataclass
class ServerStats:
    published: int = 0          # KVPUBs sent (updates, deletes, expiries)
    rejected: int = 0           # malformed or refused messages dropped
    snapshots: int = 0          # ICANHAZ answered
    bulk_snapshots: int = 0     # of which with KVBULK messages
    votes_refused: int = 0      # ICANHAZ dropped because the FSM did not accept them
    subscriptions: int = 0      # prefix subscriptions open on the publisher (metrics)
    resyncs: int = 0            # snapshots taken from the active while passive
    last_reject: str = ""
    states: list[str] = field(default_factory=list)   # state changes, in order
    # subscriptions_refused_long / _many, connections_cut (SubscriptionGuard)
    refusals: Counter = field(default_factory=Counter)


class CloneServer:
    """One CHP server. Not thread-safe: `run` owns the sockets; `stop` may be called
    from anywhere."""

    def __init__(self, config: ServerConfig, *, context: zmq.Context | None = None) -> None:
        self.config = config.validate()
        self.stats = ServerStats()
        self.exit_reason: str | None = None
        self._stop = threading.Event()
        self._ctx = context or zmq.Context()
        self._own_ctx = context is None
        self._sockets: list[zmq.Socket] = []
        self.guard: SubscriptionGuard | None = None
        self.store: MapStore | None = None
        self.map = CloneMap()
        if config.data_dir:
            self.store, self.map = _open_data_dir(config)
        self.pending = PendingUpdates(config.pending_horizon)
        self.replica: Mirror | None = None
        self.bstar: BinaryStar | None = None
        if config.role is not None:
            self.bstar = BinaryStar(config.role is BstarRole.PRIMARY, time.monotonic(),
                                    heartbeat=config.bstar_heartbeat,
                                    peer_timeout=config.peer_timeout)
        self._poller = zmq.Poller()
        self._handlers: dict[zmq.Socket, Callable[[], None]] = {}
        self._peer_sub: zmq.Socket | None = None
        self._peer_snapshot: zmq.Socket | None = None
        self._bulk: list[BulkReply] = []    # bulk answers being sent, a slice per turn
        self._sync_started = 0.0
        self._hugz = Periodic(config.hugz_interval, 0.0)
        self._prune = Periodic(1.0, 0.0)
        try:
            self._bind()
        except BaseException:
            self._close()
            raise

    # ----------------------------------------------------------------- setup
    def _socket(self, kind: int, handler: Callable[[], None] | None = None) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, self.config.limits.max_frame_bytes)
        self._sockets.append(sock)
        if handler is not None:
            self._poller.register(sock, zmq.POLLIN)
            self._handlers[sock] = handler
        return sock

    def _bind(self) -> None:
        cfg = self.config
        here = ServerAddress(cfg.bind, cfg.port)
        try:
            self.router = self._socket(zmq.ROUTER, self._on_snapshot_request)
            self.router.router_mandatory = 1
            self.router.sndhwm = 0   # a snapshot is never cut short by the high-water mark
            self.router.bind(here.snapshot)
            self.publisher = self._socket(zmq.XPUB, self._on_subscription)
            self.publisher.xpub_verbose = 1
            self.publisher.xpub_verboser = 1    # unsubscriptions too: stats.subscriptions
            self.publisher.sndhwm = cfg.publisher_hwm
            # it receives subscriptions only: a subtree, HUGZ (see SubscriptionGuard)
            self.publisher.maxmsgsize = publisher_maxmsgsize(cfg.limits.max_subtree_bytes)
            self.publisher.bind(here.publisher)
            self.guard = SubscriptionGuard(
                self.publisher, SubscriptionLimits(cfg.limits.max_subtree_bytes,
                                                   cfg.limits.max_subscriptions),
                f"chp server publisher (port {cfg.port + 1})", log, self.stats.refusals)
            self._poller.register(self.guard.monitor, zmq.POLLIN)
            self._handlers[self.guard.monitor] = self.guard.on_monitor
            self.collector = self._socket(zmq.SUB, self._on_collector)
            self.collector.rcvhwm = cfg.publisher_hwm
            self.collector.subscribe(b"")
            self.collector.bind(here.collector)
            if self.bstar is not None:
                self.statepub = self._socket(zmq.PUB)
                self.statepub.maxmsgsize = publisher_maxmsgsize(0)   # the peer's b""
                self.statepub.bind(endpoint(cfg.bind, cfg.bstar_port))
                self.statesub = self._socket(zmq.SUB, self._on_peer_state)
                self.statesub.subscribe(b"")
                self.statesub.connect(endpoint(cfg.peer.host, cfg.peer_bstar_port))
        except zmq.ZMQError as exc:
            raise ChpConfigError(f"--port {cfg.port}: cannot bind on {cfg.bind} ({exc}); the "
                              "server needs ports P, P+1, P+2 (and --bstar-port in a pair) "
                              "free: choose another --port") from None

    # ----------------------------------------------------------------- loop
    @property
    def serving(self) -> bool:
        """Whether we apply KVSETs and answer snapshots (standalone or ACTIVE)."""
        return self.bstar is None or self.bstar.active

    @property
    def state(self) -> str:
        return "standalone" if self.bstar is None else self.bstar.state.name.lower()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until `stop()` (or a fatal split brain, see `exit_reason`); then every
        socket is closed: a server runs once."""
        cfg = self.config
        log.info("chp server %s on %s: snapshot %d, publisher %d, collector %d, "
                 "sequence %d, %d keys", self.state, cfg.bind, cfg.port, cfg.port + 1,
                 cfg.port + 2, self.map.sequence, len(self.map))
        self.stats.states.append(self.state)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                wait = min(self._next_deadline(now) - now, MAX_LOOP_WAIT)
                if self._bulk:
                    wait = 0.0   # serve what is waiting, then the next slices
                for sock, _ in self._poller.poll(max(wait, 0.0) * 1000):
                    handler = self._handlers.get(sock)
                    if handler is not None:   # may be gone after a state change
                        handler()
                self._on_timers()
                self.guard.release_memory()
                if self._bulk:
                    self._send_bulk()
        except SplitBrain as exc:
            self.exit_reason = str(exc)
            log.error("chp server: %s", exc)
        finally:
            self._close()
            log.info("chp server stopped at sequence %d, %d keys; %d published, %d "
                     "malformed messages dropped", self.map.sequence, len(self.map),
                     self.stats.published, self.stats.rejected)

    def _next_deadline(self, now: float) -> float:
        deadline = self._hugz.deadline
        if self.bstar is not None:
            deadline = min(deadline, self.bstar.next_deadline())
        expiry = self.map.next_expiry() if self.serving else None
        if expiry is not None:
            deadline = min(deadline, now + expiry - time.time())
        return deadline

    def _on_timers(self) -> None:
        now = time.monotonic()
        if self._hugz.due(now):
            self._send_hugz()
        if self.bstar is not None:
            status = self.bstar.heartbeat_due(now)
            if status is not None:
                send_frames(self.statepub, encode(status))
            if self.replica is not None and not self.replica.live \
                    and now - self._sync_started > self.config.sync_timeout:
                log.warning("chp server: no snapshot from the active %s after %.1fs; "
                            "asking again", self.config.peer, self.config.sync_timeout)
                self._start_following(now)
            if self._prune.due(now):
                self.pending.prune(now)
        if self.serving:
            deletes = self.map.expire(time.time())
            if deletes:
                self._publish(deletes)

    # ----------------------------------------------------------------- handlers
    def _on_collector(self) -> None:
        now = time.time()
        serving = self.serving
        published = []
        for update in self._drain(self.collector, Channel.COLLECTOR, "collector"):
            try:
                if serving:
                    published.append(self.map.apply(update, now))
                elif not self._applied(update):
                    self.pending.client_update(update, time.monotonic())
            except ProtocolError as exc:
                self._reject("collector", exc)
        if published:
            self._publish(published)

    def _applied(self, update: Kvset) -> bool:
        """Whether the map already holds this very update (same key and UUID)."""
        entry = self.map.get(update.key)
        return entry is not None and entry.uuid == update.uuid

    def _on_snapshot_request(self) -> None:
        for frames in drain(self.router, self.config.max_batch):
            identity = frames[0]
            try:
                request = decode(frames[1:], Channel.SNAPSHOT_REQUEST, self.config.limits)
            except ProtocolError as exc:
                self._reject("snapshot", exc)
                continue
            if not self._vote():
                self.stats.votes_refused += 1
                continue
            self._answer(identity, *self.map.snapshot_parts(request.subtree))

    def _answer(self, identity: bytes, entries: list, end: Message) -> None:
        """Send a snapshot answer (`entries`: KVSYNCs or stored entries, which encode
        alike): KVBULK slices over the next loop turns to a client that asked for
        them, else at once, a message per entry, then `end`."""
        if self.config.bulk and wants_bulk(identity) and isinstance(end, Kthxbai):
            self._bulk.append(BulkReply(identity, entries, end, self.config.limits))
            return
        try:
            for msg in entries:
                send_frames(self.router, [identity, *encode(msg)])
            send_frames(self.router, [identity, *encode(end)])
            self.stats.snapshots += 1
        except zmq.ZMQError as exc:   # the client went away (ROUTER_MANDATORY)
            log.info("chp server: snapshot for a vanished client dropped: %s", exc)

    def _send_bulk(self) -> None:
        """The next message of every bulk answer in progress."""
        for reply in list(self._bulk):
            try:
                send_frames(self.router, reply.next_message())
            except zmq.ZMQError as exc:   # the client went away (ROUTER_MANDATORY)
                log.info("chp server: bulk snapshot for a vanished client dropped: %s", exc)
                self._bulk.remove(reply)
                continue
            except ProtocolError as exc:  # an entry no peer could decode: never stored
                self._reject("bulk snapshot", exc)
                self._bulk.remove(reply)
                continue
            if reply.done:
                self._bulk.remove(reply)
                self.stats.snapshots += 1
                self.stats.bulk_snapshots += 1

    def _vote(self) -> bool:
        """A client request is a Binary Star vote; it may make us active."""
        if self.bstar is None:
            return True
        was_active = self.bstar.active
        accepted = self.bstar.on_client_request(time.monotonic())
        if self.bstar.active and not was_active:
            self._become_active("a client voted for us and the peer is silent")
        return accepted

    def _on_subscription(self) -> None:
        subscribed = []
        for _ in range(SUBSCRIPTION_DRAIN):
            try:
                frame = self.publisher.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self.guard.release_memory()
                break
            if frame.more or frame.bytes[:1] not in (b"\x00", b"\x01"):
                while frame.more:   # not a subscription: nothing we read
                    frame = self.publisher.recv(zmq.NOBLOCK, copy=False)
                self.stats.rejected += 1
            elif self.guard.admit(frame):
                subscribed.append(frame.bytes[:1] == b"\x01")
        self.stats.subscriptions = max(
            0, self.stats.subscriptions + 2 * sum(subscribed) - len(subscribed))
        if any(subscribed):
            self._send_hugz()

    def _on_peer_state(self) -> None:
        for status in self._drain(self.statesub, Channel.BSTAR, "bstar"):
            change = self.bstar.on_peer_state(status.state, time.monotonic())
            if change is BstarState.ACTIVE:
                self._become_active(f"the peer is {status.state.name}")
            elif change is BstarState.PASSIVE:
                self._become_passive()

    def _on_peer_update(self) -> None:
        replica = self.replica
        now, mono = time.time(), time.monotonic()
        for msg in self._drain(self._peer_sub, Channel.PUBLISHER, "peer publisher"):
            if isinstance(msg, Hugz):
                replica.on_hugz(msg)
            else:
                self.pending.published(msg, mono)
                replica.on_update(msg, now)
        self._persist()
        if replica.wants_snapshot:
            send_frames(self._peer_snapshot, encode(replica.snapshot_request()))
            self._sync_started = mono

    def _on_peer_snapshot(self) -> None:
        replica = self.replica
        for msg in self._drain(self._peer_snapshot, Channel.SNAPSHOT_REPLY, "peer snapshot"):
            synced = replica.on_snapshot(msg, time.time())
            if synced is not None:
                self.map = replica.map
                self.map.take_changes()   # all in the snapshot saved below
                if self.store is not None:
                    self.store.replace(self.map)
                self.pending.discard(self._applied)
                self.stats.resyncs += 1
                log.info("chp server: passive, synced with %s at sequence %d, %d keys",
                         self.config.peer, synced.sequence, len(self.map))

    # ----------------------------------------------------------------- state changes
    def _become_active(self, why: str) -> None:
        log.info("chp server: ACTIVE (%s)", why)
        self.stats.states.append("active")
        self._stop_following()
        now = time.time()
        published = []
        for update in self.pending.take(time.monotonic()):
            try:
                published.append(self.map.apply(update, now))
            except ProtocolError as exc:
                self._reject("pending", exc)
        if published:
            log.info("chp server: applied %d pending updates", len(published))
            self._publish(published)

    def _become_passive(self) -> None:
        log.info("chp server: PASSIVE, following %s", self.config.peer)
        self.stats.states.append("passive")
        self._start_following(time.monotonic())

    def _start_following(self, now: float) -> None:
        self._stop_following()
        self.replica = Mirror(b"", self.map)
        peer = self.config.peer
        self._peer_sub = self._socket(zmq.SUB, self._on_peer_update)
        self._peer_sub.rcvhwm = self.config.publisher_hwm
        self._peer_sub.subscribe(b"")
        self._peer_sub.connect(peer.publisher)
        self._peer_snapshot = self._socket(zmq.DEALER, self._on_peer_snapshot)
        self._peer_snapshot.connect(peer.snapshot)
        self._sync_started = now

    def _stop_following(self) -> None:
        for sock in (self._peer_sub, self._peer_snapshot):
            if sock is not None:
                self._poller.unregister(sock)
                self._handlers.pop(sock, None)
                self._sockets.remove(sock)
                sock.close(0)
        self._peer_sub = self._peer_snapshot = None
        if self.replica is not None:
            self.map = self.replica.map
            self.replica = None

    # ----------------------------------------------------------------- output
    def _publish(self, updates: list[Kvpub]) -> None:
        """Make the changes durable (with a data dir), then publish them."""
        self._persist()
        publisher = self.publisher
        for u in updates:
            send_kvmsg(publisher, u.key, pack_sequence(u.sequence), u.uuid, u.properties,
                       u.body)
        self.stats.published += len(updates)

    def _persist(self) -> None:
        if self.store is None:
            return
        changes = self.map.take_changes()
        if changes:
            self.store.append(changes)
            self.store.sync()
            self.store.maybe_snapshot(self.map)

    def _send_hugz(self) -> None:
        send_frames(self.publisher, encode(Hugz(self.map.sequence)))

    def _drain(self, sock: zmq.Socket, channel: Channel, where: str) -> Iterator[Message]:
        """The messages waiting on `sock`, decoded; malformed ones counted and dropped."""
        return drain_decoded(sock, channel, lambda exc: self._reject(where, exc),
                             limits=self.config.limits, limit=self.config.max_batch)

    def _reject(self, where: str, exc: ProtocolError) -> None:
        self.stats.rejected += 1
        self.stats.last_reject = f"{where}: {exc}"
        count = self.stats.rejected
        if count <= _LOG_FIRST_REJECTS or count % 1000 == 0:
            log.warning("chp server: dropped a malformed message on the %s (%s); %d so far",
                        where, exc, count)

    def _close(self) -> None:
        if self.guard is not None:
            self.guard.close()
        for sock in self._sockets:
            sock.close(0)
        self._sockets.clear()
        if self.store is not None:
            self.store.close()
        if self._own_ctx:
            self._ctx.term()


def _open_data_dir(config: ServerConfig) -> tuple[MapStore, CloneMap]:
    """The store in --data-dir and the map recovered from it."""
    store = None
    try:
        store = MapStore(config.data_dir, fsync=config.fsync,
                         snapshot_every=config.snapshot_every)
        return store, store.recover()
    except (StorageError, ProtocolError, OSError) as exc:
        if store is not None:
            store.close()
        raise DataDirError(f"--data-dir {config.data_dir}: {exc}") from exc


def run_server(config: ServerConfig) -> CloneServer:
    """Run a server in the calling thread until SIGINT/SIGTERM; returns it, stopped."""
    return serve(CloneServer(config))


def serve(server: CloneServer) -> CloneServer:
    """Run `server` (any kind) in the calling thread until SIGINT/SIGTERM."""
    import signal
    previous = {sig: signal.signal(sig, lambda *_: server.stop())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return server


__all__ = ["CloneServer", "DEFAULT_BSTAR_PORTS", "DEFAULT_PORT", "BstarRole", "ServerConfig",
           "ServerStats", "run_server", "serve"]
