"""The farm's built-in state machines, applied to committed Application entries.

`FarmStateMachine` dispatches each entry (envelope.py says what an entry holds):

* farm commands go to the built-ins: the **journal** (what the Spark raft source reads:
  the records stay in the log; the machine counts them), the **kv map** (put, append,
  cas; get is a query) and the **sink ledger** (`Ledger`: staged task output, atomic
  batch commits, aborts, sequence counters);
* Garlic Farm status JSON updates each node's latest status (`status.py`);
* any other bytes go to the pluggable application machine, if one is given.

Every command carries a request id; `RequestLog` remembers the outcome of the last
`DEDUP_CAPACITY` ids, so a retried write (same id, whatever the client session) is
applied once and answered with the first outcome. Everything here is deterministic: the
same entries give the same state and the same answers on every member, which is what
snapshots, two-step reads and replays rely on.

Queries (`query(bytes) -> bytes`) are msgpack arrays ``[op, args...]`` with a built-in
op name; anything else goes to the application machine.
"""
from __future__ import annotations

import array
import bisect
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import msgpack

from consensus.common.errors import ErrorCode
from consensus.common.partitions import ABORTED_KEY, DECIDED_AT_KEY, MARKERS_KEY, \
    PREPARED_KEY, PREPARED_TIMEOUT_KEY, RESOLVES_KEY, WAITING_FOR_MARKERS, aborted_message, \
    aborted_prepared
from consensus.raft import Entry, EntryType, StateMachine
from consensus.runtime.status import choose_publisher, parse_status
from consensus.wire.envelope import Command, CommandKind, decode_command, is_command, \
    is_status, request_id_of
from consensus.wire.errors import ProtocolError

log = logging.getLogger("garlicfarm.machines")

DEDUP_CAPACITY = 65_536
BATCHES_KEPT_PER_QUERY = 100_000
ALLOCATIONS_KEPT = 100_000
#: rolled-forward prepared commits whose decision index is kept, for readers that cut
#: every partition at one index of partition 0 (only the newest matter: `prepared` query)
RESOLVED_KEPT = 4096
#: batches whose prepared commits partition 0 aborted and no run has decided since; more
#: aborts are refused (never forgotten: a forgotten one would show its commits again)
ABORTS_KEPT = 100_000
MAX_COUNTER = (1 << 63) - 1
SNAPSHOT_VERSION = 2           #: 2: requests as [id, [index, term, result, error]]
_READABLE_VERSIONS = (1, 2)    #: 1: requests as [id, index, term, result, error]


# Not frozen on purpose (like consensus.raft.Entry): one is built for every command
# applied, on every member, and a frozen dataclass costs ~3x more to build. Treat as
# immutable.
@dataclass(slots=True)
class CommandOutcome:
    """What applying one command produced: `result` (msgpack-able) or an error, at the
    index/term of the entry that first carried its request id."""
    request_id: bytes
    index: int
    term: int
    result: Any = None
    error: tuple[int, str] | None = None
    duplicate: bool = False


class CommandError(Exception):
    """A command that is well formed but cannot be applied (e.g. unknown staged index)."""


class RequestLog:
    """Outcomes by request id, the oldest forgotten first (insertion order: deterministic).
    Outcomes are remembered as their entries apply, so in index order, and forgotten in
    the same order: `forgotten_through` (the highest index forgotten) tells exactly which
    outcomes are gone, which reader threads use to judge entries consistently."""

    def __init__(self, capacity: int = DEDUP_CAPACITY) -> None:
        self.capacity = capacity
        self.outcomes: OrderedDict[bytes, tuple[int, int, Any, Any]] = OrderedDict()
        self.forgotten_through = 0

    def get(self, request_id: bytes) -> CommandOutcome | None:
        found = self.outcomes.get(request_id)
        if found is None:
            return None
        index, term, result, error = found
        return CommandOutcome(request_id, index, term, result,
                              tuple(error) if error else None, True)

    def remember(self, outcome: CommandOutcome) -> None:
        self.outcomes[outcome.request_id] = (outcome.index, outcome.term, outcome.result,
                                             list(outcome.error) if outcome.error else None)
        while len(self.outcomes) > self.capacity:
            _, forgotten = self.outcomes.popitem(last=False)
            self.forgotten_through = max(self.forgotten_through, forgotten[0])

    def dump(self) -> list:
        """[[request id, [index, term, result, error]], ...], oldest first (built by C
        code: a snapshot holds up to 65,536 of these)."""
        return list(self.outcomes.items())

    def load(self, items: list, version: int = SNAPSHOT_VERSION) -> None:
        if version == 1:
            self.outcomes = OrderedDict((item[0], tuple(item[1:])) for item in items)
        else:
            self.outcomes = OrderedDict((rid, tuple(v)) for rid, v in items)
        oldest = next(iter(self.outcomes.values()), None)
        self.forgotten_through = oldest[0] - 1 if oldest is not None else 0


