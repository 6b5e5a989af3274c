"""Property tests: histories from real sequential executions are always linearizable, and
on small mutated histories the checker agrees with an exhaustive brute force."""
from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from consensus.linearizability import checker
from consensus.linearizability import (KVModel, Operation, Outcome, RegisterModel, Verdict,
                                       check, pair_events)

from .lin_reference import INITIAL, READ, VALUES, apply, brute_force, executions

MODELS = {"register": RegisterModel(), "kv": KVModel()}
# The lookahead pruning starts only once a search struggles, which small histories rarely
# do: the properties are checked with it on from the start, and with the default.
EAGER = {"eager": -1, "default": checker.PATIENCE}

PROPERTY = settings(derandomize=True, deadline=None, max_examples=100,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("patience", sorted(EAGER))
@pytest.mark.parametrize("model", sorted(MODELS))
@PROPERTY
@given(data=st.data())
def test_real_executions_are_linearizable(model: str, patience: str,
                                          data: st.DataObject) -> None:
    events = data.draw(executions(model, max_ops=16))
    with mock.patch.object(checker, "PATIENCE", EAGER[patience]):
        result = check(pair_events(events), MODELS[model])
    assert result.verdict is Verdict.LINEARIZABLE, result.explain(MODELS[model])


def mutations(op: Operation, model: str) -> list[str]:
    """The changes that make sense for `op`."""
    found = ["time"] if op.ret is not None else ["known"]
    if op.f == READ[model] and op.outcome is Outcome.OK:
        found.append("output")
    if op.f == "cas" and op.outcome is not Outcome.UNKNOWN:
        found.append("outcome")
    if op.f not in ("read", "get", "cas"):
        found.append("input")
    if op.outcome is Outcome.OK:
        found.append("unknown")
    return found


@st.composite
def mutated(draw: st.DrawFn, model: str) -> list[Operation]:
    """A small real history with one or two things changed: a result, a cas outcome, an
    input, an outcome made unknown or known, or an operation's time span."""
    ops = pair_events(draw(executions(model, max_ops=6)))
    for _ in range(draw(st.integers(1, 2)) if ops else 0):
        i = draw(st.integers(0, len(ops) - 1))
        op = ops[i]
        how = draw(st.sampled_from(mutations(op, model)))
        if how == "output":
            op = dataclasses.replace(op, output=draw(st.one_of(VALUES[model],
                                                               st.just(INITIAL[model]))))
        elif how == "outcome":
            flipped = Outcome.FAIL if op.outcome is Outcome.OK else Outcome.OK
            op = dataclasses.replace(op, outcome=flipped)
        elif how == "input":
            op = dataclasses.replace(op, input=draw(VALUES[model]))
        elif how == "unknown":
            op = dataclasses.replace(op, outcome=Outcome.UNKNOWN, output=None, ret=None)
        elif how == "known":
            output = (draw(st.one_of(VALUES[model], st.just(INITIAL[model])))
                      if op.f == READ[model] else op.input)
            op = dataclasses.replace(op, outcome=Outcome.OK, output=output,
                                     ret=op.call + draw(st.integers(0, 8)))
        else:
            call = max(0, op.call + draw(st.integers(-6, 6)))
            op = dataclasses.replace(op, call=call, ret=call + draw(st.integers(0, 8)))
        ops[i] = op
    return ops


@pytest.mark.timeout(120)
@pytest.mark.parametrize("patience", sorted(EAGER))
@pytest.mark.parametrize("model", sorted(MODELS))
@settings(PROPERTY, max_examples=250)
@given(data=st.data())
def test_agrees_with_brute_force(model: str, patience: str, data: st.DataObject) -> None:
    ops = data.draw(mutated(model))
    expected = brute_force(ops, model)
    with mock.patch.object(checker, "PATIENCE", EAGER[patience]):
        result = check(ops, MODELS[model])
    assert (result.verdict is Verdict.LINEARIZABLE) == expected, \
        "\n".join(op.describe() for op in ops) + "\n" + result.explain(MODELS[model])
    for violation in result.violations:
        assert_legal_prefix(model, violation.prefix, ops)


def assert_legal_prefix(model: str, prefix: tuple[Operation, ...],
                        ops: list[Operation]) -> None:
    """The explanation's prefix is a legal sequential run that respects real time."""
    state = INITIAL[model]
    ids = [op.id for op in prefix]
    assert len(set(ids)) == len(ids)
    for position, op in enumerate(prefix):
        assert all(not (later.ret is not None and later.ret < op.call)
                   for later in prefix[position + 1:]), f"{op.describe()} out of real time"
        new, _, matched = apply(model, state, op.f, op.input)
        if op.f == READ[model]:
            assert op.output == state
        elif op.f == "cas" and op.outcome is not Outcome.UNKNOWN:
            assert matched == (op.outcome is Outcome.OK)
        state = new
