"""KVBULK, garlicfarm's bulk snapshot (docs/protocol.md "CHP bulk snapshot"): many
snapshot entries as eight frames of columns, every declared count and length checked
against `ChpLimits` and the frames before anything is built."""
from __future__ import annotations

import struct
import sys
from array import array
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from consensus.wire.errors import InvalidField, LimitExceeded, Truncated, UnknownMessageType

from .limits import DEFAULT_LIMITS, PROTOCOL, ChpLimits
from .messages import BULK_FRAMES, BULK_VERSION, KVBULK, UUID_LENGTH, EntryLike, KvBulk
from .properties import parse_properties

if array("I").itemsize != 4 or array("q").itemsize != 8:   # pragma: no cover
    raise ImportError("connectors.chp.proto needs 4-byte array('I') and 8-byte array('q')")
_BULK_HEADER = struct.Struct(">BxxxI")     # version, 3 reserved zero bytes, entry count
_SWAP = sys.byteorder == "little"     # the wire is big-endian, as the kvmsg sequence
_U32 = np.dtype(">u4")
_MAX_INT32 = (1 << 31) - 1
_KEY, _SEQ, _UUID, _PROPERTIES, _BODY = (attrgetter(name) for name in (
    "key", "sequence", "uuid", "properties", "body"))
_I64 = np.dtype(">i8")


def bulk_column_bytes(entries: Sequence[EntryLike]) -> int:
    """The bytes of the largest variable column (keys, properties, bodies) a KVBULK of
    `entries` holds: what `ChpLimits.max_bulk_bytes` bounds."""
    return max(sum(map(len, map(get, entries))) for get in (_KEY, _PROPERTIES, _BODY))


def encode_bulk(entries: Sequence[EntryLike]) -> list[bytes]:
    """The eight KVBULK frames of `entries` (anything with key, sequence, uuid,
    properties and body: `kvmap.Entry`, `Kvsync`). The caller keeps a KVBULK within
    `ChpLimits` (`bulk.slices`); values no peer could decode raise `InvalidField`."""
    keys = list(map(_KEY, entries))         # attrgetter: the loops run in C
    uuids = list(map(_UUID, entries))
    props = list(map(_PROPERTIES, entries))
    bodies = list(map(_BODY, entries))
    try:
        sequences = array("q", map(_SEQ, entries))
    except OverflowError:
        raise InvalidField("sequence", "does not fit a signed 64-bit integer",
                           protocol=PROTOCOL) from None
    lengths = array("I", map(len, keys))
    uuid_lengths = array("I", map(len, uuids))
    if uuid_lengths.count(0) + uuid_lengths.count(UUID_LENGTH) != len(uuid_lengths):
        raise InvalidField("uuid", "must be 16 bytes or empty", protocol=PROTOCOL)
    lengths += uuid_lengths
    lengths.extend(map(len, props))
    lengths.extend(map(len, bodies))
    if _SWAP:
        sequences.byteswap()
        lengths.byteswap()
    return [KVBULK, _BULK_HEADER.pack(BULK_VERSION, len(keys)), sequences.tobytes(),
            lengths.tobytes(), b"".join(keys), b"".join(uuids), b"".join(props),
            b"".join(bodies)]


def _sized(frame: Any, expected: int, field: str) -> None:
    if len(frame) != expected:
        error = Truncated if len(frame) < expected else InvalidField
        raise error(field, f"{len(frame)} bytes, expected {expected}", protocol=PROTOCOL)


def decode_bulk(frames: Sequence[bytes], limits: ChpLimits = DEFAULT_LIMITS) -> KvBulk:
    """A KVBULK, checked: the count against `limits` and the fixed-size frames, every
    length against its limit, the sums against the column frames, each UUID 16 bytes
    or empty, each non-empty properties value as in a KVSYNC. Nothing is allocated
    before the count and frame sizes are known to fit."""
    count = len(frames)
    if count != BULK_FRAMES:
        error = Truncated if count < BULK_FRAMES else InvalidField
        raise error("frames", f"got {count} frames, expected {BULK_FRAMES}: KVBULK, "
                    "header, sequences, lengths, keys, uuids, properties, bodies",
                    protocol=PROTOCOL)
    marker, header, seqs, lengths_frame, keys, uuids, props, values = frames
    if marker != KVBULK:
        raise UnknownMessageType("command", f"{bytes(marker[:16])!r} is not KVBULK",
                                 protocol=PROTOCOL)
    _sized(header, _BULK_HEADER.size, "header")
    version, n = _BULK_HEADER.unpack(header)
    if version != BULK_VERSION or header[1:4] != b"\0\0\0":
        raise InvalidField("header", f"version {version} (reserved bytes "
                           f"{bytes(header[1:4]).hex()}); we speak version {BULK_VERSION}",
                           protocol=PROTOCOL)
    if n > limits.max_bulk_entries:
        raise LimitExceeded("count", f"{n} entries > limit {limits.max_bulk_entries}",
                            protocol=PROTOCOL)
    _sized(seqs, 8 * n, "sequences")
    _sized(lengths_frame, 16 * n, "lengths")
    largest_frame = min(limits.max_bulk_bytes, _MAX_INT32)   # Arrow's int32 offsets
    for name, frame in (("keys", keys), ("uuids", uuids), ("properties", props),
                        ("bodies", values)):
        if len(frame) > largest_frame:
            raise LimitExceeded(name, f"{len(frame)} bytes > limit {largest_frame}",
                                protocol=PROTOCOL)
    lengths = np.frombuffer(lengths_frame, _U32).reshape(4, n)   # a view: no copy
    offsets = []
    for row, (name, frame_name, frame, largest) in enumerate((
            ("key", "keys", keys, limits.max_key_bytes),
            ("uuid", "uuids", uuids, UUID_LENGTH),
            ("properties", "properties", props, limits.max_properties_bytes),
            ("body", "bodies", values, limits.max_body_bytes))):
        column = lengths[row]
        if n and int(column.max()) > largest:
            raise LimitExceeded(name, f"an entry of {int(column.max())} bytes > limit "
                                f"{largest}", protocol=PROTOCOL)
        total = int(column.sum(dtype=np.int64))
        if total != len(frame):
            error = Truncated if len(frame) < total else InvalidField
            raise error(frame_name, f"the lengths add up to {total} bytes, the frame holds "
                        f"{len(frame)}", protocol=PROTOCOL)
        ends = np.zeros(n + 1, np.int32)
        np.cumsum(column, out=ends[1:], dtype=np.int32)   # total < 2 GiB: checked above
        offsets.append(ends)
    key_offsets, uuid_offsets, property_offsets, value_offsets = offsets
    if n and not np.all((lengths[1] == 0) | (lengths[1] == UUID_LENGTH)):
        raise InvalidField("uuid", "must be 16 bytes or empty", protocol=PROTOCOL)
    props = bytes(props)
    if props:
        po = property_offsets.tolist()
        for i in np.flatnonzero(lengths[2]).tolist():
            parse_properties(props[po[i]:po[i + 1]], limits)
    return KvBulk(np.frombuffer(seqs, _I64).astype(np.int64), key_offsets, bytes(keys),
                  uuid_offsets, bytes(uuids), property_offsets, props, value_offsets,
                  bytes(values))