class Ledger:
    """The exactly-once sink's ledger: staged task output, batch commits, counters.

    A STAGED entry is invisible until a COMMIT entry of its query names it; the commit
    makes all the entries it names visible at once, at its own index. A second commit of
    the same (query, batch) is ignored (the answer points at the first). ABORT turns a
    batch's staged entries into garbage. Counters hand out sequence ranges, the same
    range again to the same owner (query, batch).

    Across partitions (a farm of several Raft groups) a batch is decided once, in
    partition 0: partition q > 0 first takes a *prepared* commit (metadata PREPARED_KEY),
    validated as a commit is but not yet effective; partition 0's commit names each
    partition's prepared commit (MARKERS_KEY) and is the decision; a marker (RESOLVES_KEY)
    later makes partition q's ledger hold that decision itself. Until then a reader asks
    partition 0's ledger (`decision`), so the decision alone makes the batch visible.
    Partition 0 also takes *aborts* (ABORTED_KEY: prepared commits left undecided past
    --prepared-timeout), only while their batch is undecided: those commits never show,
    a decision naming one fails, and a re-run's new prepared commits decide it anew."""

    def __init__(self) -> None:
        self.staged: dict[int, list] = {}           # index -> [query, batch, partition, attempt, type]
        self.by_batch: dict[tuple[str, int], list[int]] = {}
        self.commits: dict[str, OrderedDict[int, list]] = {}  # query -> batch -> [index, staged, meta]
        self.effective: dict[str, array.array] = {}   # query -> indexes of effective commits
        self.forgotten: dict[str, int] = {}           # query -> highest batch forgotten
        self.counters: dict[str, int] = {}
        self.allocations: OrderedDict[tuple[str, str, int], int] = OrderedDict()
        self.prepared: dict[int, list] = {}         # index -> [query, batch, staged, meta]
        self.resolved: OrderedDict[int, int] = OrderedDict()  # prepared index -> decision's
        # (query, batch) -> [abort's index, {"q": [aborted prepared indexes]}, timeout]
        self.aborted: OrderedDict[tuple[str, int], list] = OrderedDict()

    def stage(self, index: int, query: str, batch: int, partition: int, attempt: int,
              content_type: str) -> int:
        self.staged[index] = [query, batch, partition, attempt, content_type]
        self.by_batch.setdefault((query, batch), []).append(index)
        return index

    def commit(self, index: int, query: str, batch: int, staged: list[int], meta: dict) -> list:
        """[committed, index of the batch's (first) commit, duplicate]. Either way the
        batch's other staged entries, and those of older batches of the query, become
        garbage: Spark never commits a batch older than the last one it planned."""
        if isinstance(meta, dict) and RESOLVES_KEY in meta:
            if staged:
                raise CommandError("a marker names no staged entries (the prepared commit "
                                   "it rolls forward does)")
            return self._resolve(query, batch, meta[RESOLVES_KEY], meta.get(DECIDED_AT_KEY))
        batches = self.commits.setdefault(query, OrderedDict())
        first = batches.get(batch)
        if first is not None:
            self._drop_garbage(query, batch)
            self._forget_prepared(query, batch)
            return [False, first[0], True]
        if batch <= self.forgotten.get(query, -1):
            # committed so long ago that its details are gone: still a duplicate
            self._drop_garbage(query, batch)
            self._forget_prepared(query, batch)
            return [False, 0, True]
        if isinstance(meta, dict) and PREPARED_KEY in meta:
            older = sorted((b, i) for i, (q, b, _, _) in self.prepared.items()
                           if q == query and b < batch)
            if older:
                raise CommandError(f"{WAITING_FOR_MARKERS}: batch {older[0][0]} of query "
                                   f"{query!r} (prepared at entry {older[0][1]}): roll "
                                   f"partition 0's decision of it forward first")
        aborted = self.aborted.get((query, batch))
        markers = meta.get(MARKERS_KEY) if isinstance(meta, dict) else None
        if aborted is not None and isinstance(markers, dict) and any(
                prepared in aborted[1].get(p, ()) for p, prepared in markers.items()):
            raise CommandError(aborted_message(query, batch, aborted[2]))
        for s in staged:
            owner = self.staged.get(s)
            if owner is None:
                raise CommandError(f"staged entry {s} is unknown, already committed or "
                                   f"aborted: stage the batch's output again")
            if owner[0] != query:
                raise CommandError(f"staged entry {s} belongs to query {owner[0]!r}, not "
                                   f"{query!r}")
        if len(set(staged)) != len(staged):
            raise CommandError("a staged entry is named twice")
        for s in staged:
            self._drop_staged(s)
        self._drop_garbage(query, batch)
        if isinstance(meta, dict) and PREPARED_KEY in meta:
            self.prepared[index] = [query, batch, list(staged), meta]
            return [True, index, False]
        self._record(query, batch, index, list(staged), meta)
        self.aborted.pop((query, batch), None)      # a re-run decided it anew
        return [True, index, False]

    def abort_prepared(self, index: int, query: str, batch: int, named: dict,
                       timeout: object) -> list:
        """Partition 0 aborts the prepared commits `named` ({"q": [index, ...]}) of an
        undecided batch: [aborted, index of the batch's decision or abort, decided]. A
        batch decided first stays decided: what this log orders first wins, everywhere."""
        first = self.commits.get(query, {}).get(batch)
        if first is not None or batch <= self.forgotten.get(query, -1):
            return [False, first[0] if first is not None else 0, True]
        if (query, batch) not in self.aborted and len(self.aborted) >= ABORTS_KEPT:
            raise CommandError(f"{ABORTS_KEPT} aborted batches wait for a run to decide "
                               f"them: decide abandoned ones empty in partition 0")
        record = self.aborted.setdefault((query, batch), [index, {}, timeout])
        for partition, indexes in named.items():
            known = record[1].setdefault(partition, [])
            known.extend(i for i in indexes if i not in known)
        return [True, record[0], False]

    def forget_aborted(self, query: str, batch: int, indexes: list[int]) -> list:
        """In q > 0, the abort's roll-forward: forget these prepared commits of the batch."""
        for index in indexes:
            if self.prepared.get(index, [None, None])[:2] == [query, batch]:
                del self.prepared[index]
        return [False, 0, False]

    def _record(self, query: str, batch: int, index: int, staged: list, meta: dict) -> None:
        """The batch is committed, visible at `index` (effective is kept sorted: a marker
        makes an older prepared commit effective)."""
        batches = self.commits.setdefault(query, OrderedDict())
        batches[batch] = [index, staged, meta]
        effective = self.effective.setdefault(query, array.array("q"))
        if effective and effective[-1] > index:
            effective.insert(bisect.bisect_left(effective, index), index)
        else:
            effective.append(index)
        while len(batches) > BATCHES_KEPT_PER_QUERY:
            old, _ = batches.popitem(last=False)
            self.forgotten[query] = max(old, self.forgotten.get(query, -1))

    def _resolve(self, query: str, batch: int, target: object, decided_at: object) -> list:
        """A marker: partition 0 decided (query, batch) with the prepared commit at
        `target`; [committed, index of the batch's commit, duplicate] as `commit`."""
        first = self.commits.get(query, {}).get(batch)
        if first is not None or batch <= self.forgotten.get(query, -1):
            self._drop_garbage(query, batch)
            self._forget_prepared(query, batch)
            return [False, first[0] if first is not None else 0, True]
        if target is None:          # decided without a share here: its prepared are garbage
            self._drop_garbage(query, batch)
            self._forget_prepared(query, batch)
            return [False, 0, False]
        found = self.prepared.get(target) if type(target) is int else None
        if found is None or found[0] != query or found[1] != batch:
            raise CommandError(f"marker: entry {target!r} is not a prepared commit of "
                               f"query {query!r}, batch {batch} (nothing to roll forward)")
        self._drop_garbage(query, batch)        # a re-run's output, zombie attempts'
        self._record(query, batch, target, found[2], found[3])   # effective before forgetting:
        self._forget_prepared(query, batch)                         # reader threads look here
        self.resolved[target] = decided_at if type(decided_at) is int else 0
        while len(self.resolved) > RESOLVED_KEPT:
            self.resolved.popitem(last=False)
        return [True, target, False]

    def _forget_prepared(self, query: str, batch: int) -> None:
        """The prepared commits of `query`'s `batch` are decided (the batch is recorded
        here, or decided without a share here): drop them."""
        for index in [i for i, p in self.prepared.items() if p[0] == query and p[1] == batch]:
            del self.prepared[index]

    def decision(self, query: str, batch: int, partition: int, index: int) -> bool | None:
        """Partition 0's verdict on partition `partition`'s prepared commit at `index`:
        True when the batch was decided with it, False when decided without it (or so long
        ago that the details are gone), None while the batch is undecided."""
        found = self.commits.get(query, {}).get(batch)
        if found is None:
            if batch <= self.forgotten.get(query, -1):
                return False
            aborted = self.aborted.get((query, batch))
            return False if aborted and index in aborted[1].get(str(partition), ()) else None
        markers = found[2].get(MARKERS_KEY) if isinstance(found[2], dict) else None
        return isinstance(markers, dict) and markers.get(str(partition)) == index

    def first_undecided(self, decision: Callable[[str, int, int], "bool | None"]
                        ) -> int | None:
        """The index of the first prepared commit whose batch is still undecided
        (`decision(query, batch, index)`): the stable end of this partition's log."""
        for index, (query, batch, _, _) in self.prepared.items():    # in index order
            if decision(query, batch, index) is None:
                return index
        return None

    def _drop_garbage(self, query: str, batch: int) -> None:
        for key in [k for k in self.by_batch if k[0] == query and k[1] <= batch]:
            for leftover in self.by_batch.pop(key):
                self.staged.pop(leftover, None)

    def referenced_floor(self, from_index: int) -> int:
        """The lowest log index still needed to read committed batches whose COMMIT entry
        is at or after `from_index`, and the staged entries not yet committed: compaction
        keeps the log from there."""
        floor = min(self.staged, default=from_index)
        for index, (_, _, staged, _) in self.prepared.items():
            floor = min(floor, index, *staged)
        for batches in self.commits.values():
            for commit_index, staged, _ in reversed(batches.values()):
                if commit_index < from_index:
                    break
                if staged:
                    floor = min(floor, min(staged))
        return min(floor, from_index)

    def _drop_staged(self, index: int) -> None:
        owner = self.staged.pop(index)
        siblings = self.by_batch.get((owner[0], owner[1]))
        if siblings is not None:
            siblings.remove(index)
            if not siblings:
                del self.by_batch[(owner[0], owner[1])]

    def abort(self, query: str, batch: int) -> int:
        dropped = self.by_batch.pop((query, batch), [])
        for s in dropped:
            self.staged.pop(s, None)
        return len(dropped)

    def allocate(self, key: str, count: int, owner_query: str, owner_batch: int) -> int:
        owner = (key, owner_query, owner_batch)
        start = self.allocations.get(owner)
        if start is not None:
            return start
        start = self.counters.get(key, 0)
        if start + count > MAX_COUNTER:   # a snapshot (msgpack) holds signed 64 bits
            raise CommandError(f"count: {count} more after {start} would pass the "
                               f"counter's limit {MAX_COUNTER} (key {key!r})")
        self.counters[key] = start + count
        self.allocations[owner] = start
        while len(self.allocations) > ALLOCATIONS_KEPT:
            self.allocations.popitem(last=False)
        return start

    def batch_status(self, query: str, batch: int) -> list | None:
        """[index, staged, metadata] of the batch's decision; of its abort (metadata
        ABORTED_KEY, PREPARED_TIMEOUT_KEY) while no run has decided it since."""
        found = self.commits.get(query, {}).get(batch)
        if found is None and (query, batch) in self.aborted:
            index, named, timeout = self.aborted[query, batch]
            return [index, [], {ABORTED_KEY: named, PREPARED_TIMEOUT_KEY: timeout}]
        return None if found is None else [found[0], found[1], found[2]]

    def last_batch(self, query: str) -> int | None:
        batches = self.commits.get(query)
        return max(batches) if batches else None

    def commit_effective(self, index: int, query: str, batch: int) -> bool:
        """Did the COMMIT entry at `index` make its batch visible? Exact for every batch
        ever committed: the index of each effective commit is kept (8 bytes a batch),
        also after the batch's details are forgotten."""
        effective = self.effective.get(query)
        if not effective:
            return False
        at = bisect.bisect_left(effective, index)
        return at < len(effective) and effective[at] == index

    def dump(self) -> dict:
        return {"staged": [[i, *v] for i, v in self.staged.items()],
                "effective": {q: a.tobytes() for q, a in self.effective.items()},
                "forgotten": self.forgotten,
                "commits": {q: [[b, *v] for b, v in batches.items()]
                            for q, batches in self.commits.items()},
                "counters": self.counters,
                "allocations": [[*k, v] for k, v in self.allocations.items()],
                "prepared": [[i, *v] for i, v in self.prepared.items()],
                "resolved": [[i, d] for i, d in self.resolved.items()],
                "aborted": [[*k, *v] for k, v in self.aborted.items()]}

    def load(self, data: dict) -> None:
        self.__init__()
        for index, query, batch, partition, attempt, content_type in data["staged"]:
            self.stage(index, query, batch, partition, attempt, content_type)
        self.commits = {q: OrderedDict((item[0], item[1:]) for item in batches)
                        for q, batches in data["commits"].items()}
        self.forgotten = dict(data["forgotten"])
        for query, raw in data["effective"].items():
            self.effective[query] = array.array("q")
            self.effective[query].frombytes(raw)
        self.counters = dict(data["counters"])
        self.allocations = OrderedDict(((k, q, b), v) for k, q, b, v in data["allocations"])
        self.prepared = {i: [q, b, list(staged), meta]
                         for i, q, b, staged, meta in data.get("prepared", ())}
        self.resolved = OrderedDict((i, d) for i, d in data.get("resolved", ()))
        self.aborted = OrderedDict(((q, b), [i, named, t])
                                   for q, b, i, named, t in data.get("aborted", ()))


