"""The storage engine: a segmented durable log, the Raft hard state, snapshot files -
files on disk, shared by the Raft log, Dafka stores and CHP servers. (The Raft core's
`Storage` protocol is consensus.raft.storage; the runtime's `DiskStorage`, which
implements it over this engine, is consensus.runtime.disk_storage.)

    from consensus.storage import SegmentedLog, FsyncPolicy, HardState, HardStateFile, \\
        SnapshotStore, StoredSnapshot, CorruptLogError

Only the stdlib is used. See `log.py` for the threading model, `record.py` for the
record format and the CRC choice, `recovery.py` for what opening after a crash does.
"""
from consensus.storage.errors import (CompactedIndexError, CorruptLogError, FutureIndexError,
                                      LogClosedError, LogFailedError, LogIndexError,
                                      LogInUseError, RecordTooLargeError, StorageError)
from consensus.storage.hardstate import HardState, HardStateFile
from consensus.storage.log import LogStats, SegmentedLog
from consensus.storage.policy import FsyncPolicy
from consensus.storage.recovery import RecordHeads, RecoveryReport
from consensus.storage.snapshot import StoredSnapshot, SnapshotNotFoundError, SnapshotStore

__all__ = [
    "CompactedIndexError", "CorruptLogError", "FsyncPolicy", "FutureIndexError", "HardState",
    "HardStateFile", "LogClosedError", "LogFailedError", "LogIndexError", "LogInUseError",
    "LogStats", "RecordHeads", "RecordTooLargeError", "RecoveryReport", "SegmentedLog",
    "StoredSnapshot", "SnapshotNotFoundError", "SnapshotStore", "StorageError",
]
