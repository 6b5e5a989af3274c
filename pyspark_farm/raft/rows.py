"""Visible log entries to Arrow record batches of the raft source's schema.

Rows are built column-wise: the values of many entries are gathered into one binary
array (an Arrow payload's `value` column as is; a page of journal entries' records over
the buffer they arrived in), and the per-entry columns (index, term, type, timestamp)
are repeated with numpy, so no Python object is made per row.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import pyarrow as pa

from ..schema import PayloadError, open_ipc

if TYPE_CHECKING:
    from consensus.wire.journal_pages import JournalPage

#: The raft source's own columns (docs/options.md).
RAFT_COLUMNS_DDL = ("cluster string, index long, term long, type string, value binary, "
                    "timestamp timestamp")
ARROW_CONTENT = "arrow"
#: Entry types that show rows: a journal entry's records, a committed batch's rows.
TYPES = ("journal", "commit")


@functools.cache
def _type_names() -> pa.Array:
    """TYPES as an Arrow array, made on first use: any pyarrow array built from Python
    imports pandas (~0.4 s), which the driver's planning and commit workers, importing
    this module, never need."""
    return pa.array(TYPES, pa.string())


def arrow_values(payload: bytes, index: int) -> list[pa.Array]:
    """The `value` column of a staged Arrow IPC payload, one array per record batch the
    sink wrote (zero-copy: the arrays view the payload's decompressed buffers)."""
    table = open_ipc(payload, index, "a committed 'arrow' payload")
    if "value" not in table.schema.names:
        raise PayloadError(f"log index {index}: a committed 'arrow' payload has no 'value' "
                           f"column (columns: {table.schema.names})")
    column = table.column("value")
    if not pa.types.is_binary(column.type):
        try:
            column = column.cast(pa.binary())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise PayloadError(f"log index {index}: the 'value' column of a committed payload "
                               f"is {column.type}, not binary") from None
    return column.chunks


def payload_chunks(payload: bytes, content_type: str, index: int) -> list[pa.Array]:
    """The values a committed payload holds, as arrays: an Arrow payload's rows, else
    one value."""
    if content_type == ARROW_CONTENT:
        return arrow_values(payload, index)
    return [pa.array([payload], pa.binary())]


def payload_values(payload: bytes, content_type: str, index: int) -> pa.Array:
    """`payload_chunks` as one array."""
    chunks = payload_chunks(payload, content_type, index)
    if len(chunks) == 1:
        return chunks[0]
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.binary())


