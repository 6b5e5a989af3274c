"""The dafka source: Dafka partitions as a stream (and as a table), read from the stores.

The driver-side reader (one long-lived Python process) asks the stores for the heads of
the subscribed topics (GET-HEADS), and with readCommitted the farm for the indexes of
partitions the garlicfarm sink wrote: such a partition is read only up to its frontier
(the first undecided sequence) and only its committed ranges are read; a partition with
no index (a plain Dafka producer's) is read as the stores hold it. Each Spark task reads
offset ranges of one partition from the stores by FETCH (`StoreClient`), so executors
never depend on the producer still running, and any store holding a range serves it:
when one dies mid-read, the re-FETCH is answered by another. Tasks read with the bulk
read extension (`StoreClient.read_range_arrays`: one store per task, the values
arrive as Arrow binary arrays), falling back to plain FETCH for stores without it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from connectors.dafka import DafkaConfig, StoreClient

from ..admission import SourceLimits
from ..compat import ReadLimit, StartTracker, SupportsTriggerAvailableNow
from ..connection import FarmClientOptions
from ..errors import GarlicFarmSparkError
from ..value_formats import value_decoder
from .deployment import open_store_client
from .index import PartitionIndex, Range
from .ledger import decided, load_index
from .offsets import (Offsets, OffsetsSpec, PartitionKey, Subscription, offsets_json,
                      parse_offsets)
from .planning import ReadTask, batch_ends, plan_tasks, task_counts

if TYPE_CHECKING:
    from consensus.client import FarmClient

log = logging.getLogger("pyspark_farm.dafka")
#: The dafka source's own columns (docs/options.md).
DAFKA_COLUMNS_DDL = ("topic string, partition string, offset long, value binary, "
                     "timestamp timestamp")
OFFSETS_PER_TASK = 1 << 18
ROWS_PER_BATCH = 1 << 16
BYTES_PER_BATCH = 64 << 20     # well under binary's 2 GiB of int32 offsets


class DafkaReadError(GarlicFarmSparkError):
    """Offsets the query needs are served by no running store."""


@dataclass(frozen=True)
class DafkaSourceSettings:
    """The source's options, typed; picklable (no sockets)."""
    config: DafkaConfig
    subscription: Subscription
    starting: OffsetsSpec
    ending: OffsetsSpec
    limits: SourceLimits
    fail_on_data_loss: bool
    read_committed: bool
    connection: FarmClientOptions | None     # the farm of the sink's ledger (readCommitted)
    fetch_timeout: float
    value_format: str
    schema: pa.Schema
    value_schema: pa.Schema | None
    min_partitions: int = 1               # Spark tasks per batch, at least


class DafkaPartition(InputPartition):
    """One Spark task: a `ReadTask` (ranges of one partition)."""

    def __init__(self, task: ReadTask | None) -> None:
        super().__init__(None)
        self.task = task


def _batch(settings: DafkaSourceSettings, task: ReadTask, offsets: list[np.ndarray],
           values: list[pa.BinaryArray], decode) -> pa.RecordBatch:
    """One Arrow batch of the source's schema from contiguous pieces (first offsets and
    binary arrays as `StoreClient.read_range_arrays` gives them): one copy of the
    values (concat), no Python object per row."""
    value = values[0] if len(values) == 1 else pa.concat_arrays(values)
    count = len(value)
    makers: dict[str, Callable[[], pa.Array]] = {   # the schema's (`columns` option)
        "topic": lambda: pa.repeat(pa.scalar(task.topic, pa.string()), count),
        "partition": lambda: pa.repeat(pa.scalar(task.partition, pa.string()), count),
        "offset": lambda: pa.array(np.concatenate(offsets), pa.int64()),
        "value": lambda: value,
        "timestamp": lambda: pa.nulls(count, pa.timestamp("us", tz="UTC")),
    }
    columns = [makers[name]() for name in settings.schema.names if name in makers]
    if decode is not None:
        columns.extend(decode(value))
    return pa.RecordBatch.from_arrays(columns, schema=settings.schema)


