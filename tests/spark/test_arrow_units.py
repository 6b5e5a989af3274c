"""Arrow conversion on both sides: value formats, the source's row batches, the sink's
payloads and the commit protocol's checks (no Spark session, no farm)."""
from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from consensus.client import LogRecord
from consensus.wire.journal_pages import page_answer, page_from_answer
from pyspark_farm.errors import CommitConflict, OptionError, SchemaError
from pyspark_farm.raft.rows import RAFT_COLUMNS_DDL, PayloadError, RowBatchBuilder, payload_values
from pyspark_farm.raft.rows import payload_chunks as payload_chunks_of
from pyspark_farm.raft.sink import ipc_payload, payload_chunks
from pyspark_farm.schema import KindColumns, arrow_schema, split_schema
from pyspark_farm.sink import StagedOutput, TaskTag, winning_outputs
from pyspark_farm.value_formats import binary_value_column, encode_values, value_decoder

UTC = datetime.timezone.utc
VALUE_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()),
                          ("at", pa.timestamp("us", tz="UTC"))])


def _struct(ddl_fields):
    schema = StructType()
    for name, type_ in ddl_fields:
        schema = schema.add(name, type_)
    return schema


RAFT_SCHEMA = _struct([("cluster", "string"), ("index", "long"), ("term", "long"),
                       ("type", "string"), ("value", "binary"), ("timestamp", "timestamp")])


@pytest.mark.parametrize("fmt", ["json", "msgpack", "arrow"])
def test_value_formats_round_trip(fmt):
    batch = pa.RecordBatch.from_pydict(
        {"id": [1, 2, None], "name": ["a", None, "ü"],
         "at": [datetime.datetime(2024, 5, 1, 12, 0, tzinfo=UTC), None, None]},
        schema=VALUE_SCHEMA)
    values = encode_values(batch, fmt)
    assert values.type == pa.binary() and len(values) == 3
    decoded = value_decoder(fmt, VALUE_SCHEMA)(values)
    assert pa.Table.from_arrays(decoded, schema=VALUE_SCHEMA).to_pylist() == batch.to_pylist()


@pytest.mark.parametrize("fmt", ["json", "msgpack", "arrow"])
def test_undecodable_values_become_null_rows_and_keep_alignment(fmt):
    good = encode_values(pa.RecordBatch.from_pydict({"id": [7], "name": ["x"], "at": [None]},
                                                    schema=VALUE_SCHEMA), fmt)
    values = pa.concat_arrays([pa.array([b"\x00garbage", None], pa.binary()), good,
                               pa.array([b"[1, 2]"], pa.binary())])
    decoded = value_decoder(fmt, VALUE_SCHEMA)(values)
    assert [len(c) for c in decoded] == [4, 4, 4]
    assert decoded[0].to_pylist() == [None, None, 7, None]
    assert decoded[1].to_pylist() == [None, None, "x", None]


def test_json_bulk_path_ignores_unknown_fields_and_handles_slices():
    values = pa.array([b'{"id": 1, "extra": true}', b'{"id": 2}', b'{"id": 3}'], pa.binary())
    decode = value_decoder("json", VALUE_SCHEMA)
    assert decode(values)[0].to_pylist() == [1, 2, 3]
    assert decode(values.slice(1, 2))[0].to_pylist() == [2, 3]


def test_binary_value_column_rules():
    strings = pa.RecordBatch.from_pydict({"value": ["a", "bc"]})
    assert binary_value_column(strings).to_pylist() == [b"a", b"bc"]
    with pytest.raises(SchemaError, match="valueFormat"):
        binary_value_column(pa.RecordBatch.from_pydict({"value": [b"a"], "key": [1]}))
    with pytest.raises(SchemaError, match="named 'value'"):
        binary_value_column(pa.RecordBatch.from_pydict({"payload": [b"a"]}))
    with pytest.raises(SchemaError, match="binary or string"):
        binary_value_column(pa.RecordBatch.from_pydict({"value": [1]}))


def journal(*entries):
    """A JournalPage (what read_journal answers) of (index, term, timestamp_ms, records)
    journal entries."""
    records = [LogRecord(i, t, "journal", list(r), b"", ts, count=len(r))
               for i, t, ts, r in entries]
    lo, hi = entries[0][0], entries[-1][0] + 1
    return page_from_answer(lo, hi, page_answer(records, hi))


