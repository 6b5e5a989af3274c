"""The sans-I/O parts of the data source: options, offsets, admission control, planning."""
from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings, strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

import numpy as np

from pyspark_farm.admission import SourceLimits, choose_end
from pyspark_farm.errors import OptionError
from pyspark_farm.offsets import OffsetSpec, index_of, offset_spec_parser
from pyspark_farm.options import UnknownOptionWarning, duration
from pyspark_farm.planning import EntrySize, Piece, Sizes, plan_tasks
from pyspark_farm.raft import kind
from pyspark_farm.raft.source import IndexBounds
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan,
                                    LessThanOrEqual, Not)

ENDPOINTS = {"endpoints": "127.0.0.1:7001,tcp://127.0.0.1:7002"}


# --- options -------------------------------------------------------------------------------

def test_options_typed_defaults_and_case_insensitive_keys():
    values = kind.SOURCE_OPTIONS.parse({**ENDPOINTS, "MAXOFFSETSPERTRIGGER": "10",
                                        "failondataloss": "false", "readFrom": "Followers",
                                        "maxTriggerDelay": "2s"})
    assert values["endpoints"] == "127.0.0.1:7001,127.0.0.1:7002"
    assert values["maxOffsetsPerTrigger"] == 10
    assert values["failOnDataLoss"] is False
    assert values["readFrom"] == "followers"
    assert values["maxTriggerDelay"] == 2.0
    assert values["cluster"] == "farm" and values["valueFormat"] == "binary"


@pytest.mark.parametrize("key,value,needle", [
    ("maxOffsetsPerTrigger", "0", "integer >= 1"),
    ("maxOffsetsPerTrigger", "ten", "expected an integer"),
    ("failOnDataLoss", "maybe", "true or false"),
    ("readFrom", "nearest", "leader, followers, observers, any"),
    ("valueFormat", "xml", "binary, json, msgpack, arrow"),
    ("startingOffsets", "first", '{"index": N}'),
    ("startingOffsets", '{"index": -1}', "integer >= 0"),
    ("startingOffsets", '{"offset": 3}', '{"index": N}'),
    ("endpoints", "localhost", "host:port"),
    ("timeout", "-1", "> 0"),
    ("maxTriggerDelay", "soon", "duration"),
])
def test_bad_values_name_the_option(key, value, needle):
    with pytest.raises(OptionError) as caught:
        kind.SOURCE_OPTIONS.parse({**ENDPOINTS, key: value})
    assert caught.value.option == key
    assert key in str(caught.value) and needle in str(caught.value)


def test_sink_options_are_bounded():
    with pytest.raises(OptionError, match="stageBytes.*<= 16777216"):
        kind.SINK_OPTIONS.parse({**ENDPOINTS, "stageBytes": str(64 << 20)})
    values = kind.SINK_OPTIONS.parse({**ENDPOINTS, "stageThreads": "3"})
    assert values["stageThreads"] == 3 and values["stageBytes"] == 4 << 20
    assert values["compression"] == "zstd"


def test_missing_endpoints_says_what_to_set():
    with pytest.raises(OptionError, match="endpoints.*host:port"):
        kind.schema({})


def test_unknown_option_warns_with_the_valid_ones():
    with pytest.warns(UnknownOptionWarning) as caught:
        kind.SOURCE_OPTIONS.parse({**ENDPOINTS, "startingOffset": "earliest", "kind": "raft",
                                   "path": "x"}, ignore=("kind",))
    message = str(caught[0].message)
    assert "startingoffset" in message and "startingOffsets" in message
    assert "kind" not in message.split("valid options")[0] and "path" not in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kind.SOURCE_OPTIONS.parse(ENDPOINTS)


