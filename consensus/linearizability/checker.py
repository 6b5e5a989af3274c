"""The linearizability checker: Wing & Gong's search with Lowe's memoization, per key.

A history is linearizable if its operations can be put in one order that respects real
time (an operation that returned before another was called comes first) and that the
model accepts one by one. The search (Wing & Gong 1993, with Lowe's cache of
(set of operations linearized, state) as in Porcupine) walks the history as a linked
list of call and return entries: it tries to linearize each operation whose call comes
before the first remaining return; on success it removes the operation's two entries and
starts again from the head; on meeting a return entry (an operation that had to be
placed by then and could not be) it undoes the last choice. A (set, state) pair seen
before is a dead end already explored, so it is never explored twice.

Operations of unknown outcome have no return entry: they may be linearized anywhere
after their call, or never, and the search succeeds once every operation with a known
outcome is placed. Two such pruning rules keep it small, both exact:
- placing an unknown operation that leaves the state unchanged is the same as never
  placing it, so it is not tried;
- unknown operations with the same function and input are interchangeable, so they are
  placed in the order of their calls (the earliest-called one first).
Two more exact rules for all operations:
- a known operation that left the state unchanged (a matching read) could be moved to
  the point where it was placed in any solution, so when its subtree fails, its node
  fails too: the search does not try its siblings;
- lookahead: once the search has undone PATIENCE choices, each placement looks at the
  next LOOKAHEAD operations that must come later and that the model guards; if one's
  guard fails on the new state and every operation that could enable it is placed, the
  branch is cut at once (a read of a value nothing left can produce, say).

Pure: no I/O, no threads. The only clock is the one passed in, read every few thousand
steps to honour the time budget; when it runs out the verdict is UNKNOWN, never a guess.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Sequence

from .history import Operation
from .models import Model

_CLOCK_EVERY = 1 << 12      # search steps between two reads of the clock
LOOKAHEAD = 256             # operations that must come next, checked for reachability
PATIENCE = 64               # choices undone before the lookahead starts (at least n / 4;
                            # -1: from the start)


class Verdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    UNKNOWN = "unknown"        # the time budget ran out before the search ended


@dataclass(frozen=True, slots=True)
class Violation:
    """Why one key's history is not linearizable.

    `prefix` is the longest linearizable prefix the search found, in its order, and
    `state` the object's state after it. `blocked` is the operation that must take effect
    next (it returned before anything else left) but cannot, in any order with the
    `concurrent` operations that could still come before it. `impossible` lists the
    operations that the model shows can never become legal once the prefix (and
    `blocked`, when it is legal itself) has taken effect: a read of a value that no
    operation left can produce, say. It may be empty: then only the exhaustive search
    knows.
    """

    key: Hashable
    prefix: tuple[Operation, ...]
    state: Hashable
    blocked: Operation
    concurrent: tuple[Operation, ...]
    impossible: tuple[Operation, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """The verdict on one key; `steps` counts the search's steps (a measure of effort)."""

    key: Hashable
    verdict: Verdict
    operations: int
    steps: int
    violation: Violation | None = None


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict on a whole history: NOT_LINEARIZABLE if any key is, else UNKNOWN if any
    key's search ran out of time, else LINEARIZABLE."""

    verdict: Verdict
    model: str
    operations: int
    partitions: tuple[PartitionResult, ...]
    elapsed: float

    @property
    def violations(self) -> list[Violation]:
        return [p.violation for p in self.partitions if p.violation is not None]

    def explain(self, model: Model | None = None, *, limit: int = 10) -> str:
        """A report for people: the verdict, and for each violation the key, the end of the
        longest linearizable prefix, the state then and the operations that cannot be
        placed. `model` (the one checked) only makes states print in its own way."""
        keys = len(self.partitions)
        lines = [f"{self.verdict.value.upper()}: {self.operations} operations, {keys} "
                 f"key{'s' if keys != 1 else ''}, {self.model} model, "
                 f"{self.elapsed:.3f} s"]
        if self.verdict is Verdict.UNKNOWN:
            unknown = [p for p in self.partitions if p.verdict is Verdict.UNKNOWN]
            lines.append(f"the time budget ran out on {len(unknown)} key(s), e.g. key "
                         f"{_show_key(unknown[0].key)} ({unknown[0].operations} operations); "
                         "give more time (--timeout) to decide")
        for v in self.violations:
            lines += _explain_violation(v, model, limit)
        return "\n".join(lines)


