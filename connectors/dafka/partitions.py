"""A store's records on disk: one `consensus.storage.SegmentedLog` per partition.

A partition is (subject, producer address); its records are numbered from 0 with no
gap (the store writer only appends the next sequence), so the log index *is* the
sequence. Each partition lives in its own directory ``p-<digest>`` beside a
``partition.json`` naming its subject and address (written and fsynced before the
first record, so a directory without it never held an ACKed record).

Group commit: the writer `stage`s the records of one drain, then `commit` appends them
with one write per partition and one fsync per touched partition, and only then makes
the new heads visible to readers (`head`, `read`, `heads`) and returns them for the
ACKs. This is the only module of the Dafka store that touches the storage engine.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from consensus.storage import SegmentedLog

META = "partition.json"
Key = tuple[str, str]   # (subject, producer address)


@dataclass
class _Partition:
    subject: str
    address: str
    log: SegmentedLog
    head: int | None                 # durable and visible to readers
    pending: int | None              # staged by the writer (>= head)
    staged: list[bytes] = field(default_factory=list)


class PartitionStore:
    """Every partition of one store directory. Writer calls (`pending_head`, `stage`,
    `stage_many`, `commit`) come from one thread; reader calls may come from another."""

    def __init__(self, directory: str | os.PathLike, fsync: str = "batch",
                 segment_bytes: int = 16 << 20, max_record_bytes: int = 64 << 20) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.max_record_bytes = max_record_bytes
        self._parts: dict[Key, _Partition] = {}
        self._touched: list[_Partition] = []
        self._create_lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        for child in sorted(self.directory.iterdir()):
            meta = child / META
            if child.name.startswith("p-") and meta.is_file():
                info = json.loads(meta.read_text())
                self._open(info["subject"], info["address"], child)

    def _open(self, subject: str, address: str, path: Path) -> _Partition:
        log = SegmentedLog.open(path, fsync=self.fsync, segment_bytes=self.segment_bytes,
                                first_index=0, max_record_bytes=self.max_record_bytes)
        head = log.last_index if log.last_index >= 0 else None
        part = _Partition(subject, address, log, head, head)
        self._parts[(subject, address)] = part
        return part

    def _create(self, subject: str, address: str) -> _Partition:
        digest = hashlib.sha256(f"{subject}\x00{address}".encode()).hexdigest()[:40]
        path = self.directory / f"p-{digest}"
        path.mkdir(exist_ok=True)
        tmp = path / (META + ".tmp")
        with open(tmp, "w") as out:
            json.dump({"subject": subject, "address": address}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path / META)
        for directory in (path, self.directory):
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        with self._create_lock:
            return self._open(subject, address, path)

    # ----------------------------------------------------------------- writer side
    def pending_head(self, key: Key) -> int | None:
        """The last sequence stored or staged for `key` (None: nothing)."""
        part = self._parts.get(key)
        return None if part is None else part.pending

    def stage(self, key: Key, sequence: int, content: bytes) -> None:
        """Stage the next record of `key` (see `stage_many`)."""
        self.stage_many(key, sequence, [content])

    def stage_many(self, key: Key, first: int, contents: list[bytes]) -> None:
        """Stage the next records of `key`, sequences from `first`, which must be
        pending_head + 1 (0 for a new partition)."""
        part = self._parts.get(key)
        if part is None:
            part = self._create(*key)
        expected = 0 if part.pending is None else part.pending + 1
        if first != expected:
            raise ValueError(f"partition {key}: staged sequence {first}, expected "
                             f"{expected}")
        if not contents:
            return
        if not part.staged:
            self._touched.append(part)
        part.staged.extend(contents)
        part.pending = first + len(contents) - 1

    def commit(self) -> dict[Key, int]:
        """Write and fsync everything staged; return the new head of each partition."""
        touched, self._touched = self._touched, []
        for part in touched:
            part.log.append_many(part.staged)
        for part in touched:
            part.log.sync()
        heads = {}
        for part in touched:
            part.staged = []
            part.head = part.pending
            heads[(part.subject, part.address)] = part.pending
        return heads

    # ----------------------------------------------------------------- reader side
    def head(self, key: Key) -> int | None:
        """The last durable sequence of `key`, None when the store has nothing."""
        part = self._parts.get(key)
        return None if part is None else part.head

    def read(self, key: Key, start: int, stop: int, max_bytes: int | None = None
             ) -> list[bytes]:
        """Durable records [start, stop) of `key`, clipped to what is stored."""
        part = self._parts.get(key)
        if part is None or part.head is None:
            return []
        stop = min(stop, part.head + 1)
        if start >= stop:
            return []
        return part.log.read(start, stop, max_bytes=max_bytes)

    def read_joined(self, key: Key, start: int, stop: int, max_bytes: int | None = None
                    ) -> tuple[array, bytes]:
        """Like `read`, packed for a bulk answer: (lengths as array('I'), the records
        concatenated); records checked as by `read`, no object per record."""
        part = self._parts.get(key)
        if part is None or part.head is None:
            return array("I"), b""
        stop = min(stop, part.head + 1)
        if start >= stop:
            return array("I"), b""
        return part.log.read_joined(start, stop, max_bytes=max_bytes)

    def heads(self, subject_prefix: str = "") -> list[tuple[str, str, int]]:
        """(subject, address, head) of every non-empty partition whose subject starts
        with `subject_prefix` (how the C store answers GET-HEADS)."""
        return sorted((p.subject, p.address, p.head) for p in list(self._parts.values())
                      if p.head is not None and p.subject.startswith(subject_prefix))

    def close(self) -> None:
        for part in list(self._parts.values()):
            part.log.close()


__all__ = ["Key", "PartitionStore"]
