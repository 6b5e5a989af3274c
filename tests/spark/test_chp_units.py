"""The chp kind's pure parts: the changelog's differences, payloads, offsets, UUIDs,
key filters, sink input checks (no Spark session, no server)."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, In, StringStartsWith

from connectors.chp.kvmap import Entry
from connectors.chp.mirror import BulkEntries
from connectors.chp.proto import decode_bulk, encode_bulk
from pyspark_farm.chp.changelog import RESYNC_PROPERTY, Change, Changelog
from pyspark_farm.chp.rows import (CHP_SCHEMA, PayloadError, changes_batch, decode_payload,
                                   encode_payloads, snapshot_table, table_changes)
from pyspark_farm.chp.sink import check_input, marker_batch, row_uuid
from pyspark_farm.chp.source import KeyFilter, chp_offset, parse_offset
from pyspark_farm.errors import SchemaError


def entry(key: str, sequence: int, value: str = "v", uuid: bytes = b"u" * 16) -> Entry:
    return Entry(key.encode(), sequence, uuid, b"", value.encode())


def fold(changes, state=None):
    state = dict(state or {})
    for c in changes:
        if c.deleted:
            state.pop(c.key, None)
        else:
            state[c.key] = c.value
    return state


def test_live_updates_then_a_resync_give_exactly_the_servers_map():
    log = Changelog(emit_snapshot=True)
    first = log.resync(2, [entry("a", 1), entry("b", 2)])
    assert [(c.key, c.sequence, c.resync) for c in first] == [(b"a", 1, "0:2"), (b"b", 2, "0:2")]
    live = [log.update(entry("c", 3)), log.update(entry("a", 4, "a2"))]
    assert [c.sequence for c in live] == [3, 4] and all(c.resync is None for c in live)
    assert log.update(entry("a", 4, "a2")) is None            # a repeat shows nothing
    # Unseen while failing over: b deleted (5), c changed (6), d added (7).
    server = [entry("a", 4, "a2"), entry("c", 6, "c2"), entry("d", 7)]
    diff = log.resync(7, server)
    assert [(c.key, c.sequence, c.deleted) for c in diff] == [
        (b"c", 6, False), (b"d", 7, False), (b"b", 7, True)]
    assert {c.resync for c in diff} == {"4:7"}
    assert fold(first + live + diff) == {e.key: e.body for e in server}


def bulk_parts(entries: list[Entry], size: int):
    """The KVBULKs a server would send for `entries`, `size` a message."""
    return [decode_bulk(encode_bulk(entries[i:i + size])) for i in range(0, len(entries), size)]


@pytest.mark.parametrize("subtree", [b"", b"/a/"])
def test_a_first_snapshot_in_columns_is_the_rows_resync_makes_of_its_entries(subtree):
    """`snapshot_table` (the capture's column path) against `Changelog.resync` over the
    entries the client would make: deletes and keys outside the subtree dropped, rows in
    sequence order, properties parsed, a key that is not UTF-8 shown with U+FFFD."""
    given = [Entry(b"/a/3", 9, b"u" * 16, b"", b"three"),
             Entry(b"/a/1", 4, b"v" * 16, b"ttl=1700000000000\nx=y\n", b"one"),
             Entry(b"/b/1", 2, b"w" * 16, b"", b"outside"),
             Entry(b"/a/gone", 5, b"x" * 16, b"", b""),
             Entry(b"/a/\xff", 7, b"", b"", b"bad key"),
             Entry(b"/a", 1, b"y" * 16, b"", b"short key")]
    bulk = BulkEntries(bulk_parts(given, 4), subtree)
    table = snapshot_table(bulk.parts, subtree, "0:9")
    expected = changes_batch(Changelog(emit_snapshot=True).resync(9, bulk.entries()))
    assert table.to_pylist() == expected.to_pylist()
    assert table.schema == CHP_SCHEMA and table.num_rows == (5 if not subtree else 3)


def test_a_first_snapshot_taken_whole_is_remembered_when_first_needed():
    log = Changelog(emit_snapshot=True)
    snapshot = [entry("a", 1), entry("b", 2), entry("c", 3)]
    loads = []
    assert log.take_whole(3, lambda: loads.append(1) or snapshot) == "0:3"
    assert log.take_whole(3, lambda: snapshot) is None           # only the first one
    assert log.update(entry("a", 4, "a2")).sequence == 4            # over the snapshot
    assert log.update(Entry(b"b", 5, b"u" * 16, b"", b"")).deleted
    assert loads == []                                               # not built yet
    diff = log.resync(6, [entry("a", 4, "a2"), entry("c", 3), entry("d", 6)])
    assert loads == [1]
    assert [(c.key, c.sequence, c.deleted, c.resync) for c in diff] == [(b"d", 6, False, "5:6")]
    assert set(log.known) == {b"a", b"c", b"d"}


def test_latest_emits_no_snapshot_but_keeps_a_baseline_for_restarts():
    log = Changelog(emit_snapshot=False)
    assert log.resync(5, [entry("a", 5)]) == []
    assert [c.key for c in log.baseline] == [b"a"]
    assert log.update(entry("a", 6, "new")).value == b"new"
    # A restart replays baseline and changes, then diffs the next snapshot against them.
    again = Changelog(emit_snapshot=False)
    for change in log.baseline + [Change(b"a", 6, b"u" * 16, b"", b"new", False)]:
        again.replay(change)
    assert again.resync(9, [entry("a", 6, "new"), entry("z", 9)]) == [
        Change(b"z", 9, b"u" * 16, b"", b"v", False, "6:9")]


def test_a_server_that_lost_updates_is_followed_back_down():
    log = Changelog(emit_snapshot=True)
    log.resync(0, [])
    for n in range(1, 4):
        log.update(entry(f"k{n}", n))
    diff = log.resync(1, [entry("k1", 1)])            # restarted without its data dir
    assert [(c.key, c.deleted) for c in diff] == [(b"k2", True), (b"k3", True)]
    assert log.update(entry("k9", 2)).sequence == 2   # its numbering, from 2 again


def test_payloads_round_trip_and_bad_ones_are_refused():
    changes = [Change(b"k", 3, b"u" * 16, b"ttl=5\n", b"v", False, "0:3"),
               Change(b"gone", 4, b"w" * 16, b"", b"", True)]
    [(payload, rows)] = encode_payloads(changes)
    assert rows == len(changes)
    table = decode_payload(payload, 7)
    assert table.schema == CHP_SCHEMA
    assert table.column("properties").to_pylist()[0] == [("ttl", "5"), (RESYNC_PROPERTY, "0:3")]
    back = list(table_changes(table))
    assert [(c.key, c.sequence, c.deleted, c.resync) for c in back] == [
        (b"k", 3, False, "0:3"), (b"gone", 4, True, None)]
    with pytest.raises(PayloadError, match="log index 7"):
        decode_payload(b"not arrow", 7)


def test_offsets_carry_the_capture_and_refuse_other_checkpoints():
    offset = chp_offset(12, "chp-capture-x", 10)
    assert parse_offset(json.loads(json.dumps(offset))) == (12, "chp-capture-x", 10)
    with pytest.raises(ValueError, match="not a chp changelog offset"):
        parse_offset({"index": 3})
    with pytest.raises(ValueError, match="since must be"):
        parse_offset({"index": 3, "capture": "c", "since": -1})


def test_row_uuids_are_deterministic_and_distinct():
    assert row_uuid("q", 3, 1, 7) == row_uuid("q", 3, 1, 7)
    seen = {row_uuid(q, b, p, r) for q in ("q", "r") for b in (0, 1) for p in (0, 1)
            for r in range(50)}
    assert len(seen) == 2 * 2 * 2 * 50 and all(len(u) == 16 for u in seen)


def test_key_filters_narrow_the_subtree():
    keys = KeyFilter(b"/o/")
    assert keys.narrow(StringStartsWith(("key",), "/o/12"))
    assert keys.subtree == b"/o/12" and keys.wanted(b"/o/123")
    exact = KeyFilter(b"")
    assert exact.narrow(In(("key",), ("/a/1", "/a/2")))
    assert exact.subtree == b"/a/" and exact.wanted(b"/a/1") and not exact.wanted(b"/a/3")
    disjoint = KeyFilter(b"/o/")
    disjoint.narrow(EqualTo(("key",), "/x"))
    assert disjoint.empty and not disjoint.wanted(b"/x")
    assert not KeyFilter(b"").narrow(EqualTo(("value",), b"x"))


def test_sink_input_checks_name_the_column():
    check_input([("key", "string"), ("value", "binary"), ("ttl", "integer"),
                 ("properties", "map")])
    with pytest.raises(SchemaError, match="'value'"):
        check_input([("key", "string")])
    with pytest.raises(SchemaError, match="drop 'extra'"):
        check_input([("key", "string"), ("value", "string"), ("extra", "long")])
    with pytest.raises(SchemaError, match="'ttl' must be"):
        check_input([("key", "string"), ("value", "string"), ("ttl", "string")])


def test_marker_values():
    assert marker_batch(None) == -1 and marker_batch(b"junk") == -1
    assert marker_batch(json.dumps({"batch": 4}).encode()) == 4
    assert pa.types.is_map(CHP_SCHEMA.field("properties").type)


def test_column_names_of_ddl_with_a_map():
    from pyspark_farm.chp.rows import CHP_COLUMNS_DDL
    from pyspark_farm.schema import KindColumns
    assert KindColumns(CHP_COLUMNS_DDL).names == [
        "key", "sequence", "uuid", "properties", "value", "deleted"]


def test_options_name_what_is_wrong():
    from pyspark_farm.chp import kind
    from pyspark_farm.errors import OptionError
    with pytest.raises(OptionError, match="'endpoint'.*needs it"):
        kind.schema({})
    with pytest.raises(OptionError, match="'endpoint'"):
        kind.schema({"endpoint": "nowhere"})
    with pytest.raises(OptionError, match="'startingOffsets'"):
        kind._source_values({"endpoint": "127.0.0.1:5556", "endpoints": "127.0.0.1:9",
                             "startingOffsets": "earliest"})
    with pytest.raises(OptionError, match="'minOffsetsPerTrigger'"):
        kind._source_values({"endpoint": "127.0.0.1:5556", "endpoints": "127.0.0.1:9",
                             "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "2"})
    assert kind.SERVER_OPTIONS.parse({"endpoint": "127.0.0.1:5556, 127.0.0.1:5566"})[
        "endpoint"] == ("127.0.0.1:5556", "127.0.0.1:5566")


class _FlakyFarm:
    """Stages payloads, refusing the second one once (the farm unavailable mid-chunk)."""

    def __init__(self) -> None:
        self.staged: dict[int, bytes] = {}
        self.calls = 0
        self.commits: list[tuple[list[int], dict]] = []

    def stage(self, query_id, batch, part, attempt, payload, *, content_type):
        from consensus.common.errors import Unavailable
        self.calls += 1
        if self.calls == 2:
            raise Unavailable("the farm is electing a leader")
        index = 100 + len(self.staged)
        self.staged[index] = payload
        return index

    def commit_batch(self, query_id, batch, staged, *, metadata):
        from consensus.common.results import BatchCommit
        self.commits.append((list(staged), metadata))
        return BatchCommit(True, 999, metadata=metadata)


def test_a_chunk_retried_after_a_refused_payload_stages_all_its_payloads():
    """A chunk of several payloads whose second stage is refused is staged whole again:
    the commit names every payload, and their rows add up to the chunk's."""
    from pyspark_farm.chp.capture import Capture, CaptureSettings
    capture = Capture(CaptureSettings(None, ("127.0.0.1:9",), b"", 1.0, True), "c", 0)
    changes = [Change(b"k%d" % n, n, b"u" * 16, b"", bytes([n]) * 100_000, False)
               for n in range(60)]
    farm = _FlakyFarm()
    capture._write(farm, "c", 0, changes, 59, "127.0.0.1:9")
    [(staged, metadata)] = farm.commits
    assert len(staged) == len(metadata["rows"]) >= 3
    assert sum(metadata["rows"]) == len(changes)
    keys = [c.key for index in staged for c in table_changes(
        decode_payload(farm.staged[index], index))]
    assert keys == [c.key for c in changes]
