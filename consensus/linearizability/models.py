"""Sequential specifications the checker holds a history against.

A `Model` says what one key's object does when operations hit it one at a time:
`init()` is its starting state, `step(state, op)` says whether `op`, applied to `state`,
could have produced the result the history recorded, and the state after it (it must
depend only on the state and the operation's function, key, input, outcome and output). States
must be hashable and compare equal when they behave the same: the checker memoizes on
(set of operations done, state). `partition_key(op)` splits a history into independent
objects (P-compositionality: a history is linearizable iff each key's part is), and
`prepare(op)` validates an operation and drops those that constrain nothing.

Two models, both with jepsen's meaning of `fail` and `info` (see `history`):

- `RegisterModel` ("register", jepsen's etcd test): ``read``, ``write v``,
  ``cas [from to]`` on a register that starts at nil.
- `KVModel` ("kv"): ``get``, ``put v``, ``append v``, ``cas [from to]`` on a map of
  strings, one register per key, where a missing key reads "" (a get that returned nil
  is read as "").
"""
from __future__ import annotations

import abc
import dataclasses
import enum
import functools
import operator
from typing import Any, Callable, ClassVar, Hashable, Iterable, Mapping, Sequence

from .edn import dumps
from .errors import HistoryError
from .history import Operation, Outcome


class Model(abc.ABC):
    """A sequential object, as the checker needs it."""

    name: ClassVar[str]

    @abc.abstractmethod
    def init(self) -> Hashable:
        """The state before any operation."""

    @abc.abstractmethod
    def step(self, state: Hashable, op: Operation) -> tuple[bool, Hashable]:
        """(could `op` on `state` have returned what it did, the state after it).

        For an operation of unknown outcome the answer is whether it *can* take effect
        on `state`, and the state if it does.
        """

    def guard(self, target: Operation) -> Callable[[Hashable], bool] | None:
        """A test of states, False only for a state after which `target` can never become
        legal unless one of its enablers (see `enabler_index`) comes between; None when
        `target` is legal on every state (a write). None always is safe (the default).

        Together with `enabler_index` this is an optional, exact pruning: when the test
        fails and every enabler that could still come before `target` is placed already,
        the checker abandons the branch at once instead of trying all its orderings.
        It is called once per operation; the test it returns, very often.
        """
        return None

    def enabler_index(self, ops: Sequence[Operation]) -> Callable[[int], Iterable[int]]:
        """For one key's operations, a function from the index of a guarded operation
        to the indices of the operations that may make its guard hold again (its
        enablers; a superset is safe). Called once per key. The default: all of them."""
        everything = range(len(ops))
        return lambda t: everything

    def partition_key(self, op: Operation) -> Hashable:
        """Operations with different keys act on independent objects."""
        return op.key

    def prepare(self, op: Operation) -> Operation | None:
        """`op` as the checker should see it, or None when it constrains nothing.

        Raises `HistoryError` for an operation the model does not know.
        """
        return op

    def describe_state(self, state: Hashable) -> str:
        return dumps(state)


class Kind(enum.Enum):
    READ = "read"
    WRITE = "write"
    APPEND = "append"
    CAS = "cas"


class Need(enum.Enum):
    """What an operation requires of the state it is placed on."""

    NOTHING = "nothing"    # writes and appends are always legal
    VALUE = "value"        # a read or a successful cas: this value
    CHANGE = "change"      # a failed cas: anything but its expected value


