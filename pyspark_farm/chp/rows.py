"""CHP rows as Arrow: the chp source's columns, the capture's journal payloads, the map.

The capture stores its changes in the farm as Arrow IPC payloads that already have the
source's columns (`CHP_SCHEMA`), so an executor hands them to Spark as they are (plus
the columns `valueFormat` decodes). Keys are text in Spark: a key that is not UTF-8 is
shown with U+FFFD in place of the bad bytes. Properties become a map; a ttl in them is
the absolute expiry in epoch milliseconds (the stored form), except in a live update
that set it (relative seconds, as the server published it).
"""
from __future__ import annotations

from operator import attrgetter
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from connectors.chp.proto import KvBulk, parse_properties
from consensus.wire.errors import ProtocolError

from ..schema import PayloadError, open_ipc
from .changelog import RESYNC_PROPERTY, Change

#: The chp source's own columns (docs/options.md).
CHP_COLUMNS_DDL = ("key string, sequence long, uuid binary, properties map<string,string>, "
                   "value binary, deleted boolean")
CHP_SCHEMA = pa.schema([("key", pa.string()), ("sequence", pa.int64()),
                        ("uuid", pa.binary()), ("properties", pa.map_(pa.string(), pa.string())),
                        ("value", pa.binary()), ("deleted", pa.bool_())])
#: The content type of the capture's staged payloads.
CHANGELOG_CONTENT = "chp-changelog"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def property_map(raw: bytes, resync: str | None = None) -> list[tuple[str, str]]:
    """CHP properties (``name=value`` lines) as map items; unreadable ones are dropped
    (the raw frame was the server's to check)."""
    try:
        pairs = [(_text(n), _text(v)) for n, v in parse_properties(raw)] if raw else []
    except ProtocolError:
        pairs = []
    if resync is not None:
        pairs.append((RESYNC_PROPERTY, resync))
    return pairs


_KEY, _SEQUENCE, _UUID, _PROPERTIES, _VALUE, _DELETED, _RESYNC = (attrgetter(name) for name in (
    "key", "sequence", "uuid", "properties", "value", "deleted", "resync"))


def changes_batch(changes: Sequence[Change]) -> pa.RecordBatch:
    """Changes as one record batch of `CHP_SCHEMA`. The columns are gathered by C loops
    (`attrgetter`) into the KVBULK layout and handed to Arrow as buffers; properties are
    parsed per change only where a change has some."""
    count = len(changes)
    if not count:
        return pa.RecordBatch.from_pylist([], schema=CHP_SCHEMA)
    keys = list(map(_KEY, changes))
    uuids = list(map(_UUID, changes))
    values = list(map(_VALUE, changes))
    raws = list(map(_PROPERTIES, changes))
    resyncs = list(map(_RESYNC, changes))
    return pa.RecordBatch.from_arrays([
        _text_column(keys),
        pa.array(np.fromiter(map(_SEQUENCE, changes), np.int64, count), pa.int64()),
        _binary_column(uuids),
        _properties_column(raws, resyncs),
        _binary_column(values),
        pa.array(np.fromiter(map(_DELETED, changes), np.bool_, count)),
    ], schema=CHP_SCHEMA)


def _offsets(items: list[bytes]) -> np.ndarray:
    ends = np.zeros(len(items) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, items), np.int64, len(items)), out=ends[1:])
    return ends


def _binary_column(items: list[bytes]) -> pa.Array:
    ends = _offsets(items)
    if ends[-1] >= 1 << 31:
        return pa.array(items, pa.binary())   # Arrow chunks it; never in practice
    return _from_buffers(pa.binary(), len(items), ends.astype(np.int32), b"".join(items))


def _text_column(keys: list[bytes]) -> pa.Array:
    """Keys as strings; U+FFFD for bytes that are not UTF-8."""
    column = _binary_column(keys)
    try:
        return column.cast(pa.string())    # validates UTF-8
    except pa.ArrowInvalid:
        return pa.array([_text(k) for k in keys], pa.string())


