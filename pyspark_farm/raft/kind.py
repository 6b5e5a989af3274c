"""The `raft` kind: its options and how they become readers and writers."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql.types import StructType

from ..admission import Limits
from ..connection import CONNECTION_OPTIONS, FarmConnection
from ..errors import OptionError
from ..offsets import OffsetSpec, offset_spec_parser
from ..options import Option, OptionSet, boolean, choice, duration, integer, text
from ..schema import KindColumns, arrow_schema, source_ddl, split_schema
from ..sink import FarmBatchWriter, FarmStreamWriter
from ..value_formats import FORMATS, check_value_column
from ..log_access import READ_FROM
from .rows import RAFT_COLUMNS_DDL
from .sink import COMPRESSIONS, RaftSinkBackend
from .source import RaftBatchReader, RaftSourceSettings, RaftStreamReader

COLUMNS = KindColumns(RAFT_COLUMNS_DDL)
VALUE_FORMAT = Option("valueFormat", choice(*FORMATS), "binary",
                      doc="how values carry columns: binary, json, msgpack or arrow")

SOURCE_OPTIONS = CONNECTION_OPTIONS.named("the raft source") + OptionSet("", (
    Option("startingOffsets", offset_spec_parser("startingOffsets"), None,
           doc='earliest, latest or {"index": N}'),
    Option("endingOffsets", offset_spec_parser("endingOffsets"), None,
           doc='batch reads only: earliest, latest or {"index": N}'),
    Option("maxOffsetsPerTrigger", integer(1), None, doc="rows per micro-batch, at most"),
    Option("minOffsetsPerTrigger", integer(1), None, doc="rows per micro-batch, at least"),
    Option("maxTriggerDelay", duration, 900.0,
           doc="longest wait for minOffsetsPerTrigger rows"),
    Option("failOnDataLoss", boolean, True, doc="fail when entries were compacted away"),
    Option("minPartitions", integer(1), 1, doc="Spark tasks per micro-batch, at least"),
    Option("readFrom", choice(*READ_FROM), "any", doc="which members serve the reads"),
    VALUE_FORMAT,
    Option("valueSchema", text, None, doc="columns decoded from values (DDL or JSON)"),
))

SINK_OPTIONS = CONNECTION_OPTIONS.named("the raft sink") + OptionSet("", (
    VALUE_FORMAT,
    # The farm takes entries up to 32 MiB (docs/runtime.md): stay well below.
    Option("stageBytes", integer(1024, 16 << 20), 4 << 20,
           doc="Arrow bytes per staged payload, before compression"),
    Option("compression", choice(*COMPRESSIONS), "zstd",
           doc="compression of staged payloads: zstd, lz4 or none"),
    Option("stageThreads", integer(1, 16), 2, doc="staged payloads in flight per task"),
))


def _source_values(options: Mapping[str, str]) -> dict:
    values = SOURCE_OPTIONS.parse(options, ignore=("kind",))
    low, high = values["minOffsetsPerTrigger"], values["maxOffsetsPerTrigger"]
    if low is not None and high is not None and low > high:
        raise OptionError("minOffsetsPerTrigger", f"{low} is above maxOffsetsPerTrigger {high}")
    return values


def schema(options: Mapping[str, str]) -> str:
    values = _source_values(options)
    return source_ddl(COLUMNS, values["valueFormat"], values["valueSchema"])


def _settings(options: Mapping[str, str], schema_: StructType, *, streaming: bool
              ) -> RaftSourceSettings:
    values = _source_values(options)
    value_columns = split_schema(COLUMNS, schema_)
    starting: OffsetSpec | None = values["startingOffsets"]
    ending: OffsetSpec | None = values["endingOffsets"]
    if streaming:
        if ending is not None:
            raise OptionError("endingOffsets", "is for batch reads (spark.read); a stream "
                              "runs on: drop it, or use Trigger.AvailableNow")
        starting = starting or OffsetSpec("latest")
        ending = OffsetSpec("latest")
    else:
        starting = starting or OffsetSpec("earliest")
        ending = ending or OffsetSpec("latest")
        if starting.position == "latest":
            raise OptionError("startingOffsets", "'latest' would read nothing in a batch "
                              'query: use earliest or {"index": N}')
        if ending.position == "earliest":
            raise OptionError("endingOffsets", "'earliest' would read nothing in a batch "
                              'query: use latest or {"index": N}')
    return RaftSourceSettings(
        connection=FarmConnection.from_options(values), starting=starting, ending=ending,
        limits=Limits(values["maxOffsetsPerTrigger"], values["minOffsetsPerTrigger"],
                      values["maxTriggerDelay"]),
        fail_on_data_loss=values["failOnDataLoss"], min_partitions=values["minPartitions"],
        read_from=values["readFrom"], value_format=values["valueFormat"],
        schema=arrow_schema(schema_),
        value_schema=arrow_schema(value_columns) if len(value_columns) else None)


def stream_reader(options: Mapping[str, str], schema_: StructType) -> RaftStreamReader:
    return RaftStreamReader(_settings(options, schema_, streaming=True))


def batch_reader(options: Mapping[str, str], schema_: StructType) -> RaftBatchReader:
    return RaftBatchReader(_settings(options, schema_, streaming=False))


def _backend(options: Mapping[str, str], schema_: StructType
             ) -> tuple[RaftSinkBackend, str]:
    values = SINK_OPTIONS.parse(options, ignore=("kind",))
    if values["valueFormat"] == "binary":   # fail when the query starts, not in a task
        value = next((f for f in schema_.fields if f.name == "value"), None)
        check_value_column(schema_.fieldNames(),
                           value.dataType.typeName() if value is not None else None)
    return (RaftSinkBackend(FarmConnection.from_options(values), values["stageBytes"],
                            values["stageThreads"], values["compression"]),
            values["valueFormat"])


def stream_writer(options: Mapping[str, str], schema_: StructType, overwrite: bool
                  ) -> FarmStreamWriter:
    # Complete mode asks to overwrite: like Kafka, a log sink appends each batch's rows.
    return FarmStreamWriter(*_backend(options, schema_))


def batch_writer(options: Mapping[str, str], schema_: StructType, overwrite: bool
                 ) -> FarmBatchWriter:
    if overwrite:
        raise OptionError("mode", "a raft log is append-only: use mode('append')")
    return FarmBatchWriter(*_backend(options, schema_))
