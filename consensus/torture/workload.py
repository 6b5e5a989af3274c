"""The torture test's clients: what they do, how each call becomes history events, the
final reads after healing, and the audit of acknowledged appends.

Two families of keys, so that each check is exact:
- **append keys** (``a<n>``) see only appends and gets. Every append carries a token
  used once in the whole run (``x17 ``), so the final value of the key must contain the
  token of every acknowledged append exactly once: an acknowledged write that was lost,
  or a retried one applied twice, is named by `audit_appends` and needs no search.
- **register keys** (``r<n>``) see puts, compare-and-sets and gets; values are unique
  too, so the linearizability checker can tell every write apart.

Keys are retired after `ops_per_key` operations and replaced by fresh ones (jepsen's
independent keys): the checker's search is per key, and short keys keep it fast however
long the run.

How outcomes are recorded (jepsen's conventions, `consensus.linearizability`):
- a call that returned: ``ok`` (a cas that returned False: ``fail``, its compare failed);
- a read that raised a `FarmError`: ``fail`` (a read changes nothing);
- a write that raised a `FarmError` whose `maybe_applied` is False (refused everywhere,
  never reached a member that could apply it): ``fail``;
- a write that raised any other `FarmError` (a timeout during a fault, say): ``info``,
  unknown, and the client continues under a new process id, since the old one's
  operation may still take effect at any later time;
- any other exception is a bug of the client library: recorded ``info`` and reported.
"""
from __future__ import annotations

import random
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Protocol, TextIO

from consensus.linearizability import Event, EventType, History, Keyword, Operation, Outcome
from consensus.linearizability import format_edn

APPEND, REGISTER = "a", "r"            # key prefixes of the two families
READS = ("get",)
WRITES = ("put", "append", "cas")


class KVClient(Protocol):
    """What the clients call: the kv part of `FarmClient`."""

    def kv_get(self, key: str) -> "str | None": ...
    def kv_put(self, key: str, value: str) -> Any: ...
    def kv_append(self, key: str, value: str) -> Any: ...
    def kv_cas(self, key: str, expected: str, new: str) -> bool: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Op:
    """One operation to run: `value` is as the history records it (cas: [expected, new])."""

    f: str
    key: str
    value: Any = None


class Workload:
    """Chooses every client's next operation; shared by the client threads (locked).

    `mix` weighs the functions per family. A cas is only chosen when a value of the key
    is known (read or written before), so its compare can succeed.
    """

    def __init__(self, rng: random.Random, *, keys: int = 3, ops_per_key: int = 200,
                 append_share: float = 0.5, read_share: float = 0.4) -> None:
        if keys < 1 or ops_per_key < 1:
            raise ValueError("keys and ops_per_key must be at least 1")
        self._rng = rng
        self._ops_per_key = ops_per_key
        self._append_share = append_share
        self._read_share = read_share
        self._lock = threading.Lock()
        self._serial = 0                      # makes every written value unique
        self._generation = {APPEND: 0, REGISTER: 0}
        self._active = {family: [self._fresh(family) for _ in range(keys)]
                        for family in (APPEND, REGISTER)}
        self._uses: Counter[str] = Counter()
        self._known: dict[str, str] = {}      # register key -> a value it held
        self.keys: list[str] = [k for family in self._active.values() for k in family]

    def _fresh(self, family: str) -> str:
        self._generation[family] += 1
        return f"{family}{self._generation[family]}"

    def next(self) -> Op:
        with self._lock:
            family = APPEND if self._rng.random() < self._append_share else REGISTER
            slot = self._rng.randrange(len(self._active[family]))
            key = self._active[family][slot]
            self._uses[key] += 1
            if self._uses[key] >= self._ops_per_key:       # retire it after this one
                self._active[family][slot] = fresh = self._fresh(family)
                self.keys.append(fresh)
            if self._rng.random() < self._read_share:
                return Op("get", key)
            self._serial += 1
            if family == APPEND:
                return Op("append", key, f"x{self._serial} ")
            known = self._known.get(key)
            if known is not None and self._rng.random() < 0.5:
                return Op("cas", key, [known, f"c{self._serial}"])
            value = f"w{self._serial}"
            self._known[key] = value
            return Op("put", key, value)

    def observe(self, key: str, value: str) -> None:
        """A value read from a register key: a later cas may expect it."""
        if key.startswith(REGISTER) and value:
            with self._lock:
                self._known[key] = value


def execute(client: KVClient, op: Op) -> tuple[str, Any]:
    """Run `op`; return the completion (type, value) for the history. Raises what the
    client raises."""
    if op.f == "get":
        return "ok", client.kv_get(op.key) or ""
    if op.f == "put":
        client.kv_put(op.key, op.value)
    elif op.f == "append":
        client.kv_append(op.key, op.value)
    elif op.f == "cas":
        expected, new = op.value
        if not client.kv_cas(op.key, expected, new):
            return "fail", op.value
    else:
        raise ValueError(f"unknown operation {op.f!r}")
    return "ok", op.value