@dataclass(frozen=True)
class Decider:
    """Where partition `partition` (> 0) of a node learns partition 0's decisions: that
    group's ledger on this node. Its answers only move from undecided to decided (a
    committed decision is final), so a replica of partition 0 that lags only holds a
    reader back, never shows it part of a batch."""
    partition: int
    ledger: Callable[[], Ledger]

    def decision(self, query: str, batch: int, index: int) -> bool | None:
        return self.ledger().decision(query, batch, self.partition, index)


class FarmStateMachine:
    """The built-in machines plus an optional application machine (`StateMachine`).
    `decider` (partitions > 0 of a farm of several) lets the ledger take prepared commits
    and readers see them once partition 0 decided their batch."""

    def __init__(self, app: StateMachine | None = None, decider: Decider | None = None) -> None:
        self.app = app
        self.decider = decider
        self.requests = RequestLog()
        self.kv: dict[str, str] = {}
        self.ledger = Ledger()
        self.statuses: dict[int, dict] = {}
        self.status_index: dict[int, int] = {}
        self.journal_entries = 0
        self.applied = 0

    # -- applying --------------------------------------------------------------------------
    def apply(self, entry: Entry) -> CommandOutcome | None:
        """Apply one committed entry; an CommandOutcome for farm commands (None otherwise)."""
        self.applied = entry.index
        if entry.type != EntryType.APPLICATION or not entry.data:
            return None
        data = entry.data
        if is_command(data):
            found = request_id_of(data)
            if found is not None and found[0] == CommandKind.JOURNAL:
                return self._apply_journal(entry, found[1])
            try:
                command = decode_command(data)
            except ProtocolError:
                return None      # refused by the leader before proposing; ignore here too
            return self.apply_command(entry, command)
        if is_status(data):
            status = parse_status(data)
            if status is not None:
                self.statuses[status["id"]] = status
                self.status_index[status["id"]] = entry.index
            return None
        if self.app is not None:
            try:
                self.app.apply(entry)
            except Exception:   # noqa: BLE001 - a committed entry never stops a replica
                log.exception("the application state machine raised applying entry %d "
                              "(term %d); the entry is skipped here, as on every member "
                              "whose machine is deterministic", entry.index, entry.term)
        return None

    def apply_command(self, entry: Entry, command: Command) -> CommandOutcome:
        known = self.requests.get(command.request_id)
        if known is not None:
            return known
        try:
            result = self._HANDLERS[command.kind](self, entry, *command.args)
            outcome = CommandOutcome(command.request_id, entry.index, entry.term, result)
        except CommandError as exc:
            outcome = CommandOutcome(command.request_id, entry.index, entry.term,
                              error=(int(ErrorCode.FAILED), str(exc)))
        self.requests.remember(outcome)
        return outcome

    def _apply_journal(self, entry: Entry, request_id: bytes) -> CommandOutcome:
        """The hot path: a journal entry's records stay in the log, so only its request
        id is read (the leader checked the command before proposing it)."""
        known = self.requests.get(request_id)
        if known is not None:
            return known
        self.journal_entries += 1
        outcome = CommandOutcome(request_id, entry.index, entry.term)
        self.requests.remember(outcome)
        return outcome

    def _journal(self, entry: Entry, records: list) -> None:
        self.journal_entries += 1

    def _kv_put(self, entry: Entry, key: str, value: str) -> None:
        self.kv[key] = value

    def _kv_append(self, entry: Entry, key: str, value: str) -> int:
        self.kv[key] = self.kv.get(key, "") + value
        return len(self.kv[key])

    def _kv_cas(self, entry: Entry, key: str, expected: str | None, new: str) -> bool:
        if self.kv.get(key) != expected:
            return False
        self.kv[key] = new
        return True

    def _stage(self, entry: Entry, query: str, batch: int, partition: int, attempt: int,
               content_type: str, payload: bytes) -> int:
        return self.ledger.stage(entry.index, query, batch, partition, attempt, content_type)

    def _commit(self, entry: Entry, query: str, batch: int, staged: list, meta: dict) -> list:
        if isinstance(meta, dict) and (PREPARED_KEY in meta or RESOLVES_KEY in meta) \
                and self.decider is None:
            raise CommandError("a prepared commit or its marker is for partitions 1 and up "
                               "of a farm of several partitions (partition 0 decides the "
                               "batch); commit here without those metadata keys")
        if isinstance(meta, dict) and ABORTED_KEY in meta:    # partition 0's, rolled forward in q
            named = aborted_prepared(meta)
            if staged or named is None:
                raise CommandError(f"an abort names no staged entries and its {ABORTED_KEY} "
                                   f"maps partitions to prepared indexes ({{\"1\": [12]}})")
            if self.decider is not None:
                return self.ledger.forget_aborted(query, batch,
                                                  named.get(str(self.decider.partition), []))
            return self.ledger.abort_prepared(entry.index, query, batch, named,
                                              meta.get(PREPARED_TIMEOUT_KEY))
        return self.ledger.commit(entry.index, query, batch, staged, meta)

    def _abort(self, entry: Entry, query: str, batch: int) -> int:
        return self.ledger.abort(query, batch)

    def _allocate(self, entry: Entry, key: str, count: int, query: str, batch: int) -> int:
        return self.ledger.allocate(key, count, query, batch)

    _HANDLERS: dict[CommandKind, Callable[..., Any]] = {
        CommandKind.JOURNAL: _journal, CommandKind.KV_PUT: _kv_put,
        CommandKind.KV_APPEND: _kv_append, CommandKind.KV_CAS: _kv_cas,
        CommandKind.STAGE: _stage, CommandKind.COMMIT: _commit, CommandKind.ABORT: _abort,
        CommandKind.ALLOCATE: _allocate,
    }

    # -- queries -----------------------------------------------------------------------------
    def query(self, query: bytes) -> bytes:
        """Answer a query (msgpack in, msgpack out); raises CommandError when malformed."""
        try:
            request = msgpack.unpackb(query, raw=False, strict_map_key=False)
        except Exception:
            request = None
        if isinstance(request, list) and request and request[0] in self._QUERIES:
            try:
                answer = self._QUERIES[request[0]](self, *request[1:])
            except TypeError as exc:
                raise CommandError(f"query {request[0]!r}: wrong arguments ({exc})") from None
            return msgpack.packb(answer, use_bin_type=True)
        if self.app is not None:
            return self.app.query(query)
        raise CommandError("not a built-in query ([op, args...] with op one of "
                           f"{', '.join(sorted(self._QUERIES))}) and no application state "
                           "machine is configured")

    def stable_applied(self) -> int:
        """The last applied index a reader may read up to: before the first prepared
        commit whose batch partition 0 has not decided (Kafka's last stable offset)."""
        if not self.ledger.prepared or self.decider is None:
            return self.applied
        first = self.ledger.first_undecided(self.decider.decision)
        return self.applied if first is None else min(self.applied, first - 1)

    def awaits_decisions(self) -> bool:
        """Prepared commits here wait for (or were decided by) partition 0: only this
        process's `Verdicts`, which ask the decider, judge them (not the reader
        process's mirror)."""
        return bool(self.ledger.prepared) and self.decider is not None

    def verdict(self, entry: Entry) -> bool | None:
        """Did this committed command take effect? (`Verdicts.of`, as of now.)"""
        return self.verdicts().of([entry])[0]

    def verdicts(self) -> "Verdicts":
        """What judges applied entries, for use on any thread (O(1): the loop hands it
        to reader threads)."""
        return Verdicts(self.requests, self.ledger, self.decider)

    def publisher(self) -> int | None:
        return choose_publisher(self.statuses)

    _QUERIES: dict[str, Callable[..., Any]] = {
        "kv_get": lambda self, key: self.kv.get(key),
        "kv_keys": lambda self: sorted(self.kv),
        "batch_status": lambda self, query, batch: self.ledger.batch_status(query, batch),
        "last_batch": lambda self, query: self.ledger.last_batch(query),
        "journal": lambda self: {"entries": self.journal_entries},
        "statuses": lambda self: self.statuses,
        "publisher": lambda self: self.publisher(),
        "applied": lambda self: self.applied,
        "prepared": lambda self, decided_from=0: [
            self.applied, [[i, p[0], p[1]] for i, p in self.ledger.prepared.items()],
            [[i, d] for i, d in self.ledger.resolved.items() if d >= decided_from]],
    }

    # -- snapshots -----------------------------------------------------------------------------
    def _restore_foreign(self, data: bytes, index: int) -> None:
        log.error("a snapshot at index %d is not a garlicfarm snapshot (%d bytes: another "
                  "implementation's, e.g. a JRaft leader's): this node's kv map, sink ledger "
                  "and statuses start empty there; the entries after it apply as usual",
                  index, len(data))
        app = self.app
        self.__init__(app, self.decider)
        self.applied = index
        if app is not None:
            app.restore(data)

    def snapshot(self) -> bytes:
        state = {"v": SNAPSHOT_VERSION, "applied": self.applied, "kv": self.kv,
                 "requests": self.requests.dump(), "ledger": self.ledger.dump(),
                 "statuses": {k: [self.status_index.get(k, 0), v] for k, v in self.statuses.items()},
                 "journal": self.journal_entries,
                 "app": self.app.snapshot() if self.app is not None else None}
        return msgpack.packb(state, use_bin_type=True)

    def restore(self, data: bytes, index: int = 0) -> None:
        """The state of a snapshot taken at `index`. A snapshot that is not ours (a JRaft
        leader's, e.g. dmprinter's, in a mixed cluster) holds no farm state: the built-in
        machines start empty there, the application machine (if any) gets the bytes, and
        an error says so; the node goes on (docs/protocol.md). One of ours of an unknown
        version is refused."""
        try:
            state = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception:   # noqa: BLE001 - msgpack raises ExtraData, ValueError, ...
            state = None
        if not isinstance(state, dict) or "v" not in state:
            self._restore_foreign(data, index)
            return
        if state.get("v") not in _READABLE_VERSIONS:
            raise ValueError(f"a farm state machine snapshot of version {state.get('v')!r}: "
                             f"this node reads versions {_READABLE_VERSIONS}; upgrade it")
        self.applied = state["applied"]
        self.kv = dict(state["kv"])
        requests, ledger = RequestLog(), Ledger()      # built, then swapped in: a reader
        requests.load(state["requests"], state["v"])    # thread's Verdicts keeps the old
        ledger.load(state["ledger"])
        self.requests, self.ledger = requests, ledger
        self.statuses = {int(k): v[1] for k, v in state["statuses"].items()}
        self.status_index = {int(k): v[0] for k, v in state["statuses"].items()}
        self.journal_entries = state["journal"]
        if self.app is not None and state.get("app") is not None:
            self.app.restore(state["app"])


