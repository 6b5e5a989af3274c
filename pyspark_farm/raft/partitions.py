"""The raft source over a farm of several partitions (Raft groups).

Without the `partitions` option a farm reads as it always did: offsets ``{"index": N}``,
no `partition` column (and a farm of several partitions is refused, not read in part: the
schema comes from the options alone, so the option says what it is). With
`partitions` = all (or "0,2"), each read partition is one log read by the
one-partition readers of `source` (each with a client addressing that partition's
leader); this module only joins them: the offset is one position per partition
(``{"0": 23, "2": 7}``: the next index to read in each, as Kafka's per-partition offsets),
every task reads one farm partition (so partitions are read in parallel, at least one
task each) and its rows carry a `partition` column (int, the schema's last). `maxOffsetsPerTrigger` is a budget for the
whole micro-batch, dealt out evenly over the partitions read (an idle partition's share
is not given to the others).

Every plan cuts all partitions at one moment of partition 0, where the sink decides each
batch (docs/exactly-once.md, "Partitions"): a batch decided before partition 0's end is
read in every partition, one decided after it in none (`consistent_ends`), so a
micro-batch never holds part of a sink batch.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from consensus.common.partitions import ABORTED_KEY

from ..compat import ReadLimit, ReadMaxRows, StartTracker, SupportsTriggerAvailableNow
from ..errors import OptionError
from ..offsets import index_of, offset_json
from ..log_access import log_end
from .consumer import BEHIND_KEYS

if TYPE_CHECKING:
    from consensus.client import FarmClient

    from ..admission import Limits
    from ..connection import FarmClientOptions
    from .source import RaftBatchReader, RaftSourceSettings, RaftStreamReader

PARTITION_COLUMN = "partition"


def farm_partitions(connection: "FarmClientOptions") -> int:
    """How many partitions the farm has (asked of a member: its answer's `count`; a node
    older than `count` hosts them all, one older than the `partitions` call one)."""
    from consensus.client import FarmError
    from ..log_access import unknown_call
    client = connection.client()
    try:
        view = client.partitions()
    except FarmError as exc:
        if not unknown_call(exc, "partitions"):
            raise
        return 1
    finally:
        client.close()
    if view.get("count"):
        return int(view["count"])
    return 1 + max((int(p["partition"]) for p in view.get("partitions", ())), default=0)


def partition_list(value: str) -> tuple[int, ...] | str:
    """The `partitions` option's parser: "all", or "0,2" -> (0, 2) (checked against the
    farm later)."""
    if value.strip().lower() == "all":
        return "all"
    found: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"expected partition numbers, comma-separated (e.g. 0,2), "
                             f"got {value!r}")
        found.append(int(part))
    if len(set(found)) != len(found):
        raise ValueError(f"a partition is named twice in {value!r}")
    return tuple(sorted(found))


def chosen_partitions(count: int, wanted: tuple[int, ...] | str) -> tuple[int, ...]:
    """The partitions to read: `wanted` (the option), each below `count`, or all."""
    if wanted == "all":
        return tuple(range(count))
    beyond = [p for p in wanted if p >= count]
    if beyond:
        raise OptionError("partitions", f"the farm has partitions 0 to {count - 1}; "
                          f"{beyond} do not exist")
    return wanted


def per_partition(settings: "RaftSourceSettings", partition: int, shares: int
                  ) -> "RaftSourceSettings":
    """The settings of one partition's reader: its client addresses `partition`, its
    schema lacks the `partition` column (added here), its row budget is its share."""
    limits = settings.limits
    if limits.max_rows is not None:
        limits = dataclasses.replace(limits, max_rows=max(1, limits.max_rows // shares))
    schema = settings.schema.remove(settings.schema.get_field_index(PARTITION_COLUMN))
    return dataclasses.replace(
        settings, connection=dataclasses.replace(settings.connection, partition=partition),
        schema=schema, limits=limits,
        min_partitions=max(1, math.ceil(settings.min_partitions / shares)))


def consistent_ends(zero: "FarmClient", clients: dict[int, "FarmClient"]) -> dict[int, int]:
    """One past the last entry each partition (`clients`, by partition) may show in one
    cut: partition 0's end first (its decisions so far), then each other partition up to
    its first commit of a batch that partition 0 had not decided before that end (one
    still prepared and undecided, or decided later: the newest rolled-forward commits
    carry their decision's index). Asking partition 0 first makes every batch decided
    later have a decision past its end, so the cut holds each batch whole or not at all."""
    end0 = log_end(zero)
    return {p: end0 if p == 0 else _cut_end(client, zero, end0, p)
            for p, client in clients.items()}


def _cut_end(client: "FarmClient", zero: "FarmClient", end0: int, partition: int) -> int:
    from consensus.client import FarmError
    try:
        applied, waiting, resolved = client.prepared_commits(end0)
    except FarmError as exc:
        if "not a built-in query" not in str(exc):
            raise
        return log_end(client)      # a node older than prepared commits holds none
    end = applied + 1
    for index, decided_at in resolved:
        if decided_at >= end0:
            end = min(end, index)
    for index, query, batch in waiting:
        if index >= end:
            break
        decision = zero.batch_status(query, batch)
        if decision is not None and decision.aborted:   # never shown once aborted
            if index in decision.metadata[ABORTED_KEY].get(str(partition), ()):
                continue
            return index                                # a later run's: undecided
        if decision is None or decision.index >= end0:
            return index
    return end


class PartitionTask(InputPartition):
    """One task: a one-partition reader's task, in farm partition `partition`."""

    def __init__(self, partition: int, inner: InputPartition) -> None:
        super().__init__(None)
        self.partition = partition
        self.inner = inner


def _tagged(partition: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        column = pa.repeat(pa.scalar(partition, pa.int32()), batch.num_rows)
        yield batch.append_column(PARTITION_COLUMN, column)


def offsets_json(ends: dict[int, int]) -> dict:
    """The checkpointed offset of a partitioned read: {"<partition>": next index}."""
    return {str(p): int(i) for p, i in sorted(ends.items())}


def positions(offset: dict, chosen: Sequence[int], what: str) -> dict[int, int]:
    """The per-partition positions of a checkpointed offset, refusing another shape."""
    if not isinstance(offset, dict) or sorted(offset) != sorted(map(str, chosen)):
        raise ValueError(f"{what} {offset!r} is not an offset of partitions {list(chosen)} "
                         '(expected {"0": N, ...}); was the checkpoint written by another '
                         "source, or did the `partitions` option change?")
    return {p: index_of({"index": offset[str(p)]}, what) for p in chosen}


class PartitionedStreamReader(StartTracker, DataSourceStreamReader,
                              SupportsTriggerAvailableNow):
    """A stream over several partitions: one `RaftStreamReader` each."""

    def __init__(self, readers: dict[int, "RaftStreamReader"], limits: "Limits") -> None:
        self.readers = readers
        self.limits = limits            # the options' limits, for the whole micro-batch
        self._initial: dict | None = None
        self._zero: "FarmClient | None" = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_zero"] = None           # a client: the driver's own
        return state

    def _cut(self) -> None:
        """Give every reader its end in one consistent cut (`consistent_ends`)."""
        self._zero = _cut_readers(self.readers, self._zero)

    def _each(self, offset: dict, what: str) -> dict[int, int]:
        return positions(offset, list(self.readers), what)

    def initialOffset(self) -> dict:
        if self._initial is None:
            self._cut()
            self._initial = offsets_json({p: index_of(r.initialOffset())
                                          for p, r in self.readers.items()})
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.limits.default_read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._cut()
        for reader in self.readers.values():
            reader.prepareForTriggerAvailableNow()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:
            start = self.next_start()
        begins = self._each(start, "start offset")
        if isinstance(limit, ReadMaxRows):
            limit = ReadMaxRows(max(1, limit.max_rows // len(self.readers)))
        self._cut()
        return offsets_json({p: index_of(r.latestOffset(offset_json(begins[p]), limit))
                             for p, r in self.readers.items()})

    def reportLatestOffset(self) -> dict:
        return offsets_json({p: index_of(r.reportLatestOffset())
                             for p, r in self.readers.items()})

    def metrics(self, consumed: dict | None) -> dict[str, str]:
        if consumed is None:
            return {}
        done = self._each(consumed, "consumed")
        behind = [max(0, r._latest - done[p]) for p, r in self.readers.items()
                  if r._latest is not None]
        if not behind:
            return {}
        return {BEHIND_KEYS[0]: str(sum(behind) / len(behind)), BEHIND_KEYS[1]: str(max(behind)),
                BEHIND_KEYS[2]: str(min(behind))}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begins, ends = self._each(start, "start offset"), self._each(end, "end offset")
        planned = [PartitionTask(p, task) for p, r in self.readers.items()
                   for task in r.partitions(offset_json(begins[p]), offset_json(ends[p]))]
        self.note_end(end)
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PartitionTask)
        return _tagged(partition.partition, self.readers[partition.partition].read(
            partition.inner))

    def commit(self, end: dict) -> None:
        ends = self._each(end, "end offset")
        for p, reader in self.readers.items():
            reader.commit(offset_json(ends[p]))

    def stop(self) -> None:
        for reader in self.readers.values():
            reader.stop()
        if self._zero is not None:
            self._zero.close()
            self._zero = None


class PartitionedBatchReader(DataSourceReader):
    """`spark.read` over several partitions: one `RaftBatchReader` each, every task
    reading one partition."""

    def __init__(self, readers: dict[int, "RaftBatchReader"]) -> None:
        self.readers = readers

    def partitions(self) -> Sequence[InputPartition]:
        zero = _cut_readers(self.readers, None)
        if zero is not None:
            zero.close()
        return [PartitionTask(p, task) for p, r in self.readers.items()
                for task in r.partitions()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PartitionTask)
        return _tagged(partition.partition, self.readers[partition.partition].read(
            partition.inner))


def _cut_readers(readers: dict, zero: "FarmClient | None") -> "FarmClient | None":
    """Set each reader's `cut`; partition 0's client when it is not one of `readers`
    (kept by the caller for the next cut)."""
    if 0 not in readers and zero is None:
        connection = next(iter(readers.values())).settings.connection
        zero = dataclasses.replace(connection, partition=0).client()
    clients = {p: r.client() for p, r in readers.items()}
    ends = consistent_ends(clients[0] if 0 in clients else zero, clients)
    for p, reader in readers.items():
        reader.cut = ends[p]
    return zero
