"""Histories: what clients invoked and what came back, and the operations they make.

A history is a sequence of `Event`s in real-time order, jepsen style: an `invoke` when a
client starts an operation, then one completion from the same process:

- ``ok``: it took effect, and `value` is what it returned (the value read, or the
  written value echoed back);
- ``fail``: it did not take effect. For a ``cas`` this also says the compare failed
  (the value differed from the expected one at that moment), as in jepsen's etcd and
  cas-register tests: report a cas that was refused for another reason as ``info``;
- ``info``: the outcome is unknown (a timeout, a lost connection): the operation may
  take effect at any point after its invoke, or never.

An operation with no completion at all is treated like ``info``. `pair_events` turns
events into `Operation`s, each with a call and a return time; `History` records events
as a simulator or a torture test runs.

Times are integers (nanoseconds from the recorder's clock, or any other monotonic unit).
Events without a time are ordered by their position. An invoke and a completion at the
same instant count as concurrent, so a coarse clock never makes a history look wrong.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Sequence

from .edn import dumps
from .errors import HistoryError


class EventType(enum.Enum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"

    @classmethod
    def parse(cls, name: "str | EventType", *, field: str = "type") -> "EventType":
        """Accept an `EventType`, ``"ok"`` or ``":ok"``."""
        if isinstance(name, EventType):
            return name
        try:
            return cls(str(name).lstrip(":"))
        except ValueError:
            raise HistoryError(field, f"{name!r} is not one of :invoke, :ok, :fail, :info") from None


class Outcome(enum.Enum):
    """What is known of an operation once it is over."""

    OK = "ok"            # took effect between call and return; output is its result
    FAIL = "fail"        # did not take effect (a cas: its compare failed)
    UNKNOWN = "unknown"  # may take effect at any time after its call, or never


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a history."""

    process: Hashable
    type: EventType
    f: str
    key: Hashable = None
    value: Any = None
    time: int | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """An invoke paired with its completion: the unit the checker orders.

    `input` is the value given at the invoke, `output` the value of the completion (None
    when the outcome is unknown). `call` and `ret` are times; `ret` is None when the
    outcome is unknown (the operation never returns as far as the history knows).
    """

    id: int
    process: Hashable
    f: str
    key: Hashable
    input: Any
    outcome: Outcome
    output: Any
    call: int
    ret: int | None

    def describe(self) -> str:
        """A short human form: ``p3 cas [1 2] -> ok @[12, 15]``."""
        arg = "" if self.input is None else " " + dumps(self.input)
        if self.outcome is Outcome.UNKNOWN:
            result = "?"
        elif self.outcome is Outcome.FAIL:
            result = "fail"
        else:
            result = dumps(self.output)
        key = "" if self.key is None else f" {dumps(self.key)}"
        ret = "..." if self.ret is None else str(self.ret)
        return f"#{self.id} p{self.process} {self.f}{key}{arg} -> {result} @[{self.call}, {ret}]"


_OUTCOMES = {EventType.OK: Outcome.OK, EventType.FAIL: Outcome.FAIL,
             EventType.INFO: Outcome.UNKNOWN}


def pair_events(events: Iterable[Event], *, lines: Sequence[int] | None = None,
                source: str | None = None) -> list[Operation]:
    """Pair each invoke with the next completion of its process.

    `lines` (the file line of each event) and `source` (the file name) only make error
    messages point at the right place. Raises `HistoryError` for a completion without an
    invoke, a second invoke while one is pending, a completion of another function or
    key, a history that gives times to some events only, or time running backwards.
    """
    pending: dict[Hashable, tuple[int, Event, int]] = {}   # process -> (op id, invoke, call)
    done: dict[int, Operation] = {}
    timed: bool | None = None
    next_id = 0
    for index, event in enumerate(events):
        line = lines[index] if lines is not None else None

        def fail(field: str, reason: str) -> HistoryError:
            return HistoryError(field, reason, line=line, source=source)

        if timed is None:
            timed = event.time is not None
        elif timed != (event.time is not None):
            raise fail("time", "some events have a :time and others do not; give every "
                               "event a time, or none (then the order of lines is the order)")
        at = event.time if event.time is not None else index
        if event.type is EventType.INVOKE:
            if event.process in pending:
                raise fail("process", f"process {event.process!r} invokes {event.f} while "
                                      f"its {pending[event.process][1].f} is still pending; "
                                      "a process runs one operation at a time")
            pending[event.process] = (next_id, event, at)
            next_id += 1
            continue
        if event.process not in pending:
            raise fail("process", f"process {event.process!r} completes {event.f} "
                                  "without having invoked it")
        op_id, invoke, call = pending.pop(event.process)
        if event.f != invoke.f:
            raise fail("f", f"completion is {event.f} but process {event.process!r} "
                            f"invoked {invoke.f}")
        if event.key is not None and event.key != invoke.key:
            raise fail("key", f"completion is for key {event.key!r} but the invoke was "
                              f"for {invoke.key!r}")
        if at < call:
            raise fail("time", f"completion at {at} is before its invoke at {call}")
        outcome = _OUTCOMES[event.type]
        unknown = outcome is Outcome.UNKNOWN
        done[op_id] = Operation(op_id, event.process, invoke.f, invoke.key, invoke.value,
                                outcome, None if unknown else event.value, call,
                                None if unknown else at)
    for op_id, invoke, call in pending.values():
        done[op_id] = Operation(op_id, invoke.process, invoke.f, invoke.key, invoke.value,
                                Outcome.UNKNOWN, None, call, None)
    return [done[i] for i in sorted(done)]
