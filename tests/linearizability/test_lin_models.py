"""Hand-written histories for the register and kv models: concurrency, unknown outcomes,
cas, failures, per-key independence, bad operations and the time budget."""
from __future__ import annotations

import pytest

from consensus.linearizability import (Event, EventType, HistoryError, KVModel, Operation,
                                       Outcome, RegisterModel, Verdict, check, pair_events)

INVOKE, OK, FAIL, INFO = EventType.INVOKE, EventType.OK, EventType.FAIL, EventType.INFO


def history(*lines: tuple) -> list[Operation]:
    """Events as (process, type, f, value) or (process, type, f, key, value), in order."""
    events = []
    for line in lines:
        process, kind, f, *rest = line
        key, value = (None, rest[0]) if len(rest) == 1 else rest
        events.append(Event(process, kind, f, key, value))
    return pair_events(events)


def verdict(model, *lines: tuple) -> Verdict:
    return check(history(*lines), model).verdict


REGISTER, KV = RegisterModel(), KVModel()
LIN, NOT = Verdict.LINEARIZABLE, Verdict.NOT_LINEARIZABLE


class TestRegister:
    def test_sequential_read_sees_the_write(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "write", 1), (0, OK, "write", 1),
                       (0, INVOKE, "read", None), (0, OK, "read", 1)) is LIN
        assert verdict(REGISTER, (0, INVOKE, "write", 1), (0, OK, "write", 1),
                       (0, INVOKE, "read", None), (0, OK, "read", 2)) is NOT

    def test_starts_at_nil(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "read", None), (0, OK, "read", None)) is LIN
        assert verdict(REGISTER, (0, INVOKE, "read", None), (0, OK, "read", 0)) is NOT

    def test_concurrent_read_may_see_old_or_new(self) -> None:
        for seen in (None, 1):
            assert verdict(REGISTER, (0, INVOKE, "write", 1), (1, INVOKE, "read", None),
                           (1, OK, "read", seen), (0, OK, "write", 1)) is LIN

    def test_no_going_back_after_a_newer_value_was_seen(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "write", 1), (1, INVOKE, "read", None),
                       (1, OK, "read", 1), (2, INVOKE, "read", None), (2, OK, "read", None),
                       (0, OK, "write", 1)) is NOT

    def test_cas_succeeds_only_on_its_expected_value(self) -> None:
        base = [(0, INVOKE, "write", 1), (0, OK, "write", 1)]
        assert verdict(REGISTER, *base, (0, INVOKE, "cas", (1, 2)), (0, OK, "cas", (1, 2)),
                       (0, INVOKE, "read", None), (0, OK, "read", 2)) is LIN
        assert verdict(REGISTER, *base, (0, INVOKE, "cas", (3, 2)),
                       (0, OK, "cas", (3, 2))) is NOT

    def test_failed_cas_means_the_compare_failed(self) -> None:
        base = [(0, INVOKE, "write", 1), (0, OK, "write", 1)]
        assert verdict(REGISTER, *base, (0, INVOKE, "cas", (3, 2)),
                       (0, FAIL, "cas", (3, 2))) is LIN
        assert verdict(REGISTER, *base, (0, INVOKE, "cas", (1, 2)),
                       (0, FAIL, "cas", (1, 2))) is NOT

    def test_failed_write_did_not_happen(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "write", 5), (0, FAIL, "write", 5),
                       (0, INVOKE, "read", None), (0, OK, "read", 5)) is NOT

    def test_unknown_write_may_take_effect_or_not(self) -> None:
        for seen in (None, 7):
            assert verdict(REGISTER, (0, INVOKE, "write", 7), (0, INFO, "write", None),
                           (1, INVOKE, "read", None), (1, OK, "read", seen)) is LIN

    def test_unknown_write_may_take_effect_long_after_its_client_gave_up(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "write", 7), (0, INFO, "write", None),
                       (1, INVOKE, "read", None), (1, OK, "read", None),
                       (1, INVOKE, "write", 1), (1, OK, "write", 1),
                       (1, INVOKE, "read", None), (1, OK, "read", 7)) is LIN

    def test_unknown_write_takes_effect_once(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "write", 7), (0, INFO, "write", None),
                       (1, INVOKE, "read", None), (1, OK, "read", 7),
                       (1, INVOKE, "write", 1), (1, OK, "write", 1),
                       (1, INVOKE, "read", None), (1, OK, "read", 7)) is NOT

    def test_unknown_cas_takes_effect_only_on_a_match(self) -> None:
        assert verdict(REGISTER, (0, INVOKE, "cas", (None, 3)), (0, INFO, "cas", None),
                       (1, INVOKE, "read", None), (1, OK, "read", 3)) is LIN
        assert verdict(REGISTER, (1, INVOKE, "write", 1), (1, OK, "write", 1),
                       (0, INVOKE, "cas", (2, 3)), (0, INFO, "cas", None),
                       (1, INVOKE, "read", None), (1, OK, "read", 3)) is NOT

    def test_pending_operation_is_unknown(self) -> None:
        ops = history((0, INVOKE, "write", 4), (1, INVOKE, "read", None), (1, OK, "read", 4))
        assert ops[0].outcome is Outcome.UNKNOWN and ops[0].ret is None
        assert check(ops, REGISTER).verdict is LIN

    def test_many_identical_unknown_writes_stay_cheap(self) -> None:
        lines = []
        for p in range(40):
            lines += [(p, INVOKE, "write", p % 2), (p, INFO, "write", None)]
        for i in range(40):
            lines += [(100, INVOKE, "read", None), (100, OK, "read", i % 2)]
        result = check(history(*lines), REGISTER)
        assert result.verdict is LIN
        assert result.partitions[0].steps < 50_000    # without the rule: millions


