"""Source schemas: each kind's fixed columns plus the columns decoded from values.

`schema()` of a data source runs in a Python worker without a JVM, so it cannot parse
DDL; it returns DDL text and Spark parses it. The reader then receives the parsed
StructType and splits it back into the kind's columns and the decoded value columns.
The Arrow schema of every batch a reader yields must equal Spark's conversion of that
StructType exactly (`arrow_schema`), or Spark refuses the batch.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from .errors import GarlicFarmSparkError, OptionError, SchemaError


@dataclass(frozen=True)
class KindColumns:
    """A kind's fixed source columns, as DDL and by name; `reserved`: every column of the
    kind, which decoded value columns must not reuse even when not selected."""
    ddl: str
    reserved: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [part.split()[0].strip("`") for part in top_level_fields(self.ddl)]

    def selected(self, columns: str | None) -> "KindColumns":
        """The columns the `columns` option names, in its order (all when None): Spark
        does not prune a Python source's columns, so a reader that ships only what the
        query uses saves the conversion of the rest in the Python worker and the JVM."""
        if columns is None:
            return self
        fields = dict(zip(self.names, top_level_fields(self.ddl)))
        wanted = [name.strip() for name in columns.split(",")]
        unknown = [name for name in wanted if name and name not in fields]
        if unknown or not all(wanted) or len(set(wanted)) != len(wanted):
            problem = (f"unknown column(s) {', '.join(map(repr, unknown))}" if unknown
                       else "an empty or repeated name")
            raise OptionError("columns", f"{problem} in {columns!r}; name some of "
                              f"{', '.join(self.names)}, comma-separated, each once")
        return KindColumns(",".join(fields[name].strip() for name in wanted),
                           reserved=tuple(self.names))


def top_level_fields(ddl: str) -> list[str]:
    """The fields of DDL text, split at commas outside <...> (map<string,string>)."""
    fields, depth, start = [], 0, 0
    for position, char in enumerate(ddl):
        depth += (char == "<") - (char == ">")
        if char == "," and depth == 0:
            fields.append(ddl[start:position])
            start = position + 1
    fields.append(ddl[start:])
    return fields


def value_schema_ddl(value_schema: str) -> str:
    """`valueSchema` as DDL: DDL is passed through (Spark checks it); a JSON StructType
    (`df.schema.json()`) is converted here."""
    stripped = value_schema.strip()
    if not stripped.startswith("{"):
        return stripped
    try:
        parsed = StructType.fromJson(json.loads(stripped))
    except (ValueError, KeyError, TypeError) as exc:
        raise OptionError("valueSchema", f"not a Spark schema in JSON ({exc}); give DDL "
                          "such as 'id long, name string' or df.schema.json()") from None
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in parsed.fields)


def source_ddl(columns: KindColumns, value_format: str, value_schema: str | None) -> str:
    """The DDL a kind's `schema()` returns."""
    if value_format == "binary":
        if value_schema:
            raise OptionError("valueSchema", "is only used with valueFormat json, msgpack or "
                              "arrow; set valueFormat too, or drop valueSchema")
        return columns.ddl
    if not value_schema:
        raise OptionError("valueSchema", f"valueFormat {value_format!r} needs the schema of "
                          "the decoded value, e.g. 'id long, name string'")
    return f"{columns.ddl}, {value_schema_ddl(value_schema)}"


def split_schema(columns: KindColumns, schema: StructType) -> StructType:
    """The decoded value columns of the reader's schema, after checking the kind's columns."""
    names = columns.names
    given = schema.fieldNames()
    if given[: len(names)] != names:
        raise SchemaError(
            f"the garlicfarm source's columns are fixed ({columns.ddl}); got {given}. Do not "
            "call .schema() on the reader: choose among the source's columns with the "
            "columns option, and describe decoded values with the valueSchema option")
    values = StructType(schema.fields[len(names):])
    clash = sorted({n.lower() for n in values.fieldNames()}
                   & {n.lower() for n in (*names, *columns.reserved)})
    if clash:
        raise OptionError("valueSchema", f"column(s) {', '.join(clash)} clash with the "
                          f"source's own columns ({', '.join(names)}); rename them")
    return values


class PayloadError(GarlicFarmSparkError):
    """A committed payload is not what the garlicfarm writer of its kind writes (corrupt,
    or written by another writer)."""


def open_ipc(payload: bytes, index: int, what: str) -> pa.Table:
    """A payload read at log `index` as an Arrow IPC stream (zero-copy), or a
    `PayloadError` naming `what` it should have been."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise PayloadError(f"log index {index}: {what} is not an Arrow IPC stream "
                           f"({exc})") from None


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects of batches for `schema` (timestamps in UTC:
    PySpark 4.3 takes `timezone`, 4.0 to 4.2 `timestamp_utc`)."""
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema, timestamp_utc=True)