def test_min_above_max_is_refused():
    with pytest.raises(OptionError, match="minOffsetsPerTrigger"):
        kind.schema({**ENDPOINTS, "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "4"})


def test_value_schema_rules():
    assert kind.schema({**ENDPOINTS, "valueFormat": "json", "valueSchema": "a long"}) \
        .endswith(", a long")
    json_schema = '{"type":"struct","fields":[{"name":"n","type":"long","nullable":true,"metadata":{}}]}'
    assert kind.schema({**ENDPOINTS, "valueFormat": "msgpack", "valueSchema": json_schema}) \
        .endswith(", `n` bigint")
    with pytest.raises(OptionError, match="valueSchema"):
        kind.schema({**ENDPOINTS, "valueFormat": "json"})
    with pytest.raises(OptionError, match="valueSchema"):
        kind.schema({**ENDPOINTS, "valueSchema": "a long"})


def test_durations():
    assert duration("500ms") == 0.5 and duration("15m") == 900 and duration("250") == 0.25
    assert duration("1h") == 3600


# --- offsets -------------------------------------------------------------------------------

def test_offset_specs_resolve_against_the_log():
    parse = offset_spec_parser("startingOffsets")
    assert parse("EARLIEST").resolve(5, 50) == 5
    assert parse("latest").resolve(5, 50) == 50
    assert parse('{"index": 17}').resolve(5, 50) == 17
    assert str(parse('{"index": 17}')) == '{"index": 17}'
    assert index_of({"index": 3}) == 3
    for bad in ({"index": "3"}, {"index": True}, {"index": 3, "x": 1}, [3]):
        with pytest.raises(ValueError, match="index"):
            index_of(bad)


# --- admission control ---------------------------------------------------------------------

ROWS = [(10, 3), (11, 0), (12, 5), (13, 1), (14, 4)]   # (index, rows); 15 is the end


def test_no_limits_reads_everything_without_counting():
    def boom():
        raise AssertionError("rows were counted")
        yield
    assert choose_end(10, 15, boom(), SourceLimits()) == 15


def test_max_rows_takes_whole_entries_within_the_limit():
    assert choose_end(10, 15, iter(ROWS), SourceLimits(max_rows=8)) == 13       # 3+0+5 = 8
    assert choose_end(10, 15, iter(ROWS), SourceLimits(max_rows=7)) == 12  # 3+0, next: 8
    assert choose_end(10, 15, iter(ROWS), SourceLimits(max_rows=100)) == 15
    # One entry larger than the limit is taken alone: the only overshoot.
    assert choose_end(12, 15, iter(ROWS[2:]), SourceLimits(max_rows=2)) == 13


def test_min_rows_waits_until_enough_or_the_delay():
    limits = SourceLimits(min_rows=20, max_trigger_delay=60)
    assert choose_end(10, 15, iter(ROWS), limits, waited=1) == 10          # 13 rows < 20
    assert choose_end(10, 15, iter(ROWS), limits, waited=61) == 15         # delay passed
    assert choose_end(10, 15, iter(ROWS), limits, available_now=True) == 15
    assert choose_end(10, 15, iter(ROWS), SourceLimits(min_rows=8), waited=0) == 15


def test_limits_under_the_engines_read_limit():
    limits = SourceLimits(max_rows=5, min_rows=2)
    assert limits.default_read_limit() == ReadMaxRows(5)
    assert SourceLimits(min_rows=2).default_read_limit() == ReadMinRows(2)
    assert SourceLimits().default_read_limit() == ReadAllAvailable()
    assert limits.under(ReadAllAvailable()).unlimited
    assert limits.under(ReadMaxRows(9)) == SourceLimits(max_rows=9, min_rows=2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(1, 120))
def test_max_rows_property(counts, max_rows):
    rows = [(100 + i, c) for i, c in enumerate(counts)]
    end = 100 + len(counts)
    stop = choose_end(100, end, iter(rows), SourceLimits(max_rows=max_rows))
    taken = [c for i, c in rows if i < stop]
    assert 100 < stop <= end
    # Within the limit, unless one single entry is bigger than the limit on its own.
    assert sum(taken) <= max_rows or len([c for c in taken if c]) == 1
    # Maximal: the limit is reached, or the next entry would not have fitted.
    if stop < end:
        assert sum(taken) >= max_rows or sum(taken) + rows[stop - 100][1] > max_rows


def test_size_scan_reads_only_as_far_as_needed():
    from pyspark_farm.log_access import SizeScan
    consumed = []

    def pages():    # pages [5, 8), [8, 12), [12, 20)
        for start, stop, sizes in [(5, 8, [EntrySize(5, 0)]), (8, 12, [EntrySize(8, 4)]),
                                   (12, 20, [EntrySize(12, 2)])]:
            consumed.append(start)
            yield Sizes.of(start, stop, sizes)
    scan = SizeScan(pages())
    assert not scan.rows_before(6) and consumed == [5]        # the first page covers 6
    assert scan.rows_before(9) and consumed == [5, 8]         # read on as far as 9
    assert not scan.covers(13) and scan.covers(9)
    assert list(scan.counts()) == [(8, 4), (12, 2)] and scan.covers(100)
    assert consumed == [5, 8, 12]
    through = scan.through(13)
    assert through.index.tolist() == [8, 12] and through.rows.tolist() == [4, 2]


class _PagedLog:
    """A leader's log for the planner: journal entries 1..`journal`, then entries without
    rows (status) up to `last`; read_entries serves `page` headers at most and counts
    the entries it served."""
    timeout = 1.0

    def __init__(self, journal: int, last: int, page: int) -> None:
        self.journal, self.last, self.page = journal, last, page
        self.served = 0

    def last_applied(self, *, stable: bool = False) -> int:
        return self.last

    def log_bounds(self, endpoint=None) -> tuple[int, int, int]:
        return 1, self.last, 0

    def read_entries(self, start, stop, *, max_bytes=0, payloads=True, endpoint=None):
        from types import SimpleNamespace
        stop = min(stop, start + self.page)
        self.served += stop - start
        return [SimpleNamespace(index=i, type="journal" if i <= self.journal else "status",
                                commit=None, records=None, count=1) for i in range(start, stop)]


class _OlderMember(_PagedLog):
    """A member from before entry_rows: the call is refused as unknown, as such a node
    refuses it."""

    def entry_rows(self, start, stop, *, endpoint=None):
        from consensus.client import FarmError
        self.refused = getattr(self, "refused", 0) + 1
        raise FarmError("unknown call 'entry_rows'; this node knows log_bounds, read_entries")


class _RowsMember(_PagedLog):
    """A member with entry_rows, answering `page` entries at a time."""

    def entry_rows(self, start, stop, *, endpoint=None):
        from consensus.client import RowCounts
        stop = min(stop, start + self.page)
        self.served += stop - start
        rows = np.array([1 if i <= self.journal else 0 for i in range(start, stop)], "<u4")
        return RowCounts(start, stop, rows.tobytes(), [])

    def read_entries(self, *args, **kwargs):
        raise AssertionError("planned from headers although entry_rows answers")


@pytest.mark.parametrize("member", ["_PagedLog", "_OlderMember", "_RowsMember"])
def test_a_micro_batch_reads_each_entry_size_once(member):
    """latestOffset without limits reads the first page; partitions reads on from there
    (it read the backlog's first page twice, when the backlog ended with entries without
    rows, e.g. status entries). Row counts come from entry_rows, or from headers where the
    member has no entry_rows or refuses it as unknown (a node older than the call)."""
    from types import SimpleNamespace

    from pyspark_farm.log_access import LogPlanner
    farm_log = globals()[member](journal=25, last=30, page=10)
    planner = LogPlanner()
    planner.settings = SimpleNamespace(limits=SourceLimits(), min_partitions=1, read_from="leader",
                                       fail_on_data_loss=True)
    planner._client = planner._probe = farm_log
    stop = planner.next_end(1, ReadAllAvailable())
    assert stop == 31 and farm_log.served == 10
    tasks = planner.plan_batch(1, stop)
    assert [(p.start, p.stop) for task in tasks for p in task.pieces] == [(1, 26)]
    assert farm_log.served == 30
    assert getattr(farm_log, "refused", 0) == (1 if member == "_OlderMember" else 0)


# --- planning -------------------------------------------------------------------------------

def _covered(tasks):
    pieces = [p for task in tasks for p in task]
    return pieces


def test_plan_splits_a_big_commit_by_its_payloads_in_order():
    sizes = [EntrySize(3, 10), EntrySize(5, 400, (100, 100, 100, 100)), EntrySize(7, 10)]
    tasks = plan_tasks(1, 9, sizes, min_tasks=4, rows_per_task=1000)
    pieces = _covered(tasks)
    assert len(tasks) >= 4
    # Only entries with rows are read: 3, the commit 5 (in slices), 7.
    assert pieces[0] == Piece(3, 4) and pieces[-1] == Piece(7, 8)
    slices = [p.parts for p in pieces if p.parts]
    assert all(p.start == 5 for p in pieces if p.parts)
    assert slices[0][0] == 0 and slices[-1][1] == 4
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:]))  # contiguous, in order


