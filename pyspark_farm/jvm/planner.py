"""The planning half of the JVM reader (`format("garlicfarm-columnar")`), in Python.

The JVM source's driver side runs ``python -m pyspark_farm.jvm.planner`` for a scan or a
stream (and keeps it for the next one: ``close`` ends a scan, ``open`` starts the next, so
only the first scan of a driver pays for starting Python) and asks it, one JSON object per line on stdin, for what the raft source's Python
readers plan (offsets, admission control, partitions), so both formats plan alike from
the same code. Each request gets one JSON line on stdout: ``{"ok": value}`` or
``{"error": {"type": ..., "message": ...}}``; a failed request leaves the process up for
the next one. Only answers go to stdout: logging, warnings and stray prints go to stderr,
which the JVM forwards to the driver's log. The protocol is in `Planner.answer`.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import IO, Any, Callable, Mapping

from pyspark.sql.types import (BinaryType, IntegerType, LongType, StringType, StructField,
                               StructType, TimestampType)

from ..compat import (HAS_FILTER_PUSHDOWN, EqualNullSafe, EqualTo, Filter, GreaterThan,
                      GreaterThanOrEqual, In, LessThan, LessThanOrEqual, ReadAllAvailable,
                      ReadLimit, ReadMaxRows, ReadMinRows)
from ..datasource import kind_module
from ..errors import OptionError
from ..kind_options import parse_source
from ..log_access import LogPartition
from ..offsets import index_of
from ..raft import kind as raft_kind
from ..raft.partitions import PartitionedStreamReader, PartitionTask, positions
from ..schema import top_level_fields

MODES = ("batch", "stream")
# The raft columns are simple types: a StructType without a JVM to parse DDL (`partition
# int`, with the `partitions` option, is IntegerType).
_TYPES = {t.typeName(): t for t in (StringType(), LongType(), BinaryType(), TimestampType())}
_TYPES["int"] = IntegerType()


class ProtocolError(ValueError):
    """A request that is not one this planner understands (not JSON, unknown op, a
    missing or mistyped field, a call out of order)."""


def raft_options(options: Mapping[str, str]) -> dict[str, str]:
    """`options` checked for the JVM reader: kind raft (the default), every raft option
    valid, and only the raw value (the JVM reader decodes no values and prunes columns
    itself)."""
    if kind_module(options) is not raft_kind:
        raise OptionError("kind", "the JVM reader (format('garlicfarm-columnar')) reads raft "
                          "logs only; use format('garlicfarm') for other kinds")
    values = parse_source(raft_kind.SOURCE_OPTIONS, options)
    if values["valueFormat"] != "binary":
        raise OptionError("valueFormat", f"{values['valueFormat']!r} is not supported by the "
                          "JVM reader, which reads the raw value (binary); use "
                          "format('garlicfarm') to decode values")
    if values["columns"] is not None:
        raise OptionError("columns", "is not supported by the JVM reader, which prunes "
                          "columns itself (select the columns you need); use "
                          "format('garlicfarm') to pass the option")
    return dict(options)


def struct_of(ddl: str) -> StructType:
    """The StructType of the raft source's DDL (simple types only)."""
    fields = []
    for part in top_level_fields(ddl):
        name, kind = part.split()
        fields.append(StructField(name.strip("`"), _TYPES[kind]))
    return StructType(fields)


