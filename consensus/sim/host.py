"""One group's replica on a simulated server: a pure RaftNode, its volume of the node's
shared disk (disk.NodeDisk) and its KvMachine, driven by the runtime's own Ready driver
(consensus.raft.driver) - the host is its disk, network, application and clock - with
the fsync's end left to chance, so that a crash can land between writing a Ready and
making it durable. The server (server.py) crashes and restarts all its replicas at once."""
from __future__ import annotations

import random
from typing import Callable, Protocol

from consensus.raft import (Configuration, Entry, EntryType, Message, RaftNode, RaftOptions,
                            ReadState, Ready, ReadyDriver, Snapshot)
from consensus.raft.storage import HardState

from .disk import NodeDisk
from .kv import KvMachine


class HostEvents(Protocol):
    """What the cluster wants to hear from a host."""

    def send(self, msg: Message) -> None: ...
    def written(self, host: "SimHost", rd: Ready) -> None: ...
    def applied(self, host: "SimHost", entries: list[Entry], restored_to: int | None) -> None: ...
    def read_states(self, host: "SimHost", states: list[ReadState]) -> None: ...


class SimHost:
    def __init__(self, node_id: int, group: int, disk: NodeDisk, options: RaftOptions,
                 bootstrap: Configuration | None, *, snapshot_every: int, keep_snapshots: int,
                 compact_margin: int) -> None:
        self.id = node_id
        self.group = group
        self.options = options
        self.bootstrap = bootstrap
        self.snapshot_every = snapshot_every
        self.keep_snapshots = keep_snapshots
        self.compact_margin = compact_margin
        self.shared = disk
        self.disk = disk.volumes[group]
        self._sync_mark = 0             # the disk's fsync count when ours was asked for
        self.up = False
        self.incarnation = 0
        self.node: RaftNode = None  # type: ignore[assignment]   # set by start()
        self.driver: ReadyDriver = None     # type: ignore[assignment]   # set by start()
        self.kv = KvMachine()
        self._snapshot_index = 0
        # set for each process() call: who hears, and the odds that an fsync ends now
        self._events: HostEvents | None = None
        self._rng = random.Random(0)
        self._sync_probability = 1.0
        # quiescing (quiet.py), as the runtime's: no ticks from `quiesced_at` (a step) on
        self.quiesced_at: int | None = None
        self.owed = 0                   #: ticks missed while quiesced, for the next tick
        self.notice = None              #: its leader's QuiesceNotice, judged after the step
        self.waker: Callable[["SimHost"], None] | None = None   #: set when the run quiesces

    def start(self) -> None:
        """Boot (or reboot) from what the disk holds."""
        snapshot = self.disk.snapshot()
        self.kv = KvMachine()
        if snapshot is not None:
            self.kv.restore(snapshot.data)
        self._snapshot_index = snapshot.index if snapshot else 0
        self.node = RaftNode(self.id, self.disk, self.options, configuration=self.bootstrap,
                             applied=self._snapshot_index)
        self.driver = ReadyDriver(self.node, self, self, self, self)
        self.quiesced_at, self.owed, self.notice = None, 0, None
        self.incarnation += 1
        self.up = True

    def stop(self) -> None:
        """The replica stops (its server crashed, or the group removed it); what the disk
        keeps is the server's business."""
        self.up = False
        self.driver.abandon()

    def reconfigure(self, options: RaftOptions, bootstrap: Configuration | None) -> None:
        """New settings for the next start (the disk stays)."""
        self.options = options
        self.bootstrap = bootstrap

    def query_snapshot(self, index: int, key: str):
        return self.node.query_snapshot(index, key, self.disk, KvMachine)

    def tick(self) -> None:
        self.driver.tick()

    def awake(self) -> RaftNode:
        """The core, for a client's or the nemesis's call: a quiesced replica wakes first
        (and ticks the time it missed), as the runtime wakes a group before its turn."""
        if self.quiesced_at is not None and self.waker is not None:
            self.waker(self)
        return self.node

    # -- the Ready pipeline ----------------------------------------------------------------
    def process(self, rng: random.Random, events: HostEvents, sync_probability: float) -> bool:
        """Advance the pipeline by one or two phases; True when something happened."""
        self._rng, self._events, self._sync_probability = rng, events, sync_probability
        driver = self.driver
        if driver.syncing:
            return driver.resume()
        if not self.node.has_ready():
            return False
        driver.handle_one()
        if driver.syncing:
            driver.resume()
        return True

    @property
    def settled(self) -> bool:
        """No Ready half-handled: the disk and the machine describe the same point."""
        return self.up and not self.driver.syncing

    # -- the driver's Clock: one tick per call (none while quiesced; the missed ones after) ----
    def due(self) -> int:
        if self.quiesced_at is not None:
            return 0
        owed, self.owed = self.owed, 0
        return 1 + owed

    # -- the driver's Disk -----------------------------------------------------------------
    def write(self, rd: Ready) -> bool:
        return self.shared.write(self.group, rd)

    def start_sync(self) -> bool:
        self._sync_mark = self.shared.syncs
        return True             # the fsync ends when sync_done() draws it

    def sync_done(self) -> bool:
        if self.shared.syncs > self._sync_mark:
            return True         # a fsync of the disk ran after our write: it is durable
        if self._rng.random() >= self._sync_probability:
            return False
        self.shared.sync()
        return True

    def save_hard_state(self, state: HardState, *, urgent: bool) -> None:
        self.disk.save_hard_state(state, urgent=urgent)

    # -- the driver's Network ----------------------------------------------------------------
    def send_now(self, msgs: list[Message]) -> None:
        for msg in msgs:
            self._heard.send(msg)

    send_persisted = send_now

    def flush(self) -> None:
        pass

    # -- the driver's Application ------------------------------------------------------------
    def on_ready(self, rd: Ready) -> None:
        self._heard.written(self, rd)

    def restore(self, snapshot: Snapshot) -> None:
        self.kv.restore(snapshot.data)
        self._snapshot_index = snapshot.index
        self._heard.applied(self, [], snapshot.index)

    def on_truncated(self, index: int) -> None:
        pass

    def apply(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.type == EntryType.APPLICATION:
                self.kv.apply(entry)
        self._heard.applied(self, entries, None)

    def on_read_states(self, states: list[ReadState]) -> None:
        self._heard.read_states(self, states)

    def after_advance(self) -> None:
        applied = self.node.applied_index
        if applied - self._snapshot_index < self.snapshot_every or self.node.installing_snapshot:
            return
        snapshot = self.node.snapshot_at(applied, self.kv.snapshot())
        self.disk.save_snapshot(snapshot)
        self._snapshot_index = applied
        # As the runtime: keep what the ledger still needs, then retention.py's rule.
        self.disk.compact_to(self.kv.needed_from(applied + 1 - self.compact_margin),
                             self.keep_snapshots)

    @property
    def _heard(self) -> HostEvents:
        assert self._events is not None, "process() sets who hears"
        return self._events