def read_task(settings: DafkaSourceSettings, task: ReadTask | None
              ) -> Iterator[pa.RecordBatch]:
    """The rows of one task (runs in an executor): Arrow all the way (the stores' bulk
    answers become binary arrays without a Python object per record)."""
    if task is None or not task.ranges:
        return
    decode = (value_decoder(settings.value_format, settings.value_schema)
              if settings.value_schema is not None else None)
    offsets: list[np.ndarray] = []
    values: list[pa.BinaryArray] = []
    rows = size = 0
    with StoreClient(settings.config) as stores:
        for start, stop in task.ranges:
            missing = start
            try:
                for first, piece in stores.read_range_arrays(
                        task.topic, task.partition, start, stop,
                        timeout=settings.fetch_timeout):
                    offsets.append(np.arange(first, first + len(piece), dtype=np.int64))
                    values.append(piece)
                    missing = first + len(piece)
                    rows += len(piece)
                    size += piece.nbytes
                    if rows >= ROWS_PER_BATCH or size >= BYTES_PER_BATCH:
                        yield _batch(settings, task, offsets, values, decode)
                        offsets, values, rows, size = [], [], 0, 0
            except TimeoutError as exc:
                message = (f"Dafka partition {task.topic}/{task.partition}: offsets "
                           f"[{missing}, {stop}) were served by no store within "
                           f"{settings.fetch_timeout:g} s (option fetchTimeout) ({exc})")
                if settings.fail_on_data_loss:
                    raise DafkaReadError(
                        f"{message}. Start the store that holds them, or set failOnDataLoss "
                        "to false to skip what no store serves") from None
                log.warning("%s; skipped (failOnDataLoss is false)", message)
    if values:
        yield _batch(settings, task, offsets, values, decode)


class _Planner:
    """Driver-side state of the stream and batch readers: a store client and a farm
    client opened lazily (never pickled), and the indexes of sink-written partitions."""

    settings: DafkaSourceSettings
    _stores: StoreClient | None = None
    _stores_used = 0.0
    _farm: "FarmClient | None" = None

    def _indexes(self) -> dict[PartitionKey, PartitionIndex | None]:
        if "_index_cache" not in self.__dict__:
            self._index_cache: dict[PartitionKey, PartitionIndex | None] = {}
        return self._index_cache

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_stores", "_farm", "_index_cache", "_latest")}

    def close(self) -> None:
        if self._stores is not None:
            self._stores.stop()
            self._stores = None
        if self._farm is not None:
            self._farm.close()
            self._farm = None

    def _store_client(self) -> StoreClient:
        """The store client, fresh when it sat idle long enough for the stores to forget
        it (it beacons only inside calls; stores drop a node silent for beacon/timeout)."""
        now = time.monotonic()
        if self._stores is not None and \
                now - self._stores_used > self.settings.config.beacon_timeout / 2:
            self._stores.stop()
            self._stores = None
        if self._stores is None:
            self._stores = open_store_client(self.settings.config, self.settings.fetch_timeout)
        self._stores_used = now
        return self._stores

    def _farm_client(self) -> "FarmClient":
        if self._farm is None:
            assert self.settings.connection is not None
            self._farm = self.settings.connection.client()
        return self._farm

    def index(self, key: PartitionKey, needed: int = 0) -> PartitionIndex | None:
        """The decided index of a partition (None: not written by the sink), fresh enough
        to decide every offset below `needed`."""
        cache = self._indexes()
        if key in cache and (cache[key] is None or cache[key].frontier >= needed):
            return cache[key]
        found = load_index(self._farm_client(), *key)
        cache[key] = None if found is None else decided(self._farm_client(), found, key[1])
        return cache[key]

    def latest(self) -> Offsets:
        """Every subscribed partition's latest readable offset."""
        stores = self._store_client()
        heads: dict[PartitionKey, int] = {}
        for topic in self.settings.subscription.topic_queries:
            heads.update(stores.heads(topic, exact=bool(topic),
                                      timeout=self.settings.fetch_timeout))
        latest = {k: head + 1 for k, head in heads.items()
                  if self.settings.subscription.wants(k)}
        self._stores_used = time.monotonic()
        if self.settings.read_committed:
            for key, end in latest.items():
                index = self.index(key, end)
                if index is not None:
                    latest[key] = min(end, index.frontier)
        self._latest = (time.monotonic(), latest)
        return latest

    def tasks(self, starts: Offsets, ends: Offsets) -> list[DafkaPartition]:
        """Spark tasks over [start, end) of each partition: of at most OFFSETS_PER_TASK
        offsets each, and at least `minPartitions` of them (`task_counts`)."""
        planned: dict[PartitionKey, Sequence[Range]] = {}
        for key, end in sorted(ends.items()):
            start = starts.get(key, 0)
            if end <= start:
                continue
            ranges: Sequence[Range] = [(start, end)]
            if self.settings.read_committed:
                index = self.index(key, end)
                if index is not None:
                    ranges = index.visible(start, end)
            planned[key] = ranges
        counts = task_counts({k: sum(b - a for a, b in r) for k, r in planned.items()},
                             self.settings.min_partitions, OFFSETS_PER_TASK)
        return [DafkaPartition(t) for key, ranges in planned.items()
                for t in plan_tasks(key, ranges, OFFSETS_PER_TASK, counts.get(key))]