def read_limit(value: Any) -> ReadLimit | None:
    """A limit from its JSON form (Spark's ReadAllAvailable, ReadMaxRows, ReadMinRows).
    A minRows limit's maxTriggerDelayMs is accepted but the reader waits by its own
    maxTriggerDelay option, which is where Spark's default limit got it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"limit {value!r} is not a JSON object")
    kind = value.get("type")
    if kind == "all":
        return ReadAllAvailable()
    if kind in ("maxRows", "minRows"):
        rows = value.get("rows")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ProtocolError(f"limit {value!r} needs rows, an integer >= 1")
        return ReadMaxRows(rows) if kind == "maxRows" else ReadMinRows(rows)
    raise ProtocolError(f"limit {value!r} has no known type (all, maxRows or minRows)")


_FILTERS = {"EqualTo": EqualTo, "EqualNullSafe": EqualNullSafe, "GreaterThan": GreaterThan,
            "GreaterThanOrEqual": GreaterThanOrEqual, "LessThan": LessThan,
            "LessThanOrEqual": LessThanOrEqual, "In": In}


def index_filters(value: Any) -> list[Filter]:
    """The filters on `index` a JVM batch scan pushed, as the Python reader's filters
    (`{"type": "GreaterThan", "value": 5}`, `{"type": "In", "value": [1, 2]}`). They only
    narrow the range read: Spark applies every filter to the rows again. None before
    PySpark 4.1, which has no filter classes."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"filters {value!r} is not a JSON list")
    found = []
    for item in value:
        kind = item.get("type") if isinstance(item, dict) else None
        given = item.get("value") if isinstance(item, dict) else None
        values = given if kind == "In" and isinstance(given, list) else [given]
        if kind not in _FILTERS or not values or \
                not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ProtocolError(f"filter {item!r} is not an index filter this planner knows "
                                f"({', '.join(_FILTERS)} with integer values)")
        if HAS_FILTER_PUSHDOWN:
            found.append(_FILTERS[kind](("index",), tuple(values) if kind == "In" else given))
    return found


def limit_json(limit: ReadLimit, max_trigger_delay: float) -> dict:
    """The JSON form of a limit the reader chose."""
    if isinstance(limit, ReadMaxRows):
        return {"type": "maxRows", "rows": limit.max_rows}
    if isinstance(limit, ReadMinRows):
        return {"type": "minRows", "rows": limit.min_rows,
                "maxTriggerDelayMs": round(max_trigger_delay * 1000)}
    return {"type": "all"}


def partitions_json(planned: Any) -> list[dict]:
    """Planned tasks as JSON: the farm partition they read (0 for a farm read without the
    `partitions` option), the member to read at, pieces [start, stop] or
    [start, stop, lo, hi]."""
    found = []
    for task in planned:
        farm_partition = 0
        if isinstance(task, PartitionTask):     # a task of one partition of several
            farm_partition, task = task.partition, task.inner
        assert isinstance(task, LogPartition), task
        found.append({"partition": farm_partition, "endpoint": task.endpoint, "pieces": [
            [p.start, p.stop] if p.parts is None else [p.start, p.stop, *p.parts]
            for p in task.pieces]})
    return found


