"""Reading and writing histories: the EDN subset, jepsen logs, EDN lines, pairing, and
the typed errors that name the line and field at fault."""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings, strategies as st

from consensus.linearizability import (Event, EventType, HistoryError, Keyword, Outcome,
                                       format_edn, pair_events, parse_edn_lines,
                                       parse_jepsen_log, read_events, read_history, write_edn)
from consensus.linearizability.edn import EdnLimits, dumps, loads


class TestEdn:
    def test_values(self) -> None:
        assert loads('{:a 1, :b "x\\"y\\n", :c nil, :d [1 -2 3N], :e true, :f 1.5}') == {
            Keyword("a"): 1, Keyword("b"): 'x"y\n', Keyword("c"): None,
            Keyword("d"): (1, -2, 3), Keyword("e"): True, Keyword("f"): 1.5}
        assert loads(":timed-out") == Keyword("timed-out")
        assert loads("#{1 2} ; comment") == frozenset({1, 2})
        assert loads('"\\u00e9"') == "é"

    @given(st.recursive(
        st.none() | st.booleans() | st.integers() | st.text() |
        st.text(st.characters(whitelist_categories=("Ll",)), min_size=1).map(Keyword),
        lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=10))
    @settings(derandomize=True, max_examples=200)
    def test_round_trip(self, value) -> None:
        back = loads(dumps(value))
        assert back == value and type(back) is type(value)

    @pytest.mark.parametrize("text, fragment", [
        ('"open', "cannot read"),
        ("{:a}", "even number"),
        ("[1 2", "never closed"),
        ("[1 2}", "closed by"),
        ("]", "unexpected"),
        ("sym", "not a value"),
        ("1 2", "after the value"),
        ("", "empty"),
        ('"\\q"', "bad escape"),
    ])
    def test_malformed(self, text: str, fragment: str) -> None:
        with pytest.raises(HistoryError, match=fragment):
            loads(text)

    def test_limits_are_checked_first(self) -> None:
        with pytest.raises(HistoryError, match="nested deeper"):
            loads("[" * 100 + "]" * 100)
        with pytest.raises(HistoryError, match="above the limit"):
            loads("1" * 50, limits=EdnLimits(max_text=10))

    def test_unwritable_value_names_the_field(self) -> None:
        with pytest.raises(HistoryError) as error:
            format_edn(Event(0, EventType.INVOKE, "put", "k", object()))
        assert error.value.field == "value"


class TestJepsenLog:
    def test_tabs_spaces_nemesis_and_other_lines(self) -> None:
        events, lines = parse_jepsen_log([
            "INFO  jepsen.core - Running test\n",
            "INFO  jepsen.util - 3\t:invoke\t:cas\t[1 4]\n",
            "INFO  jepsen.util - :nemesis\t:info\t:start\tnil\n",
            "\n",
            "INFO  jepsen.util - 3   :info   :cas    :timed-out\n",
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n",
            "INFO  jepsen.util - 0\t:fail\t:read\t:timed-out\n",
        ])
        assert lines == [2, 5, 6, 7]
        assert events[0] == Event(3, EventType.INVOKE, "cas", None, (1, 4))
        assert events[1].type is EventType.INFO and events[1].value == Keyword("timed-out")
        cas, read = pair_events(events)
        assert cas.outcome is Outcome.UNKNOWN and cas.ret is None
        assert read.outcome is Outcome.FAIL

    def test_malformed_line_is_named(self) -> None:
        with pytest.raises(HistoryError) as error:
            parse_jepsen_log(["INFO  jepsen.util - 1\t:invoke\t:read\tnil\n",
                              "INFO  jepsen.util - 1\t:bogus\t:read\tnil\n"], source="x.log")
        assert (error.value.line, error.value.field) == (2, "type")
        assert str(error.value).startswith("x.log:2: type:")