def test_plan_merges_runs_of_journal_entries_and_skips_entries_without_rows():
    sizes = [EntrySize(i, 2) for i in (10, 11, 12, 15, 16)] + [EntrySize(20, 0)]
    assert plan_tasks(10, 30, sizes) == [[Piece(10, 13), Piece(15, 17)]]
    assert plan_tasks(10, 30, [EntrySize(20, 0)]) == []
    assert plan_tasks(4, 9, []) == []
    assert plan_tasks(12, 16, sizes) == [[Piece(12, 13), Piece(15, 16)]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(1, 50), max_size=5)),
                max_size=20), st.integers(1, 8), st.integers(1, 200))
def test_plan_covers_every_row_once_in_order(entries, min_tasks, rows_per_task):
    sizes, index = [], 10
    for gap, parts in entries:
        index += gap
        sizes.append(EntrySize(index, sum(parts), tuple(parts) if len(parts) > 1 else ()))
        index += 1
    stop = index + 2
    tasks = plan_tasks(10, stop, sizes, min_tasks=min_tasks, rows_per_task=rows_per_task)
    units = []   # (index, part) in reading order
    by_index = {s.index: s for s in sizes}
    for piece in _covered(tasks):
        for i in range(piece.start, piece.stop):
            size = by_index.get(i)
            if size is None:
                continue
            parts = range(*piece.parts) if piece.parts else range(max(1, len(size.parts)))
            units += [(i, p) for p in parts]
    expected = [(s.index, p) for s in sizes if s.rows for p in range(max(1, len(s.parts)))]
    assert units == expected
    assert all(task for task in tasks)


