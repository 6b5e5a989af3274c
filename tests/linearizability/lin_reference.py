"""An independent reference for the checker's tests: a brute-force linearizability checker
with its own sequential semantics, and a generator of histories from a real sequential
execution (so they are linearizable by construction).

Written to share nothing with `consensus.linearizability` but the `Operation` record:
if the checker's models or pruning were wrong, this would disagree.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from hypothesis import strategies as st

from consensus.linearizability import Event, EventType, Operation, Outcome

READ = {"register": "read", "kv": "get"}
WRITE = {"register": "write", "kv": "put"}
INITIAL = {"register": None, "kv": ""}


def apply(model: str, state: Any, f: str, value: Any) -> tuple[Any, Any, bool]:
    """(new state, result, whether a cas matched) of one operation on a real object."""
    if f in ("read", "get"):
        return state, state, True
    if f in ("write", "put"):
        return value, value, True
    if f == "append":
        return state + value, value, True
    expected, new = value
    return (new, value, True) if state == expected else (state, value, False)


def brute_force(ops: Sequence[Operation], model: str) -> bool:
    """Try every order (and every subset of the unknown operations) that respects real
    time: exhaustive, no memo, no pruning beyond real-time order."""
    keep = []
    for op in ops:
        if op.outcome is Outcome.FAIL and op.f != "cas":
            continue                       # did not happen, observed nothing
        if op.outcome is Outcome.UNKNOWN and op.f == READ[model]:
            continue                       # no result: constrains nothing
        keep.append(op)
    definite = sum(op.outcome is not Outcome.UNKNOWN for op in keep)

    def legal(op: Operation, state: Any) -> tuple[bool, Any]:
        new, _, matched = apply(model, state, op.f, op.input)
        if op.outcome is Outcome.UNKNOWN:
            return True, new
        if op.f == "cas":
            return matched == (op.outcome is Outcome.OK), new
        if op.f == READ[model]:
            return op.output == state, state
        return True, new

    def search(placed: frozenset, states: dict, done: int) -> bool:
        if done == definite:
            return True
        for op in keep:
            if op.id in placed:
                continue
            if any(a.ret is not None and a.ret < op.call and a.id not in placed for a in keep):
                continue                   # something that returned before it began is left
            ok, new = legal(op, states.get(op.key, INITIAL[model]))
            if ok and search(placed | {op.id}, {**states, op.key: new},
                             done + (op.outcome is not Outcome.UNKNOWN)):
                return True
        return False

    return search(frozenset(), {}, 0)


# kv values of several lengths, prefixes of each other: "a" + "bc" == "abc".
VALUES = {"register": st.sampled_from([0, 1, 2]), "kv": st.sampled_from(["a", "bc", "abc", ""])}


@st.composite
def executions(draw: st.DrawFn, model: str, max_ops: int, timed: bool | None = None
               ) -> list[Event]:
    """Events of clients running against one real sequential object: each operation
    takes effect at one instant between its invoke and its completion (or, when its
    client gives up with `info`, at any later instant, or never)."""
    processes = draw(st.integers(1, 4))
    keys: list[Hashable] = [None] if model == "register" else draw(
        st.sampled_from([["k"], ["k", "j"]]))
    functions = (["read", "write", "cas"] if model == "register"
                 else ["get", "put", "append", "cas"])
    timed = draw(st.booleans()) if timed is None else timed
    max_ops = draw(st.integers(1, max_ops))
    truth: dict[Hashable, Any] = {}
    events: list[Event] = []
    pending: dict[int, dict] = {}          # process -> its operation in flight
    abandoned: list[dict] = []             # info'd, not yet applied: may apply later
    clock, invoked = 0, 0

    def emit(process: int, kind: EventType, op: dict, value: Any) -> None:
        nonlocal clock
        clock += draw(st.integers(0, 2))    # equal times happen: they mean concurrent
        events.append(Event(process, kind, op["f"], op["key"], value,
                            clock if timed else None))

    def take_effect(op: dict) -> None:
        state = truth.get(op["key"], INITIAL[model])
        truth[op["key"]], op["result"], op["matched"] = apply(model, state, op["f"],
                                                              op["value"])
        op["applied"] = True

    while True:
        actions = []
        if invoked < max_ops and len(pending) < processes:
            actions.append("invoke")
        if any(not op["applied"] for op in pending.values()):
            actions.append("apply")
        if any(not op["applied"] and op["f"] != "cas" for op in pending.values()):
            actions.append("fail")             # a failed cas claims its compare failed
        if any(op["applied"] for op in pending.values()):
            actions.append("complete")
        if pending:
            actions.append("info")
        if abandoned:
            actions.append("late")
        if not actions:
            break
        action = draw(st.sampled_from(actions))
        if action == "invoke":
            process = draw(st.sampled_from([p for p in range(processes) if p not in pending]))
            f = draw(st.sampled_from(functions))
            value = None if f in ("read", "get") else (
                (draw(VALUES[model]), draw(VALUES[model])) if f == "cas" else draw(VALUES[model]))
            if model == "register" and f == "cas" and draw(st.booleans()):
                value = (None, value[1])    # a cas from nil
            op = {"f": f, "key": draw(st.sampled_from(keys)), "value": value,
                  "applied": False}
            pending[process] = op
            invoked += 1
            emit(process, EventType.INVOKE, op, value)
        elif action == "apply":
            process = draw(st.sampled_from(sorted(p for p, op in pending.items()
                                                  if not op["applied"])))
            take_effect(pending[process])
        elif action == "fail":             # refused before it took effect
            process = draw(st.sampled_from(sorted(
                p for p, op in pending.items() if not op["applied"] and op["f"] != "cas")))
            op = pending.pop(process)
            emit(process, EventType.FAIL, op, op["value"])
        elif action == "complete":
            process = draw(st.sampled_from(sorted(p for p, op in pending.items()
                                                  if op["applied"])))
            op = pending.pop(process)
            kind = EventType.OK if op.get("matched", True) else EventType.FAIL
            emit(process, kind, op, op["result"])
        elif action == "info":
            process = draw(st.sampled_from(sorted(pending)))
            op = pending.pop(process)
            emit(process, EventType.INFO, op, None)
            if not op["applied"]:
                abandoned.append(op)
        else:
            take_effect(abandoned.pop(draw(st.integers(0, len(abandoned) - 1))))
    return events
