"""SegmentedLog's API: indexes, range reads, truncation, compaction, reset, reopening."""
from __future__ import annotations

import os

import pytest

from consensus.storage import (CompactedIndexError, FsyncPolicy, FutureIndexError,
                               LogClosedError, LogInUseError, RecordTooLargeError,
                               SegmentedLog)
from storage_testkit import (all_records, expected_heads, joined_heads, payload,
                             segment_paths)

SMALL_SEGMENTS = 200  # a 20-byte header and about four 40-byte records per segment


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "log")


def filled(log_dir, count, *, first_index=1, fsync="batch", size=40,
           segment_bytes=SMALL_SEGMENTS) -> SegmentedLog:
    log = SegmentedLog.open(log_dir, fsync=fsync, segment_bytes=segment_bytes,
                            first_index=first_index)
    log.append_many(payload(i, size) for i in range(first_index, first_index + count))
    return log


def test_a_new_log_is_empty_at_its_first_index(log_dir):
    with SegmentedLog.open(log_dir, first_index=1000) as log:
        assert (log.first_index, log.last_index, log.durable_index) == (1000, 999, 999)
        assert log.read(1000, 1000) == []
        assert log.append(b"a") == 1000
    with SegmentedLog.open(log_dir, first_index=5) as log:  # an existing log keeps its own
        assert (log.first_index, log.last_index, log.get(1000)) == (1000, 1000, b"a")


def test_indexes_start_at_zero_when_asked(log_dir):
    with SegmentedLog.open(log_dir, first_index=0) as log:
        assert log.last_index == -1
        assert log.append_many([b"x", b"y"]) == 1
        assert log.read(0, 2) == [b"x", b"y"]


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_records_survive_reopening_under_every_policy(log_dir, policy):
    with filled(log_dir, 30, fsync=policy) as log:
        expected = all_records(log)
    assert len(segment_paths(log_dir)) > 5
    with SegmentedLog.open(log_dir, fsync=policy, segment_bytes=SMALL_SEGMENTS) as log:
        assert (log.first_index, log.last_index) == (1, 30)
        assert all_records(log) == expected == [payload(i) for i in range(1, 31)]
        assert log.recovery.cut_bytes == 0 and log.recovery.removed_files == ()


def test_payload_types_and_the_size_limit(log_dir):
    with SegmentedLog.open(log_dir, max_record_bytes=100) as log:
        log.append(bytearray(b"ba"))
        log.append(memoryview(b"xxmvxx")[2:4])
        log.append(b"z" * 100)
        with pytest.raises(RecordTooLargeError, match="max_record_bytes=100"):
            log.append_many([b"ok", b"z" * 101])
        with pytest.raises(TypeError, match="str"):
            log.append("text")
        assert all_records(log) == [b"ba", b"mv", b"z" * 100]  # the bad batch wrote nothing


@pytest.mark.parametrize("option, value, message", [
    ("fsync", "sometimes", "fsync='sometimes' is not a fsync policy; use one of 'always'"),
    ("segment_bytes", 10, "segment_bytes=10: must be an integer >= 29"),
    ("first_index", -1, "first_index=-1"),
    ("max_record_bytes", 1 << 32, "max_record_bytes=4294967296"),
    ("head_bytes", -1, "head_bytes=-1"),
])
def test_bad_options_name_themselves(log_dir, option, value, message):
    with pytest.raises(ValueError, match=message):
        SegmentedLog.open(log_dir, **{option: value})


def test_range_reads_cross_segments(log_dir):
    with filled(log_dir, 40) as log:
        for start, stop in [(1, 41), (3, 4), (4, 13), (17, 40), (40, 41), (9, 9)]:
            assert log.read(start, stop) == [payload(i) for i in range(start, stop)]
        assert log.get(23) == payload(23)


def test_max_bytes_returns_at_least_one_then_stops_before_the_limit(log_dir):
    with filled(log_dir, 40) as log:
        assert log.read(5, 30, max_bytes=0) == [payload(5)]
        assert log.read(5, 30, max_bytes=39) == [payload(5)]
        assert log.read(5, 30, max_bytes=80) == [payload(5), payload(6)]
        assert log.read(5, 30, max_bytes=119) == [payload(i) for i in range(5, 7)]
        assert log.read(5, 30, max_bytes=10_000) == [payload(i) for i in range(5, 30)]
        with pytest.raises(ValueError, match="max_bytes=-1"):
            log.read(5, 6, max_bytes=-1)


def test_out_of_range_reads_say_which_side(log_dir):
    with filled(log_dir, 10, first_index=5) as log:
        with pytest.raises(CompactedIndexError, match=r"index 4 was compacted away \(the log holds 5..14\)"):
            log.get(4)
        with pytest.raises(FutureIndexError, match="index 15 is not written yet"):
            log.read(10, 16)
        with pytest.raises(IndexError):  # both are IndexErrors too
            log.get(15)
        with pytest.raises(ValueError, match="start is after stop"):
            log.read(9, 8)


def test_truncate_after_across_segments_then_append(log_dir):
    with filled(log_dir, 30) as log:
        before = len(segment_paths(log_dir))
        log.truncate_after(9)
        assert (log.last_index, log.durable_index) == (9, 9)
        assert len(segment_paths(log_dir)) < before
        assert log.append(b"new 10") == 10
        assert log.append_many([payload(i) for i in range(11, 20)]) == 19
        expected = [payload(i) for i in range(1, 10)] + [b"new 10"] + \
                   [payload(i) for i in range(11, 20)]
        assert all_records(log) == expected
    with SegmentedLog.open(log_dir, segment_bytes=SMALL_SEGMENTS) as log:
        assert all_records(log) == expected


