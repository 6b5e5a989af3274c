"""`valueFormat`: how a record's value bytes carry columns.

* ``binary`` — the value is opaque bytes (the `value` column only);
* ``json`` — a JSON object per value (the sink writes one per row, like Spark's to_json);
* ``msgpack`` — a msgpack map per value;
* ``arrow`` — an Arrow IPC stream holding one row per value.

The source decodes values into the columns of `valueSchema` next to the raw `value`
column. Decoding is permissive, like Spark's `from_json`: a value that does not decode
gives nulls in the decoded columns and keeps its raw bytes, so nothing is lost. JSON is
decoded in bulk by pyarrow's JSON reader (no Python object per row); msgpack and arrow
values are decoded one by one (msgpack has no columnar decoder; one-row Arrow streams are
self-describing messages).
"""
from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any, Callable

import msgpack
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from .errors import OptionError, SchemaError

FORMATS = ("binary", "json", "msgpack", "arrow")


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


def _msgpack_default(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.time)) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot encode a {type(value).__name__} as msgpack")


def _as_naive_utc(row: dict) -> dict:
    """msgpack's Timestamp needs aware datetimes; Spark hands naive ones for timestamp_ntz."""
    return {k: (v.replace(tzinfo=datetime.timezone.utc)
                if isinstance(v, datetime.datetime) and v.tzinfo is None else v)
            for k, v in row.items()}


# --- encoding (the sink) ------------------------------------------------------------------

def encode_values(batch: pa.RecordBatch, value_format: str) -> pa.Array:
    """The `value` column (pa.binary()) the sink stores for one input batch."""
    if value_format == "binary":
        return binary_value_column(batch)
    rows = batch.to_pylist()
    if value_format == "json":
        return pa.array([json.dumps(r, default=_json_default, separators=(",", ":")).encode()
                         for r in rows], pa.binary())
    if value_format == "msgpack":
        return pa.array([msgpack.packb(_as_naive_utc(r), default=_msgpack_default,
                                       datetime=True, use_bin_type=True) for r in rows],
                        pa.binary())
    if value_format == "arrow":
        return pa.array([_ipc_bytes(batch.slice(i, 1)) for i in range(batch.num_rows)],
                        pa.binary())
    raise OptionError("valueFormat", f"expected one of {', '.join(FORMATS)}")


def check_value_column(names: list[str], value_type: str | None) -> None:
    """What valueFormat 'binary' needs of the sink's input: exactly one column, `value`,
    binary or string (`value_type` names its type, None when it is missing)."""
    if "value" not in names:
        raise SchemaError(
            f"the garlicfarm sink writes a column named 'value' (binary or string); the "
            f"DataFrame has {', '.join(names) or 'no columns'}. Select or alias one as "
            "'value', or set the option valueFormat to json, msgpack or arrow to encode all "
            "columns into the value.")
    extra = [n for n in names if n != "value"]
    if extra:
        raise SchemaError(
            f"the garlicfarm sink with valueFormat 'binary' writes only the 'value' column, "
            f"but the DataFrame also has {', '.join(extra)}: drop them, or set the option "
            "valueFormat to json, msgpack or arrow to encode every column into the value.")
    if value_type not in ("binary", "string"):
        raise SchemaError(f"the 'value' column must be binary or string, not {value_type}: "
                          "cast it, or set the option valueFormat to encode it")


def binary_value_column(batch: pa.RecordBatch) -> pa.Array:
    """The batch's `value` column as pa.binary() (strings are cast: their UTF-8 bytes)."""
    names = batch.schema.names
    column = batch.column("value") if "value" in names else None
    kind = None
    if column is not None:
        kind = ("binary" if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)
                else "string" if pa.types.is_string(column.type)
                or pa.types.is_large_string(column.type) else str(column.type))
    check_value_column(names, kind)
    return column if column.type == pa.binary() else column.cast(pa.binary())


def _ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


# --- decoding (the source) -----------------------------------------------------------------

def value_decoder(value_format: str, schema: pa.Schema) -> Callable[[pa.Array], list[pa.Array]]:
    """A function from a binary `value` array to the arrays of `schema`'s columns."""
    if value_format == "json":
        _check_json_types(schema)
        return lambda values: _decode_json(values, schema)
    if value_format == "msgpack":
        return lambda values: _decode_objects(values, schema, _unpack_msgpack)
    if value_format == "arrow":
        return lambda values: _decode_objects(values, schema, _unpack_arrow(schema))
    raise OptionError("valueFormat", f"{value_format!r} decodes no columns")


