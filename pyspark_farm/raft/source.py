"""The raft source: the committed log of a farm as a stream (and as a table).

Offsets are log indexes (``{"index": N}`` = the next entry to read). Rows come from the
read-committed view of the log: each journal entry's records, and each committed sink
batch's rows at the index of its commit entry; everything else (staged output, aborted
batches, status and configuration entries) shows no rows. Planning (driver) and reading
(executors) are split as Spark runs them: the stream reader lives in one long-lived
Python process on the driver and keeps a FarmClient there; `read()` runs in executors on
pickled copies and opens its own client.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from consensus.wire.journal_pages import JournalPage

from ..admission import SourceLimits
from ..compat import (EqualNullSafe, EqualTo, Filter, GreaterThan, GreaterThanOrEqual, In,
                      LessThan, LessThanOrEqual, ReadLimit, StartTracker,
                      SupportsTriggerAvailableNow, pushdown_allowed)
from ..connection import FarmClientOptions
from ..log_access import LogPartition, LogPlanner, PieceReader, first_index, log_end
from ..offsets import OffsetSpec, index_of, offset_json
from ..value_formats import value_decoder
from .consumer import ConsumerReport, behind_latest
from .rows import RowBatchBuilder, payload_chunks
from .timestamps import index_at_time

if TYPE_CHECKING:
    from consensus.client import FarmClient


@dataclass(frozen=True)
class RaftSourceSettings:
    """The source's options, typed; picklable (no sockets)."""
    connection: FarmClientOptions
    starting: OffsetSpec
    ending: OffsetSpec
    limits: SourceLimits
    fail_on_data_loss: bool
    min_partitions: int
    read_from: str
    value_format: str
    schema: pa.Schema               # the Arrow schema of every batch (Spark's, exactly)
    value_schema: pa.Schema | None  # the decoded value columns (json, msgpack, arrow)
    starting_ms: int | None = None  # startingTimestamp: replaces `starting`
    ending_ms: int | None = None    # endingTimestamp (batch reads): replaces `ending`
    consumer_name: str | None = None    # consumerName (streams): None, a generated one

    def start_in(self, client: "FarmClient", first: int, end: int) -> int:
        """The first index to read of a log holding [first, end)."""
        if self.starting_ms is not None:
            return index_at_time(client, self.starting_ms, first, end)
        return self.starting.resolve(first, end)

    def stop_in(self, client: "FarmClient", start: int, end: int) -> int:
        """One past the last index a batch read reads, from `start` in [.., end)."""
        if self.ending_ms is not None:
            return index_at_time(client, self.ending_ms, start, end)
        return min(end, self.ending.resolve(start, end))


def read_partition(settings: RaftSourceSettings, partition: InputPartition
                   ) -> Iterator[pa.RecordBatch]:
    """The rows of one task, as record batches (runs in an executor)."""
    if not isinstance(partition, LogPartition) or not partition.pieces:
        return
    decode = (value_decoder(settings.value_format, settings.value_schema)
              if settings.value_schema is not None else None)
    builder = RowBatchBuilder(settings.connection.cluster, settings.schema, decode)
    reader = PieceReader(settings.connection, partition.endpoint,
                         fail_on_data_loss=settings.fail_on_data_loss)
    try:
        for visible in reader.read(partition.pieces):
            if isinstance(visible, JournalPage):
                yield from builder.add_journal(visible)
                continue
            for payload, content_type in zip(visible.records, visible.content_types):
                for values in payload_chunks(payload, content_type, visible.index):
                    yield from builder.add_values(visible.index, visible.term, visible.type,
                                                  visible.timestamp_ms, values)
        yield from builder.finish()
    finally:
        reader.close()


