"""Crashes: a write cut at every byte, interrupted segment creation, truncation and
reset, and a writer process killed with SIGKILL. Recovery must keep every fsynced
record, return nothing garbled, and leave a log that takes appends again."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from consensus.storage import CorruptLogError, SegmentedLog
from consensus.storage.record import HEADER_SIZE, frame
from consensus.storage.segment import FLAG_RESET, Segment, encode_header, segment_name
from storage_testkit import (all_records, append_bytes, expected_heads, joined_heads, payload,
                             segment_paths)

SEGMENT_BYTES = 1 << 20
HEAD_BYTES = 12     # longer than some records of the batches below


def durable_base(directory: str, count: int) -> list[bytes]:
    """A log whose `count` records were all fsynced (fsync=always) before the 'crash'."""
    records = [payload(i, 30 + i) for i in range(1, count + 1)]
    with SegmentedLog.open(directory, fsync="always", segment_bytes=SEGMENT_BYTES) as log:
        for p in records:
            log.append(p)
        assert log.durable_index == count
    return records


def bytes_appended(base: str, scratch: str, items: list[bytes]) -> bytes:
    """Exactly what appending `items` writes: done on a copy, then read back."""
    shutil.copytree(base, scratch)
    last = segment_paths(scratch)[-1]
    size = os.path.getsize(last)
    with SegmentedLog.open(scratch, fsync="batch", segment_bytes=SEGMENT_BYTES) as log:
        log.append_many(items)
    assert len(segment_paths(scratch)) == len(segment_paths(base))  # no roll-over
    with open(last, "rb") as file:
        return file.read()[size:]


def crash_at_every_byte(tmp_path, items: list[bytes], cuts=None) -> int:
    """Write each prefix of the append of `items` into a copy of the last segment,
    reopen, and check what recovery keeps. Returns how many prefixes were tried."""
    base, work = str(tmp_path / "base"), str(tmp_path / "work")
    durable = durable_base(base, 6)
    written = bytes_appended(base, str(tmp_path / "probe"), items)
    ends, position = [], 0
    for item in items:
        position += HEADER_SIZE + len(item)
        ends.append(position)
    assert ends[-1] == len(written)
    shutil.copytree(base, work)
    segment = segment_paths(work)[-1]
    size = os.path.getsize(segment)
    tried = 0
    for cut in (range(len(written) + 1) if cuts is None else cuts):
        with open(segment, "r+b") as file:
            file.truncate(size)
            file.seek(size)
            file.write(written[:cut])
        whole = sum(end <= cut for end in ends)
        complete_bytes = ends[whole - 1] if whole else 0
        # fsync="never" only spares the test fsyncs: recovery is the same for all policies
        with SegmentedLog.open(work, fsync="never", segment_bytes=SEGMENT_BYTES,
                               head_bytes=HEAD_BYTES) as log:
            assert all_records(log) == durable + items[:whole], f"cut at byte {cut}"
            # no head of a record the cut tore
            assert joined_heads(log.take_heads()) == expected_heads(
                durable + items[:whole], HEAD_BYTES, 1), f"cut at byte {cut}"
            assert log.recovery.cut_bytes == cut - complete_bytes
            assert log.last_index == log.durable_index == 6 + whole
            log.append(b"after the crash")
        with SegmentedLog.open(work, fsync="never", segment_bytes=SEGMENT_BYTES) as log:
            assert log.get(7 + whole) == b"after the crash"
        tried += 1
    return tried


def test_crash_at_every_byte_of_one_append(tmp_path):
    assert crash_at_every_byte(tmp_path, [payload(100, 60)]) == HEADER_SIZE + 60 + 1


def test_crash_at_every_byte_of_a_batch(tmp_path):
    items = [payload(100, 10), b"", payload(102, 50)]
    assert crash_at_every_byte(tmp_path, items) == 3 * HEADER_SIZE + 60 + 1


def test_crash_through_a_64_kib_record(tmp_path):
    big = os.urandom(64 << 10)
    size = HEADER_SIZE + len(big)
    cuts = sorted({*range(0, 40), *range(size - 40, size + 1), *range(0, size, 4099)})
    assert crash_at_every_byte(tmp_path, [big], cuts) == len(cuts)


def test_a_segment_torn_while_being_created_is_removed(tmp_path):
    """Only possible without fsync (creation is temp file, fsync, rename), but
    recovery must cope: a header that never got complete held nothing durable."""
    directory = str(tmp_path / "log")
    durable = durable_base(directory, 6)
    new = os.path.join(directory, segment_name(7))
    header = encode_header(7, 0)
    first = header + frame(payload(7, 30), len(header))  # what the roll-over writes
    for cut in range(len(first) + 1):
        with open(new, "wb") as file:
            file.write(first[:cut])
        with SegmentedLog.open(directory, segment_bytes=SEGMENT_BYTES) as log:
            got = all_records(log)
            if cut < len(header):
                assert got == durable and log.recovery.removed_files == (new,)
                assert not os.path.exists(new)
            else:
                assert got == durable + ([payload(7, 30)] if cut == len(first) else [])


def test_a_leftover_temp_segment_is_removed(tmp_path):
    directory = str(tmp_path / "log")
    durable = durable_base(directory, 6)
    temp = os.path.join(directory, segment_name(7) + ".tmp")
    with open(temp, "wb") as file:
        file.write(encode_header(7, 0)[:11])
    with SegmentedLog.open(directory) as log:
        assert all_records(log) == durable and log.recovery.removed_files == (temp,)


def test_a_truncation_interrupted_after_dropping_segments_leaves_a_prefix(tmp_path):
    directory = str(tmp_path / "log")
    with SegmentedLog.open(directory, segment_bytes=200) as log:
        log.append_many(payload(i) for i in range(1, 31))
    paths = segment_paths(directory)
    for path in paths[-2:]:  # truncate_after deletes the newest segments first
        os.unlink(path)
    kept_last = int(os.path.basename(paths[-2]).split(".")[0]) - 1
    with SegmentedLog.open(directory, segment_bytes=200) as log:
        assert all_records(log) == [payload(i) for i in range(1, kept_last + 1)]


@pytest.mark.parametrize("new_first", [1000, 5])
def test_a_reset_interrupted_after_its_segment_appeared_is_finished(tmp_path, new_first):
    directory = str(tmp_path / "log")
    with SegmentedLog.open(directory, segment_bytes=200) as log:
        log.append_many(payload(i) for i in range(1, 31))
    old = []
    for path in segment_paths(directory):  # reset() first drops the segments >= new_first
        if int(os.path.basename(path).split(".")[0]) >= new_first:
            os.unlink(path)
        else:
            old.append(path)
    Segment.create(directory, new_first, durable=True, flags=FLAG_RESET).close()
    with SegmentedLog.open(directory, head_bytes=4) as log:
        assert (log.first_index, log.last_index) == (new_first, new_first - 1)
        heads = log.take_heads()        # none of the dropped segments' records
        assert (heads.first_index, joined_heads(heads)) == (new_first, (b"", ()))
        assert sorted(log.recovery.removed_files) == old
    assert segment_paths(directory) == [os.path.join(directory, segment_name(new_first))]


def test_a_missing_segment_in_the_middle_is_corruption(tmp_path):
    directory = str(tmp_path / "log")
    with SegmentedLog.open(directory, segment_bytes=200) as log:
        log.append_many(payload(i) for i in range(1, 31))
    paths = segment_paths(directory)
    os.unlink(paths[2])
    with pytest.raises(CorruptLogError, match="are missing") as caught:
        SegmentedLog.open(directory)
    assert caught.value.file == paths[3] and caught.value.offset == 0
    assert os.path.exists(paths[0])  # nothing was deleted by the failed open


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {testdir!r})
    from consensus.storage import SegmentedLog
    from storage_testkit import payload
    log = SegmentedLog.open({directory!r}, fsync="always", segment_bytes=8192)
    i = log.last_index + 1
    while True:
        index = log.append(payload(i, 1 + i % 300))
        print(index, flush=True)
        i += 1
""")


