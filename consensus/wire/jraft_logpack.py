"""JRaft's LogPack: a gzip of a run of log records, in one of two incompatible layouts.

SyncLogRequest carries one LogPack entry. Its uncompressed content is whatever the
*sender's* log store wrote, with no tag saying which (tests/vectors/garlicfarm/LAYOUT.md):

* **FileBased** (FileBasedSequentialLogStore; what we emit): ``indexLength i32 (= 8k) |
  dataLength i32 | k index entries i64 | data``. The index entries are the sender's
  absolute offsets in its ``store.data``; record i spans ``[idx[i] - idx[0], idx[i+1] -
  idx[0])`` of the data and is ``term i64 | valueType u8 | value`` with no length field.
  Only ``idx[0]`` is free (`LogPack.base_offset`); the rest follow from the record sizes.
* **H2** (H2LogStore; derived from the source, never run): records to the end, each
  ``recordSize i32 (counting itself) | term i64 | valueType u8 | value``.
* **Empty**: FileBased's packLog returns zero bytes, not a gzip, when asked past its end.

Telling them apart safely: the content is FileBased exactly when its first two i32 are a
non-negative multiple of 8 and a non-negative length with ``8 + indexLength + dataLength
== len(content)``. Every FileBased pack satisfies this by construction. An H2 pack
satisfies it only if its first record's term is >= 2**32 (the term's high half lands in
dataLength; with a smaller term dataLength is 0, leaving exactly 8 bytes for records of at
least 13), so no real H2 pack is mistaken for FileBased; anything else is parsed as H2,
and so is content whose sizes line up but which does not parse as FileBased. Only content
valid in both layouts (an H2 pack with such a term, and index offsets and value types
that happen to fit) is read as FileBased.

Deflate output differs between compressors, so packs compare by content (`entries`,
`format`, `base_offset`): the gzip bytes received are kept in `compressed` (excluded from
equality) and sent on unchanged when the pack is relayed. We use zlib, not the gzip
module, deliberately: decompression must stop at a size limit (gzip.decompress has no
cap: a small bomb would expand to gigabytes), and our own gzip header is byte-for-byte
OpenJDK's (mtime 0, OS 255), so a pack we build matches what a JRaft peer would send.
"""
from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from consensus.wire.errors import (ChecksumMismatch, InvalidField, LimitExceeded, ProtocolError,
                                   Truncated)
from consensus.wire.jraft_fields import (I64, error, field_scope, join, json_hex, json_int,
                                         json_list, json_object, pack_ints)
from consensus.wire.jraft_values import (DEFAULT_LIMITS, VALUE_TYPE_OF_BYTE, JRaftLimits,
                                         LogEntry, ValueType, check_payload, entry_from_json,
                                         entry_to_json)

#: What OpenJDK's GZIPOutputStream writes before the deflate stream.
JAVA_GZIP_HEADER = bytes.fromhex("1f8b08000000000000ff")
_RECORD_HEAD = struct.Struct(">qB")       # term, valueType (both layouts)
_MIN_RECORD = _RECORD_HEAD.size           # a FileBased record: 9 bytes and its value
_H2_SIZE_FIELD = 4
_H2_SIZE = struct.Struct(">i")


class LogPackFormat(enum.Enum):
    """Which log store's layout the uncompressed content follows."""
    FILE_BASED = "FileBased"
    H2 = "H2"
    EMPTY = "Empty"


def gzip_java(content: bytes) -> bytes:
    """A gzip member exactly as OpenJDK 17's GZIPOutputStream writes it."""
    deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(content) + deflate.flush()
    trailer = struct.pack("<II", zlib.crc32(content), len(content) & 0xFFFFFFFF)
    return JAVA_GZIP_HEADER + body + trailer


def gunzip_bounded(data: bytes, limit: int, base: int = 0) -> bytes:
    """Decompress every gzip member of ``data``, refusing to produce more than ``limit``
    bytes (checked as the output grows, so a bomb costs at most ``limit`` bytes)."""
    out = bytearray()
    rest = data
    member = 0
    while True:
        where = "gzip" if member == 0 else f"gzip.member[{member}]"
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += inflate.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            corrupt = "data check" in str(exc) or "length check" in str(exc)
            cls = ChecksumMismatch if corrupt else InvalidField
            raise error(cls, where, f"bad gzip data ({exc})", base) from None
        if len(out) > limit:
            raise error(LimitExceeded, "uncompressedSize",
                        f"expands beyond the limit of {limit} bytes", base)
        if not inflate.eof:
            raise error(Truncated, where, "the gzip stream ends early", base + len(data))
        rest = inflate.unused_data
        if not rest:
            return bytes(out)
        member += 1


