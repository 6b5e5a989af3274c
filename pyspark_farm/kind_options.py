"""What the options of every log kind (raft, dafka...) share: the read limits, value
decoding, the rules of startingOffsets / endingOffsets for streams and batch reads, and
the check of a sink's input columns, so that each means the same in every kind."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, TypeVar

from pyspark.sql.types import StructType

from .errors import OptionError
from .options import Option, OptionSet, boolean, choice, duration, integer, text
from .sink import FarmBatchWriter, FarmStreamWriter, SinkBackend
from .value_formats import FORMATS, check_value_column

VALUE_FORMAT = Option("valueFormat", choice(*FORMATS), "binary",
                      doc="how values carry columns: binary, json, msgpack or arrow")
READ_OPTIONS = OptionSet("", (
    Option("maxOffsetsPerTrigger", integer(1), None, doc="rows per micro-batch, at most"),
    Option("minOffsetsPerTrigger", integer(1), None, doc="rows per micro-batch, at least"),
    Option("maxTriggerDelay", duration, 900.0,
           doc="longest wait for minOffsetsPerTrigger rows"),
    Option("failOnDataLoss", boolean, True, doc="fail when offsets a query needs are gone"),
    VALUE_FORMAT,
    Option("valueSchema", text, None, doc="columns decoded from values (DDL or JSON)"),
    # Spark cannot prune the columns of a Python data source (no such pushdown in its
    # API): a reader builds and ships every column it declares, used or not.
    Option("columns", text, None,
           doc="the kind's own columns to produce, comma-separated (default: all)"),
))


class Spec(Protocol):
    position: str


S = TypeVar("S", bound=Spec)


def parse_source(options_: OptionSet, raw: Mapping[str, str], ignore: tuple[str, ...] = ()
                 ) -> dict[str, Any]:
    """The typed source options, after checking the read limits agree."""
    values = options_.parse(raw, ignore=("kind", *ignore))
    low, high = values["minOffsetsPerTrigger"], values["maxOffsetsPerTrigger"]
    if low is not None and high is not None and low > high:
        raise OptionError("minOffsetsPerTrigger", f"{low} is above maxOffsetsPerTrigger {high}")
    return values


def offset_bounds(starting: S | None, ending: S | None, spec: Callable[[str], S], *,
                  streaming: bool, exact: str) -> tuple[S, S]:
    """(starting, ending) with their defaults: streams start at latest and refuse an end;
    batch reads go from earliest to latest and refuse an empty range. `exact` names the
    kind's exact-offset form in messages."""
    if streaming:
        if ending is not None:
            raise OptionError("endingOffsets", "is for batch reads (spark.read); a stream "
                              "runs on: drop it, or use Trigger.AvailableNow")
        return starting or spec("latest"), spec("latest")
    starting, ending = starting or spec("earliest"), ending or spec("latest")
    if starting.position == "latest":
        raise OptionError("startingOffsets", "'latest' would read nothing in a batch "
                          f"query: use earliest or {exact}")
    if ending.position == "earliest":
        raise OptionError("endingOffsets", "'earliest' would read nothing in a batch "
                          f"query: use latest or {exact}")
    return starting, ending


def parse_sink(options_: OptionSet, raw: Mapping[str, str], schema: StructType,
               ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The typed sink options, after checking the input's columns fit `valueFormat` (when
    the query starts, not in a task)."""
    values = options_.parse(raw, ignore=("kind", *ignore))
    if values["valueFormat"] == "binary":
        value = next((f for f in schema.fields if f.name == "value"), None)
        check_value_column(schema.fieldNames(),
                           value.dataType.typeName() if value is not None else None)
    return values


def sink_writers(backend: Callable[[Mapping[str, str], StructType], tuple[SinkBackend, str]],
                 append_only: str):
    """A kind's `stream_writer` and `batch_writer` over its `backend(options, schema)`
    -> (backend, valueFormat). Complete mode asks a stream to overwrite: like Kafka, a log
    sink appends each batch's rows; a batch write refuses overwrite with `append_only`."""
    def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool
                      ) -> FarmStreamWriter:
        return FarmStreamWriter(*backend(options, schema))

    def batch_writer(options: Mapping[str, str], schema: StructType, overwrite: bool
                     ) -> FarmBatchWriter:
        if overwrite:
            raise OptionError("mode", f"{append_only}: use mode('append')")
        return FarmBatchWriter(*backend(options, schema))
    return stream_writer, batch_writer