@pytest.mark.timeout(60)
def test_a_killed_writer_loses_nothing_it_was_told_was_durable(tmp_path):
    directory = str(tmp_path / "log")
    script = WRITER.format(testdir=os.path.dirname(__file__), directory=directory)
    reported = 0
    for _round in range(2):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 text=True)
        try:
            for line in child.stdout:
                reported = int(line)
                if reported >= 150 * (_round + 1):
                    break
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        with SegmentedLog.open(directory, segment_bytes=8192) as log:
            assert log.last_index >= reported
            assert all_records(log) == [payload(i, 1 + i % 300)
                                        for i in range(1, log.last_index + 1)]
    assert len(segment_paths(directory)) > 3


def test_garbage_after_a_clean_close_is_cut_and_reported(tmp_path):
    directory = str(tmp_path / "log")
    durable = durable_base(directory, 6)
    segment = segment_paths(directory)[-1]
    size = os.path.getsize(segment)
    append_bytes(segment, b"\x00" * 4096)  # a tail of zeros, as a crashed file system leaves
    with SegmentedLog.open(directory) as log:
        assert all_records(log) == durable
        assert (log.recovery.cut_file, log.recovery.cut_offset, log.recovery.cut_bytes) == \
               (segment, size, 4096)
    assert os.path.getsize(segment) == size
