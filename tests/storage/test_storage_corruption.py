"""Damage that is not a torn tail is reported with the file and the offset, never cut or
skipped; damage that is a torn tail is cut. Both sides of the boundary are tested."""
from __future__ import annotations

import os
import struct

import pytest

from consensus.storage import CorruptLogError, RecordTooLargeError, SegmentedLog
from consensus.storage.record import HEADER_SIZE
from consensus.storage.segment import HEADER_SIZE as SEGMENT_HEADER
from storage_testkit import (all_records, append_bytes, flip_byte, overwrite, payload,
                             segment_paths)

SIZE = 40
FRAME = HEADER_SIZE + SIZE


@pytest.fixture
def log_dir(tmp_path):
    """A closed log of 30 records of 40 bytes, ten segments of 3 records each."""
    directory = str(tmp_path / "log")
    with SegmentedLog.open(directory, segment_bytes=200) as log:
        log.append_many(payload(i, SIZE) for i in range(1, 31))
    return directory


def offset_of(k: int) -> int:
    """The byte offset of the k-th record (from 0) of a segment."""
    return SEGMENT_HEADER + k * FRAME


def open_fails_at(directory: str, path: str, offset: int, reason: str) -> CorruptLogError:
    with pytest.raises(CorruptLogError) as caught:
        SegmentedLog.open(directory, segment_bytes=200)
    assert (caught.value.file, caught.value.offset) == (path, offset)
    assert reason in caught.value.reason
    assert f"{path}: corrupt at byte {offset}" in str(caught.value)
    return caught.value


def test_a_flipped_payload_byte_in_the_last_segment_is_not_a_tail(log_dir):
    last = segment_paths(log_dir)[-1]
    before = open(last, "rb").read()
    flip_byte(last, offset_of(0) + HEADER_SIZE + 7)
    open_fails_at(log_dir, last, offset_of(0), "valid records resume")
    assert os.path.getsize(last) == len(before)  # nothing was cut


@pytest.mark.parametrize("new_length", [0xFFFF0000, SIZE + 1, SIZE - 1, 0])
def test_a_corrupt_length_in_the_middle_is_not_a_tail(log_dir, new_length):
    last = segment_paths(log_dir)[-1]
    overwrite(last, offset_of(0), struct.pack(">I", new_length))
    open_fails_at(log_dir, last, offset_of(0), "valid records resume")


def test_damage_in_a_sealed_segment_is_reported_wherever_it_is(log_dir):
    paths = segment_paths(log_dir)
    flip_byte(paths[1], offset_of(2) + HEADER_SIZE + SIZE - 1)  # its last record
    open_fails_at(log_dir, paths[1], offset_of(2), "CRC mismatch in a sealed segment")


def test_a_sealed_segment_with_a_bad_header(log_dir):
    paths = segment_paths(log_dir)
    flip_byte(paths[0], 1)
    open_fails_at(log_dir, paths[0], 0, "bad magic")


def test_a_segment_renamed_to_another_index_is_caught(log_dir):
    last = segment_paths(log_dir)[-1]
    index = int(os.path.basename(last).split(".")[0])
    os.rename(last, last.replace(f"{index:020d}", f"{index + 1:020d}"))
    with pytest.raises(CorruptLogError, match="header says first index"):
        SegmentedLog.open(log_dir)


def test_a_bad_crc_on_the_very_last_record_is_a_torn_tail(log_dir):
    last = segment_paths(log_dir)[-1]
    size = os.path.getsize(last)
    flip_byte(last, size - 1)
    with SegmentedLog.open(log_dir, segment_bytes=200) as log:
        assert all_records(log) == [payload(i, SIZE) for i in range(1, 30)]
        assert (log.recovery.cut_file, log.recovery.cut_offset) == (last, size - FRAME)
        assert log.append(b"new 30") == 30
    assert os.path.getsize(last) == size - FRAME + HEADER_SIZE + 6


@pytest.mark.parametrize("tail", [b"\xff" * 3, b"\x00" * 8, struct.pack(">II", 0xFFFFFFF0, 0),
                                  os.urandom(1000)])
def test_garbage_after_the_last_record_is_a_torn_tail(log_dir, tail):
    last = segment_paths(log_dir)[-1]
    append_bytes(last, tail)
    with SegmentedLog.open(log_dir, segment_bytes=200, max_record_bytes=1 << 20) as log:
        assert all_records(log) == [payload(i, SIZE) for i in range(1, 31)]
        assert log.recovery.cut_bytes == len(tail)


def test_a_huge_length_in_the_middle_is_damage_not_an_allocation(log_dir):
    last = segment_paths(log_dir)[-1]
    overwrite(last, offset_of(0), struct.pack(">I", 0xFFFFFFF0))
    error = open_fails_at(log_dir, last, offset_of(0), "runs past the end of the file")
    assert "valid records resume" in error.reason


@pytest.mark.parametrize("where", ["sealed", "last"])
def test_records_above_a_lowered_limit_are_refused_not_cut(tmp_path, where):
    directory = str(tmp_path / "log")
    with SegmentedLog.open(directory, segment_bytes=200) as log:
        log.append_many([b"a" * 10, b"b" * 150, b"c" * 10] if where == "sealed"
                        else [b"a" * 10, b"b" * 150])
    sizes = [os.path.getsize(p) for p in segment_paths(directory)]
    with pytest.raises(RecordTooLargeError, match="open the log with max_record_bytes >= 150"):
        SegmentedLog.open(directory, segment_bytes=200, max_record_bytes=100)
    assert [os.path.getsize(p) for p in segment_paths(directory)] == sizes
    with SegmentedLog.open(directory, segment_bytes=200, max_record_bytes=150) as log:
        assert log.get(2) == b"b" * 150


def test_damage_found_after_opening_is_reported_by_reads(log_dir):
    with SegmentedLog.open(log_dir, segment_bytes=200) as log:
        path = segment_paths(log_dir)[2]
        flip_byte(path, offset_of(1) + HEADER_SIZE)
        first = int(os.path.basename(path).split(".")[0])
        assert log.get(first) == payload(first, SIZE)
        with pytest.raises(CorruptLogError) as caught:
            log.read(first, first + 3)
        assert (caught.value.file, caught.value.offset) == (path, offset_of(1))
        os.truncate(path, offset_of(2))
        with pytest.raises(CorruptLogError, match="shorter than the records indexed"):
            log.get(first + 2)


def test_the_error_tells_the_operator_what_to_do(log_dir):
    last = segment_paths(log_dir)[-1]
    flip_byte(last, offset_of(0) + HEADER_SIZE)
    error = open_fails_at(log_dir, last, offset_of(0), "CRC mismatch")
    assert "restore this node's data from a replica" in str(error)