class SharedSink:
    """The history file, written by the recorder and the nemesis from several threads:
    each line is written whole, and flushed."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self._out.write(text)

    def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def note(self, f: str, value: Any, clock: Callable[[], int] = time.monotonic_ns) -> None:
        """A nemesis line (``:process :nemesis``), which checkers skip."""
        event = Event(Keyword("nemesis"), EventType.INFO, f, None, value, clock())
        with self._lock:
            self._out.write(format_edn(event) + "\n")
            self._out.flush()


@dataclass
class ClientStats:
    """What the client threads saw, for the report."""

    outcomes: Counter = field(default_factory=Counter)   # (f, "ok"|"fail"|"info") -> n
    errors: Counter = field(default_factory=Counter)     # exception class name -> n
    bugs: list[str] = field(default_factory=list)        # tracebacks of non-FarmErrors


class ClientPool:
    """`count` client threads running the workload against the farm until `stop`.

    `connect(index)` builds client `index` (0 <= index < count); each thread owns one and
    builds a new one after any failed call (a client stuck to a member that stalled or
    was cut off would otherwise never see the rest of the farm). `expected` is the
    exception class that means the farm refused or did not answer (`FarmError`);
    anything else is reported as a bug.
    """

    def __init__(self, connect: Callable[[int], KVClient], history: History,
                 workload: Workload, count: int, expected: type[BaseException]) -> None:
        self._connect = connect
        self._history = history
        self._workload = workload
        self._count = count
        self._expected = expected
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.stats = ClientStats()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                          name=f"torture-client-{i}") for i in range(count)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout: float) -> bool:
        """Ask every client to stop after its current call; True when all did in time."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _count_outcome(self, f: str, kind: str, error: BaseException | None) -> None:
        with self._lock:
            self.stats.outcomes[f, kind] += 1
            if error is not None:
                self.stats.errors[type(error).__name__] += 1
                if not isinstance(error, self._expected):
                    self.stats.bugs.append("".join(traceback.format_exception(error)))

    def _run(self, index: int) -> None:
        process = index
        client: KVClient | None = None
        try:
            while not self._stop.is_set():
                if client is None:
                    try:
                        client = self._connect(index)
                    except self._expected as error:      # the farm is down: try again
                        self._count_outcome("connect", "fail", error)
                        self._stop.wait(0.1)
                        continue
                op = self._workload.next()
                op_id = self._history.invoke(process, op.f, op.key, op.value)
                error: BaseException | None = None
                try:
                    kind, value = execute(client, op)
                except Exception as e:    # noqa: BLE001 - every failure is recorded
                    error = e
                    certain = op.f in READS or (isinstance(e, self._expected)
                                                and getattr(e, "maybe_applied", True) is False)
                    # A cas `fail` tells the checker its compare failed (the value was
                    # another): a cas refused before it ran saw nothing, and is `info`
                    # (it did not happen, which `info` allows) as `history` asks.
                    if op.f == "cas":
                        certain = False
                    kind, value = ("fail" if certain else "info"), None
                self._history.complete(op_id, kind, value)
                self._count_outcome(op.f, kind, error)
                if kind == "ok" and op.f == "get":
                    self._workload.observe(op.key, value)
                if kind == "info":
                    process += self._count            # the old process may still act
                if error is not None:                 # reconnect, as applications do:
                    client.close()                    # the new client starts at its
                    client = None                     # home member again
        finally:
            if client is not None:
                client.close()


def final_reads(connect: Callable[[], KVClient], history: History, keys: Iterable[str],
                deadline: float, *, expected: type[BaseException],
                process: Hashable = "final") -> dict[str, str]:
    """Read every key once the farm is healed, recording each attempt (as `process`);
    retry a key until it is read or `deadline` (monotonic seconds) passes. Returns the
    values read; keys missing from the result could not be read."""
    values: dict[str, str] = {}
    client: KVClient | None = None
    try:
        for key in keys:
            while time.monotonic() < deadline:
                if client is None:
                    try:
                        client = connect()
                    except expected:
                        time.sleep(0.1)
                        continue
                op_id = history.invoke(process, "get", key)
                try:
                    value = client.kv_get(key) or ""
                except expected:
                    history.complete(op_id, "fail")
                    client.close()
                    client = None
                    time.sleep(0.1)
                    continue
                history.complete(op_id, "ok", value)
                values[key] = value
                break
    finally:
        if client is not None:
            client.close()
    return values


@dataclass(frozen=True)
class Audit:
    """Acknowledged appends against the final values of their keys."""

    lost: tuple[tuple[str, str], ...] = ()         # (key, token) acknowledged, missing
    duplicated: tuple[tuple[str, str], ...] = ()   # (key, token) present more than once
    unreadable: tuple[str, ...] = ()               # keys whose final read never succeeded
    checked: int = 0                               # acknowledged appends checked

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unreadable)


def audit_appends(operations: Iterable[Operation], finals: Mapping[str, str]) -> Audit:
    """Every acknowledged append must be in its key's final value exactly once; no
    token may appear twice (an append applied twice). Register keys are left to the
    linearizability checker (a later put may rightly have replaced any value)."""
    acknowledged: dict[str, list[str]] = {}
    keys: set[Hashable] = set()
    for op in operations:
        if op.f == "append" and isinstance(op.key, str):
            keys.add(op.key)
            if op.outcome is Outcome.OK:
                acknowledged.setdefault(op.key, []).append(op.input.strip())
    lost, duplicated, unreadable, checked = [], [], [], 0
    for key in sorted(keys, key=str):
        if key not in finals:
            unreadable.append(key)
            continue
        present = Counter(finals[key].split())
        duplicated += [(key, token) for token, n in sorted(present.items()) if n > 1]
        for token in acknowledged.get(key, ()):
            checked += 1
            if not present[token]:
                lost.append((key, token))
    return Audit(tuple(lost), tuple(duplicated), tuple(unreadable), checked)