class RaftStreamReader(LogPlanner, StartTracker, DataSourceStreamReader,
                       SupportsTriggerAvailableNow):
    """Micro-batches over the committed log, with admission control."""

    def __init__(self, settings: RaftSourceSettings) -> None:
        self.settings = settings
        self._initial: dict | None = None
        self.consumer = ConsumerReport(settings.consumer_name)
        self._latest: int | None = None

    def initialOffset(self) -> dict:
        """Where a new query starts; the same each time this reader is asked (PySpark
        before 4.2 asks after latestOffset has planned from it)."""
        if self._initial is None:
            client = self.client()
            start = self.settings.start_in(client, first_index(client), self.end())
            self._initial = offset_json(self.checked_start(start))
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.settings.limits.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.end()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch. PySpark before 4.2 passes neither argument:
        the start is the end of the batch Spark last planned, the limits this source's
        options (docs/compatibility.md)."""
        if start is None:
            start = self.next_start()
        begin = index_of(start, "start offset")
        self.consumer.committed(self.client(), begin)   # the batch that ended there is done
        return offset_json(self.next_end(begin, limit))

    def reportLatestOffset(self) -> dict:
        self._latest = log_end(self.client())
        return offset_json(self._latest)

    def metrics(self, consumed: dict | None) -> dict[str, str]:
        """Kafka's source metrics in entries (the JVM reader's ReportsSourceMetrics):
        the latest offset Spark last saw minus `consumed`."""
        return behind_latest(None if consumed is None else index_of(consumed, "consumed"),
                             self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        planned = self.plan_batch(index_of(start, "start offset"),
                                  index_of(end, "end offset"))
        self.note_end(end)
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.settings, partition)

    def commit(self, end: dict) -> None:
        self.forget_sizes()
        self.consumer.committed(self.client(), index_of(end, "end offset"))

    def stop(self) -> None:
        self.close()


class RaftBatchReader(LogPlanner, DataSourceReader):
    """`spark.read`: the committed log between startingOffsets and endingOffsets. This
    class takes no filters (Spark filters the rows it reads); `RaftPushdownReader` adds
    pushdown of `index` filters where the session allows it (`batch_reader`)."""

    def __init__(self, settings: RaftSourceSettings) -> None:
        self.settings = settings
        self.bounds = IndexBounds()

    def partitions(self) -> Sequence[InputPartition]:
        client = self.client()
        try:
            end = self.end()
            start = self.checked_start(self.settings.start_in(client, first_index(client), end))
            stop = self.settings.stop_in(client, start, end)
            planned = self.plan(self.bounds.ranges(start, stop))
        finally:
            self.close()
        return planned or [LogPartition((), None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.settings, partition)


class RaftPushdownReader(RaftBatchReader):
    """The batch reader with filters on `index` narrowing what is read."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for condition in filters:
            if not self.bounds.narrow(condition):
                yield condition


def batch_reader(settings: RaftSourceSettings) -> RaftBatchReader:
    """The reader for `spark.read`: with pushFilters only where Spark may call it
    (`compat.pushdown_allowed`), so a session without
    spark.sql.python.filterPushdown.enabled reads too."""
    return (RaftPushdownReader if pushdown_allowed() else RaftBatchReader)(settings)


class IndexBounds:
    """What filters on `index` leave of the log: [low, high) and, for IN / =, the points."""

    def __init__(self) -> None:
        self.low = 0
        self.high: int | None = None
        self.points: set[int] | None = None

    def narrow(self, condition: Filter) -> bool:
        """Apply a filter; False when it is not one this reader can take over."""
        if getattr(condition, "attribute", None) != ("index",):
            return False
        value = getattr(condition, "value", None)
        values = value if isinstance(condition, In) else (value,)
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return False
        if isinstance(condition, (EqualTo, EqualNullSafe, In)):
            found = set(values)
            self.points = found if self.points is None else self.points & found
        elif isinstance(condition, GreaterThan):
            self.low = max(self.low, value + 1)
        elif isinstance(condition, GreaterThanOrEqual):
            self.low = max(self.low, value)
        elif isinstance(condition, LessThan):
            self.high = value if self.high is None else min(self.high, value)
        elif isinstance(condition, LessThanOrEqual):
            self.high = value + 1 if self.high is None else min(self.high, value + 1)
        else:
            return False
        return True

    def ranges(self, start: int, stop: int) -> list[tuple[int, int]]:
        low = max(start, self.low)
        high = stop if self.high is None else min(stop, self.high)
        if self.points is None:
            return [(low, high)] if high > low else []
        found: list[tuple[int, int]] = []
        for point in sorted(p for p in self.points if low <= p < high):
            if found and found[-1][1] == point:
                found[-1] = (found[-1][0], point + 1)
            else:
                found.append((point, point + 1))
        return found
