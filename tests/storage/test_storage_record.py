"""The record framing and the torn-tail / damage-in-the-middle decision, without files."""
from __future__ import annotations

import os
import random
import struct
from array import array

import pytest
from hypothesis import given, settings, strategies as st

from consensus.storage import record
from storage_testkit import payload

BASE = 20  # records start after a segment header; any offset works


def framed(payloads: list[bytes], base: int = BASE) -> tuple[bytes, list[int]]:
    """Records laid out from `base` (preceded by filler), and their offsets."""
    out, offsets, position = bytearray(b"H" * base), [], base
    for p in payloads:
        offsets.append(position)
        out += record.frame(p, position)
        position += record.HEADER_SIZE + len(p)
    return bytes(out), offsets


def scan(buf: bytes, max_length: int = 1 << 20):
    offsets = array("Q")
    damage = record.scan(memoryview(buf), BASE, max_length, offsets)
    return list(offsets), damage


def test_frame_layout_is_length_crc_payload():
    body = b"hello"
    data = record.frame(body, 1234)
    length, crc = struct.unpack(">II", data[:8])
    assert (length, data[8:]) == (5, body)
    assert crc == record.record_crc(record.payload_crc(body), 5, 1234)


def test_the_crc_binds_a_record_to_its_offset():
    data = record.frame(b"payload", 100)
    assert record.problem_at(memoryview(b"\0" * 100 + data), 100) is None
    assert record.problem_at(memoryview(b"\0" * 101 + data), 101) == "CRC mismatch"


@given(st.lists(st.binary(max_size=300), max_size=12))
@settings(max_examples=60, deadline=None)
def test_scan_indexes_every_record(payloads):
    buf, offsets = framed(payloads)
    assert scan(buf) == (offsets, None)


@pytest.mark.parametrize("cut", range(1, 3 * (8 + 25)))
def test_a_cut_anywhere_is_reported_at_the_record_it_cuts_and_is_a_tail(cut):
    payloads = [payload(i, 25) for i in range(3)]
    buf, offsets = framed(payloads)
    torn = buf[:len(buf) - cut]
    kept, damage = scan(torn)
    whole = [o for o in offsets if o + 8 + 25 <= len(torn)]
    assert kept == whole
    if len(torn) in offsets:  # cut exactly between two records: nothing is torn
        assert damage is None
    else:
        assert damage.offset == offsets[len(whole)]
        assert record.next_valid_record(memoryview(torn), damage) is None


def test_bad_crc_followed_by_a_valid_record_is_damage_in_the_middle():
    buf, offsets = framed([payload(i) for i in range(4)])
    broken = bytearray(buf)
    broken[offsets[1] + 8 + 3] ^= 1
    kept, damage = scan(bytes(broken))
    assert kept == offsets[:1]
    assert damage.offset == offsets[1] and damage.reason == "CRC mismatch"
    assert record.next_valid_record(memoryview(bytes(broken)), damage) == offsets[2]


def test_bad_crc_on_the_last_record_is_a_tail():
    buf, offsets = framed([payload(i) for i in range(4)])
    broken = bytearray(buf)
    broken[-1] ^= 1
    kept, damage = scan(bytes(broken))
    assert kept == offsets[:3] and damage.offset == offsets[3]
    assert record.next_valid_record(memoryview(bytes(broken)), damage) is None


@pytest.mark.parametrize("length", [0xFFFFFF00, 5, 0])
def test_a_corrupt_length_in_the_middle_is_not_a_tail(length):
    buf, offsets = framed([payload(i, 64) for i in range(5)])
    broken = bytearray(buf)
    broken[offsets[2]:offsets[2] + 4] = struct.pack(">I", length)
    kept, damage = scan(bytes(broken))
    assert kept == offsets[:2] and damage.offset == offsets[2]
    # the file's last record, found from the end, proves valid data follows the damage
    assert record.next_valid_record(memoryview(bytes(broken)), damage) == offsets[4]


def test_a_corrupt_length_followed_by_a_torn_end_is_a_tail():
    """Two faults at once (a garbled length and a torn last write) cannot be told from
    one torn write: the documented limit of the decision."""
    buf, offsets = framed([payload(i, 64) for i in range(5)])
    broken = bytearray(buf[:-10])
    broken[offsets[2]:offsets[2] + 4] = struct.pack(">I", 0xFFFFFF00)
    _, damage = scan(bytes(broken))
    assert record.next_valid_record(memoryview(bytes(broken)), damage) is None


def test_a_declared_length_is_checked_against_the_bytes_present():
    buf, offsets = framed([payload(0)])
    huge = buf + struct.pack(">II", 0xFFFFFFF0, 0) + b"x" * 100
    _, damage = scan(huge)
    assert damage == record.Damage(offsets[0] + 48, "record length 4294967280 runs past "
                                                    "the end of the file (100 payload bytes "
                                                    "present)")


