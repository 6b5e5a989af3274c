"""The errors of the storage engine.

Everything the engine raises on purpose is a `StorageError`. Corruption is never skipped:
it surfaces as `CorruptLogError` naming the file and the byte offset, so an operator can
look at exactly that place. Index errors are also `IndexError`s, split into "compacted
away" and "not written yet" because callers answer them differently (JournalKeeper's
INDEX_UNDERFLOW and INDEX_OVERFLOW).
"""
from __future__ import annotations


class StorageError(Exception):
    """Base class of every error the storage engine raises on purpose."""


class CorruptLogError(StorageError):
    """A storage file holds bytes that are not what the engine wrote, and they are not a
    torn tail that recovery may cut: `file` and `offset` say where."""

    def __init__(self, file: str, offset: int, reason: str) -> None:
        self.file = file
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"{file}: corrupt at byte {offset}: {reason}. Nothing was cut or skipped; "
            f"restore this node's data from a replica or a backup, or move the file "
            f"aside if losing its records is acceptable")


class LogIndexError(StorageError, IndexError):
    """An index outside the records the log holds."""

    def __init__(self, index: int, first_index: int, last_index: int, what: str) -> None:
        self.index = index
        self.first_index = first_index
        self.last_index = last_index
        super().__init__(f"index {index} {what} (the log holds {first_index}..{last_index})")


class CompactedIndexError(LogIndexError):
    """The index is below `first_index`: compacted away (read it from a snapshot)."""

    def __init__(self, index: int, first_index: int, last_index: int) -> None:
        super().__init__(index, first_index, last_index, "was compacted away")


class FutureIndexError(LogIndexError):
    """The index is above `last_index`: not written yet."""

    def __init__(self, index: int, first_index: int, last_index: int) -> None:
        super().__init__(index, first_index, last_index, "is not written yet")


class RecordTooLargeError(StorageError, ValueError):
    """A payload longer than the log's `max_record_bytes`."""


class LogClosedError(StorageError):
    """The log was closed; open it again to use it."""


class LogInUseError(StorageError):
    """Another `SegmentedLog` (in this or another process) has the directory open."""


class LogFailedError(StorageError):
    """A write or fsync failed; what reached the disk is unknown, so the log refuses
    further work. Reopening runs recovery, which finds out."""