UNDECIDED = object()


@dataclass(frozen=True)
class Verdicts:
    """Judges applied entries off the event loop, from facts that never change once an
    entry has applied: the index at which each request id first applied (RequestLog:
    remembered and forgotten in index order) and the index of every effective COMMIT
    (Ledger.effective, append-only). Each lookup is one dict get or bisect, atomic
    under the GIL, and a snapshot restore swaps in new objects rather than changing
    these, so a reader thread may use it while the loop applies entries."""
    requests: RequestLog
    ledger: Ledger
    decider: Decider | None = None

    def of(self, entries: list[Entry]) -> list[bool | None]:
        """Each entry's verdict: False for a retry of a request applied before and for
        a COMMIT that was a duplicate or failed (exact for every commit, so a batch is
        visible whole or not at all); None for another command whose request id is
        forgotten; True otherwise. A prepared commit not yet rolled forward gets partition
        0's decision (None while undecided: readers stop before it). The answer for the whole list is the machine's at
        one moment (the end of the call), whatever was applied or forgotten meanwhile:
        outcomes found during the call but forgotten by its end count as forgotten.
        The entries must have applied before the call began."""
        outcomes, commit_effective = self.requests.outcomes, self.ledger.commit_effective
        prepared, decider = self.ledger.prepared, self.decider
        found_at: list = []
        for entry in entries:
            found = request_id_of(entry.data) if entry.type == EntryType.APPLICATION else None
            if found is None:
                found_at.append(True)
                continue
            kind, request_id = found
            if kind == CommandKind.COMMIT:
                try:
                    command = decode_command(entry.data)
                except ProtocolError:
                    found_at.append(False)
                    continue
                query, batch = command.args[0], command.args[1]
                # prepared first: a marker makes it effective before it leaves `prepared`
                if entry.index in prepared and decider is not None:
                    decided = decider.decision(query, batch, entry.index)
                    found_at.append(UNDECIDED if decided is None else decided)
                    continue
                found_at.append(commit_effective(entry.index, query, batch))
                continue
            known = outcomes.get(request_id)
            found_at.append(known[0] if known is not None else 0)
        forgotten = self.requests.forgotten_through
        verdicts: list[bool | None] = []
        for entry, at in zip(entries, found_at):
            if at is True or at is False:
                verdicts.append(at)
            elif at is UNDECIDED:
                verdicts.append(None)
            elif at <= forgotten:           # 0: not found (forgotten before it was asked)
                verdicts.append(None)
            else:
                verdicts.append(at == entry.index)
        return verdicts
