"""The chp source: a CHP map's changelog as a stream, and the map itself as a table.

Streams: the driver's `capture` appends the map's changes to the farm's journal; offsets
are positions in that journal, ``{"index": N, "capture": ID, "since": S}`` (the next log
index to read, the capture's id, the index where it began): the id travels in the
checkpoint, so a restarted query finds its capture's history and resumes it. Executors
read the capture's chunks in the range as committed batches (`log_access`): the stream
is replayable, and the CHP server is never asked for history it does not have.

Batch reads (`spark.read`) return the current map straight from a server: one task
takes a snapshot of the subtree, narrowed by pushed filters on `key` (=, IN, LIKE
'prefix%'); from our servers it comes as KVBULK columns, turned into Arrow batches
without a loop per key (`client.read_snapshot`, `rows.bulk_batch`).
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from connectors.chp.client import read_snapshot

from ..admission import SourceLimits
from ..compat import (EqualNullSafe, EqualTo, Filter, In, ReadLimit, StartTracker,
                      StringStartsWith, SupportsTriggerAvailableNow, pushdown_allowed)
from ..log_access import LogPartition, LogPlanner, PieceReader, log_end
from ..value_formats import value_decoder
from .capture import Capture, CaptureSettings, obtain, release
from .rows import CHP_SCHEMA, bulk_batch, decode_payload


@dataclass(frozen=True)
class ValueColumns:
    """The Arrow schema of the batches Spark expects, and how to decode values."""
    value_format: str
    schema: pa.Schema               # the Arrow schema of every batch (Spark's, exactly)
    value_schema: pa.Schema | None  # the decoded value columns

    def batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch of the chp columns the schema has (the `columns` option), with the
        columns `valueFormat` decodes appended."""
        columns = [batch.column(name) for name in self.schema.names
                   if name in batch.schema.names]
        if self.value_schema is not None:
            columns += value_decoder(self.value_format, self.value_schema)(batch.column("value"))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


@dataclass(frozen=True)
class ChpSourceSettings:
    """The stream's options, typed; picklable (no sockets)."""
    capture: CaptureSettings
    limits: SourceLimits
    min_partitions: int
    read_from: str
    columns: ValueColumns

    @property
    def connection(self):
        return self.capture.connection

    @property
    def fail_on_data_loss(self) -> bool:
        return self.capture.fail_on_data_loss


# --- offsets --------------------------------------------------------------------------------

def chp_offset(index: int, capture_id: str, since: int) -> dict:
    return {"index": int(index), "capture": capture_id, "since": int(since)}


