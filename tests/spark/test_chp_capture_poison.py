"""The chp capture's journal against hostile committed chunks (issue 13 item 3): what a
restarted capture replays into its memory - the Arrow payloads of its committed chunks
and their commits' metadata - never raises; a payload it never writes is skipped the
same way at every restart, and two captures fed the same chunks remember the same. And
the chp sink refuses a ttl no server could store, naming the row."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from pyspark_farm.chp.capture import recorded_last, replay
from pyspark_farm.chp.changelog import Change, Changelog
from connectors.chp.proto import MAX_TTL_SECONDS
from pyspark_farm.chp.rows import CHP_SCHEMA, encode_payloads, payload_changes
from pyspark_farm.chp.sink import updates as sink_updates
from pyspark_farm.errors import GarlicFarmSparkError
from pyspark_farm.schema import PayloadError
from pyspark_farm.sink import TaskTag

PROPERTIES = settings(max_examples=200, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])

changes = st.lists(st.builds(
    Change, st.binary(min_size=1, max_size=6), st.integers(min_value=-5, max_value=1 << 62),
    st.binary(max_size=16), st.just(b""), st.binary(max_size=6), st.booleans(),
    st.one_of(st.none(), st.text(max_size=6))), min_size=1, max_size=6)


def payload_of(items: list[Change]) -> bytes:
    [(payload, _)] = encode_payloads(items)
    return payload


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


NULL_KEY = ipc(pa.table({"key": [None], "sequence": [1], "uuid": [b""], "properties": [None],
                         "value": [b"v"], "deleted": [False]}, schema=CHP_SCHEMA))
NULL_SEQUENCE = ipc(pa.table({"key": ["k"], "sequence": [None], "uuid": [b""],
                              "properties": [[("a", "b")]], "value": [b"v"],
                              "deleted": [False]}, schema=CHP_SCHEMA))
OTHER_COLUMNS = ipc(pa.table({"key": ["k"]}))

payloads = st.one_of(
    changes.map(payload_of),
    st.tuples(changes.map(payload_of), st.integers(min_value=0, max_value=2000),
              st.integers(min_value=0, max_value=255)).map(
        lambda t: t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:]),
    st.tuples(changes.map(payload_of), st.integers(min_value=0, max_value=2000)).map(
        lambda t: t[0][:t[1]]),
    st.sampled_from([NULL_KEY, NULL_SEQUENCE, OTHER_COLUMNS, b"", b"not arrow"]),
    st.binary(max_size=40))


@PROPERTIES
@given(st.lists(payloads, max_size=6))
@example([NULL_KEY])              # key.encode() of None: AttributeError at every restart
@example([NULL_SEQUENCE])
def test_any_committed_chunks_replay_and_captures_agree(chunks):
    first, second = Changelog(emit_snapshot=False), Changelog(emit_snapshot=False)
    for index, payload in enumerate(chunks, 1):
        for changelog in (first, second):
            replay(changelog, payload, index, "capture")
    assert (first.known, first.last, first.has_history) == \
        (second.known, second.last, second.has_history)
    first.resync(10, [])   # the next snapshot diffs against what was replayed


@PROPERTIES
@given(payloads)
def test_a_payload_is_its_changes_or_a_payload_error(payload):
    try:
        found = payload_changes(payload, 7)
    except PayloadError as exc:
        assert "log index 7" in str(exc) or "null" in str(exc)
        return
    assert all(type(c.key) is bytes and type(c.sequence) is int for c in found)


@pytest.mark.parametrize("metadata, last", [
    ({"chp": {"last": 5}}, 5), ({"chp": {"last": "5"}}, None), ({"chp": [1]}, None),
    ({"chp": None}, None), ([1, 2], None), (None, None), ({"chp": {"last": True}}, None)])
def test_a_recorded_last_sequence_is_read_only_when_it_is_one(metadata, last):
    assert recorded_last(metadata) == last


def test_the_sink_refuses_a_ttl_no_server_could_store_naming_the_row():
    """A ttl column of 1e300 or infinity used to reach the servers (and kill them)."""
    batch = pa.RecordBatch.from_pydict({"key": ["a", "b", "c", "d"], "value": ["1"] * 4,
                                        "ttl": [5.0, None, float("nan"), -1.0]})
    assert [u.ttl for u in sink_updates(batch, TaskTag("q", 0, 3, 0), 0)] == \
        [5.0, None, None, None]
    for ttl in (1e300, float("inf"), MAX_TTL_SECONDS + 1):
        poison = pa.RecordBatch.from_pydict({"key": ["k"], "value": ["v"], "ttl": [ttl]})
        with pytest.raises(GarlicFarmSparkError, match="row 7 of partition 3.*at most"):
            list(sink_updates(poison, TaskTag("q", 0, 3, 0), 7))
