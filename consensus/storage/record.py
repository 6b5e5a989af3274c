"""The record framing of segment files, and finding where valid records are (sans-I/O).

A record is ``length u32 | crc u32 | payload`` (big-endian). The CRC is zlib's CRC-32
(ISO-HDLC) over ``payload || length u32 || offset u64``, where offset is the byte offset
of the record in its segment file.

- zlib.crc32, not crcmod's crc-32c: the storage engine imports only the stdlib, and on
  this project's machines zlib's is about 5x faster (1.5 GB/s against 0.3 GB/s, measured);
  CRC-32 and CRC-32C both detect every burst of up to 32 bits, which is the torn-sector and
  bit-flip damage we guard against.
- The payload comes first so its CRC can be computed outside the log's lock (zlib
  releases the GIL on big buffers); the 12 trailing bytes are folded in when the offset is
  known.
- Covering the offset makes each record self-certifying: a frame embedded in a payload
  (a log stored inside a log), or a stale frame, never passes for a record at another
  position. That is what lets recovery tell a torn tail from damage in the middle by
  searching for valid records after the damage.
"""
from __future__ import annotations

import re
import struct
import zlib
from array import array
from dataclasses import dataclass

HEADER = struct.Struct(">II")  # length, crc
HEADER_SIZE = HEADER.size
MAX_LENGTH = 0xFFFFFFFF
_TRAILER = struct.Struct(">IQ")  # length, offset: folded into the CRC after the payload
_LENGTH = struct.Struct(">I")

# Candidates of the resync search whose payload is at most this long are CRC-checked at
# once; longer ones only when the chain of record headers after them ends exactly at the
# end of the file (a cheap test that random bytes almost never pass), which keeps the
# search linear instead of cubic on a torn multi-megabyte record.
_DIRECT_CHECK_BYTES = 1 << 16


def payload_crc(payload: bytes | bytearray | memoryview) -> int:
    """The CRC of the payload alone; `header` completes it."""
    return zlib.crc32(payload)


def record_crc(partial: int, length: int, offset: int) -> int:
    """Fold the length and the record's offset into the payload's CRC."""
    return zlib.crc32(_TRAILER.pack(length, offset), partial)


def header(length: int, partial_crc: int, offset: int) -> bytes:
    """The 8 header bytes of a record of `length` bytes written at `offset`."""
    return HEADER.pack(length, record_crc(partial_crc, length, offset))


def frame(payload: bytes, offset: int) -> bytes:
    """A whole record (header and payload) as written at `offset`."""
    return header(len(payload), payload_crc(payload), offset) + payload


def problem_at(buf: memoryview, pos: int, max_length: int) -> str | None:
    """Why no valid record starts at `pos` of `buf`, or None when one does.

    `buf` holds the file from its byte 0 up to its end, so positions are file offsets.
    A declared length is checked against `max_length` and the bytes present before
    anything is read for it."""
    left = len(buf) - pos
    if left < HEADER_SIZE:
        return f"record header cut short ({left} of {HEADER_SIZE} bytes)"
    length, crc = HEADER.unpack_from(buf, pos)
    if length > max_length:
        return f"record length {length} exceeds max_record_bytes={max_length}"
    if length > left - HEADER_SIZE:
        return (f"record length {length} runs past the end of the file "
                f"({left - HEADER_SIZE} payload bytes present)")
    start = pos + HEADER_SIZE
    if record_crc(zlib.crc32(buf[start:start + length]), length, pos) != crc:
        return "CRC mismatch"
    return None


@dataclass(frozen=True, slots=True)
class Damage:
    """The first place where the records stop being valid."""
    offset: int
    reason: str


def scan(buf: memoryview, start: int, max_length: int, offsets: array) -> Damage | None:
    """Append to `offsets` the offset of each valid record from `start` on.

    Returns None when the records end exactly at the end of `buf`, else where and why
    they stopped."""
    pos, end = start, len(buf)
    while pos < end:
        reason = problem_at(buf, pos, max_length)
        if reason is not None:
            return Damage(pos, reason)
        offsets.append(pos)
        pos += HEADER_SIZE + _LENGTH.unpack_from(buf, pos)[0]
    return None


def next_valid_record(buf: memoryview, damage: Damage, max_length: int) -> int | None:
    """The offset of a valid record after `damage`, or None when there is none.

    None means the damage is a torn tail (a cut or garbled last write); a valid record
    after it means the damage is in the middle. The record right after the damaged one,
    when its length is plausible, is tried first; then every byte position."""
    pos = damage.offset
    end = len(buf)
    if end - pos >= HEADER_SIZE:
        following = pos + HEADER_SIZE + _LENGTH.unpack_from(buf, pos)[0]
        if following < end and problem_at(buf, following, max_length) is None:
            return following
    bound = min(max_length, end)
    # A length <= bound has a first byte <= bound >> 24. Eight zero bytes are skipped so
    # a zero-filled tail does not cost a Python step per byte: they are a valid (empty)
    # record only at the ~1 in 2**32 offsets whose CRC is 0, and then only one record
    # the search could have used.
    candidates = re.compile(b"[\\x00-" + re.escape(bytes([min(bound >> 24, 255)]))
                            + b"](?!\\x00{7})", re.DOTALL)
    chains: dict[int, bool] = {}
    for match in candidates.finditer(buf, pos + 1, max(pos + 1, end - HEADER_SIZE + 1)):
        candidate = match.start()
        length = _LENGTH.unpack_from(buf, candidate)[0]
        if length > max_length or candidate + HEADER_SIZE + length > end:
            continue
        if (length > _DIRECT_CHECK_BYTES
                and not _chain_ends_at_end(buf, candidate + HEADER_SIZE + length,
                                           max_length, chains)):
            continue
        if problem_at(buf, candidate, max_length) is None:
            return candidate
    return None


def _chain_ends_at_end(buf: memoryview, pos: int, max_length: int,
                       memo: dict[int, bool]) -> bool:
    """Do record headers, followed by their lengths from `pos`, land exactly on the end?"""
    end = len(buf)
    visited = []
    result = False
    while True:
        if pos == end:
            result = True
            break
        if pos in memo:
            result = memo[pos]
            break
        visited.append(pos)
        if end - pos < HEADER_SIZE:
            break
        length = _LENGTH.unpack_from(buf, pos)[0]
        if length > max_length or pos + HEADER_SIZE + length > end:
            break
        pos += HEADER_SIZE + length
    for seen in visited:
        memo[seen] = result
    return result


def unframe(buf: memoryview, pos: int, expected_length: int, base: int) -> memoryview:
    """The payload of the record at `pos` of `buf`, which was read from file offset
    `base`; raises ValueError (with the reason) when it is not the record the index
    promised."""
    length, crc = HEADER.unpack_from(buf, pos)
    if length != expected_length:
        raise ValueError(f"record length {length} differs from the {expected_length} "
                         f"bytes indexed when the segment was opened")
    payload = buf[pos + HEADER_SIZE:pos + HEADER_SIZE + length]
    if record_crc(zlib.crc32(payload), length, base + pos) != crc:
        raise ValueError("CRC mismatch")
    return payload
