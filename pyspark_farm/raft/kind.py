"""The `raft` kind: its options and how they become readers and writers."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from pyspark.sql.types import StructType

from consensus.common.errors import FarmError

from ..admission import SourceLimits
from ..connection import CONNECTION_OPTIONS, FarmClientOptions
from ..errors import OptionError, SchemaError
from ..kind_options import (READ_OPTIONS, VALUE_FORMAT, offset_bounds, parse_sink, parse_source,
                            sink_writers)
from ..log_access import READ_FROM
from ..offsets import OffsetSpec, offset_spec_parser
from ..options import Option, OptionSet, choice, integer
from ..schema import KindColumns, arrow_schema, source_ddl, split_schema
from .consumer import consumer_name, generated_name
from .partitions import (PARTITION_COLUMN, PartitionedBatchReader, PartitionedStreamReader,
                         chosen_partitions, farm_partitions, partition_list, per_partition)
from .rows import RAFT_COLUMNS_DDL
from .routed_sink import KEY_COLUMN, RoutedSinkBackend, check_key_type
from .sink import COMPRESSIONS, RaftSinkBackend
from .source import RaftBatchReader, RaftSourceSettings, RaftStreamReader
from .source import batch_reader as _batch_reader

COLUMNS = KindColumns(RAFT_COLUMNS_DDL)

SOURCE_OPTIONS = CONNECTION_OPTIONS.named("the raft source") + OptionSet("", (
    Option("startingOffsets", offset_spec_parser("startingOffsets"), None,
           doc='earliest, latest or {"index": N}'),
    Option("endingOffsets", offset_spec_parser("endingOffsets"), None,
           doc='batch reads only: earliest, latest or {"index": N}'),
    Option("startingTimestamp", integer(0), None,
           doc="ms since the epoch: start at the first entry appended at or after it"),
    Option("endingTimestamp", integer(0), None,
           doc="batch reads only, ms since the epoch: stop before the first entry "
               "appended at or after it"),
    Option("minPartitions", integer(1), 1, doc="Spark tasks per micro-batch, at least"),
    Option("readFrom", choice(*READ_FROM), "any", doc="which members serve the reads"),
    Option("partitions", partition_list, None,
           doc='a farm of several partitions: "all", or the ones to read ("0,2"); adds '
               "the `partition` column"),
    Option("consumerName", consumer_name, None,
           doc="streams: the name the farm shows this query's position and lag under "
               "(default: generated when the query starts)"),
)) + READ_OPTIONS

SINK_OPTIONS = CONNECTION_OPTIONS.named("the raft sink") + OptionSet("", (
    VALUE_FORMAT,
    # The farm takes entries up to 32 MiB (docs/runtime.md): stay well below.
    Option("stageBytes", integer(1024, 16 << 20), 4 << 20,
           doc="Arrow bytes per staged payload, before compression"),
    Option("compression", choice(*COMPRESSIONS), "zstd",
           doc="compression of staged payloads: zstd, lz4 or none"),
    Option("stageThreads", integer(1, 16), 2, doc="staged payloads in flight per task"),
))


def schema(options: Mapping[str, str]) -> str:
    """The source's DDL; with the `partitions` option, `partition int` last. The schema
    comes from the options alone (it is made without reaching the farm)."""
    values = parse_source(SOURCE_OPTIONS, options)
    ddl = source_ddl(COLUMNS.selected(values["columns"]), values["valueFormat"],
                     values["valueSchema"])
    if values["partitions"] is None:
        return ddl
    return f"{ddl}, {PARTITION_COLUMN} int"


def _partitions(values: Mapping[str, object]) -> tuple[int, ...] | None:
    """The farm partitions to read, or None without the `partitions` option (a farm of
    one partition, read as ever: a farm of more is refused rather than read in part)."""
    count = farm_partitions(FarmClientOptions.from_options(values))
    if values["partitions"] is None:
        if count > 1:
            raise OptionError("partitions", f"the farm has {count} partitions: set it to "
                              "all (or to the ones to read, e.g. 0,2); the rows then carry "
                              f"a `{PARTITION_COLUMN}` column")
        return None
    for name in ("startingOffsets", "endingOffsets"):
        spec = values[name]
        if spec is not None and spec.position == "index":
            raise OptionError(name, '{"index": N} names a place in one log; partitions '
                              "are read from earliest or latest (or startingTimestamp)")
    if values["minOffsetsPerTrigger"] is not None:
        raise OptionError("minOffsetsPerTrigger", "is not supported with the `partitions` "
                          "option yet: drop it (maxOffsetsPerTrigger is)")
    return chosen_partitions(count, values["partitions"])


def _settings(options: Mapping[str, str], schema_: StructType, *, streaming: bool
              ) -> RaftSourceSettings:
    values = parse_source(SOURCE_OPTIONS, options)
    own = StructType([f for f in schema_.fields if f.name != PARTITION_COLUMN]) \
        if schema_.fieldNames()[-1:] == [PARTITION_COLUMN] else schema_
    value_columns = split_schema(COLUMNS.selected(values["columns"]), own)
    starting, ending = offset_bounds(values["startingOffsets"], values["endingOffsets"],
                                     OffsetSpec, streaming=streaming, exact='{"index": N}')
    times = time_bounds(values, streaming=streaming)
    return RaftSourceSettings(
        connection=FarmClientOptions.from_options(values), starting=starting, ending=ending,
        starting_ms=times[0], ending_ms=times[1],
        limits=SourceLimits(values["maxOffsetsPerTrigger"], values["minOffsetsPerTrigger"],
                      values["maxTriggerDelay"]),
        fail_on_data_loss=values["failOnDataLoss"], min_partitions=values["minPartitions"],
        read_from=values["readFrom"], value_format=values["valueFormat"],
        consumer_name=values["consumerName"],
        schema=arrow_schema(schema_),
        value_schema=arrow_schema(value_columns) if len(value_columns) else None)


def time_bounds(values: Mapping[str, object], *, streaming: bool
                ) -> tuple[int | None, int | None]:
    """(startingTimestamp, endingTimestamp), checked against the offsets they replace
    (Kafka's source lets a timestamp win silently; here giving both is an error)."""
    start, end = values["startingTimestamp"], values["endingTimestamp"]
    for name, other in (("startingTimestamp", "startingOffsets"),
                        ("endingTimestamp", "endingOffsets")):
        if values[name] is not None and values[other] is not None:
            raise OptionError(name, f"and {other} both say where to read: give one of them")
    if end is not None and streaming:
        raise OptionError("endingTimestamp", "is for batch reads (spark.read); a stream "
                          "runs on: drop it, or use Trigger.AvailableNow")
    if start is not None and end is not None and end < start:   # type: ignore[operator]
        raise OptionError("endingTimestamp", f"{end} is before startingTimestamp {start}")
    return start, end  # type: ignore[return-value]


def _chosen(options: Mapping[str, str], schema_: StructType) -> tuple[int, ...] | None:
    chosen = _partitions(parse_source(SOURCE_OPTIONS, options))
    if chosen is not None and schema_.fieldNames()[-1:] != [PARTITION_COLUMN]:
        raise OptionError("schema", f"a farm of several partitions is read with a last "
                          f"column `{PARTITION_COLUMN} int`: add it to the schema you give")
    return chosen


def stream_reader(options: Mapping[str, str], schema_: StructType
                  ) -> RaftStreamReader | PartitionedStreamReader:
    settings = _settings(options, schema_, streaming=True)
    chosen = _chosen(options, schema_)
    if chosen is None:
        return RaftStreamReader(settings)
    # one consumer name for the query in every partition (each leader shows its lag)
    settings = dataclasses.replace(settings, consumer_name=settings.consumer_name
                                   or generated_name())
    return PartitionedStreamReader(
        {p: RaftStreamReader(per_partition(settings, p, len(chosen))) for p in chosen},
        settings.limits)


def batch_reader(options: Mapping[str, str], schema_: StructType
                 ) -> RaftBatchReader | PartitionedBatchReader:
    settings = _settings(options, schema_, streaming=False)
    chosen = _chosen(options, schema_)
    if chosen is None:
        return _batch_reader(settings)
    return PartitionedBatchReader(
        {p: RaftBatchReader(per_partition(settings, p, len(chosen))) for p in chosen})


def _backend(options: Mapping[str, str], schema_: StructType
             ) -> tuple[RaftSinkBackend | RoutedSinkBackend, str]:
    """Today's backend for a farm of one partition; over several, one that routes rows by
    their `key` (routed_sink). Input errors of today's sink are found before the farm is
    asked how many partitions it has."""
    key = next((f for f in schema_.fields if f.name == KEY_COLUMN), None)
    try:
        values = parse_sink(SINK_OPTIONS, options, schema_)
    except SchemaError as refused:
        if key is None:
            raise
        without_key = StructType([f for f in schema_.fields if f.name != KEY_COLUMN])
        values = parse_sink(SINK_OPTIONS, options, without_key)
        try:
            count = farm_partitions(FarmClientOptions.from_options(values))
        except FarmError as exc:    # both problems: the key may be no mistake at all
            raise SchemaError(f"{refused} (a '{KEY_COLUMN}' column routes rows on a farm "
                              f"of several partitions, but the farm could not say how many "
                              f"it has: {exc})") from exc
        if count == 1:
            raise       # a key routes only over several partitions: today's error
    connection = FarmClientOptions.from_options(values)
    backend = RaftSinkBackend(connection, values["stageBytes"], values["stageThreads"],
                              values["compression"])
    count = farm_partitions(connection)
    if count == 1:
        return backend, values["valueFormat"]
    if key is not None:
        check_key_type(key.dataType.typeName())
    return RoutedSinkBackend(backend, count, values["valueFormat"]), values["valueFormat"]


stream_writer, batch_writer = sink_writers(_backend, "a raft log is append-only")
