"""A simulated server: one pure RaftNode, its SimDisk and its KvMachine, driven the way
the runtime drives a node (persist, send, apply, advance), with the fsync split off so
that a crash can land between writing a Ready and making it durable."""
from __future__ import annotations

import random
from typing import Protocol

from consensus.raft import (Configuration, Entry, EntryType, Message, RaftNode, RaftOptions,
                            ReadState, Ready)

from .disk import SimDisk
from .kv import KvMachine


class HostEvents(Protocol):
    """What the cluster wants to hear from a host."""

    def send(self, msg: Message) -> None: ...
    def written(self, host: "SimHost", rd: Ready) -> None: ...
    def applied(self, host: "SimHost", entries: list[Entry], restored_to: int | None) -> None: ...
    def read_states(self, host: "SimHost", states: list[ReadState]) -> None: ...


class SimHost:
    def __init__(self, node_id: int, options: RaftOptions, bootstrap: Configuration | None,
                 *, snapshot_every: int, keep_snapshots: int, compact_margin: int) -> None:
        self.id = node_id
        self.options = options
        self.bootstrap = bootstrap
        self.snapshot_every = snapshot_every
        self.keep_snapshots = keep_snapshots
        self.compact_margin = compact_margin
        self.disk = SimDisk()
        self.up = False
        self.incarnation = 0
        self.node: RaftNode = None  # type: ignore[assignment]   # set by start()
        self.kv = KvMachine()
        self._pending: Ready | None = None
        self._snapshot_index = 0

    def start(self) -> None:
        """Boot (or reboot) from what the disk holds."""
        snapshot = self.disk.snapshot()
        self.kv = KvMachine()
        if snapshot is not None:
            self.kv.restore(snapshot.data)
        self._snapshot_index = snapshot.index if snapshot else 0
        self.node = RaftNode(self.id, self.disk, self.options, configuration=self.bootstrap,
                             applied=self._snapshot_index)
        self.incarnation += 1
        self._pending = None
        self.up = True

    def crash(self, rng: random.Random) -> str:
        self.up = False
        self._pending = None
        return self.disk.crash(rng)

    def reconfigure(self, options: RaftOptions, bootstrap: Configuration | None) -> None:
        """New settings for the next start (the disk stays)."""
        self.options = options
        self.bootstrap = bootstrap

    def query_snapshot(self, index: int, key: str):
        return self.node.query_snapshot(index, key, self.disk, KvMachine)

    # -- the Ready pipeline ----------------------------------------------------------------
    def process(self, rng: random.Random, events: HostEvents, sync_probability: float) -> bool:
        """Advance the pipeline by one or two phases; True when something happened."""
        if self._pending is not None:
            if rng.random() >= sync_probability:
                return False
            self._finish(events)
            return True
        if not self.node.has_ready():
            return False
        self._write(events)
        if rng.random() < sync_probability:
            self._finish(events)
        return True

    def _write(self, events: HostEvents) -> None:
        """Phase one: take a Ready, write it (not yet synced), send what may go now."""
        rd = self.node.ready()
        events.written(self, rd)
        self.disk.write(rd)
        for msg in rd.send_now:
            events.send(msg)
        self._pending = rd

    def _finish(self, events: HostEvents) -> None:
        rd, self._pending = self._pending, None
        assert rd is not None
        self.disk.sync()
        for msg in rd.send_after_persist:
            events.send(msg)
        restored_to = None
        if rd.snapshot is not None:
            self.kv.restore(rd.snapshot.data)
            self._snapshot_index = restored_to = rd.snapshot.index
        for entry in rd.committed_entries:
            if entry.type == EntryType.APPLICATION:
                self.kv.apply(entry)
        events.applied(self, rd.committed_entries, restored_to)
        if rd.read_states:
            events.read_states(self, rd.read_states)
        self.node.advance(rd)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        applied = self.node.log.applied
        if applied - self._snapshot_index < self.snapshot_every or self.node.installing_snapshot:
            return
        snapshot = self.node.snapshot_at(applied, self.kv.snapshot())
        self.disk.save_snapshot(snapshot)
        self._snapshot_index = applied
        # As the runtime: keep what the ledger still needs, then retention.py's rule.
        self.disk.compact_to(self.kv.needed_from(applied + 1 - self.compact_margin),
                             self.keep_snapshots)

    @property
    def settled(self) -> bool:
        """No Ready half-handled: the disk and the machine describe the same point."""
        return self.up and self._pending is None