class ValueModel(Model):
    """One value per key, read, overwritten, appended to or compared-and-set."""

    functions: ClassVar[Mapping[str, Kind]]
    initial: ClassVar[Any]

    def init(self) -> Hashable:
        return self.initial

    def step(self, state: Hashable, op: Operation) -> tuple[bool, Hashable]:
        kind = self.functions[op.f]
        if kind is Kind.READ:
            return op.output == state, state
        if kind is Kind.WRITE:
            return True, op.input
        if kind is Kind.APPEND:
            return True, state + op.input
        expected, new = op.input
        if op.outcome is Outcome.FAIL:        # the compare was seen to fail
            return state != expected, state
        return state == expected, new

    def guard(self, target: Operation) -> Callable[[Hashable], bool] | None:
        need, value = self._requirement(target)
        if need is Need.VALUE:
            return self.leads_to(value)
        if need is Need.CHANGE:
            return functools.partial(operator.ne, value)
        return None

    def enabler_index(self, ops: Sequence[Operation]) -> Callable[[int], Iterable[int]]:
        writers: dict[Hashable, list[int]] = {}   # value written -> who may write it
        changers = []                              # who may change the state at all
        for i, op in enumerate(ops):
            kind = self.functions[op.f]
            if kind is Kind.READ or op.outcome is Outcome.FAIL:
                continue                           # leaves the state as it is
            if kind in _RESETS:
                writers.setdefault(self._written(op), []).append(i)
            if kind in _RESETS or op.input != "":
                changers.append(i)
        sources = self.sources(writers)

        def enablers(t: int) -> Iterable[int]:
            need, value = self._requirement(ops[t])
            if need is Need.VALUE:                 # a write from which `value` follows
                return [i for w in sources(value) for i in writers[w]]
            if need is Need.CHANGE:                # anything that changes the state
                return changers
            return ()

        return enablers

    def sources(self, writers: Mapping[Hashable, Any]) -> Callable[[Hashable], list]:
        """For the values in `writers`, a function giving those from which a wanted value
        follows (see `leads_to`): here, the value itself."""
        return lambda want: [want] if want in writers else []

    def _requirement(self, target: Operation) -> tuple[Need, Any]:
        """What `target` needs of the state it is placed on."""
        kind = self.functions[target.f]
        if kind is Kind.READ:
            return Need.VALUE, target.output
        if kind is Kind.CAS:
            return (Need.CHANGE if target.outcome is Outcome.FAIL else Need.VALUE,
                    target.input[0])
        return Need.NOTHING, None

    def leads_to(self, want: Hashable) -> Callable[[Hashable], bool]:
        """A test of states: can reads, appends and failed operations alone turn a state
        into `want`?"""
        return functools.partial(operator.eq, want)

    def _written(self, op: Operation) -> Hashable:
        return op.input[1] if self.functions[op.f] is Kind.CAS else op.input

    def prepare(self, op: Operation) -> Operation | None:
        kind = self.functions.get(op.f)
        if kind is None:
            known = ", ".join(sorted(self.functions))
            raise HistoryError("f", f"the {self.name} model has no function {op.f!r} "
                                    f"(operation {op.id}); it knows {known}")
        if kind is Kind.CAS:
            if not isinstance(op.input, (tuple, list)) or len(op.input) != 2:
                raise HistoryError("value", f"cas operation {op.id} needs [expected new], "
                                            f"got {op.input!r}")
            op = dataclasses.replace(op, input=tuple(op.input))
        elif op.outcome is Outcome.FAIL:
            return None                      # did not happen and observed nothing
        if kind is Kind.READ and op.outcome is Outcome.UNKNOWN:
            return None                      # a read with no result changes nothing
        return self._check_values(op, kind)

    def _check_values(self, op: Operation, kind: Kind) -> Operation:
        """Reject values the model cannot hold; may normalise them."""
        values = _values(op, kind)
        try:
            hash(values)
        except TypeError:
            raise HistoryError("value", f"operation {op.id} has an unhashable value "
                                        f"{values!r}") from None
        return op


class RegisterModel(ValueModel):
    """jepsen's etcd register: read / write / cas, starting at nil."""

    name = "register"
    functions = {"read": Kind.READ, "write": Kind.WRITE, "cas": Kind.CAS}
    initial = None


class KVModel(ValueModel):
    """A map of strings: get / put / append / cas; a missing key reads ""."""

    name = "kv"
    functions = {"get": Kind.READ, "put": Kind.WRITE,
                 "append": Kind.APPEND, "cas": Kind.CAS}
    initial = ""

    def leads_to(self, want: Hashable) -> Callable[[Hashable], bool]:
        return want.startswith  # type: ignore[union-attr]   # appends only extend

    def sources(self, writers: Mapping[Hashable, Any]) -> Callable[[Hashable], list]:
        lengths = sorted({len(w) for w in writers})          # the prefixes worth trying
        return lambda want: [want[:n] for n in lengths
                             if n <= len(want) and want[:n] in writers]

    def _check_values(self, op: Operation, kind: Kind) -> Operation:
        if kind is Kind.READ and op.output is None:
            op = dataclasses.replace(op, output="")
        for v in _values(op, kind):
            if not isinstance(v, str):
                raise HistoryError("value", f"{op.f} operation {op.id}: the kv model holds "
                                            f"strings, got {v!r}")
        return op


_RESETS = frozenset({Kind.WRITE, Kind.CAS})    # may replace the value outright


def _values(op: Operation, kind: Kind) -> tuple:
    """The values an operation puts into or observes from the object."""
    if kind is Kind.CAS:
        return tuple(op.input)
    return (op.output,) if kind is Kind.READ else (op.input,)


MODELS: dict[str, type[Model]] = {m.name: m for m in (RegisterModel, KVModel)}