def test_truncate_after_at_a_segment_boundary_and_to_empty(log_dir):
    with filled(log_dir, 30) as log:
        second = int(os.path.basename(segment_paths(log_dir)[1]).split(".")[0])
        log.truncate_after(second - 1)  # the newest kept record ends a segment
        assert log.last_index == second - 1 and len(segment_paths(log_dir)) == 1
        log.truncate_after(40)  # beyond the end: nothing to do
        log.truncate_after(0)  # first_index - 1: no record left
        assert (log.first_index, log.last_index) == (1, 0)
        assert log.append(b"again") == 1


def test_truncate_below_the_first_index_is_refused(log_dir):
    with filled(log_dir, 30) as log:
        log.compact_before(20)
        first = log.first_index
        with pytest.raises(CompactedIndexError):
            log.truncate_after(first - 2)
        assert log.last_index == 30


def test_compaction_removes_only_whole_segments_below_the_index(log_dir):
    with filled(log_dir, 30) as log:
        log.compact_before(14)
        first = log.first_index
        assert 10 < first <= 14  # the segment holding 14 (and maybe some below) stays
        assert log.read(first, 31) == [payload(i) for i in range(first, 31)]
        with pytest.raises(CompactedIndexError):
            log.get(first - 1)
        log.compact_before(10_000)  # never removes the segment that takes appends
        assert log.last_index == 30 and log.get(30) == payload(30)
        assert len(segment_paths(log_dir)) == 1
    with SegmentedLog.open(log_dir, segment_bytes=SMALL_SEGMENTS) as log:
        assert log.last_index == 30 and log.first_index > first


def test_opening_keeps_each_records_head_for_take_heads(log_dir):
    """The first head_bytes bytes of every record, from the recovery scan: one buffer a
    segment, short records zero-padded and named, from the first index kept."""
    records = [payload(i, i % 11) for i in range(1, 41)]       # 0 to 10 bytes
    with SegmentedLog.open(log_dir, segment_bytes=100) as log:
        log.append_many(records)
        log.compact_before(12)
        first = log.first_index
        assert 1 < first <= 12
    with SegmentedLog.open(log_dir, segment_bytes=100, head_bytes=6) as log:
        heads = log.take_heads()
        assert (heads.first_index, heads.size) == (first, 6)
        assert len(heads.chunks) == len(segment_paths(log_dir)) > 2
        assert joined_heads(heads) == expected_heads(records[first - 1:], 6, first)
        assert heads.short and len(heads.short) < len(records) - first
        with pytest.raises(ValueError, match="already taken"):
            log.take_heads()
        assert all_records(log) == records[first - 1:]      # the log itself is unchanged


def test_reset_drops_everything_and_moves_the_first_index(log_dir):
    with filled(log_dir, 30) as log:
        log.reset(500)
        assert (log.first_index, log.last_index, log.durable_index) == (500, 499, 499)
        assert log.append(b"five hundred") == 500
    with SegmentedLog.open(log_dir) as log:
        assert (log.first_index, log.read(500, 501)) == (500, [b"five hundred"])
        log.reset(3)  # backwards works too
        assert (log.first_index, log.last_index) == (3, 2)
        assert len(segment_paths(log_dir)) == 1


def test_a_record_larger_than_a_segment_gets_its_own(log_dir):
    big = os.urandom(1000)
    with filled(log_dir, 3) as log:
        log.append(big)
        log.append(b"after")
        assert log.read(3, 6) == [payload(3), big, b"after"]
    with SegmentedLog.open(log_dir) as log:
        assert log.get(4) == big


def test_big_records_up_to_the_default_limit(log_dir):
    blobs = [os.urandom(64 << 10), os.urandom(1 << 20) * 64, os.urandom(1)]
    assert len(blobs[1]) == 64 << 20  # exactly max_record_bytes' default
    # fsync="never": the point is sizes, and 64 MiB of fsync would dominate the suite
    with SegmentedLog.open(log_dir, fsync="never", segment_bytes=1 << 20) as log:
        assert log.append_many(blobs) == 3
        with pytest.raises(RecordTooLargeError):
            log.append(blobs[1] + b"!")
    with SegmentedLog.open(log_dir, fsync="never", segment_bytes=1 << 20) as log:
        assert log.read(1, 4) == blobs
        assert log.read(1, 4, max_bytes=1 << 20) == blobs[:1]
        assert len(segment_paths(log_dir)) == 3  # the big one got a segment of its own


def test_one_log_per_directory(log_dir):
    log = SegmentedLog.open(log_dir)
    with pytest.raises(LogInUseError, match="already open"):
        SegmentedLog.open(log_dir)
    log.close()
    SegmentedLog.open(log_dir).close()


def test_a_closed_log_refuses_work(log_dir):
    log = filled(log_dir, 3)
    log.close()
    log.close()
    for call in (lambda: log.append(b"x"), lambda: log.get(1), log.sync,
                 lambda: log.truncate_after(1)):
        with pytest.raises(LogClosedError, match="closed"):
            call()


def test_durable_index_follows_the_policy(log_dir, tmp_path):
    with SegmentedLog.open(log_dir, fsync="batch") as log:
        log.append_many([b"a", b"b"])
        assert log.durable_index == 0
        log.sync()
        assert log.durable_index == 2 and log.stats().fsyncs == 1
    with SegmentedLog.open(tmp_path / "always", fsync="always") as log:
        log.append(b"a")
        log.append_many([b"b", b"c"])
        assert log.durable_index == 3 and log.stats().fsyncs == 2
    with SegmentedLog.open(tmp_path / "never", fsync="never") as log:
        log.append(b"a")
        assert log.durable_index == 0
        log.sync()
        assert log.durable_index == 1 and log.stats().fsyncs == 0