class TestEdnLines:
    def test_vector_format(self) -> None:
        events, _ = parse_edn_lines([
            '{:process 6, :type :invoke, :f :append, :key "0", :value "x 6 0 y"}',
            '{:process 6, :type :ok, :f :append, :key "0", :value "x 6 0 y", :index 9}',
            '{:process :nemesis, :type :info, :f :kill, :value nil}'])
        assert events == [Event(6, EventType.INVOKE, "append", "0", "x 6 0 y"),
                          Event(6, EventType.OK, "append", "0", "x 6 0 y")]

    @pytest.mark.parametrize("line, field", [
        ('{:type :invoke, :f :get}', ":process"),
        ('{:process 1, :type :begin, :f :get}', ":type"),
        ('{:process 1, :type :invoke, :f 7}', ":f"),
        ('{:process 1.5, :type :invoke, :f :get}', ":process"),
        ('{:process 1, :type :invoke, :f :get, :time "now"}', ":time"),
        ('[1 2]', "line"),
    ])
    def test_bad_line_names_line_and_field(self, line: str, field: str) -> None:
        with pytest.raises(HistoryError) as error:
            parse_edn_lines(["", line])
        assert (error.value.line, error.value.field) == (2, field)

    def test_write_then_read_is_identity(self) -> None:
        events = [Event(0, EventType.INVOKE, "cas", "k", ("a", "b"), 10),
                  Event("p1", EventType.INVOKE, "get", "k", None, 11),
                  Event(0, EventType.FAIL, "cas", "k", ("a", "b"), 12),
                  Event("p1", EventType.INFO, "get", "k", Keyword("timeout"), 13),
                  Event(2, EventType.INVOKE, "write", None, 3, 14)]
        out = io.StringIO()
        write_edn(events, out)
        assert parse_edn_lines(out.getvalue().splitlines())[0] == events


class TestPairing:
    def ev(self, process, kind, f="read", time=None, key=None):
        return Event(process, kind, f, key, None, time)

    @pytest.mark.parametrize("events, field", [
        ([("a", EventType.OK)], "process"),
        ([("a", EventType.INVOKE), ("a", EventType.INVOKE)], "process"),
    ])
    def test_process_discipline(self, events, field) -> None:
        with pytest.raises(HistoryError) as error:
            pair_events([self.ev(p, k) for p, k in events], lines=[7, 8])
        assert error.value.field == field and error.value.line == len(events) + 6

    def test_completion_must_match_its_invoke(self) -> None:
        with pytest.raises(HistoryError, match="invoked read") as error:
            pair_events([self.ev(0, EventType.INVOKE), self.ev(0, EventType.OK, f="write")])
        assert error.value.field == "f"
        with pytest.raises(HistoryError) as error:
            pair_events([self.ev(0, EventType.INVOKE, key="a"),
                          self.ev(0, EventType.OK, key="b")])
        assert error.value.field == "key"

    def test_times_all_or_nothing_and_forward(self) -> None:
        with pytest.raises(HistoryError, match="some events have a :time"):
            pair_events([self.ev(0, EventType.INVOKE, time=5), self.ev(0, EventType.OK)])
        with pytest.raises(HistoryError, match="before its invoke"):
            pair_events([self.ev(0, EventType.INVOKE, time=5),
                         self.ev(0, EventType.OK, time=4)])

    def test_times_or_positions(self) -> None:
        timed = pair_events([self.ev(0, EventType.INVOKE, time=100),
                             self.ev(1, EventType.INVOKE, time=100),
                             self.ev(0, EventType.OK, time=250)])
        assert [(op.call, op.ret) for op in timed] == [(100, 250), (100, None)]
        ordered = pair_events([self.ev(0, EventType.INVOKE), self.ev(0, EventType.OK)])
        assert (ordered[0].call, ordered[0].ret) == (0, 1)


class TestFiles:
    def test_reads_both_formats(self, tmp_path, vectors_dir) -> None:
        ops = read_history(vectors_dir / "linearizability/jepsen/etcd_000.log")
        assert ops and {op.f for op in ops} <= {"read", "write", "cas"}
        ops = read_history(vectors_dir / "linearizability/kv/c01-ok.txt")
        assert ops and {op.f for op in ops} <= {"get", "put", "append"}
        (tmp_path / "empty.txt").write_text("\n\n")
        assert read_events(tmp_path / "empty.txt") == ([], [])

    def test_not_text_or_not_a_history(self, tmp_path) -> None:
        (tmp_path / "bin").write_bytes(b"{:process \xff}\n")
        with pytest.raises(HistoryError) as error:
            read_events(tmp_path / "bin")
        assert error.value.field == "encoding"
        (tmp_path / "csv").write_text("a,b,c\n")
        with pytest.raises(HistoryError) as error:
            read_events(tmp_path / "csv")
        assert error.value.field == "format" and error.value.line == 1

    def test_line_too_long_is_refused_without_reading_it_all(self, tmp_path) -> None:
        path = tmp_path / "long.edn"
        path.write_text('{:process 1, :type :invoke, :f :get}\n{:value "' + "x" * 5000 + '"}\n')
        with pytest.raises(HistoryError) as error:
            read_events(path, limits=EdnLimits(max_text=1000))
        assert error.value.line == 2