def _properties_column(raws: list[bytes], resyncs: list[str | None]) -> pa.Array:
    """map<string,string>: the parsed properties, then the resync property if any. Rows
    without raw properties (the usual case) are assembled without a Python loop."""
    count = len(raws)
    if not any(raws):
        has = np.fromiter((r is not None for r in resyncs), np.int32, count)
        ends = np.zeros(count + 1, np.int32)
        np.cumsum(has, out=ends[1:])
        spans = [r for r in resyncs if r is not None]
        return pa.MapArray.from_arrays(pa.array(ends), pa.array([RESYNC_PROPERTY] * len(spans),
                                                                  pa.string()),
                                       pa.array(spans, pa.string()))
    return pa.array([property_map(raw, resync) for raw, resync in zip(raws, resyncs)],
                    pa.map_(pa.string(), pa.string()))


def _from_buffers(kind: pa.DataType, count: int, offsets: np.ndarray, data: bytes) -> pa.Array:
    """A string/binary array over the KVBULK column as it is (no copy, no loop)."""
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(offsets),
                                               pa.py_buffer(data)])


def _bulk_keys(part: KvBulk) -> pa.Array:
    """The keys as strings; a part with a key that is not UTF-8 goes the slow way
    (U+FFFD for the bad bytes, as `changes_batch` does)."""
    keys = _from_buffers(pa.string(), part.count, part.key_offsets, part.keys)
    try:
        keys.validate(full=True)
        return keys
    except pa.ArrowInvalid:
        offsets = part.key_offsets.tolist()
        return pa.array([_text(part.keys[offsets[i]:offsets[i + 1]])
                         for i in range(part.count)], pa.string())


def _bulk_properties(part: KvBulk, resync: str | None) -> pa.Array:
    """map<string,string> per entry: built by a loop only over the entries that have
    properties (or over all of them, to add the resync property)."""
    count = part.count
    lengths = np.diff(part.property_offsets)
    if not part.properties:
        if resync is None:
            return pa.MapArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)),
                                           pa.array([], pa.string()), pa.array([], pa.string()))
        # the usual snapshot: no properties of its own, one resync property per entry
        return pa.MapArray.from_arrays(pa.array(np.arange(count + 1, dtype=np.int32)),
                                       _repeated(RESYNC_PROPERTY, count),
                                       _repeated(resync, count))
    offsets = part.property_offsets.tolist()
    raw = part.properties
    names: list[str] = []
    values: list[str] = []
    ends = np.zeros(count + 1, np.int32)
    rows = range(count) if resync is not None else np.flatnonzero(lengths).tolist()
    counts = np.zeros(count, np.int32)
    for i in rows:
        pairs = property_map(raw[offsets[i]:offsets[i + 1]], resync)
        counts[i] = len(pairs)
        for name, value in pairs:
            names.append(name)
            values.append(value)
    np.cumsum(counts, out=ends[1:])
    return pa.MapArray.from_arrays(pa.array(ends), pa.array(names, pa.string()),
                                   pa.array(values, pa.string()))


def _repeated(text: str, count: int) -> pa.Array:
    """`count` times the same string, as buffers (no Python object per row)."""
    raw = text.encode()
    if len(raw) * count >= 1 << 31:
        return pa.array([text] * count, pa.string())
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(raw))
    return _from_buffers(pa.string(), count, offsets, raw * count)


def bulk_batch(part: KvBulk, *, resync: str | None = None,
               deleted: bool = False) -> pa.RecordBatch:
    """A KVBULK as one record batch of `CHP_SCHEMA`: keys, UUIDs and values are the
    message's own buffers (Arrow offsets + bytes), sequences its numpy column; only
    properties are parsed per entry, and only where there are some. `resync`: the
    ``A:S`` property of snapshot changes; `deleted` for every row."""
    count = part.count
    return pa.RecordBatch.from_arrays([
        _bulk_keys(part),
        pa.array(part.sequences, pa.int64()),
        _from_buffers(pa.binary(), count, part.uuid_offsets, part.uuids),
        _bulk_properties(part, resync),
        _from_buffers(pa.binary(), count, part.value_offsets, part.values),
        pa.array(np.full(count, deleted, np.bool_)),
    ], schema=CHP_SCHEMA)


