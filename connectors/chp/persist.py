"""A clone server's map on disk (`--data-dir`), on the project's storage engine.

The reference servers keep their map in memory only and lose it when they die. Here
every change the map makes (an `Entry`; an empty body is a delete) is appended to a
`consensus.storage.SegmentedLog` and made durable *before* the server publishes it, so
no client ever sees a sequence the server could forget. Every `snapshot_every` records
the whole map is written to a `SnapshotStore` and the log segments it covers are
dropped. Recovery loads the newest snapshot and replays the log records after it.

Layout of the directory: ``log/`` (segments), ``snapshots/``. A log record is the
msgpack list ``[key, sequence, uuid, properties, body]``; a snapshot's data is
`CloneMap.dump()`. This module is the only one in `connectors.chp` that touches the
storage engine.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import msgpack

from consensus.storage import FsyncPolicy, SegmentedLog, SnapshotStore
from consensus.wire.errors import InvalidField

from .kvmap import CloneMap, Entry
from .proto import PROTOCOL

SNAPSHOT_EVERY = 100_000   # log records between two map snapshots
SNAPSHOTS_KEPT = 2
_REPLAY_CHUNK = 4 << 20    # bytes of log read at a time during recovery


class MapStore:
    """The durable state of one server's map."""

    def __init__(self, directory: str | os.PathLike, *, fsync: FsyncPolicy | str = "batch",
                 snapshot_every: int = SNAPSHOT_EVERY) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be at least 1, got {snapshot_every}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.snapshot_every = snapshot_every
        self._snapshots = SnapshotStore(str(self.directory / "snapshots"))
        self._log = SegmentedLog.open(str(self.directory / "log"), fsync=fsync)
        latest = self._snapshots.latest()
        self._snapshot_index = latest.index if latest else 0

    def recover(self) -> CloneMap:
        """The map as it was when the last durable change was made."""
        latest = self._snapshots.latest()
        clone = CloneMap.load(latest.data) if latest else CloneMap()
        start = max(self._log.first_index, self._snapshot_index + 1)
        stop = self._log.last_index + 1
        while start < stop:
            records = self._log.read(start, stop, max_bytes=_REPLAY_CHUNK)
            for offset, payload in enumerate(records):
                clone.replay(_entry(payload, start + offset))
            start += len(records)
        clone.track_changes = True
        return clone

    def append(self, changes: Iterable[Entry]) -> None:
        """Log changes (durable after `sync`, or at once with fsync=always)."""
        payloads = [msgpack.packb(change.to_record()) for change in changes]
        if payloads:
            self._log.append_many(payloads)

    def sync(self) -> None:
        """Everything appended so far is on disk when this returns."""
        self._log.sync()

    def maybe_snapshot(self, clone: CloneMap) -> bool:
        """Snapshot the map if enough has been logged since the last snapshot; the map
        must reflect exactly the records appended so far."""
        if self._log.last_index - self._snapshot_index < self.snapshot_every:
            return False
        self._save(clone, self._log.last_index)
        self._log.compact_before(self._snapshot_index + 1)
        return True

    def replace(self, clone: CloneMap) -> None:
        """The map was replaced wholesale (a passive server took a snapshot from the
        active): persist it and drop the log, which describes the old map."""
        index = self._log.last_index + 1
        self._save(clone, index)
        self._log.reset(index + 1)

    def _save(self, clone: CloneMap, index: int) -> None:
        self._snapshots.save(index, 0, clone.dump(), {"sequence": clone.sequence})
        self._snapshots.prune(SNAPSHOTS_KEPT)
        self._snapshot_index = index

    def close(self) -> None:
        self._log.close()


def _entry(payload: bytes, index: int) -> Entry:
    try:
        return Entry.from_record(msgpack.unpackb(payload))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise InvalidField("log record", f"record {index} is not a CHP map change: {exc}",
                           protocol=PROTOCOL) from None


__all__ = ["MapStore", "SNAPSHOT_EVERY"]