def _reference_plan(start, stop, sizes, min_tasks, rows_per_task):
    """plan_tasks as it was written before it was vectorized: entry by entry, in Python."""
    units = [s for s in sizes if start <= s.index < stop and s.rows > 0]
    total = sum(s.rows for s in units)
    if total == 0:
        return []
    target = max(1, min(rows_per_task, -(-total // max(1, min_tasks))))
    tasks, bucket, dealt = [], -1, 0

    def place(unit_bucket, piece):
        nonlocal bucket
        if unit_bucket != bucket:
            tasks.append([])
            bucket = unit_bucket
        last = tasks[-1][-1] if tasks[-1] else None
        if piece.parts is None and last is not None and last.parts is None \
                and last.stop == piece.start:
            tasks[-1][-1] = Piece(last.start, piece.stop)
        else:
            tasks[-1].append(piece)

    for size in units:
        if not size.parts:
            place((2 * dealt + size.rows) // (2 * target), Piece(size.index, size.index + 1))
            dealt += size.rows
            continue
        lo, lo_bucket = 0, None
        for position, rows in enumerate(size.parts):
            unit_bucket = (2 * dealt + rows) // (2 * target)
            dealt += rows
            if lo_bucket is not None and unit_bucket != lo_bucket:
                place(lo_bucket, Piece(size.index, size.index + 1, (lo, position)))
                lo = position
            lo_bucket = unit_bucket
        place(lo_bucket, Piece(size.index, size.index + 1, (lo, len(size.parts))))
    return tasks


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 50), max_size=5)),
                max_size=30), st.integers(1, 8), st.integers(1, 200), st.integers(0, 40))
def test_plan_cuts_where_the_entry_by_entry_plan_cuts(entries, min_tasks, rows_per_task, skip):
    """The vectorized planner makes the same tasks as planning an entry at a time, from
    EntrySizes and from the arrays of `Sizes.journal` (what `entry_rows` answers)."""
    sizes, index = [], 10
    for gap, parts in entries:
        index += gap
        sizes.append(EntrySize(index, sum(parts), tuple(parts), index - 3) if len(parts) > 1
                     else EntrySize(index, sum(parts)))
        index += 1
    start, stop = 10 + skip // 4, index + 2 - skip % 3
    expected = _reference_plan(start, stop, sizes, min_tasks, rows_per_task)
    assert plan_tasks(start, stop, sizes, min_tasks=min_tasks,
                      rows_per_task=rows_per_task) == expected
    journal = np.zeros(index + 2 - 10, dtype="<u4")
    for s in sizes:
        if not s.parts:
            journal[s.index - 10] = s.rows
    arrays = Sizes.journal(10, journal, [s for s in sizes if s.parts])
    assert plan_tasks(start, stop, arrays, min_tasks=min_tasks,
                      rows_per_task=rows_per_task) == expected