def _check_json_types(schema: pa.Schema) -> None:
    try:
        _read_json(b"{}\n", schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise OptionError("valueSchema", f"the json valueFormat cannot decode this schema "
                          f"({exc}); use msgpack or arrow, or decode in Spark with "
                          "from_json") from None


def _read_json(data: bytes | pa.Buffer, schema: pa.Schema,
               block_size: int = 1 << 20) -> pa.Table:
    return pa_json.read_json(
        pa.BufferReader(data),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=block_size),
        parse_options=pa_json.ParseOptions(explicit_schema=schema, newlines_in_values=False,
                                           unexpected_field_behavior="ignore"))


def _decode_json(values: pa.Array, schema: pa.Schema) -> list[pa.Array]:
    """Bulk: values joined by newlines through pyarrow's JSON reader. A value that breaks
    the bulk parse (not an object, a raw newline, bad JSON) sends the batch down the
    per-value path, where it alone becomes nulls."""
    count = len(values)
    if count == 0:
        return [pa.array([], f.type) for f in schema]
    lines = pc.binary_join_element_wise(values, b"\n", b"", null_handling="replace",
                                        null_replacement=b"{}")
    text = contiguous_data(lines)
    biggest = pc.max(pc.binary_length(lines)).as_py()
    try:
        table = _read_json(text, schema, block_size=max(1 << 20, 2 * biggest))
        if table.num_rows == count:
            return [table.column(i).combine_chunks() for i in range(table.num_columns)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    return _decode_objects(values, schema, _unpack_json(schema))


def contiguous_data(values: pa.Array) -> pa.Buffer:
    """The bytes of a binary array's values, back to back, without copying."""
    offsets = pa.Array.from_buffers(pa.int32(), len(values) + 1, [None, values.buffers()[1]],
                                    offset=values.offset)
    first, last = offsets[0].as_py(), offsets[len(values)].as_py()
    return values.buffers()[2].slice(first, last - first)


def _unpack_json(schema: pa.Schema) -> Callable[[bytes], pa.Table | None]:
    def unpack(value: bytes) -> pa.Table | None:
        if not value.lstrip().startswith(b"{"):
            return None
        table = _read_json(value.replace(b"\n", b" ") + b"\n", schema,
                           block_size=max(1 << 20, 2 * len(value) + 2))
        return table if table.num_rows == 1 else None
    return unpack


def _unpack_msgpack(value: bytes) -> dict | None:
    obj = msgpack.unpackb(value, raw=False, timestamp=3, strict_map_key=False)
    return obj if isinstance(obj, dict) else None


def _unpack_arrow(schema: pa.Schema) -> Callable[[bytes], pa.Table | None]:
    def unpack(value: bytes) -> pa.Table | None:
        table = pa.ipc.open_stream(value).read_all()
        if table.num_rows != 1:
            return None
        columns = [table.column(f.name).cast(f.type) if f.name in table.schema.names
                   else pa.nulls(1, f.type) for f in schema]
        return pa.Table.from_arrays(columns, schema=schema)
    return unpack


def _decode_objects(values: pa.Array, schema: pa.Schema,
                    unpack: Callable[[bytes], Any]) -> list[pa.Array]:
    """Per value: `unpack` gives a dict (converted by pyarrow), a one-row table, or None;
    anything that fails becomes a row of nulls."""
    struct = pa.struct(list(schema))
    rows: list[pa.StructArray] = []
    null_row = pa.array([None], struct)
    for value in values.to_pylist():
        row = null_row
        if value is not None:
            try:
                decoded = unpack(value)
                if isinstance(decoded, pa.Table):
                    row = pa.StructArray.from_arrays(
                        [decoded.column(i).combine_chunks() for i in range(decoded.num_columns)],
                        fields=list(schema))
                elif decoded is not None:
                    row = pa.array([{f.name: decoded.get(f.name) for f in schema}], struct)
            except Exception:  # any undecodable value is a null row, by design (see module doc)
                row = null_row
        rows.append(row)
    if not rows:
        return [pa.array([], f.type) for f in schema]
    combined = pa.concat_arrays(rows)
    return combined.flatten()