@dataclass(frozen=True, slots=True)
class LogPack:
    """The records of a LogPack entry, compared by content; see the module docstring."""
    format: LogPackFormat
    entries: tuple[LogEntry, ...] = ()
    base_offset: int = 0        #: FileBased: the first record's offset in the sender's store
    compressed: bytes | None = field(default=None, compare=False, repr=False)

    VALUE_TYPE: ClassVar[ValueType] = ValueType.LOG_PACK
    JSON_KEY: ClassVar[str] = "logPack"

    # -- content ------------------------------------------------------------------------

    def content(self) -> bytes:
        """The uncompressed bytes, as the sender's store laid them out."""
        if self.format is LogPackFormat.EMPTY:
            if self.entries:
                raise error(InvalidField, "entries", "an Empty pack holds no entries")
            return b""
        records = []
        for i, entry in enumerate(self.entries):
            with field_scope(f"entries[{i}]"):
                head = pack_ints(">qB", ("term", "valueType"), entry.term, int(entry.value_type))
            records.append(head + entry.value)
        if self.format is LogPackFormat.H2:
            if self.base_offset:
                raise error(InvalidField, "baseOffset", "only FileBased packs have one")
            return b"".join(struct.pack(">i", _H2_SIZE_FIELD + len(r)) + r for r in records)
        if self.base_offset < 0 or (self.base_offset and not records):
            raise error(InvalidField, "baseOffset", "must be >= 0, and 0 for a pack without "
                        "entries")
        offsets, at = [], self.base_offset
        for record in records:
            offsets.append(at)
            at += len(record)
        index = pack_ints(f">{len(offsets)}q", ("baseOffset",) * len(offsets), *offsets)
        data_length = at - self.base_offset
        return pack_ints(">ii", ("indexLength", "dataLength"), len(index), data_length) \
            + index + b"".join(records)

    @property
    def uncompressed_size(self) -> int:
        if self.format is LogPackFormat.EMPTY:
            return 0
        header = 8 + 8 * len(self.entries) if self.format is LogPackFormat.FILE_BASED else 0
        per_record = _MIN_RECORD + (_H2_SIZE_FIELD if self.format is LogPackFormat.H2 else 0)
        return header + sum(per_record + len(e.value) for e in self.entries)

    # -- bytes --------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The received gzip bytes when there are any, else a fresh Java-style gzip."""
        if self.compressed is not None:
            return self.compressed
        content = self.content()
        return gzip_java(content) if self.format is not LogPackFormat.EMPTY else b""

    @classmethod
    def from_bytes(cls, data: bytes, limits: JRaftLimits = DEFAULT_LIMITS, base: int = 0,
                   max_uncompressed: int | None = None) -> LogPack:
        """Decompress (at most ``max_uncompressed`` bytes, default the limits') and parse."""
        if not data:
            return cls(LogPackFormat.EMPTY, compressed=b"")
        limit = limits.max_log_pack_size if max_uncompressed is None else max_uncompressed
        content = gunzip_bounded(data, limit, base)
        pack_format, base_offset, entries = _parse_content(content, limits)
        for i, entry in enumerate(entries):
            # Nested packs are not opened: a pack of packs would multiply the work.
            if entry.value_type not in (ValueType.APPLICATION, ValueType.LOG_PACK):
                check_payload(f"records[{i}]", entry.value_type, entry.value, limits)
        return cls(pack_format, entries, base_offset, compressed=bytes(data))

    # -- JSON ---------------------------------------------------------------------------

    def to_json(self) -> dict:
        out: dict[str, Any] = {"format": self.format.value}
        if self.format is LogPackFormat.FILE_BASED:
            out["baseOffset"] = self.base_offset
        if self.format is not LogPackFormat.EMPTY:
            out["entries"] = [entry_to_json(e) for e in self.entries]
        if self.compressed:
            out["gzip"] = self.compressed.hex()
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str) -> LogPack:
        """With ``gzip``, those exact bytes are kept and must hold the listed entries;
        without it the pack is compressed afresh."""
        json_object(obj, path, ("format", "baseOffset", "entries", "gzip"))
        formats = {f.value: f for f in LogPackFormat}
        if obj.get("format") not in formats:
            raise error(InvalidField, join(path, "format"),
                        f"{obj.get('format')!r} is not one of {', '.join(formats)}")
        entries = json_list(obj, "entries", path)
        pack = cls(formats[obj["format"]],
                   tuple(entry_from_json(e, join(join(path, "entries"), i))
                         for i, e in enumerate(entries)),
                   json_int(obj, "baseOffset", path, (0, I64[1])))
        with field_scope(path):
            pack.content()          # a pack that cannot be laid out is refused here
        if "gzip" not in obj:
            return pack
        compressed = json_hex(obj, "gzip", path)
        with field_scope(path):
            received = cls.from_bytes(compressed)
        if received != pack:
            raise error(InvalidField, join(path, "gzip"), "does not hold the listed entries; "
                        "drop the gzip key to compress them afresh")
        return received