def check(history: "Iterable[Operation] | object", model: Model, *,
          timeout: float | None = None,
          clock: Callable[[], float] = time.monotonic) -> CheckResult:
    """Check `history` (operations, or anything with an ``operations()`` method such as
    `History`) against `model`, spending at most `timeout` seconds of `clock`."""
    operations = getattr(history, "operations", None)
    ops = list(operations() if callable(operations) else history)  # type: ignore[arg-type]
    start = clock()
    deadline = None if timeout is None else start + timeout
    partitions: dict[Hashable, list[Operation]] = {}
    for op in ops:
        prepared = model.prepare(op)
        if prepared is not None:
            partitions.setdefault(model.partition_key(prepared), []).append(prepared)
    # Small keys first: when time runs out, as much as possible has been decided.
    order = sorted(partitions.items(), key=lambda item: (len(item[1]), item[1][0].id))
    results = []
    for key, part in order:
        if deadline is not None and clock() >= deadline:
            results.append(PartitionResult(key, Verdict.UNKNOWN, len(part), 0))
        else:
            results.append(_Search(key, part, model, clock, deadline).run())
    verdicts = {r.verdict for r in results}
    verdict = (Verdict.NOT_LINEARIZABLE if Verdict.NOT_LINEARIZABLE in verdicts else
               Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else Verdict.LINEARIZABLE)
    return CheckResult(verdict, model.name, len(ops), tuple(results), clock() - start)