class DafkaStreamReader(_Planner, StartTracker, DataSourceStreamReader,
                        SupportsTriggerAvailableNow):
    """Micro-batches over Dafka partitions, with admission control."""

    def __init__(self, settings: DafkaSourceSettings) -> None:
        self.settings = settings
        self._target: Offsets | None = None       # Trigger.AvailableNow's ends
        self._last_batch_at = time.monotonic()     # for maxTriggerDelay
        self._initial: dict | None = None

    def initialOffset(self) -> dict:
        """Where a new query starts; the same each time this reader is asked (PySpark
        before 4.2 asks after latestOffset has planned from it)."""
        if self._initial is None:
            latest = self.latest()
            self._initial = offsets_json({k: self.settings.starting.resolve(k, end)
                                          for k, end in latest.items()})
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.settings.limits.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.latest()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch. PySpark before 4.2 passes neither argument:
        the start is the end of the batch Spark last planned, the limits this source's
        options (docs/compatibility.md)."""
        if start is None:
            start = self.next_start()
        starts = parse_offsets(start, "start offset")
        latest = self.latest() if self._target is None else {
            k: min(v, self._target[k]) if k in self._target else v
            for k, v in self.latest().items() if k in self._target}
        now = time.monotonic()
        ends = batch_ends(starts, latest, self.settings.limits.under(limit),
                          waited=now - self._last_batch_at,
                          available_now=self._target is not None)
        if any(ends[k] > starts.get(k, 0) for k in ends):
            self._last_batch_at = now
        return offsets_json(ends)

    def reportLatestOffset(self) -> dict:
        """What latestOffset last saw (Spark asks right after it), else a fresh look."""
        seen = getattr(self, "_latest", None)
        if seen is not None and time.monotonic() - seen[0] < 1.0:
            return offsets_json(seen[1])
        return offsets_json(self.latest())

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        planned = self.tasks(parse_offsets(start, "start offset"),
                             parse_offsets(end, "end offset"))
        self.note_end(end)
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.settings, getattr(partition, "task", None))

    def commit(self, end: dict) -> None:
        """Nothing to do: the stores keep every record."""

    def stop(self) -> None:
        self.close()


class DafkaBatchReader(_Planner, DataSourceReader):
    """`spark.read`: the partitions between startingOffsets and endingOffsets."""

    def __init__(self, settings: DafkaSourceSettings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        try:
            latest = self.latest()
            starts = {k: self.settings.starting.resolve(k, end) for k, end in latest.items()}
            ends = {k: min(end, max(starts[k], self.settings.ending.resolve(k, end)))
                    for k, end in latest.items()}
            planned = self.tasks(starts, ends)
        finally:
            self.close()
        return planned or [DafkaPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(self.settings, getattr(partition, "task", None))


__all__ = ["DAFKA_COLUMNS_DDL", "DafkaBatchReader", "DafkaStreamReader"]