def test_read_from_members_leave_out_those_behind():
    from consensus.client import ClusterView, MemberView
    from pyspark_farm.log_access import choose_members
    members = {1: MemberView(1, "h:1", "leader", True, 100, None),
               2: MemberView(2, "h:2", "follower", True, 99, None),
               3: MemberView(3, "h:3", "follower", True, 40, None),     # behind, or down
               4: MemberView(4, "h:4", "observer", False, 100, None)}
    view = ClusterView(1, 3, 100, {1: "h:1", 2: "h:2", 3: "h:3"}, {4: "h:4"}, {}, members)
    assert choose_members(view, "leader", 100) == [None]
    assert choose_members(view, "followers", 100) == ["h:2"]
    assert choose_members(view, "followers", 30) == ["h:2", "h:3"]
    assert choose_members(view, "observers", 100) == ["h:4"]
    assert choose_members(view, "any", 100) == [None, "h:2", "h:4"]
    # A member whose log starts after the lowest entry the tasks read is left out too,
    # and so is one that did not say where its log starts.
    assert choose_members(view, "followers", 30, {2: 50, 3: 10}, low=20) == ["h:3"]
    assert choose_members(view, "any", 100, {2: 20, 4: None}, low=20) == [None, "h:2"]
    assert choose_members(view, "observers", 100, {2: 10, 4: 21}, low=20) == ["h:2"]
    alone = ClusterView(1, 3, 100, {1: "h:1"}, {}, {}, {1: members[1]})
    assert choose_members(alone, "followers", 100) == [None]
    assert choose_members(alone, "observers", 100) == [None]


# --- filter pushdown on index -----------------------------------------------------------------

def test_index_filters_narrow_the_range():
    bounds = IndexBounds()
    assert bounds.narrow(GreaterThanOrEqual(("index",), 5))
    assert bounds.narrow(LessThan(("index",), 20))
    assert bounds.narrow(GreaterThan(("index",), 6))
    assert not bounds.narrow(EqualTo(("term",), 2))
    assert not bounds.narrow(Not(EqualTo(("index",), 2)))
    assert not bounds.narrow(GreaterThan(("index",), 2.5))
    assert bounds.ranges(1, 100) == [(7, 20)]
    assert bounds.ranges(1, 10) == [(7, 10)]
    points = IndexBounds()
    assert points.narrow(In(("index",), (3, 4, 9, 50)))
    assert points.narrow(LessThanOrEqual(("index",), 9))
    assert points.ranges(1, 40) == [(3, 5), (9, 10)]


class _OlderJournalMember:
    """A member from before read_journal: it refuses the call as unknown and serves
    read_entries (journal entries 5..9 with two records each, 7 a retried duplicate)."""
    timeout = 1.0

    def __init__(self) -> None:
        self.refused = 0

    def read_journal(self, start, stop, *, max_bytes=0, endpoint=None):
        from consensus.client import FarmError
        self.refused += 1
        raise FarmError("unknown call 'read_journal'; this node knows read_entries")

    def read_entries(self, start, stop, *, max_bytes=0, endpoint=None, payloads=True):
        from consensus.client import LogRecord
        stop = min(stop, start + 2)         # pages of two entries
        return [LogRecord(i, 1, "journal", [b"%d-a" % i, b"%d-b" % i], b"", i,
                          duplicate=i == 7, count=2) for i in range(start, stop)]

    def close(self) -> None:
        pass


def test_journal_runs_from_a_member_older_than_read_journal_come_from_read_entries():
    from types import SimpleNamespace

    from pyspark_farm.log_access import PieceReader
    member = _OlderJournalMember()
    reader = PieceReader(SimpleNamespace(client=lambda **_: member, timeout=1.0), None,
                         fail_on_data_loss=True)
    try:
        pages = list(reader.read([Piece(5, 10)]))
    finally:
        reader.close()
    assert [entry for page in pages for entry in page.entries()] == [
        (i, [b"%d-a" % i, b"%d-b" % i]) for i in (5, 6, 8, 9)]
    assert member.refused == 1          # asked once, then read_entries for the rest
