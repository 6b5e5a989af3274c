"""The fsyncs of a node's groups, off the event loop, in rounds: one flush per disk for a
round of many groups.

`SyncThread` runs `storage.sync()` (the fsync of group commit) for every group of the
node: `start(storage)` asks for one, `done(storage)` says whether it finished, `wake` is
called when a round ends. The storages asked for while a round runs are synced together
in the next one, so a loop turn costs one round on one thread, however many groups
there are. A new term or vote given with the request is saved in the round too, after
the log's flush (the order the Ready driver keeps), so that elections in many groups at
once do not fsync their hard states one by one on the loop thread.

How a round flushes. A few groups: each log is fsynced, each hard state saved with its
two fsyncs (temp file, directory). Many groups on one filesystem (at least
`shared_from` in the round, `--shared-fsync-groups`): one syncfs for all their logs and
the temp files of their hard states, the renames, then one more syncfs for the renames
- two flushes of the disk instead of up to three per group. Electing 1,000 groups per
node asked ~2,000 fsyncs a vote round and did not finish in 400 s (benchmarks/RESULTS.md,
"Idle cost of many groups"). A node's groups share one data directory, so one disk.

A failed flush leaves the logs of the round unusable (what reached the disk is
unknown): `done()` raises it, and the node stops.
"""
from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from typing import TYPE_CHECKING, Callable

from consensus.raft import HardState
from consensus.storage.filesystem_flush import FilesystemFlush, filesystem_flush_available

if TYPE_CHECKING:
    from consensus.runtime.disk_storage import DiskObserver, DiskStorage

#: the default of `--shared-fsync-groups`: below it, per-file fsyncs cost less than a
#: syncfs that may also write back other programs' files (measured in RESULTS.md)
SHARED_FSYNC_GROUPS = 8

Request = tuple["DiskStorage", HardState | None]


class SyncThread:
    """The node's fsync thread (module docstring)."""

    def __init__(self, wake: Callable[[], None], observer: "DiskObserver", *,
                 shared_from: int = SHARED_FSYNC_GROUPS) -> None:
        self.wake, self.observer = wake, observer
        #: rounds of at least this many storages share syncfs flushes (0: never)
        self.shared_from = shared_from if filesystem_flush_available() else 0
        self._flushes: dict[int, FilesystemFlush] = {}    # by device
        self._by_directory: dict[str, FilesystemFlush] = {}
        # asked for, not started: storage, and the hard state to save after its fsync
        self._wanted: dict[int, Request] = {}
        self._pending: set[int] = set()             # asked for, not finished
        self._error: BaseException | None = None
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fsync")
        self._thread.start()

    def start(self, storage: "DiskStorage", hard: HardState | None = None) -> None:
        with self._cond:
            self._wanted[id(storage)] = (storage, hard)
            self._pending.add(id(storage))
            self._cond.notify()

    def done(self, storage: "DiskStorage") -> bool:
        if self._error is not None:
            raise self._error
        with self._cond:
            return id(storage) not in self._pending

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._closing:
                    self._cond.wait()
                if not self._wanted:
                    break
                batch, self._wanted = self._wanted, {}
            try:
                self._round(list(batch.values()))
            except BaseException as exc:    # handed to the loop thread
                self._error = exc
            with self._cond:
                self._pending -= {key for key in batch if key not in self._wanted}
            self.wake()
        for flush in self._flushes.values():
            flush.close()

    def _round(self, requests: list[Request]) -> None:
        if self.shared_from and len(requests) >= self.shared_from:
            by_device: dict[int, list[Request]] = {}
            for request in requests:
                by_device.setdefault(self._flush_for(request[0]).device, []).append(request)
            for device, share in by_device.items():
                if len(share) >= self.shared_from:
                    self._shared_round(self._flushes[device], share)
                else:
                    self._own_round(share)
        else:
            self._own_round(requests)

    def _flush_for(self, storage: "DiskStorage") -> FilesystemFlush:
        """The flush of the filesystem holding `storage` (one per device)."""
        flush = self._by_directory.get(storage.data_dir)
        if flush is None:
            opened = FilesystemFlush(storage.data_dir)
            flush = self._flushes.setdefault(opened.device, opened)
            if flush is not opened:
                opened.close()
            self._by_directory[storage.data_dir] = flush
        return flush

    def _own_round(self, requests: list[Request]) -> None:
        for storage, hard in requests:
            started = time.perf_counter()
            storage.sync()
            self.observer.fsynced(time.perf_counter() - started)
            if hard is not None:    # the driver's own save then finds it saved
                storage.save_hard_state(hard, urgent=True)

    def _shared_round(self, flush: FilesystemFlush, requests: list[Request]) -> None:
        """Logs and hard-state temp files by one syncfs, the renames by a second."""
        with ExitStack() as hard_states:
            publishes = [hard_states.enter_context(storage.hard_state_by_flush(hard))
                         for storage, hard in requests if hard is not None]
            started = time.perf_counter()
            with ExitStack() as logs:
                for storage, _ in requests:
                    logs.enter_context(storage.synced_by_flush())
                flush()
            self.observer.fsynced(time.perf_counter() - started)
            if publishes:
                for publish in publishes:
                    publish()
                flush()
        self.observer.flushed_shared()

    def close(self) -> None:
        """Finish the rounds asked for, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
