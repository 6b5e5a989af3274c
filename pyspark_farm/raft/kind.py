"""The `raft` kind: its options and how they become readers and writers."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql.types import StructType

from ..admission import SourceLimits
from ..connection import CONNECTION_OPTIONS, FarmClientOptions
from ..errors import OptionError
from ..kind_options import (READ_OPTIONS, VALUE_FORMAT, offset_bounds, parse_sink, parse_source,
                            sink_writers)
from ..log_access import READ_FROM
from ..offsets import OffsetSpec, offset_spec_parser
from ..options import Option, OptionSet, choice, integer
from ..schema import KindColumns, arrow_schema, source_ddl, split_schema
from .consumer import consumer_name
from .rows import RAFT_COLUMNS_DDL
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
    values = parse_source(SOURCE_OPTIONS, options)
    return source_ddl(COLUMNS.selected(values["columns"]), values["valueFormat"],
                      values["valueSchema"])


def _settings(options: Mapping[str, str], schema_: StructType, *, streaming: bool
              ) -> RaftSourceSettings:
    values = parse_source(SOURCE_OPTIONS, options)
    value_columns = split_schema(COLUMNS.selected(values["columns"]), schema_)
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


def stream_reader(options: Mapping[str, str], schema_: StructType) -> RaftStreamReader:
    return RaftStreamReader(_settings(options, schema_, streaming=True))


def batch_reader(options: Mapping[str, str], schema_: StructType) -> RaftBatchReader:
    return _batch_reader(_settings(options, schema_, streaming=False))


def _backend(options: Mapping[str, str], schema_: StructType
             ) -> tuple[RaftSinkBackend, str]:
    values = parse_sink(SINK_OPTIONS, options, schema_)
    return (RaftSinkBackend(FarmClientOptions.from_options(values), values["stageBytes"],
                            values["stageThreads"], values["compression"]),
            values["valueFormat"])


stream_writer, batch_writer = sink_writers(_backend, "a raft log is append-only")
