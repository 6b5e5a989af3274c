"""Frame 1 of the bulk read and heads extensions: lengths and records, heads."""
from __future__ import annotations

import sys
from array import array
from typing import Any, Sequence

import numpy as np

from consensus.wire.errors import InvalidField, LimitExceeded, Truncated

from .messages import (BulkRecords, Command, DafkaLimits, MAX_COUNT, MAX_SEQUENCE, PROTOCOL, _LAST,
                       _LE_U32, _U32_PACK, _U64_PACK, _header, _number, _string)


def pack_bulk(lengths: Sequence[int] | Any, data: bytes | bytearray | memoryview
              ) -> bytes:
    """Frame 1 of BULK-RECORDS: the lengths as little-endian u32, then `data` (the
    records concatenated). `lengths` is an array('I') (as `SegmentedLog.read_joined`
    gives it), a numpy array or any int sequence; one copy of `data`, no step per
    record."""
    if isinstance(lengths, np.ndarray):
        packed = lengths.astype(_LE_U32, copy=False).tobytes()
    else:
        arr = lengths if getattr(lengths, "typecode", None) == "I" else array("I", lengths)
        if sys.byteorder == "big":
            arr = array("I", arr)
            arr.byteswap()
        packed = arr.tobytes()
    return b"".join((packed, data))


def bulk_records_frame0(topic: str, address: str, partition: str, subject: str,
                        sequence: int, count: int, last: bool) -> bytes:
    """Frame 0 of BULK-RECORDS; a store sends it with frame 1 from `pack_bulk` (which
    it built itself, so nothing needs checking again as `encode` does)."""
    return b"".join((
        _header(Command.BULK_RECORDS, topic), _string(address, "address"),
        _string(partition, "partition"), _string(subject, "subject"),
        _U64_PACK(_number(sequence, "sequence", MAX_SEQUENCE)),
        _U32_PACK(_number(count, "count", MAX_COUNT)), bytes((_LAST if last else 0,))))


def pack_heads(heads: Sequence[tuple[str, str, int]]) -> bytes:
    """Frame 1 of BULK-HEADS: per entry the subject and the partition as strings (1-byte
    length + bytes) and the head as u64, big-endian like the rest of Dafka."""
    parts: list[bytes] = []
    for subject, partition, head in heads:
        parts += (_string(subject, "subject"), _string(partition, "partition"),
                  _U64_PACK(_number(head, "head", MAX_SEQUENCE)))
    return b"".join(parts)


def bulk_heads_frame0(topic: str, address: str, request: int, first: int, count: int,
                      total: int) -> bytes:
    """Frame 0 of BULK-HEADS: requester, store reader, request, first, count, total."""
    if first + count > total:
        raise InvalidField("total", f"{total} < first {first} + count {count}",
                           protocol=PROTOCOL)
    return b"".join((
        _header(Command.BULK_HEADS, topic), _string(address, "address"),
        _U32_PACK(_number(request, "request", MAX_COUNT)),
        _U32_PACK(_number(first, "first", MAX_COUNT)),
        _U32_PACK(_number(count, "count", MAX_COUNT)),
        _U32_PACK(_number(total, "total", MAX_COUNT))))


def bulk_lengths(msg: BulkRecords) -> np.ndarray:
    """The record lengths of a decoded BULK-RECORDS (a read-only uint32 view)."""
    return np.frombuffer(msg.content, _LE_U32, msg.count)


def bulk_offsets(msg: BulkRecords) -> np.ndarray:
    """The int32 Arrow offsets (count + 1 of them) of the records of a decoded
    BULK-RECORDS, relative to its data (frame 1 from byte 4 * count on): a numpy
    cumsum, no step per record. `decode` checked that the lengths add up to the data,
    and `max_bulk_bytes` < 2^31 keeps them in int32."""
    offsets = np.zeros(msg.count + 1, np.int32)
    np.cumsum(bulk_lengths(msg), out=offsets[1:], dtype=np.int32)
    return offsets


def _check_bulk(content: bytes | bytearray | memoryview, count: int, limits: DafkaLimits,
                name: str = "content") -> None:
    """Frame 1 of BULK-RECORDS holds exactly `count` lengths and their records."""
    if count > limits.max_bulk_records:
        raise LimitExceeded("count", f"{count} records, limit {limits.max_bulk_records}",
                            protocol=PROTOCOL)
    if len(content) > limits.max_bulk_bytes:
        raise LimitExceeded(name, f"{len(content)} bytes, limit {limits.max_bulk_bytes}",
                            protocol=PROTOCOL)
    if 4 * count > len(content):
        raise Truncated(name, f"{count} lengths need {4 * count} bytes, "
                        f"{len(content)} present", protocol=PROTOCOL)
    total = int(np.frombuffer(content, _LE_U32, count).sum(dtype=np.uint64))
    if total != len(content) - 4 * count:
        raise InvalidField(name, f"the lengths add up to {total} bytes, "
                           f"{len(content) - 4 * count} follow them", protocol=PROTOCOL)
