"""The `dafka` kind: its options and how they become readers and writers
(docs/options.md, "kind = dafka")."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql.types import StructType

from ..admission import SourceLimits
from ..connection import CONNECTION_OPTIONS, FarmClientOptions
from ..errors import OptionError
from ..kind_options import (READ_OPTIONS, VALUE_FORMAT, offset_bounds, parse_sink, parse_source,
                            sink_writers)
from ..options import Option, OptionSet, boolean, integer, non_empty, positive_float
from ..schema import KindColumns, arrow_schema, source_ddl, split_schema
from .deployment import dafka_config, passthrough_keys, towers
from .offsets import OffsetsSpec, Subscription, offsets_spec_parser
from .sink import DafkaSinkBackend
from .source import DAFKA_COLUMNS_DDL, DafkaBatchReader, DafkaSourceSettings, DafkaStreamReader

COLUMNS = KindColumns(DAFKA_COLUMNS_DDL)
TOWER = Option("tower", towers, required=True,
               doc="set it to the Dafka towers' beacon endpoints, tcp://HOST:PORT[,...]")
_FARM = tuple(o for o in CONNECTION_OPTIONS.options if o.name != "endpoints") + (
    Option("endpoints", CONNECTION_OPTIONS.by_key["endpoints"].parse, None,
           doc="the farm of the sink's ledger (host:port,...)"),)

SOURCE_OPTIONS = OptionSet("the dafka source", (
    TOWER,
    Option("subscribe", non_empty, None, doc="topics, comma-separated"),
    Option("subscribePattern", non_empty, None, doc="a regex of topics"),
    Option("assign", non_empty, None, doc='JSON {"topic": ["<partition>", ...]}'),
    Option("startingOffsets", offsets_spec_parser("startingOffsets"), None,
           doc='earliest, latest or {"topic": {"<partition>": offset}}'),
    Option("endingOffsets", offsets_spec_parser("endingOffsets"), None,
           doc='batch reads only: latest or {"topic": {"<partition>": offset}}'),
    Option("readCommitted", boolean, True,
           doc="sink-written partitions: committed batches only (needs endpoints)"),
    Option("fetchTimeout", positive_float, 30.0,
           doc="seconds a range may go unserved by every store before the read fails"),
    Option("minPartitions", integer(1), 1,
           doc="Spark tasks per batch, at least (offset ranges split evenly)"),
) + READ_OPTIONS.options + _FARM)

SINK_OPTIONS = OptionSet("the dafka sink", (
    TOWER,
    Option("topic", non_empty, required=True, doc="set it to the Dafka topic to write"),
    VALUE_FORMAT,
    Option("ackTimeout", positive_float, 60.0,
           doc="seconds a task waits for a store to acknowledge its records"),
)) + CONNECTION_OPTIONS


def _source_values(options: Mapping[str, str]) -> dict:
    values = parse_source(SOURCE_OPTIONS, options, passthrough_keys(options))
    if values["readCommitted"] and values["endpoints"] is None:
        raise OptionError("endpoints", "readCommitted (true by default) needs the farm of "
                          "the garlicfarm sink's ledger: set endpoints (and username/password), "
                          "or set readCommitted to false to read every stored record")
    return values


def schema(options: Mapping[str, str]) -> str:
    values = _source_values(options)
    return source_ddl(COLUMNS.selected(values["columns"]), values["valueFormat"],
                      values["valueSchema"])


def _settings(options: Mapping[str, str], schema_: StructType, *, streaming: bool
              ) -> DafkaSourceSettings:
    values = _source_values(options)
    value_columns = split_schema(COLUMNS.selected(values["columns"]), schema_)
    starting, ending = offset_bounds(values["startingOffsets"], values["endingOffsets"],
                                     OffsetsSpec, streaming=streaming,
                                     exact="per-partition JSON")
    return DafkaSourceSettings(
        config=dafka_config(values["tower"], options),
        subscription=Subscription.from_options(values["subscribe"],
                                               values["subscribePattern"], values["assign"]),
        starting=starting, ending=ending,
        limits=SourceLimits(values["maxOffsetsPerTrigger"], values["minOffsetsPerTrigger"],
                      values["maxTriggerDelay"]),
        fail_on_data_loss=values["failOnDataLoss"], read_committed=values["readCommitted"],
        connection=FarmClientOptions.from_options(values) if values["readCommitted"] else None,
        fetch_timeout=values["fetchTimeout"], value_format=values["valueFormat"],
        min_partitions=values["minPartitions"],
        schema=arrow_schema(schema_),
        value_schema=arrow_schema(value_columns) if len(value_columns) else None)


def stream_reader(options: Mapping[str, str], schema_: StructType) -> DafkaStreamReader:
    return DafkaStreamReader(_settings(options, schema_, streaming=True))


def batch_reader(options: Mapping[str, str], schema_: StructType) -> DafkaBatchReader:
    return DafkaBatchReader(_settings(options, schema_, streaming=False))


def _backend(options: Mapping[str, str], schema_: StructType) -> tuple[DafkaSinkBackend, str]:
    values = parse_sink(SINK_OPTIONS, options, schema_, passthrough_keys(options))
    return (DafkaSinkBackend(FarmClientOptions.from_options(values),
                             dafka_config(values["tower"], options), values["topic"],
                             values["ackTimeout"]),
            values["valueFormat"])


stream_writer, batch_writer = sink_writers(_backend, "Dafka partitions are append-only")