class TestKV:
    def test_missing_key_reads_empty(self) -> None:
        assert verdict(KV, (0, INVOKE, "get", "k", None), (0, OK, "get", "k", "")) is LIN
        assert verdict(KV, (0, INVOKE, "get", "k", None), (0, OK, "get", "k", None)) is LIN
        assert verdict(KV, (0, INVOKE, "get", "k", None), (0, OK, "get", "k", "x")) is NOT

    def test_concurrent_appends_in_either_order(self) -> None:
        for seen in ("ab", "ba"):
            assert verdict(KV, (0, INVOKE, "append", "k", "a"), (1, INVOKE, "append", "k", "b"),
                           (0, OK, "append", "k", "a"), (1, OK, "append", "k", "b"),
                           (2, INVOKE, "get", "k", None), (2, OK, "get", "k", seen)) is LIN

    def test_get_after_both_appends_must_see_both(self) -> None:
        assert verdict(KV, (0, INVOKE, "append", "k", "a"), (1, INVOKE, "append", "k", "b"),
                       (0, OK, "append", "k", "a"), (1, OK, "append", "k", "b"),
                       (2, INVOKE, "get", "k", None), (2, OK, "get", "k", "a")) is NOT

    def test_put_replaces_and_cas_compares(self) -> None:
        assert verdict(KV, (0, INVOKE, "append", "k", "a"), (0, OK, "append", "k", "a"),
                       (0, INVOKE, "put", "k", "z"), (0, OK, "put", "k", "z"),
                       (0, INVOKE, "cas", "k", ("z", "q")), (0, OK, "cas", "k", ("z", "q")),
                       (0, INVOKE, "append", "k", "r"), (0, OK, "append", "k", "r"),
                       (0, INVOKE, "get", "k", None), (0, OK, "get", "k", "qr")) is LIN
        assert verdict(KV, (0, INVOKE, "put", "k", "z"), (0, OK, "put", "k", "z"),
                       (0, INVOKE, "cas", "k", ("a", "q")),
                       (0, OK, "cas", "k", ("a", "q"))) is NOT

    def test_stale_read_after_a_put_is_a_violation_that_names_it(self) -> None:
        ops = history((0, INVOKE, "put", "k", "old"), (0, OK, "put", "k", "old"),
                      (0, INVOKE, "append", "k", "+"), (0, OK, "append", "k", "+"),
                      (0, INVOKE, "put", "k", "new"), (0, OK, "put", "k", "new"),
                      (1, INVOKE, "get", "k", None), (1, OK, "get", "k", "old+"))
        result = check(ops, KV)
        assert result.verdict is NOT
        (violation,) = result.violations
        assert violation.key == "k"
        assert ops[3] in violation.impossible + (violation.blocked,)
        assert "old+" in result.explain(KV)

    def test_unknown_append_may_appear_later(self) -> None:
        assert verdict(KV, (0, INVOKE, "append", "k", "a"), (0, INFO, "append", "k", None),
                       (1, INVOKE, "get", "k", None), (1, OK, "get", "k", ""),
                       (1, INVOKE, "append", "k", "b"), (1, OK, "append", "k", "b"),
                       (1, INVOKE, "get", "k", None), (1, OK, "get", "k", "ba")) is LIN

    def test_keys_are_independent_and_the_bad_one_is_named(self) -> None:
        result = check(history(
            (0, INVOKE, "put", "a", "1"), (0, OK, "put", "a", "1"),
            (0, INVOKE, "put", "b", "2"), (0, OK, "put", "b", "2"),
            (1, INVOKE, "get", "a", None), (1, OK, "get", "a", "1"),
            (1, INVOKE, "get", "b", None), (1, OK, "get", "b", "3")), KV)
        assert result.verdict is NOT
        assert {p.key: p.verdict for p in result.partitions} == {"a": LIN, "b": NOT}
        assert [v.key for v in result.violations] == ["b"]