def _parse_content(content: bytes, limits: JRaftLimits
                   ) -> tuple[LogPackFormat, int, tuple[LogEntry, ...]]:
    """FileBased when the sizes say so and it parses; otherwise H2 (module docstring)."""
    if not _looks_file_based(content):
        return LogPackFormat.H2, 0, _parse_h2(content, limits)
    try:
        return (LogPackFormat.FILE_BASED, *_parse_file_based(content, limits))
    except ProtocolError as file_based_error:
        try:
            return LogPackFormat.H2, 0, _parse_h2(content, limits)
        except ProtocolError:
            raise file_based_error from None


def _looks_file_based(content: bytes) -> bool:
    if len(content) < 8:
        return False
    index_length, data_length = struct.unpack_from(">ii", content)
    return (index_length >= 0 and index_length % 8 == 0 and data_length >= 0
            and 8 + index_length + data_length == len(content))


def _records(content: bytes, spans: list[tuple[int, int]]) -> tuple[LogEntry, ...]:
    """``term | valueType | value`` in each span (both layouts store records this way)."""
    unpack, entries = _RECORD_HEAD.unpack_from, []
    for i, (start, end) in enumerate(spans):
        term, type_byte = unpack(content, start)
        value_type = VALUE_TYPE_OF_BYTE[type_byte]
        if value_type is None:
            raise error(InvalidField, f"records[{i}].valueType",
                        f"unknown value type {type_byte} (1..5)", start + 8)
        entries.append(LogEntry(term, value_type, content[start + _MIN_RECORD:end]))
    return tuple(entries)


def _parse_file_based(content: bytes, limits: JRaftLimits) -> tuple[int, tuple[LogEntry, ...]]:
    index_length, data_length = struct.unpack_from(">ii", content)   # sizes already checked
    count = index_length // 8
    if count > limits.max_entries:
        raise error(LimitExceeded, "indexLength",
                    f"{count} records is above the limit of {limits.max_entries}", 0)
    offsets = struct.unpack_from(f">{count}q", content, 8)
    if not offsets:
        if data_length:
            raise error(InvalidField, "dataLength", "data without index entries", 4)
        return 0, ()
    base_offset = offsets[0]
    if base_offset < 0:
        raise error(InvalidField, "index[0]", f"negative offset {base_offset}", 8)
    data_at, largest = 8 + index_length, limits.max_value_size + _MIN_RECORD
    spans, start = [], 0
    for i, end in enumerate([o - base_offset for o in offsets[1:]] + [data_length]):
        if not _MIN_RECORD <= end - start <= largest:
            last = i + 1 == count
            raise error(InvalidField, "dataLength" if last else f"index[{i + 1}]",
                        f"record {i} would be {end - start} bytes; a record is {_MIN_RECORD} "
                        f"to {largest}", 4 if last else 8 + 8 * (i + 1))
        spans.append((data_at + start, data_at + end))
        start = end
    return base_offset, _records(content, spans)


def _parse_h2(content: bytes, limits: JRaftLimits) -> tuple[LogEntry, ...]:
    smallest = _H2_SIZE_FIELD + _MIN_RECORD
    largest = smallest + limits.max_value_size
    spans: list[tuple[int, int]] = []
    pos, total = 0, len(content)
    while pos < total:
        field_name = f"records[{len(spans)}].recordSize"
        if len(spans) == limits.max_entries:
            raise error(LimitExceeded, "records", f"more than {limits.max_entries} records", pos)
        if total - pos < _H2_SIZE_FIELD:
            raise error(Truncated, field_name, f"needs 4 bytes, {total - pos} left", pos)
        (size,) = _H2_SIZE.unpack_from(content, pos)
        if not smallest <= size <= largest:
            raise error(InvalidField, field_name, f"{size} is not a record size "
                        f"({smallest} to {largest})", pos)
        if size > total - pos:
            raise error(Truncated, field_name, f"declares {size} bytes, {total - pos} left", pos)
        spans.append((pos + _H2_SIZE_FIELD, pos + size))
        pos += size
    return _records(content, spans)