class _Search:
    """The search over one key's operations.

    Entries are numbered: op i's call is entry i, its return entry n + i, the list's head
    2n and its tail 2n + 1. The list is two arrays of links; removing an operation and
    putting it back are O(1) and strictly last-out-first-in (dancing links).
    """

    def __init__(self, key: Hashable, ops: Sequence[Operation], model: Model,
                 clock: Callable[[], float], deadline: float | None) -> None:
        self.key, self.ops, self.model = key, ops, model
        self.clock, self.deadline = clock, deadline
        n = len(ops)
        entries = sorted([(op.call, 0, i) for i, op in enumerate(ops)] +
                         [(op.ret, 1, n + i) for i, op in enumerate(ops) if op.ret is not None])
        chain = [2 * n] + [e for _, _, e in entries] + [2 * n + 1]
        self.next = [0] * (2 * n + 2)
        self.prev = [0] * (2 * n + 2)
        for a, b in zip(chain, chain[1:]):
            self.next[a], self.prev[b] = b, a
        self.rank = [0] * (2 * n)             # position of each entry in time order
        for position, e in enumerate(chain[1:-1]):
            self.rank[e] = position
        # The return entries of operations with a guard, in the same order: the first
        # ones are the constrained operations that must be placed next.
        self.guards = [model.guard(op) if op.ret is not None else None for op in ops]
        returns = ([2 * n] + [e for _, kind, e in entries if kind and self.guards[e - n]]
                   + [2 * n + 1])
        self.rnext = [0] * (2 * n + 2)
        self.rprev = [0] * (2 * n + 2)
        for a, b in zip(returns, returns[1:]):
            self.rnext[a], self.rprev[b] = b, a
        self.enabler_index = model.enabler_index(ops)
        self.enablers: list[list[int] | None] = [None] * n   # per guarded operation
        self.free = [-1] * n                     # an enabler last seen unplaced
        self.known = [op.ret is not None for op in ops]
        # Unknown operations with the same (f, input) are placed in call order: each
        # waits for its predecessor in that class (-1: none).
        self.waits_for = [-1] * n
        last: dict[tuple, int] = {}
        for i in sorted(range(n), key=lambda i: (ops[i].call, i)):
            if not self.known[i]:
                cls = (ops[i].f, ops[i].input)
                self.waits_for[i] = last.get(cls, -1)
                last[cls] = i

    def run(self) -> PartitionResult:
        ops, n, step = self.ops, len(self.ops), self.model.step
        nxt, prv, known, waits_for = self.next, self.prev, self.known, self.waits_for
        rnxt, rprv, guards = self.rnext, self.rprev, self.guards
        head = 2 * n
        placed = bytearray(n)
        remaining = sum(known)
        state = self.model.init()
        linearized = 0                     # bitset of placed operations
        stack: list[tuple[int, Hashable, bool]] = []   # (call entry, state before, forced)
        seen: set[tuple[int, Hashable]] = set()
        best: tuple[list[int], Hashable] = ([], state)
        steps = 0
        # The lookahead costs more than it saves while the search goes straight through:
        # it starts once the search has undone as many choices as PATIENCE allows.
        backtracks, patience = 0, max(PATIENCE, n // 4) if PATIENCE >= 0 else -1
        looking = backtracks > patience
        entry = nxt[head]
        while remaining:
            steps += 1
            if steps % _CLOCK_EVERY == 0 and self.deadline is not None \
                    and self.clock() >= self.deadline:
                return PartitionResult(self.key, Verdict.UNKNOWN, n, steps)
            if entry < n:                                   # a call: try to place it
                w = waits_for[entry]
                if w < 0 or placed[w]:
                    ok, after = step(state, ops[entry])
                    if ok and (known[entry] or after != state):
                        bits = linearized | (1 << entry)
                        if (bits, after) not in seen:
                            seen.add((bits, after))
                            placed[entry] = 1
                            if looking and self._hopeless(entry, after, placed):
                                placed[entry] = 0
                            else:
                                stack.append((entry, state, after == state))
                                state, linearized = after, bits
                                p, q = prv[entry], nxt[entry]
                                nxt[p], prv[q] = q, p
                                if known[entry]:
                                    r = n + entry
                                    p, q = prv[r], nxt[r]
                                    nxt[p], prv[q] = q, p
                                    if guards[entry]:
                                        p, q = rprv[r], rnxt[r]
                                        rnxt[p], rprv[q] = q, p
                                    remaining -= 1
                                entry = nxt[head]
                                continue
                entry = nxt[entry]
                continue
            # A return (or the tail): an operation that had to be placed by now was not.
            backtracks += 1
            looking = backtracks > patience
            if len(stack) > len(best[0]):
                best = ([e for e, _, _ in stack], state)
            # Undo the last choice. A choice that left the state as it was is forced (the
            # operation could be moved to that point in any solution), so when it fails
            # its node fails too: keep undoing.
            forced = True
            while forced and stack:
                entry, state, forced = stack.pop()
                linearized ^= 1 << entry
                placed[entry] = 0
                if known[entry]:
                    r = n + entry
                    if guards[entry]:
                        rnxt[rprv[r]] = rprv[rnxt[r]] = r
                    nxt[prv[r]] = prv[nxt[r]] = r
                    remaining += 1
                nxt[prv[entry]] = prv[nxt[entry]] = entry
            if forced:                    # undone back to the start: no order works
                return self._violation(best, steps)
            entry = nxt[entry]
        return PartitionResult(self.key, Verdict.LINEARIZABLE, n, steps)

    def _hopeless(self, placing: int, after: Hashable, placed: bytearray) -> bool:
        """Would placing operation `placing` (reaching state `after`) leave one of the next
        `LOOKAHEAD` guarded operations that must be placed with no way to become legal:
        its guard fails on `after`, and every operation that could enable it (and be
        placed before it) is placed already?"""
        n, rnxt, guards, free = len(self.ops), self.rnext, self.guards, self.free
        targets = LOOKAHEAD
        r = rnxt[2 * n]
        while r != 2 * n + 1 and targets:
            t = r - n
            if t != placing:
                targets -= 1
                if not guards[t](after):
                    i = free[t]             # the enabler found free last time, if still so
                    if (i < 0 or placed[i]) and self._stuck(t, placed):
                        return True
            r = rnxt[r]
        return False

    def _stuck(self, t: int, placed: bytearray) -> bool:
        """Is every enabler of operation t that could come before it placed already?"""
        enablers = self.enablers[t]
        if enablers is None:         # those called before t returned, the latest first
            deadline, rank = self.rank[len(self.ops) + t], self.rank
            enablers = self.enablers[t] = sorted(
                (i for i in self.enabler_index(t) if rank[i] < deadline and i != t),
                key=rank.__getitem__, reverse=True)
        for i in enablers:
            if not placed[i]:
                self.free[t] = i
                return False
        return True

    def _doomed(self, state: Hashable, placed: bytearray) -> list[int]:
        """All unplaced operations that can never become legal after `state`."""
        return [t for t, guard in enumerate(self.guards)
                if guard is not None and not placed[t] and not guard(state)
                and self._stuck(t, placed)]

    def _violation(self, best: tuple[list[int], Hashable], steps: int) -> PartitionResult:
        order, state = best
        ops, n = self.ops, len(self.ops)
        placed = bytearray(n)
        for i in order:
            placed[i] = 1
        left = [i for i in range(n) if not placed[i]]
        blocked = min((i for i in left if self.known[i]), key=lambda i: (ops[i].ret, i))
        concurrent = tuple(ops[i] for i in left
                           if i != blocked and ops[i].call <= ops[blocked].ret)
        doomed = self._doomed(state, placed)
        ok, after = self.model.step(state, ops[blocked])
        if not doomed and ok:         # legal itself: what placing it would rule out
            placed[blocked] = 1
            doomed = self._doomed(after, placed)
        violation = Violation(self.key, tuple(ops[i] for i in order), state, ops[blocked],
                              concurrent, tuple(ops[i] for i in doomed))
        return PartitionResult(self.key, Verdict.NOT_LINEARIZABLE, n, steps, violation)


def _show_key(key: Hashable) -> str:
    return "(none)" if key is None else repr(key)


def _explain_violation(v: Violation, model: Model | None, limit: int) -> list[str]:
    state = model.describe_state(v.state) if model is not None else repr(v.state)
    lines = [f"key {_show_key(v.key)}: the longest linearizable prefix has {len(v.prefix)} "
             "operations" + (f" (the last {limit} shown)" if len(v.prefix) > limit else "")
             + ":"]
    lines += [f"  {op.describe()}" for op in v.prefix[-limit:]]
    lines.append(f"state after it: {state}")
    lines.append("this operation must take effect next (it returned before the others "
                 "left began), but no order of it and the operations concurrent with it "
                 "is legal from that state:")
    lines.append(f"  {v.blocked.describe()}")
    if v.impossible:
        lines.append("no operation left can make these legal any more"
                     + (" once it has taken effect:" if v.blocked not in v.impossible else ":"))
        lines += [f"  {op.describe()}" for op in v.impossible[:limit]]
    if v.concurrent:
        more = f" (first {limit} of {len(v.concurrent)})" if len(v.concurrent) > limit else ""
        lines.append(f"concurrent with it{more}:")
        lines += [f"  {op.describe()}" for op in v.concurrent[:limit]]
    return lines