class TestBadOperations:
    @pytest.mark.parametrize("model, f, value, field", [
        (REGISTER, "get", None, "f"),
        (KV, "write", "x", "f"),
        (REGISTER, "cas", 3, "value"),
        (KV, "cas", ("a",), "value"),
        (KV, "append", 5, "value"),
        (REGISTER, "write", [1, 2], "value"),
    ])
    def test_rejected_with_the_field_named(self, model, f, value, field) -> None:
        ops = history((0, INVOKE, f, "k", value), (0, OK, f, "k", value))
        with pytest.raises(HistoryError) as error:
            check(ops, model)
        assert error.value.field == field


class TestTimeBudget:
    def hard_history(self) -> list[Operation]:
        """Twelve concurrent writes and a read of a value none wrote: to prove it is not
        linearizable a search without the model's pruning must try every subset."""
        lines = [(p, INVOKE, "write", p) for p in range(12)]
        lines += [(p, OK, "write", p) for p in range(12)]
        return history(*lines, (20, INVOKE, "read", None), (20, OK, "read", 99))

    class Unpruned(RegisterModel):
        name = "register (no pruning)"

        def guard(self, target):
            return None

    def test_runs_out_with_unknown_never_a_guess(self) -> None:
        times = iter([0.0, 0.0])
        clock = lambda: next(times, 1000.0)     # noqa: E731 - time jumps once the search runs
        result = check(self.hard_history(), self.Unpruned(), timeout=1.0, clock=clock)
        assert result.verdict is Verdict.UNKNOWN
        assert result.partitions[0].steps > 0
        assert "time budget" in result.explain()

    def test_decides_with_enough_time(self) -> None:
        result = check(self.hard_history(), self.Unpruned(), timeout=60.0)
        assert result.verdict is NOT
        assert result.partitions[0].steps > 4096      # it did need the search

    def test_pruning_cuts_the_search_short(self) -> None:
        result = check(self.hard_history(), REGISTER)
        assert result.verdict is NOT
        assert result.partitions[0].steps < 1000      # without the model's pruning: 100000s

    def test_expired_before_a_key_leaves_it_unknown(self) -> None:
        times = iter([0.0])
        result = check(history((0, INVOKE, "write", 1), (0, OK, "write", 1)), REGISTER,
                       timeout=1.0, clock=lambda: next(times, 5.0))
        assert result.verdict is Verdict.UNKNOWN
        assert result.partitions[0].steps == 0


class TestPruningHooks:
    """The models' `guard` and `enabler_index`, which the lookahead trusts to be exact."""

    def enablers(self, model, ops: list[Operation], target: int) -> set[int]:
        return set(model.enabler_index(ops)(target))

    def test_kv_read_is_enabled_by_puts_of_any_prefix_of_its_value(self) -> None:
        ops = history((0, INVOKE, "put", "k", "a"), (0, OK, "put", "k", "a"),
                      (0, INVOKE, "put", "k", "abc"), (0, OK, "put", "k", "abc"),
                      (0, INVOKE, "put", "k", "zz"), (0, OK, "put", "k", "zz"),
                      (0, INVOKE, "cas", "k", ("zz", "ab")), (0, OK, "cas", "k", ("zz", "ab")),
                      (0, INVOKE, "put", "k", "abcd"), (0, OK, "put", "k", "abcd"),
                      (0, INVOKE, "append", "k", "bc"), (0, OK, "append", "k", "bc"),
                      (0, INVOKE, "get", "k", None), (0, OK, "get", "k", "abc"))
        assert self.enablers(KV, ops, 6) == {0, 1, 3}
        guard = KV.guard(ops[6])
        assert guard("ab") and guard("") and not guard("zz") and not guard("abcd")
        assert KV.guard(ops[5]) is None and KV.guard(ops[0]) is None

    def test_register_read_is_enabled_by_writes_of_its_value(self) -> None:
        ops = history((0, INVOKE, "write", 1), (0, OK, "write", 1),
                      (0, INVOKE, "write", 2), (0, OK, "write", 2),
                      (0, INVOKE, "cas", (2, 1)), (0, INFO, "cas", None),
                      (0, INVOKE, "cas", (1, 1)), (0, FAIL, "cas", (1, 1)),
                      (0, INVOKE, "read", None), (0, OK, "read", 1))
        assert self.enablers(REGISTER, ops, 4) == {0, 2}
        assert REGISTER.guard(ops[4])(1) and not REGISTER.guard(ops[4])(2)

    def test_failed_cas_is_enabled_by_whatever_changes_the_state(self) -> None:
        ops = history((0, INVOKE, "append", "k", ""), (0, OK, "append", "k", ""),
                      (0, INVOKE, "append", "k", "x"), (0, OK, "append", "k", "x"),
                      (0, INVOKE, "get", "k", None), (0, OK, "get", "k", "x"),
                      (0, INVOKE, "put", "k", "q"), (0, OK, "put", "k", "q"),
                      (0, INVOKE, "cas", "k", ("q", "r")), (0, FAIL, "cas", "k", ("q", "r")))
        assert self.enablers(KV, ops, 4) >= {1, 3}
        assert not self.enablers(KV, ops, 4) & {0, 2}
        assert KV.guard(ops[4])("x") and not KV.guard(ops[4])("q")