def parse_offset(offset: dict, what: str = "offset") -> tuple[int, str, int]:
    """(index, capture id, since) of a checkpointed chp offset, or a clear error."""
    if not isinstance(offset, dict) or set(offset) != {"index", "capture", "since"}:
        raise ValueError(f"{what} {offset!r} is not a chp changelog offset (expected "
                         '{"index": N, "capture": ID, "since": S}); was the checkpoint '
                         "written by another source?")
    index, capture_id, since = offset["index"], offset["capture"], offset["since"]
    for name, number in (("index", index), ("since", since)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{what} {offset!r}: {name} must be an integer >= 0")
    if not isinstance(capture_id, str) or not capture_id:
        raise ValueError(f"{what} {offset!r}: capture must be a non-empty id")
    return index, capture_id, since


# --- executors ------------------------------------------------------------------------------

def read_changes(settings: ChpSourceSettings, partition: InputPartition
                 ) -> Iterator[pa.RecordBatch]:
    """The rows of one task: the capture's chunks it was given (runs in an executor)."""
    if not isinstance(partition, LogPartition) or not partition.pieces:
        return
    reader = PieceReader(settings.connection, partition.endpoint,
                         fail_on_data_loss=settings.fail_on_data_loss)
    try:
        for visible in reader.read(partition.pieces):
            for payload in visible.records:
                for batch in decode_payload(payload, visible.index).to_batches():
                    yield settings.columns.batch(batch)
    finally:
        reader.close()


# --- the stream -----------------------------------------------------------------------------

class ChpStreamReader(LogPlanner, StartTracker, DataSourceStreamReader,
                      SupportsTriggerAvailableNow):
    """Micro-batches over the capture's chunks; the capture runs beside it."""

    def __init__(self, settings: ChpSourceSettings) -> None:
        self.settings = settings
        self._capture: Capture | None = None
        self._available_now = False
        self._initial: dict | None = None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_capture"] = None
        return state

    def capture(self, capture_id: str, since: int | None) -> Capture:
        if self._capture is None or self._capture.capture_id != capture_id:
            self._capture = obtain(self.settings.capture, capture_id, since)
        self._capture.check()
        return self._capture

    def initialOffset(self) -> dict:
        """Where a new query starts: a new capture, begun now. Spark may ask more than
        once (Trigger.AvailableNow asks again to plan the first batch): the same offset
        each time, or that batch would name a second, empty capture."""
        if self._initial is None:
            capture_id = f"chp-capture-{uuid.uuid4()}"
            # started first, so that it follows the server while we reach the farm
            capture = self.capture(capture_id, None)
            capture.since = since = log_end(self.client())
            self._initial = chp_offset(since, capture_id, since)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.settings.limits.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True   # the target is fixed once the capture is known

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch. PySpark before 4.2 passes neither argument:
        the start is the end of the batch Spark last planned, the limits this source's
        options (docs/compatibility.md)."""
        if start is None:
            start = self.next_start()
        begin, capture_id, since = parse_offset(start, "start offset")
        capture = self.capture(capture_id, since)
        if self._available_now and self._target is None:
            capture.flush(max(30.0, 3 * self.settings.capture.server_timeout))
            self._target = log_end(self.client())
        return chp_offset(self.next_end(begin, limit, query_id=capture_id), capture_id, since)

    def reportLatestOffset(self) -> dict | None:
        capture = self._capture
        if capture is None:
            return None
        return chp_offset(log_end(self.client()), capture.capture_id, capture.since)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, capture_id, _ = parse_offset(start, "start offset")
        stop, _, _ = parse_offset(end, "end offset")
        planned = self.plan_batch(begin, stop, query_id=capture_id)
        self.note_end(end)
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_changes(self.settings, partition)

    def commit(self, end: dict) -> None:
        self.forget_sizes()

    def stop(self) -> None:
        if self._capture is not None:
            release(self._capture)
            self._capture = None
        self.close()


# --- the map as a table ---------------------------------------------------------------------

class KeyFilter:
    """What filters on `key` leave of a subtree: a longer prefix, or exact keys."""

    def __init__(self, subtree: bytes) -> None:
        self.subtree = subtree
        self.keys: set[bytes] | None = None
        self.empty = False

    def narrow(self, condition: Filter) -> bool:
        """Take a filter into account; False when it says nothing about keys. Spark still
        applies every filter after the read (they are all handed back)."""
        if getattr(condition, "attribute", None) != ("key",):
            return False
        value = getattr(condition, "value", None)
        if isinstance(condition, StringStartsWith) and isinstance(value, str):
            self._prefix(value.encode())
        elif isinstance(condition, (EqualTo, EqualNullSafe, In)):
            values = value if isinstance(condition, In) else (value,)
            if not all(isinstance(v, str) for v in values):
                return False
            found = {v.encode() for v in values}
            self.keys = found if self.keys is None else self.keys & found
            self._prefix(os.path.commonprefix(sorted(found)) if found else b"")
            self.empty = self.empty or not self.keys
        else:
            return False
        return True

    def _prefix(self, prefix: bytes) -> None:
        if prefix.startswith(self.subtree):
            self.subtree = prefix
        elif not self.subtree.startswith(prefix):
            self.empty = True       # two prefixes that exclude each other

    def wanted(self, key: bytes) -> bool:
        return not self.empty and (self.keys is None or key in self.keys)


@dataclass(frozen=True)
class MapSettings:
    """What a batch read of the map needs (picklable)."""
    servers: tuple[str, ...]
    subtree: bytes
    server_timeout: float
    columns: ValueColumns


class ChpMapPartition(InputPartition):
    def __init__(self, subtree: bytes, keys: frozenset[bytes] | None) -> None:
        super().__init__(None)
        self.subtree = subtree
        self.keys = keys


class ChpMapReader(DataSourceReader):
    """`spark.read`: the current map under `subtree`. This class takes no filters (Spark
    filters the rows it reads); `ChpPushdownReader` narrows the snapshot by key filters
    where the session allows it (`map_reader`)."""

    def __init__(self, settings: MapSettings) -> None:
        self.settings = settings
        self.filter = KeyFilter(settings.subtree)

    def partitions(self) -> Sequence[InputPartition]:
        if self.filter.empty:
            return [ChpMapPartition(b"", frozenset())]
        keys = None if self.filter.keys is None else frozenset(self.filter.keys)
        return [ChpMapPartition(self.filter.subtree, keys)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChpMapPartition)
        if partition.keys is not None and not partition.keys:
            return
        settings = self.settings
        snapshot = read_snapshot(list(settings.servers), partition.subtree,
                                 server_timeout=settings.server_timeout)
        table = pa.Table.from_batches([bulk_batch(p) for p in snapshot.parts], CHP_SCHEMA)
        if partition.keys is not None:
            wanted = pa.array(sorted(partition.keys), pa.binary())
            table = table.filter(pc.is_in(table.column("key").cast(pa.binary()), wanted))
        if table.num_rows:
            for batch in table.sort_by("key").to_batches():
                yield settings.columns.batch(batch)


class ChpPushdownReader(ChpMapReader):
    """The map reader with the snapshot narrowed by filters on `key` (=, IN, LIKE
    'prefix%'); Spark still applies every filter to the rows (they are all returned)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for condition in filters:
            self.filter.narrow(condition)
            yield condition


def map_reader(settings: MapSettings) -> ChpMapReader:
    """The reader for `spark.read`: with pushFilters only where Spark may call it
    (`compat.pushdown_allowed`), so a session without
    spark.sql.python.filterPushdown.enabled reads too."""
    return (ChpPushdownReader if pushdown_allowed() else ChpMapReader)(settings)