def test_a_valid_record_above_the_limit_is_flagged_not_treated_as_damage():
    buf, offsets = framed([payload(0, 10), payload(1, 500)])
    _, damage = scan(buf, max_length=499)
    assert damage.offset == offsets[1] and damage.over_limit
    assert "open the log with max_record_bytes >= 500" in damage.reason


def test_a_frame_inside_a_payload_does_not_pass_for_a_record():
    inner = record.frame(b"inner record", 0)
    outer_payload = b"x" * 30 + inner
    buf, offsets = framed([payload(0), outer_payload])
    torn = buf[:-3]  # the outer record is torn; its payload still holds the inner frame
    kept, damage = scan(torn)
    assert kept == offsets[:1]
    assert record.next_valid_record(memoryview(torn), damage) is None


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fill", ["random", "zeros", "low-bytes"])
def test_searching_a_torn_multi_megabyte_record_finds_nothing(fill):
    size = 4 << 20
    rng = random.Random(7)
    body = {"random": lambda: rng.randbytes(size),
            "zeros": lambda: bytes(size),
            # bytes 0..2: most length fields are small enough to be plausible
            "low-bytes": lambda: rng.randbytes(size).translate(bytes(i % 3 for i in range(256)))
            }[fill]()
    buf, offsets = framed([payload(0), body])
    torn = buf[:len(buf) - size // 2]
    kept, damage = scan(torn, max_length=64 << 20)
    assert kept == offsets[:1] and damage.offset == offsets[1]
    assert record.next_valid_record(memoryview(torn), damage) is None


def test_unframe_checks_the_indexed_length_and_the_crc():
    buf, offsets = framed([b"abc", b"defg"])
    view = memoryview(buf)
    assert bytes(record.unframe(view, offsets[1], 4, 0)) == b"defg"
    with pytest.raises(ValueError, match="differs"):
        record.unframe(view, offsets[1], 3, 0)
    with pytest.raises(ValueError, match="CRC"):
        record.unframe(view, offsets[1], 4, 1)  # the same bytes found at another offset


def test_random_bytes_are_never_mistaken_for_records():
    junk = os.urandom(1 << 16)
    buf = b"H" * BASE + junk
    kept, damage = scan(buf)
    assert kept == [] and damage.offset == BASE
    assert record.next_valid_record(memoryview(buf), damage) is None


# ----------------------------------------------------------------- unframe_many (batch)
def _ranges(offsets: list[int], buf: bytes) -> tuple[array, array]:
    ends = offsets[1:] + [len(buf)]
    return array("Q", offsets), array("Q", ends)


@pytest.fixture(params=["numpy", "loop"])
def batch_check(request, monkeypatch):
    """unframe_many with its numpy fold (forced on few records too), and the per-record
    loop it uses for few records or without numpy."""
    if request.param == "loop":
        monkeypatch.setattr(record, "_FOLD", None)
    else:
        assert record._fold() is not None, "numpy is installed: the fold must be used"
        monkeypatch.setattr(record, "BATCH_MIN", 0)
    return record.unframe_many


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(0, 1 << 40))
def test_the_trailer_fold_equals_record_crc(payloads, offset):
    import numpy as np
    fold = record._fold()
    partial = np.array([record.payload_crc(p) for p in payloads], np.uint32)
    lengths = np.array([len(p) for p in payloads], np.uint64)
    offsets = np.array([offset + 7 * k for k in range(len(payloads))], np.uint64)
    assert fold.crcs(partial, lengths, offsets).tolist() == [
        record.record_crc(record.payload_crc(p), len(p), offset + 7 * k)
        for k, p in enumerate(payloads)]


def test_unframe_many_returns_the_payloads_of_valid_records(batch_check):
    payloads = [os.urandom(n) for n in (0, 1, 100, 3, 4096, 0, 77)]
    buf, offsets = framed(payloads)
    data = buf[BASE:]
    assert batch_check(data, BASE, *_ranges(offsets, buf)) == payloads
    assert batch_check(data, BASE, array("Q"), array("Q")) == []


def test_unframe_many_reports_the_first_damaged_record(batch_check):
    payloads = [b"x" * 10, b"y" * 20, b"z" * 30, b"w" * 5]
    buf, offsets = framed(payloads)
    for damaged, at in ((1, offsets[1] + record.HEADER_SIZE + 3),     # payload byte
                        (2, offsets[2] + 5),                           # CRC byte
                        (0, offsets[0] + 1)):                          # length byte
        bad = bytearray(buf)
        bad[at] ^= 0x40
        with pytest.raises(record.BadRecord) as caught:
            batch_check(bytes(bad[BASE:]), BASE, *_ranges(offsets, buf))
        assert caught.value.offset == offsets[damaged]
    # A record moved to another offset does not pass (the offset is in its CRC).
    with pytest.raises(record.BadRecord):
        batch_check(buf[BASE:], BASE + 1, *_ranges([o + 1 for o in offsets], buf + b"."))
    # A buffer shorter than the index says never reads past its end.
    with pytest.raises(record.BadRecord, match="shorter"):
        batch_check(buf[BASE:-1], BASE, *_ranges(offsets, buf))