class Planner:
    """The state of one scan or stream: its reader, once opened. Sans-I/O: `answer` takes
    a request and returns the answer; `serve` runs it over lines."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.reader: Any = None

    def answer(self, request: Any) -> dict:
        """The answer to one request; every failure becomes an error answer."""
        try:
            return {"ok": self._dispatch(request)}
        except Exception as exc:   # noqa: BLE001 - each failure is the JVM's to report
            return {"error": {"type": type(exc).__name__, "message": str(exc)}}

    def close(self) -> None:
        """Close the reader's clients (also the stream's `stop`): a reader of several
        farm partitions holds one reader, with its clients, per partition."""
        if self.reader is not None:
            inner = getattr(self.reader, "readers", None)
            for reader in inner.values() if inner is not None else (self.reader,):
                reader.close()

    def _dispatch(self, request: Any) -> Any:
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            raise ProtocolError(f"a request is a JSON object with a string 'op', got "
                                f"{request!r}")
        op = request["op"]
        if op == "stop":
            self.close()
            return None
        if op == "close":           # this scan or stream is over; the next may open
            self.close()
            self.reader = self.mode = None
            return None
        if op == "open":
            return self._open(request)
        if self.reader is None:
            raise ProtocolError(f"op {op!r} before 'open'")
        reader = self.reader
        if self.mode == "batch":
            if op != "partitions":
                raise ProtocolError(f"op {op!r} is not one of a batch scan (partitions, close, "
                                    "stop)")
            return partitions_json(reader.partitions())
        calls: dict[str, Callable[[], Any]] = {
            "initialOffset": reader.initialOffset,
            "defaultReadLimit": lambda: limit_json(
                reader.getDefaultReadLimit(), limits_of(reader).max_trigger_delay),
            "latestOffset": lambda: reader.latestOffset(
                field(request, "start", dict), read_limit(request.get("limit"))),
            "prepareForTriggerAvailableNow": reader.prepareForTriggerAvailableNow,
            "partitions": lambda: partitions_json(reader.partitions(
                field(request, "start", dict), field(request, "end", dict))),
            "commit": lambda: reader.commit(checked(reader, field(request, "end", dict))),
            "reportLatestOffset": reader.reportLatestOffset,
            "metrics": lambda: reader.metrics(
                None if request.get("consumed") is None
                else checked(reader, field(request, "consumed", dict))),
        }
        if op not in calls:
            raise ProtocolError(f"unknown op {op!r}; a stream takes open, "
                                f"{', '.join(calls)}, close and stop")
        return calls[op]()

    def _open(self, request: dict) -> dict:
        if self.reader is not None:
            raise ProtocolError("'open' twice: close the scan or stream first")
        mode = request.get("mode")
        if mode not in MODES:
            raise ProtocolError(f"'open' needs mode batch or stream, got {mode!r}")
        options = field(request, "options", dict)
        if not all(isinstance(v, str) for v in options.values()):
            raise ProtocolError("'open' options must map names to strings")
        options = raft_options(options)
        filters = index_filters(request.get("filters"))
        ddl = raft_kind.schema(options)
        make = raft_kind.stream_reader if mode == "stream" else raft_kind.batch_reader
        reader = make(options, struct_of(ddl))
        if mode == "batch":
            for condition in filters:
                reader.bounds.narrow(condition)
        self.reader, self.mode = reader, mode
        return {"schema": ddl}


def field(request: dict, name: str, kind: type) -> Any:
    """A request's field `name`, checked to be a `kind`."""
    value = request.get(name)
    if not isinstance(value, kind):
        raise ProtocolError(f"op {request['op']!r} needs {name!r}, a JSON "
                            f"{'object' if kind is dict else kind.__name__}, got {value!r}")
    return value


def limits_of(reader: Any) -> Any:
    """The options' limits of a stream reader, of one log or of several partitions."""
    if isinstance(reader, PartitionedStreamReader):
        return reader.limits
    return reader.settings.limits


def checked(reader: Any, offset: dict) -> dict:
    """`offset`, after checking it is an offset of `reader`'s (the one-log reader's
    commit looks at none): {"index": N}, or {"<partition>": N, ...} over partitions."""
    if isinstance(reader, PartitionedStreamReader):
        positions(offset, list(reader.readers), "end offset")
    else:
        index_of(offset, "end offset")
    return offset


def parse_line(line: bytes) -> Any:
    """A request line as JSON, or a ProtocolError saying why not."""
    try:
        return json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"request line is not UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"request line is not JSON ({exc.msg} at column {exc.colno}): "
                            f"{line[:200]!r}") from None


def serve(planner: Planner, requests: IO[bytes], answers: IO[str]) -> None:
    """Answer each line of `requests` on `answers` until EOF or `stop`."""
    try:
        for line in requests:
            if not line.strip():
                continue
            try:
                request = parse_line(line)
            except ProtocolError as exc:
                request = None
                reply = {"error": {"type": type(exc).__name__, "message": str(exc)}}
            else:
                reply = planner.answer(request)
            answers.write(json.dumps(reply, allow_nan=False) + "\n")
            answers.flush()
            if isinstance(request, dict) and request.get("op") == "stop":
                return
    finally:
        planner.close()


def main() -> int:
    """Run over stdin/stdout, keeping fd 1 for answers: anything else written to stdout
    (by Python or native code) lands in stderr."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        serve(Planner(), sys.stdin.buffer, answers)
    except (BrokenPipeError, OSError) as exc:
        print(f"garlicfarm planner: stdin or stdout broke ({exc}); exiting", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
