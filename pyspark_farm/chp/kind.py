"""The `chp` kind: a CHP map's changelog (streams), the map itself (batch reads), and an
idempotent KVSET sink. Options: docs/options.md, "The chp kind"."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql.types import StructType

from connectors.chp.address import parse_address
from connectors.chp.errors import ChpConfigError

from ..admission import SourceLimits
from ..connection import CONNECTION_OPTIONS, FarmClientOptions
from ..errors import OptionError
from ..log_access import READ_FROM
from ..kind_options import READ_OPTIONS, parse_source
from ..options import Option, OptionSet, choice, duration, integer, non_empty, text
from ..schema import KindColumns, arrow_schema, source_ddl, split_schema
from .capture import CaptureSettings
from .rows import CHP_COLUMNS_DDL
from .sink import MARKER_PREFIX, ChpBatchWriter, ChpSinkBackend, ChpStreamWriter, check_input
from .source import (ChpMapReader, ChpSourceSettings, ChpStreamReader, MapSettings, ValueColumns,
                     map_reader)

COLUMNS = KindColumns(CHP_COLUMNS_DDL)


def servers(value: str) -> tuple[str, ...]:
    """`host:port[,host:port]`: a server, then its Binary Star backup(s)."""
    found = tuple(part.strip() for part in value.split(",") if part.strip())
    if not found:
        raise ValueError("expected host:port of the CHP server (and of its backup)")
    for server in found:
        try:
            parse_address(server)
        except ChpConfigError as exc:
            raise ValueError(str(exc)) from None
    return found


SERVER_OPTIONS = OptionSet("", (
    Option("endpoint", servers, required=True,
           doc="set it to host:port of the CHP server (its snapshot port), then of its "
               "Binary Star backup: 127.0.0.1:5556,127.0.0.1:5566"),
    Option("subtree", text, "", doc="the key prefix read (or confirmed, by the sink)"),
    Option("serverTimeout", duration, 5.0,
           doc="silence after which a client fails over to the next server"),
))

VALUE_OPTIONS = OptionSet("", tuple(READ_OPTIONS.by_key[k] for k in ("valueformat",
                                                                       "valueschema",
                                                                       "columns")))

#: `spark.read`: the map from the server; no farm involved.
MAP_OPTIONS = SERVER_OPTIONS.named("the chp map read") + VALUE_OPTIONS

SOURCE_OPTIONS = (CONNECTION_OPTIONS.named("the chp source") + SERVER_OPTIONS + READ_OPTIONS
                  + OptionSet("", (
    Option("startingOffsets", choice("snapshot", "latest"), "snapshot",
           doc="snapshot (the current map first, then updates) or latest"),
    Option("minPartitions", integer(1), 1, doc="Spark tasks per micro-batch, at least"),
    Option("readFrom", choice(*READ_FROM), "any", doc="which farm members serve the reads"),
    Option("captureLinger", duration, 0.05, doc="longest wait before captured updates are "
                                                "written to the farm"),
    Option("captureChunkRows", integer(1, 1_000_000), 10_000,
           doc="updates per journal chunk, at most"),
)))
_STREAM_ONLY = tuple(k for k in SOURCE_OPTIONS.by_key if k not in MAP_OPTIONS.by_key)

SINK_OPTIONS = SERVER_OPTIONS.named("the chp sink") + OptionSet("", (
    Option("markerPrefix", non_empty, MARKER_PREFIX,
           doc="prefix of the commit marker keys (one per query)"),
    Option("confirmTimeout", duration, 30.0,
           doc="longest wait for the server to publish a task's KVSETs"),
))


def _source_values(options: Mapping[str, str]) -> dict:
    return parse_source(SOURCE_OPTIONS, options)


def _map_values(options: Mapping[str, str]) -> dict:
    return MAP_OPTIONS.parse(options, ignore=("kind", *_STREAM_ONLY))


def schema(options: Mapping[str, str]) -> str:
    values = _map_values(options)
    return source_ddl(COLUMNS.selected(values["columns"]), values["valueFormat"],
                      values["valueSchema"])


def _columns(values: dict, schema_: StructType) -> ValueColumns:
    value_columns = split_schema(COLUMNS.selected(values["columns"]), schema_)
    return ValueColumns(values["valueFormat"], arrow_schema(schema_),
                        arrow_schema(value_columns) if len(value_columns) else None)


def _settings(options: Mapping[str, str], schema_: StructType) -> ChpSourceSettings:
    values = _source_values(options)
    capture = CaptureSettings(
        connection=FarmClientOptions.from_options(values), servers=values["endpoint"],
        subtree=values["subtree"].encode(), server_timeout=values["serverTimeout"],
        emit_snapshot=values["startingOffsets"] == "snapshot",
        fail_on_data_loss=values["failOnDataLoss"], linger=values["captureLinger"],
        chunk_rows=values["captureChunkRows"])
    return ChpSourceSettings(
        capture=capture,
        limits=SourceLimits(values["maxOffsetsPerTrigger"], values["minOffsetsPerTrigger"],
                      values["maxTriggerDelay"]),
        min_partitions=values["minPartitions"], read_from=values["readFrom"],
        columns=_columns(values, schema_))


def stream_reader(options: Mapping[str, str], schema_: StructType) -> ChpStreamReader:
    return ChpStreamReader(_settings(options, schema_))


def batch_reader(options: Mapping[str, str], schema_: StructType) -> ChpMapReader:
    """The current map, from the server (farm options are not needed)."""
    values = _map_values(options)
    return map_reader(MapSettings(values["endpoint"], values["subtree"].encode(),
                                  values["serverTimeout"], _columns(values, schema_)))


def _backend(options: Mapping[str, str], schema_: StructType, *, markers: bool
             ) -> ChpSinkBackend:
    values = SINK_OPTIONS.parse(options, ignore=("kind",))
    check_input([(f.name, f.dataType.typeName()) for f in schema_.fields])
    return ChpSinkBackend(values["endpoint"], values["subtree"].encode(),
                          values["serverTimeout"], values["confirmTimeout"],
                          values["markerPrefix"], markers)


def stream_writer(options: Mapping[str, str], schema_: StructType, overwrite: bool
                  ) -> ChpStreamWriter:
    # Complete mode asks to overwrite: a map sink sets each row's key, so it is an upsert.
    return ChpStreamWriter(_backend(options, schema_, markers=True), "binary")


def batch_writer(options: Mapping[str, str], schema_: StructType, overwrite: bool
                 ) -> ChpBatchWriter:
    if overwrite:
        raise OptionError("mode", "the chp sink sets keys (an upsert) and never clears the "
                          "map: use mode('append')")
    return ChpBatchWriter(_backend(options, schema_, markers=False), "binary")