def test_row_batches_match_sparks_arrow_schema_and_keep_log_order():
    schema = arrow_schema(RAFT_SCHEMA)
    builder = RowBatchBuilder("farm", schema, max_rows=1000)
    payload = ipc_payload([pa.array([b"c1", b"c2", b"c3"], pa.binary())])
    batches = list(builder.add_journal(journal((4, 2, 1_700_000_000_123, [b"j1", b"j2"]))))
    batches += builder.add_values(6, 2, "commit", 1_700_000_000_500,
                                  payload_values(payload, "arrow", 6))
    batches += builder.add_journal(journal((7, 3, 0, [b"j3"])))
    batches += builder.finish()
    assert [b.num_rows for b in batches] == [2, 3, 1]
    assert all(b.schema.equals(schema) for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["value"] for r in rows] == [b"j1", b"j2", b"c1", b"c2", b"c3", b"j3"]
    assert [r["index"] for r in rows] == [4, 4, 6, 6, 6, 7]
    assert [r["type"] for r in rows] == ["journal"] * 2 + ["commit"] * 3 + ["journal"]
    assert {r["cluster"] for r in rows} == {"farm"}
    assert rows[0]["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def test_large_payload_batches_go_to_spark_without_copies_in_log_order():
    schema = arrow_schema(RAFT_SCHEMA)
    builder = RowBatchBuilder("farm", schema, max_rows=5000, direct_rows=100)
    sent = [pa.array([f"a{i}".encode() for i in range(7000)], pa.binary()),
            pa.array([b"b0", b"b1"], pa.binary())]
    payload = ipc_payload(sent)
    chunks = payload_chunks_of(payload, "arrow", 5)
    assert [len(c) for c in chunks] == [7000, 2]       # one array per batch the sink wrote
    batches = list(builder.add_journal(journal((3, 1, 0, [b"j"]))))
    for values in chunks:
        batches += builder.add_values(5, 1, "commit", 0, values)
    batches += builder.finish()
    assert [b.num_rows for b in batches] == [1, 5000, 2000, 2]
    assert batches[1].column("value").buffers()[2].address == chunks[0].buffers()[2].address
    assert [v for b in batches for v in b.column("value").to_pylist()] == \
        [b"j"] + sent[0].to_pylist() + sent[1].to_pylist()
    assert [i for b in batches for i in b.column("index").to_pylist()] == [3] + [5] * 7002
    assert payload_values(payload, "arrow", 5).to_pylist() == \
        sent[0].to_pylist() + sent[1].to_pylist()


def test_row_batches_are_cut_at_max_rows_and_decode_values():
    schema = arrow_schema(_struct(list(zip(RAFT_SCHEMA.fieldNames(),
                                           ["string", "long", "long", "string", "binary",
                                            "timestamp"])) + [("id", "long")]))
    value_schema = pa.schema([("id", pa.int64())])
    builder = RowBatchBuilder("c", schema, value_decoder("json", value_schema), max_rows=3)
    out = list(builder.add_journal(journal(*[(10 + i, 1, 0, [b'{"id": %d}' % i, b"{}"])
                                             for i in range(5)])))
    out += builder.finish()
    assert [b.num_rows for b in out] == [2, 2, 2, 2, 2]     # whole entries, max_rows each
    assert [r["id"] for b in out for r in b.to_pylist()] == [0, None, 1, None, 2, None,
                                                             3, None, 4, None]


def test_corrupt_payloads_are_typed_errors_naming_the_index():
    with pytest.raises(PayloadError, match="log index 9"):
        payload_values(b"not arrow", "arrow", 9)
    sink = pa.BufferOutputStream()
    batch = pa.RecordBatch.from_pydict({"other": [1]})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    with pytest.raises(PayloadError, match="no 'value' column"):
        payload_values(sink.getvalue().to_pybytes(), "arrow", 3)
    assert payload_values(b"raw", "bytes", 1).to_pylist() == [b"raw"]


def test_payload_chunks_respect_stage_bytes_and_keep_every_row():
    arrays = [pa.array([bytes([i % 256]) * 100 for i in range(n)], pa.binary())
              for n in (10, 500, 3)]
    chunks = list(payload_chunks(iter(arrays), stage_bytes=8_000))
    assert sum(rows for _, rows in chunks) == 513
    flat = [v for arrays_, _ in chunks for a in arrays_ for v in a.to_pylist()]
    assert flat == [v for a in arrays for v in a.to_pylist()]
    assert all(sum(a.nbytes for a in arrays_) <= 8_000 + 200 for arrays_, _ in chunks[:-1])


def test_schema_split_refuses_user_schemas_and_clashes():
    columns = KindColumns(RAFT_COLUMNS_DDL)
    assert columns.names == ["cluster", "index", "term", "type", "value", "timestamp"]
    with_value = RAFT_SCHEMA.add("id", "long")
    assert split_schema(columns, with_value).fieldNames() == ["id"]
    with pytest.raises(SchemaError, match="valueSchema"):
        split_schema(columns, _struct([("value", "binary")]))
    with pytest.raises(OptionError, match="clash"):
        split_schema(columns, RAFT_SCHEMA.add("Value", "string"))


def test_columns_option_selects_the_kinds_columns_in_its_order():
    columns = KindColumns(RAFT_COLUMNS_DDL)
    assert columns.selected(None) is columns
    chosen = columns.selected(" value, index ")
    assert chosen.names == ["value", "index"]
    assert split_schema(chosen, _struct([("value", "binary"), ("index", "long"),
                                         ("id", "long")])).fieldNames() == ["id"]
    # a decoded column may not take the name of a column left out
    with pytest.raises(OptionError, match="clash"):
        split_schema(chosen, _struct([("value", "binary"), ("index", "long"),
                                      ("term", "long")]))
    for bad, reason in (("value,offset", "unknown column.*'offset'"), ("value,,index", "empty"),
                        ("value,value", "repeated")):
        with pytest.raises(OptionError, match=reason) as error:
            columns.selected(bad)
        assert "'columns'" in str(error.value) and "cluster, index, term" in str(error.value)


def test_row_batches_hold_only_the_schemas_columns():
    schema = arrow_schema(_struct([("timestamp", "timestamp"), ("value", "binary")]))
    builder = RowBatchBuilder("farm", schema, max_rows=1000)
    batches = list(builder.add_journal(journal((4, 2, 1_700_000_000_123, [b"j1", b"j2"]))))
    batches += builder.add_values(6, 2, "commit", 0, pa.array([b"c1"], pa.binary()))
    batches += builder.finish()
    assert len(batches) == 2 and all(b.schema.equals(schema) for b in batches)
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b"j1", b"j2", b"c1"]
    assert batches[0].column("timestamp")[0].as_py() == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def _out(query, batch, partition, refs=(1,)):
    return StagedOutput(TaskTag(query, batch, partition, 0), tuple(refs), (1,) * len(refs))


def test_winning_outputs_orders_by_partition_and_checks_consistency():
    query, outputs = winning_outputs([_out("q", 3, 1), None, _out("q", 3, 0)], 3)
    assert query == "q" and [o.tag.partition for o in outputs] == [0, 1]
    assert winning_outputs([], 3) == (None, [])
    with pytest.raises(CommitConflict, match="several batches"):
        winning_outputs([_out("q", 3, 0), _out("q", 4, 1)])
    with pytest.raises(CommitConflict, match="batch 5"):
        winning_outputs([_out("q", 3, 0)], 5)
    with pytest.raises(CommitConflict, match="one partition"):
        winning_outputs([_out("q", 3, 0), _out("q", 3, 0, (2,))], 3)


@pytest.mark.parametrize("compression", ["zstd", "lz4", "none"])
def test_compressed_payloads_read_back_transparently(compression):
    values = pa.array([b'{"id": %d, "kind": "click"}' % i for i in range(5000)], pa.binary())
    payload = ipc_payload([values], compression)
    plain = ipc_payload([values], "none")
    assert (len(payload) < len(plain) / 3) == (compression != "none")
    assert payload_values(payload, "arrow", 1).equals(values)