def _kept(part: KvBulk, subtree: bytes) -> np.ndarray | None:
    """Which entries of a snapshot's KVBULK a client keeps (a body, a key under
    `subtree`: as `mirror.BulkEntries`), by numpy over the columns; None for all."""
    keep = np.diff(part.value_offsets) > 0
    if subtree:
        starts = part.key_offsets[:-1].astype(np.int64)
        keep &= np.diff(part.key_offsets) >= len(subtree)
        data = np.frombuffer(part.keys, np.uint8)
        candidates = np.flatnonzero(keep)
        match = np.ones(len(candidates), np.bool_)
        for position, byte in enumerate(subtree):
            match &= data[starts[candidates] + position] == byte
        keep[candidates] = match
    return None if keep.all() else keep


def snapshot_table(parts: Sequence[KvBulk], subtree: bytes, resync: str) -> pa.Table:
    """A whole snapshot that came in KVBULK columns, as the rows a new capture emits for
    it (what `Changelog.resync` makes of its entries, without a loop per key): every
    entry the client keeps, `resync` as its ``garlicfarm.resync`` property, in sequence
    order (stable, as `resync` sorts)."""
    batches = []
    for part in parts:
        batch = bulk_batch(part, resync=resync)
        keep = _kept(part, subtree)
        batches.append(batch if keep is None else batch.filter(pa.array(keep)))
    table = pa.Table.from_batches(batches, CHP_SCHEMA)
    sequences = table.column("sequence").to_numpy()
    if len(sequences) > 1 and bool((sequences[1:] < sequences[:-1]).any()):
        table = table.take(pa.array(np.argsort(sequences, kind="stable")))
    return table


#: Uncompressed bytes of rows per staged payload: the farm stages a few MiB at a time
#: several times faster than one payload of tens of MiB, and readers fetch the payloads
#: of one commit in parallel.
PAYLOAD_BYTES = 2 << 20


def encode_payloads(changes: Sequence[Change], head: pa.Table | None = None, *,
                    max_bytes: int = PAYLOAD_BYTES) -> Iterator[tuple[bytes, int]]:
    """A chunk's rows (`head`, a snapshot already in columns from `snapshot_table`,
    then `changes`) as journal payloads of about `max_bytes` each (Arrow IPC streams,
    zstd), with their row counts; encoded as they are asked for."""
    parts = [] if head is None else [head]
    if changes or head is None:
        parts.append(pa.Table.from_batches([changes_batch(changes)]))
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    rows = table.num_rows
    step = max(1, rows * max_bytes // max(1, table.nbytes)) if rows else 1
    for start in range(0, max(rows, 1), step):
        piece = table.slice(start, step)
        sink = pa.BufferOutputStream()
        options = pa.ipc.IpcWriteOptions(compression="zstd")
        with pa.ipc.new_stream(sink, CHP_SCHEMA, options=options) as writer:
            writer.write_table(piece)
        yield sink.getvalue().to_pybytes(), piece.num_rows


def decode_payload(payload: bytes, index: int) -> pa.Table:
    """A journal payload back as a table of `CHP_SCHEMA`, checked."""
    table = open_ipc(payload, index, "a chp capture payload")
    if table.schema != CHP_SCHEMA:
        raise PayloadError(f"log index {index}: a chp capture payload has the columns "
                           f"{table.schema.names}, not the capture's")
    return table


def table_changes(table: pa.Table) -> Iterable[Change]:
    """The changes in a decoded payload (for rebuilding the capture's memory);
    `PayloadError` at a row the capture never writes (a null key, sequence, UUID, value
    or flag)."""
    for row in table.to_pylist():
        if None in (row["key"], row["sequence"], row["uuid"], row["value"], row["deleted"]):
            raise PayloadError(f"a chp capture payload has a row with a null column: "
                               f"{ {k: v for k, v in row.items() if v is None} }")
        props = dict(row["properties"] or ())
        yield Change(row["key"].encode(), row["sequence"], row["uuid"], b"", row["value"],
                     row["deleted"], props.get(RESYNC_PROPERTY))


def payload_changes(payload: bytes, index: int) -> list[Change]:
    """The changes of a capture payload committed at log `index`, all checked (Arrow's
    full validation included: the bytes may be anyone's), or `PayloadError`."""
    try:
        table = decode_payload(payload, index)
        table.validate(full=True)
        return list(table_changes(table))
    except (pa.ArrowException, UnicodeDecodeError) as exc:   # (a column name not UTF-8)
        raise PayloadError(f"log index {index}: Arrow refuses a chp capture payload "
                           f"({exc})") from None