@dataclass
class RowBatchBuilder:
    """Collects the rows of visible entries and cuts them into record batches."""
    cluster: str
    schema: pa.Schema                              # the full Arrow schema Spark expects
    decode: Callable[[pa.Array], list[pa.Array]] | None = None
    max_rows: int = 1 << 16
    max_bytes: int = 16 << 20
    #: Arrow values of this many rows or more become a batch of their own, without being
    #: copied into a bigger one (a staged payload holds the sink's input batches, 10,000
    #: rows each by Spark's default): copying them cost ~10% of a read task's CPU.
    direct_rows: int = 4096
    _indexes: list[int] = field(default_factory=list)
    _terms: list[int] = field(default_factory=list)
    _types: list[int] = field(default_factory=list)
    _times: list[int] = field(default_factory=list)
    _counts: list[int] = field(default_factory=list)
    _chunks: list[pa.Array] = field(default_factory=list)
    _rows: int = 0
    _bytes: int = 0

    def add_journal(self, page: "JournalPage") -> Iterator[pa.RecordBatch]:
        """A page of journal entries as columns (`read_journal`): its records become one
        binary array over the page's buffer (no Python object per record), cut into
        batches of `max_rows` rows at entry boundaries."""
        if not len(page):
            return
        yield from self.finish()             # what came before, in log order
        offsets = page.offsets()
        ends = np.cumsum(page.count, dtype=np.int64)
        first = 0
        while first < len(page):
            # as many whole entries as max_rows holds (at least one)
            base = ends[first - 1] if first else 0
            last = max(first + 1, int(np.searchsorted(ends, base + self.max_rows, "right")))
            lo, hi = int(base), int(ends[last - 1])
            values = pa.BinaryArray.from_buffers(
                pa.binary(), hi - lo, [None, pa.py_buffer(offsets[lo:hi + 1] - offsets[lo]),
                                       pa.py_buffer(page.data)[offsets[lo]:offsets[hi]]])
            entries = slice(first, last)
            yield self._batch(page.index[entries].astype(np.int64),
                              page.term[entries].astype(np.int64),
                              np.full(last - first, TYPES.index("journal"), np.int8),
                              page.timestamp[entries].astype(np.int64),
                              page.count[entries].astype(np.int64), values)
            first = last

    def add_values(self, index: int, term: int, type_: str, timestamp_ms: int,
                   values: pa.Array) -> Iterator[pa.RecordBatch]:
        """Values already in Arrow (a committed batch's payload)."""
        if len(values) == 0:
            return
        if len(values) >= self.direct_rows:
            yield from self.finish()             # what came before, in log order
            for start in range(0, len(values), self.max_rows):
                piece = values.slice(start, self.max_rows)
                self._entry(index, term, type_, timestamp_ms, len(piece))
                self._chunks.append(piece)
                yield self._emit()
            return
        self._entry(index, term, type_, timestamp_ms, len(values))
        self._chunks.append(values)
        self._bytes += values.nbytes
        yield from self._maybe_emit()

    def finish(self) -> Iterator[pa.RecordBatch]:
        if self._rows:
            yield self._emit()

    # -- internals -----------------------------------------------------------------------------
    def _entry(self, index: int, term: int, type_: str, timestamp_ms: int, count: int) -> None:
        self._indexes.append(index)
        self._terms.append(term)
        self._types.append(TYPES.index(type_))
        self._times.append(timestamp_ms)
        self._counts.append(count)
        self._rows += count

    def _maybe_emit(self) -> Iterator[pa.RecordBatch]:
        if self._rows >= self.max_rows or self._bytes >= self.max_bytes:
            yield self._emit()

    def _emit(self) -> pa.RecordBatch:
        values = self._chunks[0] if len(self._chunks) == 1 else pa.concat_arrays(self._chunks)
        batch = self._batch(np.asarray(self._indexes, np.int64),
                            np.asarray(self._terms, np.int64), np.asarray(self._types, np.int8),
                            np.asarray(self._times, np.int64),
                            np.asarray(self._counts, np.int64), values)
        self._indexes, self._terms, self._types, self._times, self._counts = [], [], [], [], []
        self._chunks = []
        self._rows = self._bytes = 0
        return batch

    def _batch(self, indexes: np.ndarray, terms: np.ndarray, types: np.ndarray,
               times: np.ndarray, counts: np.ndarray, values: pa.Array) -> pa.RecordBatch:
        """The batch of `values`, entry k's `counts[k]` rows carrying its index, term,
        type and time."""
        rows = len(values)
        # only the columns the schema has (the `columns` option), each made on demand
        makers: dict[str, Callable[[], pa.Array]] = {
            "cluster": lambda: pa.repeat(pa.scalar(self.cluster, pa.string()), rows),
            "index": lambda: pa.array(np.repeat(indexes, counts)),
            "term": lambda: pa.array(np.repeat(terms, counts)),
            "type": lambda: _type_names().take(pa.array(np.repeat(types, counts))),
            "value": lambda: values,
            "timestamp": lambda: pa.array(np.repeat(times, counts) * 1000,
                                          pa.timestamp("us", tz="UTC")),
        }
        columns = [makers[name]() for name in self.schema.names if name in makers]
        if self.decode is not None:
            columns.extend(self.decode(values))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
