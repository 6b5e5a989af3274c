"""Opening a log directory as a clean close or any crash left it.

What a crash can leave, and what recovery does about it:
- a torn or garbled last write at the end of the last segment: cut (`Segment.load`);
- a segment still under its temp name (creation interrupted): deleted;
- a last segment whose header never got complete (possible only without fsync): deleted;
- a reset() interrupted after its new segment appeared: the segments before the newest
  segment flagged RESET are deleted, which finishes the reset.
Anything else that is not a contiguous run of valid records is corruption and raises
CorruptLogError: recovery never drops records it cannot prove were never durable.

Recovery reads every record to check it; it keeps the first bytes of each that the log's
user asks for (`RecordHeads`), so that user need not read the log a second time.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from consensus.storage import record
from consensus.storage.errors import CorruptLogError
from consensus.storage.files import fsync_directory
from consensus.storage.segment import (FLAG_RESET, TEMP_SUFFIX, Segment, parse_segment_name)

log = logging.getLogger("consensus.storage")


@dataclass(frozen=True)
class RecoveryReport:
    """What opening the log changed on disk (all empty after a clean close)."""
    cut_file: str | None = None  # the segment whose torn tail was cut
    cut_offset: int | None = None  # where the file now ends
    cut_bytes: int = 0
    removed_files: tuple[str, ...] = ()  # temp files, torn segments, pre-reset segments


@dataclass(frozen=True)
class RecordHeads:
    """The first `size` bytes of every record the log held when it was opened, as
    recovery's scan found them (`SegmentedLog.open(head_bytes=...)`, `take_heads`).

    `chunks` holds them oldest first, `size` bytes a record from record `first_index`
    on, one buffer per segment; a record shorter than `size` is zero-padded there, and
    its index is in `short`. Records recovery cut off (a torn tail) have no head."""
    first_index: int
    size: int
    chunks: tuple[bytearray, ...]
    short: tuple[int, ...]


def recover(directory: str, *, first_index: int, max_record_bytes: int, durable: bool,
            head_bytes: int = 0) -> tuple[list[Segment], RecoveryReport, RecordHeads]:
    """The segments of `directory`, oldest first, after repairing what a crash left, and
    the first `head_bytes` bytes of each record they hold.

    An empty directory gets one empty segment starting at `first_index`."""
    removed: list[str] = []
    named: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(TEMP_SUFFIX):
            os.unlink(path)
            removed.append(path)
        elif (index := parse_segment_name(name)) is not None:
            named.append((index, path))
    named.sort()
    newest_first: list[Segment] = []
    heads: list[record.Heads] = []      # newest first, beside newest_first
    cut: dict = {}
    try:
        for position in range(len(named) - 1, -1, -1):
            index, path = named[position]
            loaded = Segment.load(path, index, max_record_bytes=max_record_bytes,
                                  is_last=not newest_first, head_bytes=head_bytes)
            if loaded is None:
                log.warning("%s: removing a segment whose header was never completely "
                            "written", path)
                os.unlink(path)
                removed.append(path)
                first_index = index
                continue
            if loaded.cut_at is not None:
                log.warning("%s: cut a torn tail of %d bytes at byte %d", path,
                            loaded.cut_bytes, loaded.cut_at)
                cut = dict(cut_file=path, cut_offset=loaded.cut_at, cut_bytes=loaded.cut_bytes)
            newest_first.append(loaded.segment)
            heads.append(loaded.heads)
            if loaded.segment.flags & FLAG_RESET:
                for _, older in named[:position]:
                    log.warning("%s: removing a segment that an interrupted reset() "
                                "dropped", older)
                    os.unlink(older)
                    removed.append(older)
                break
        segments = newest_first[::-1]
        _check_contiguous(segments)
        if not segments:
            segments.append(Segment.create(directory, first_index, durable=durable))
        if durable:
            for segment in segments:
                segment.sync()
            fsync_directory(directory)
    except BaseException:
        for segment in newest_first:
            segment.close()
        raise
    heads.reverse()         # a segment created above holds no record: zip drops it
    short = tuple(segment.first_index + k for segment, found in zip(segments, heads)
                  for k in found.short)
    return segments, RecoveryReport(removed_files=tuple(removed), **cut), RecordHeads(
        segments[0].first_index, head_bytes, tuple(found.data for found in heads), short)


def _check_contiguous(segments: list[Segment]) -> None:
    for before, after in zip(segments, segments[1:]):
        if after.first_index > before.next_index:
            raise CorruptLogError(after.path, 0,
                                  f"records {before.next_index}..{after.first_index - 1} "
                                  f"are missing: the segment before ends at "
                                  f"{before.last_index}")
        if after.first_index < before.next_index:
            raise CorruptLogError(after.path, 0,
                                  f"segment starts at index {after.first_index} but the "
                                  f"one before already holds records up to "
                                  f"{before.last_index}")
