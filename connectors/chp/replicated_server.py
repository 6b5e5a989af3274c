"""Replicated mode: CHP servers whose map is the state machine of a garlicfarm Raft log.

    garlicfarm chp server --port P --replicated HOST:PORT,... [--map chp] [--data-dir D]

Every server of a replicated map accepts KVSETs, answers snapshots and publishes KVPUBs,
all in one sequence numbering, so a client can use any of them and fail over between
them (with `CloneClient` given all of them) without a gap or a repeat.

**Shape.** A replicated server is an ordinary CHP server process (the same sockets,
codec, limits and malformed-frame handling as `server.CloneServer`, which it extends)
and a *client* of a farm (`FarmClient`, `farmlink.FarmLink`): it proposes what it
receives as journal records and applies the committed log to a `map_machine.
ReplicatedMap`. Run one next to each farm node and list that node first. We chose this
over loading the map into the nodes with ``--state-machine`` because:

* the farm stamps its leader's clock into its own commands only, and applies request
  ids only to them: journal entries get both (the ttl clock and retries that apply
  once) with no change to the runtime;
* the nodes stay free of ZeroMQ and of CHP's hot path (a node's loop serves Raft; a
  slow subscriber must not delay elections), and CHP servers can be added, restarted
  or moved without touching the farm's membership;
* a CHP server that dies is replaced by starting another: the log is the truth, and
  a server is only a view of it (with ``--data-dir``, a checkpoint saves the replay).

**Flow.** A KVSET on the collector becomes a record queued for the proposer (KVSETs
without a UUID get a server-made `origin` so a retried round applies once). The
follower hands over committed entries in order; each is applied to the map and its
KVPUBs are published at once, so every server publishes the same KVPUBs in the same
order. The sequence is assigned at apply time, the ttl clock is the leader's stamp
and expiry is evaluated at apply time (`map_machine` says why).

**Consistency of what a client sees.**

* A snapshot (ICANHAZ) is answered only after a *barrier*: the leader's
  ReadIndex-confirmed applied index, reached by this server. Every KVPUB any server
  published came from an entry committed before that, so the answer is never older
  than what the client saw elsewhere: no sequence goes back after a failover.
* A client that resumes (`resume`: it was in sync with this map) gets the updates after
  its sequence, one by one, so its change stream is exactly the committed one.
* HUGZ are sent (with the current sequence and the map's identity) only once the server
  has caught up with the farm at its start and while the farm has answered within
  `farm_timeout`: a server cut off from its farm goes silent and its clients move on.

Checkpoints (``--data-dir``): the map, its dedup memory and the log index are saved
every `checkpoint_every` entries and at a clean stop (fsync, atomic rename); a restart
replays the log from there. Without one a server replays the log from its start, which
the farm keeps (`--retain-entries` below its latest snapshot, 100,000 by default); when
the farm has compacted past what the server has, ``--bootstrap`` names other servers
of the map to take the whole state from (`bootstrap`).
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import zmq

from consensus.client import ConfigError as FarmConfigError
from consensus.client import FarmClient, FarmError
from consensus.storage import SnapshotStore, StorageError
from consensus.storage.files import DirectoryLock
from consensus.wire.errors import ProtocolError

from . import bootstrap, resume
from .address import parse_address
from .errors import ChpConfigError, DataDirError
from .farmlink import Barrier, Entries, FarmLink
from .kvmap import check_update
from .map_machine import (DEDUP_WINDOW, HISTORY, ReplicatedMap, encode_kvset,
                          encode_tick)
from .proto import Channel, Icanhaz, decode, encode
from .server import CloneServer, ServerConfig
from .zmqio import drain, send_frames

log = logging.getLogger("garlicfarm.chp.replicated")

CHECKPOINT_EVERY = 10_000   # log entries between two checkpoints
CHECKPOINTS_KEPT = 2
TICK_RETRY = 0.25           # seconds before proposing another TICK for the same expiry
_ORIGIN = struct.Struct(">Q")


@dataclass
class FarmOptions:
    """How a replicated server reaches its farm and which map it serves."""
    endpoints: str | Sequence[str]
    cluster: str = "farm"
    username: str | None = None
    password: str | None = None
    map_name: str = "chp"
    history: int = HISTORY
    dedup_window: int = DEDUP_WINDOW   # decides what applies: the same on every server
    checkpoint_every: int = CHECKPOINT_EVERY
    farm_timeout: float = 3.0
    tls_ca: str | None = None      # TLS to the farm, as its nodes' --tls-* require
    tls_cert: str | None = None
    tls_key: str | None = None
    bootstrap: Sequence[str] = ()  # other servers of the map, to start from their state

    @property
    def identity(self) -> bytes:
        """What HUGZ and KTHXBAI announce: servers with the same one share sequences."""
        return f"{self.cluster}/{self.map_name}".encode()

    def validate(self) -> "FarmOptions":
        if not self.map_name or len(self.map_name) > 64 or not self.map_name.isprintable() \
                or "/" in self.map_name:
            raise ChpConfigError(f"--map: {self.map_name!r} must be 1..64 printable characters "
                              "without '/'")
        for option, value, least in (("--history", self.history, 0),
                                     ("dedup_window", self.dedup_window, 1),
                                     ("--checkpoint-every", self.checkpoint_every, 1)):
            if not isinstance(value, int) or value < least:
                raise ChpConfigError(f"{option}: must be an integer >= {least}, got {value!r}")
        if not isinstance(self.farm_timeout, (int, float)) or \
                not 0 < self.farm_timeout < math.inf:
            raise ChpConfigError(f"--farm-timeout: must be a positive number of seconds, got "
                              f"{self.farm_timeout!r}")
        self.bootstrap = [parse_address(p, "--bootstrap") if isinstance(p, str) else p
                          for p in self.bootstrap]
        self.client().close()   # the endpoints and credentials are checked here
        return self

    def client(self) -> FarmClient:
        """A new `FarmClient` (each farm link thread has its own)."""
        try:
            return FarmClient(self.endpoints, cluster=self.cluster, username=self.username,
                              password=self.password, tls_ca=self.tls_ca,
                              tls_cert=self.tls_cert, tls_key=self.tls_key,
                              timeout=self.farm_timeout)
        except FarmConfigError as exc:
            option = {"username": "--farm-user", "endpoints": "--replicated"}.get(
                exc.option, f"--farm-{exc.option.lstrip('-').replace('_', '-')}")
            raise ChpConfigError(f"{option}: {str(exc).partition(': ')[2] or exc}") from None


class ReplicatedServer(CloneServer):
    """A CHP server of a replicated map. `config` is the socket side (port, bind,
    hugz_interval, limits, data_dir for checkpoints); no Binary Star role."""

    def __init__(self, config: ServerConfig, farm: FarmOptions, *,
                 context: zmq.Context | None = None) -> None:
        if config.role is not None:
            raise ChpConfigError("--replicated: a replicated server has no Binary Star peer; "
                              "drop --primary/--backup (every replicated server is active)")
        self.farm = farm.validate()
        self.link: FarmLink | None = None
        self._checkpoints: SnapshotStore | None = None
        self._checkpointed = 0
        self._dir_lock: DirectoryLock | None = None
        self._notify_lock = threading.Lock()
        self._notify_closed = False
        super().__init__(dataclasses.replace(config, data_dir=None), context=context)
        try:
            self.replicated = ReplicatedMap(farm.map_name, farm.identity,
                                            dedup_window=farm.dedup_window,
                                            history=farm.history, limits=config.limits)
            if config.data_dir:
                self._open_checkpoints(config.data_dir)
            self.map = self.replicated.map
            self._checkpointed = self.replicated.applied_index
            address = f"inproc://chp-farm-{id(self):x}"
            self._woken = self._socket(zmq.PAIR, self._on_farm)
            self._woken.bind(address)
            self._wake = self._socket(zmq.PAIR)
            self._wake.connect(address)
            self.link = FarmLink(farm.client, self.replicated.applied_index + 1,
                                 self._notify, poll_interval=min(0.25, farm.farm_timeout / 4))
        except BaseException:
            self._close()
            raise
        self._origin = os.urandom(8)
        self._origins = itertools.count(1)
        self._ready = False
        self._tickets = itertools.count(1)
        self._waiting: list[tuple[int, bytes, Icanhaz, float]] = []
        self._tick_after = 0.0

    def _open_checkpoints(self, data_dir: str) -> None:
        try:
            os.makedirs(data_dir, exist_ok=True)
            self._dir_lock = DirectoryLock(data_dir)
            checkpoints = SnapshotStore(os.path.join(data_dir, "checkpoints"))
            latest = checkpoints.latest()
            if latest is not None:
                self.replicated.restore(latest.data)
                log.info("chp server: checkpoint at log index %d, sequence %d, %d keys",
                         latest.index, self.replicated.sequence, len(self.replicated.map))
            self._checkpoints = checkpoints   # only a state read whole is saved again
        except StorageError as exc:
            raise DataDirError(f"--data-dir {data_dir}: {exc} (is another server using "
                               "it?)") from None
        except (ProtocolError, OSError) as exc:
            raise DataDirError(f"--data-dir {data_dir}: {exc}") from None

    # ----------------------------------------------------------------- state
    @property
    def state(self) -> str:
        return "replicated"

    @property
    def serving(self) -> bool:
        """Caught up with the farm at start, and heard from it within farm_timeout."""
        return self._ready and \
            time.monotonic() - self.link.last_contact <= self.farm.farm_timeout

    def run(self) -> None:
        log.info("chp server: replicated map %s from log index %d, farm %s",
                 self.farm.identity.decode(), self.replicated.applied_index + 1,
                 self.farm.endpoints)
        self._bootstrap_if_compacted()
        self.link.start()
        self.link.request_barrier(next(self._tickets))
        super().run()

    def _bootstrap_if_compacted(self) -> None:
        """When the farm no longer has the entries after our state, start from another
        server's (`bootstrap`); without --bootstrap the follower reports the problem."""
        if not self.farm.bootstrap:
            return
        try:
            with self.farm.client() as client:
                first = client.log_bounds()[0]
        except FarmError as exc:
            log.warning("chp server: cannot see the farm's log bounds (%s); not "
                        "bootstrapping", exc)
            return
        if first <= self.replicated.applied_index + 1:
            return
        log.info("chp server: the farm's log starts at %d, after our index %d: fetching a "
                 "checkpoint from %s", first, self.replicated.applied_index,
                 ", ".join(map(str, self.farm.bootstrap)))
        found = bootstrap.fetch(self._ctx, self.farm.bootstrap, self.farm.identity,
                                timeout=self.farm.farm_timeout, limits=self.config.limits)
        if found is None:
            log.error("chp server: no --bootstrap server gave a checkpoint")
            return
        index, dump = found
        self.replicated.restore(dump)
        self.link.next_index = self.replicated.applied_index + 1
        log.info("chp server: checkpoint at log index %d from a bootstrap server, "
                 "sequence %d, %d keys", index, self.replicated.sequence,
                 len(self.replicated.map))
        self._checkpoint()

    def _notify(self) -> None:
        """Wake the loop (called by the farm link's threads)."""
        with self._notify_lock:
            if not self._notify_closed:
                try:
                    self._wake.send(b"", zmq.NOBLOCK)
                except zmq.Again:
                    pass   # a wake-up is waiting already

    # ----------------------------------------------------------------- loop
    def _next_deadline(self, now: float) -> float:
        deadline = self._hugz.deadline
        expiry = self.replicated.next_expiry() if self._ready else None
        if expiry is not None:
            deadline = min(deadline, max(now + expiry - time.time(), self._tick_after))
        if self._waiting:
            deadline = min(deadline, self._waiting[0][3])
        return deadline

    def _on_timers(self) -> None:
        now = time.monotonic()
        if self._hugz.due(now):
            self._send_hugz()
        expiry = self.replicated.next_expiry() if self._ready else None
        if expiry is not None and time.time() >= expiry and now >= self._tick_after:
            self.link.submit(encode_tick(self.farm.map_name))   # time passes in the log
            self._tick_after = now + TICK_RETRY
        if self._waiting and self._waiting[0][3] <= now:
            dropped = [w for w in self._waiting if w[3] <= now]
            self._waiting = [w for w in self._waiting if w[3] > now]
            log.warning("chp server: dropped %d snapshot requests: the farm did not confirm "
                        "its state within %.1fs", len(dropped), 2 * self.farm.farm_timeout)

    def _send_hugz(self) -> None:
        if self.serving:
            send_frames(self.publisher, encode(self.replicated.hugz()))

    # ----------------------------------------------------------------- handlers
    def _on_collector(self) -> None:
        name = self.farm.map_name
        for update in self._drain(self.collector, Channel.COLLECTOR, "collector"):
            try:
                check_update(update)   # what no map would apply never enters the log
            except ProtocolError as exc:
                self._reject("collector", exc)
                continue
            origin = b"" if update.uuid else self._origin + _ORIGIN.pack(next(self._origins))
            if not self.link.submit(encode_kvset(name, update, origin)):
                self.stats.rejected += 1
                self.stats.last_reject = "collector: the farm is not taking records fast " \
                                         "enough; KVSET refused"
                if self.stats.rejected % 1000 == 1:
                    log.warning("chp server: %d KVSETs wait for the farm; refusing more",
                                self.link.queued)

    def _on_snapshot_request(self) -> None:
        deadline = time.monotonic() + 2 * self.farm.farm_timeout
        for frames in drain(self.router, self.config.max_batch):
            try:
                request = decode(frames[1:], Channel.SNAPSHOT_REQUEST, self.config.limits)
            except ProtocolError as exc:
                self._reject("snapshot", exc)
                continue
            ticket = next(self._tickets)
            self._waiting.append((ticket, frames[0], request, deadline))
            self.link.request_barrier(ticket)

    def _on_farm(self) -> None:
        for _ in drain(self._woken):
            pass
        for item in self.link.take():
            if isinstance(item, Entries):
                self._apply(item)
            elif isinstance(item, Barrier):
                self._barrier_reached(item.ticket)
            else:
                self.exit_reason = item.message
                log.error("chp server: %s", item.message)
                self.stop()

    def _apply(self, entries: Entries) -> None:
        replicated = self.replicated
        rejected = replicated.rejected
        published = []
        for record in entries.records:
            published += replicated.apply_entry(record.index, record.timestamp_ms,
                                                record.records or ())
        if replicated.rejected != rejected:
            self.stats.rejected += replicated.rejected - rejected
            log.warning("chp server: skipped %d malformed records or refused KVSETs in the "
                        "log (last: %s)", replicated.rejected - rejected,
                        replicated.last_reject)
        if published:
            self._publish(published)
        if replicated.applied_index - self._checkpointed >= self.farm.checkpoint_every:
            self._checkpoint()

    def _barrier_reached(self, ticket: int) -> None:
        if not self._ready:
            self._ready = True
            log.info("chp server: caught up with the farm at log index %d, sequence %d, "
                     "%d keys; serving", self.replicated.applied_index,
                     self.replicated.sequence, len(self.replicated.map))
            self._send_hugz()
        answered = [w for w in self._waiting if w[0] <= ticket]
        self._waiting = [w for w in self._waiting if w[0] > ticket]
        for _, identity, request, _ in answered:
            reply = self._reply_to(request)
            since = resume.resumed_from(reply[-1].properties)
            if since is not None:
                log.info("chp server: resumed a client from sequence %d with %d updates",
                         since, len(reply) - 1)
            self._answer(identity, reply[:-1], reply[-1])

    def _reply_to(self, request: Icanhaz) -> list:
        """A snapshot, a resume, or (to a server bootstrapping) our whole state."""
        replicated = self.replicated
        if bootstrap.wanted(request) == replicated.identity:
            dump = replicated.dump()
            log.info("chp server: sent our state at log index %d (%d bytes) to a server "
                     "bootstrapping", replicated.applied_index, len(dump))
            return bootstrap.reply(dump, replicated.applied_index, replicated.sequence,
                                   replicated.identity)
        return replicated.snapshot_reply(request.subtree, request.properties)

    # ----------------------------------------------------------------- durability
    def _checkpoint(self) -> None:
        if self._checkpoints is None or self.replicated.applied_index == self._checkpointed:
            return
        replicated = self.replicated
        self._checkpoints.save(replicated.applied_index, 0, replicated.dump(),
                               {"sequence": replicated.sequence, "map": replicated.name})
        self._checkpoints.prune(CHECKPOINTS_KEPT)
        self._checkpointed = replicated.applied_index

    def _close(self) -> None:
        if self.link is not None:
            self.link.stop()
        with self._notify_lock:
            self._notify_closed = True
        try:
            if self._checkpoints is not None:
                self._checkpoint()
        except (StorageError, OSError) as exc:
            log.error("chp server: could not save a checkpoint at stop: %s", exc)
        finally:
            if self._dir_lock is not None:
                self._dir_lock.release()
            super()._close()


def run_replicated(config: ServerConfig, farm: FarmOptions) -> ReplicatedServer:
    """Run a replicated server in the calling thread until SIGINT/SIGTERM."""
    from .server import serve
    return serve(ReplicatedServer(config, farm))


__all__ = ["CHECKPOINT_EVERY", "FarmOptions", "ReplicatedServer", "run_replicated"]
