"""The raft sink over a farm of several partitions: rows routed by an optional `key`.

A row whose `key` (string, binary or integer) is not null goes to the partition Kafka's default
partitioner picks for it (`partitioning.key_partitions`: murmur2 of the key's bytes, mod
N), so the rows of one key stay in one partition, in write order; rows without a key are spread
row by row over the partitions in turn (from the task's number: deterministic, so a
re-run batch routes as the first run did). Each partition gets staged payloads, as the
one-partition sink's; the driver then decides the batch once, in partition 0, so that it
is visible in every partition at once or in none (docs/exactly-once.md, "Partitions"):
1. prepare: every other partition with rows takes a prepared commit of its share, which
   its readers do not read past until partition 0 decides the batch;
2. decide: partition 0's commit (its own share, maybe none) names each prepared commit;
   its ledger takes one per (query id, batch id), so the batch is decided once;
3. roll forward: a marker in each prepared partition records the decision there.
Readers need only step 2 (a partition's members ask partition 0's ledger); a commit that
is re-run (driver restart) after the decision finds it and only rolls it forward.
A batch left undecided past the farm's --prepared-timeout is aborted in partition 0: the
run that then decides it fails with an error naming the option (never "duplicate": its
rows were not written), and the restart's re-run prepares and decides it anew.
With valueFormat binary the key routes only (the value is stored); with json, msgpack or
arrow it is encoded into the value with the other columns, as today.
"""
from __future__ import annotations

import dataclasses
from collections import deque
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TypeVar

import numpy as np
import pyarrow as pa

from consensus.common.partitions import DECIDED_AT_KEY, MARKERS_KEY, PREPARED_KEY, \
    RESOLVES_KEY, WAITING_FOR_MARKERS

from ..errors import SchemaError
from ..sink import CommitOutcome, StagedOutput, TaskTag
from ..value_formats import encode_values
from .partitioning import NO_PARTITION, key_partitions
from .sink import RaftSinkBackend, _Stager, ipc_payload, payload_chunks

if TYPE_CHECKING:
    from consensus.client import BatchCommit, FarmClient

KEY_COLUMN = "key"
T = TypeVar("T")


#: Spark type names of the key columns `partitioning` encodes as Kafka's serializers do.
KEY_TYPES = ("string", "binary", "byte", "short", "integer", "long")


def check_key_type(type_name: str | None) -> None:
    """The `key` column, when there is one (`type_name`), is of a type whose bytes a
    Kafka producer would send alike (partitioning's table), checked before any task runs."""
    if type_name is not None and type_name not in KEY_TYPES:
        raise SchemaError(f"the garlicfarm sink routes rows by a '{KEY_COLUMN}' column of "
                          f"strings, bytes or integers (byte, short, int, long); this one "
                          f"is {type_name}, which has no stable byte encoding: cast it to "
                          f"string")


@dataclass
class RoutedOutput(StagedOutput):
    """A task's commit message: its staged refs and row counts, per farm partition."""
    routed: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = dataclasses.field(
        default_factory=dict)


@dataclass(frozen=True)
class RoutedSinkBackend:
    """`sink.SinkBackend` over `partitions` farm partitions (picklable settings)."""
    base: RaftSinkBackend
    partitions: int
    value_format: str

    def _of(self, partition: int) -> RaftSinkBackend:
        return dataclasses.replace(self.base, connection=dataclasses.replace(
            self.base.connection, partition=partition))

    def stage_batches(self, tag: TaskTag, batches: Iterator[pa.RecordBatch]) -> RoutedOutput:
        """Route the task's rows and stage each partition's share there, `in_flight`
        payloads at a time per partition (memory: ~stage_bytes per partition)."""
        base = self.base
        stagers: dict[int, _Stager] = {}
        pending: dict[int, list[pa.Array]] = {}
        sizes: dict[int, int] = {}
        futures: dict[int, deque[Future]] = {}
        refs: dict[int, list[int]] = {}
        rows: dict[int, list[int]] = {}
        nbytes = 0

        def flush(partition: int) -> None:
            nonlocal nbytes
            if partition not in stagers:
                stagers[partition] = _Stager(self._of(partition).connection, base.in_flight)
            for chunks, count in payload_chunks(iter(pending.pop(partition, [])),
                                                base.stage_bytes):
                payload = ipc_payload(chunks, base.compression)
                nbytes += len(payload)
                rows.setdefault(partition, []).append(count)
                queue = futures.setdefault(partition, deque())
                queue.append(stagers[partition].submit(tag, payload))
                while len(queue) > base.in_flight:      # backpressure: bounded memory
                    refs.setdefault(partition, []).append(queue.popleft().result())
            sizes[partition] = 0

        try:
            turn = tag.partition
            for batch in batches:
                if not batch.num_rows:
                    continue
                for partition, share in self._split(batch, turn):
                    values = encode_values(share, self.value_format)
                    pending.setdefault(partition, []).append(values)
                    sizes[partition] = sizes.get(partition, 0) + values.nbytes
                    if sizes[partition] >= base.stage_bytes:
                        flush(partition)
                turn += batch.num_rows
            for partition in list(pending):
                flush(partition)
            for partition, queue in futures.items():
                refs.setdefault(partition, []).extend(f.result() for f in queue)
        finally:
            for stager in stagers.values():
                stager.close()
        routed = {p: (tuple(refs[p]), tuple(rows[p])) for p in sorted(refs)}
        return RoutedOutput(tag, tuple(r for p in routed for r in routed[p][0]),
                            tuple(n for p in routed for n in routed[p][1]), nbytes, routed)

    def _split(self, batch: pa.RecordBatch, turn: int
               ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(partition, rows) of one input batch, in row order within each partition; the
        keyless rows go round-robin from partition `turn` mod N."""
        spread = (turn + np.arange(batch.num_rows, dtype=np.int64)) % self.partitions
        if KEY_COLUMN in batch.schema.names:
            targets = key_partitions(batch.column(KEY_COLUMN), self.partitions,
                                     name=KEY_COLUMN)
            targets = np.where(targets == NO_PARTITION, spread, targets)
        else:
            targets = spread
        if self.value_format == "binary" and KEY_COLUMN in batch.schema.names:
            batch = batch.drop_columns([KEY_COLUMN])     # the key routes; the value is stored
        for partition in np.unique(targets).tolist():
            yield partition, batch.filter(pa.array(targets == partition))

    def stage(self, tag: TaskTag, values: Iterator[pa.Array]) -> StagedOutput:
        raise TypeError("a routed sink stages record batches (stage_batches)")

    def commit(self, query_id: str, batch_id: int, outputs: Sequence[StagedOutput]
               ) -> CommitOutcome:
        """Prepare, decide in partition 0, roll forward (the module docstring)."""
        shares: dict[int, tuple[list[int], list[int]]] = {}
        for output in outputs:
            if isinstance(output, RoutedOutput):
                for partition, (refs, rows) in output.routed.items():
                    staged, counts = shares.setdefault(partition, ([], []))
                    staged.extend(refs)
                    counts.extend(rows)
        if not shares:
            return CommitOutcome(False, False, None, 0, ())
        parts = {p: sum(1 for o in outputs if isinstance(o, RoutedOutput) and p in o.routed)
                 for p in shares}

        def metadata(partition: int) -> dict:
            return {"rows": shares[partition][1], "partitions": parts[partition],
                    "writer": "pyspark_farm"}

        with _Clients(self) as ask:
            decision = ask(0, lambda c: c.batch_status(query_id, batch_id))
            committed = False
            if decision is not None and decision.aborted:
                decision = None     # an earlier run's, aborted: this run decides anew
            if decision is None:
                prepared = ask.each(sorted(p for p in shares if p), lambda p: self._prepare(
                    ask, p, query_id, batch_id, shares[p][0],
                    {**metadata(p), PREPARED_KEY: 0}))
                markers = {str(p): result.index for p, result in prepared.items()}
                if any(result.duplicate for result in prepared.values()):
                    # rolled forward already somewhere: decided meanwhile
                    decision = ask(0, lambda c: c.batch_status(query_id, batch_id))
                else:       # the decision, or (duplicate) the one taken before, as it was
                    staged0, counts0 = shares.get(0, ([], []))
                    decision = ask(0, lambda c: c.commit_batch(
                        query_id, batch_id, staged0,
                        metadata={"rows": counts0, "partitions": parts.get(0, 0),
                                  "writer": "pyspark_farm", MARKERS_KEY: markers}))
                    committed = decision.committed
                if decision is None:
                    raise RuntimeError(f"partition 0 neither took nor remembers the decision "
                                       f"of query {query_id}, batch {batch_id}: the batch "
                                       f"fails and Spark runs it again")
            self.roll_forward(query_id, batch_id, decision.index, decision.metadata, ask)
        named = tuple(r for p in sorted(shares) for r in shares[p][0])
        return CommitOutcome(committed, not committed, decision.index,
                             sum(sum(c) for _, c in shares.values()), named)

    def roll_forward(self, query_id: str, batch_id: int, at: int, decision: dict,
                     ask: "_Clients") -> None:
        """Record partition 0's decision (at index `at`, `decision` its commit's metadata)
        in every partition it names: a marker each, which a partition that has it already
        answers duplicate. (A partition it does not name learns it at its next prepared
        commit of the query: `_prepare`.)"""
        markers = decision.get(MARKERS_KEY) if isinstance(decision, dict) else None
        named = {int(key): prepared for key, prepared in (markers or {}).items()}
        ask.each(sorted(named), lambda p: ask(p, lambda c: c.commit_batch(
            query_id, batch_id, [], metadata={RESOLVES_KEY: named[p], DECIDED_AT_KEY: at})))

    def _prepare(self, ask: "_Clients", partition: int, query_id: str, batch_id: int,
                 staged: list[int], metadata: dict) -> "BatchCommit":
        """The prepared commit in `partition`; when the partition still holds an older
        batch of the query prepared and unmarked (a driver died after deciding it, and
        its re-run had no rows there), that decision is rolled forward first."""
        from consensus.client import FarmError

        def prepare() -> "BatchCommit":
            return ask(partition, lambda c: c.commit_batch(query_id, batch_id, staged,
                                                           metadata=metadata))
        try:
            return prepare()
        except FarmError as exc:
            if WAITING_FOR_MARKERS not in str(exc):
                raise
        _, waiting, _ = ask(partition, lambda c: c.prepared_commits())
        for older in sorted({b for _, q, b in waiting if q == query_id and b < batch_id}):
            decision = ask(0, lambda c: c.batch_status(query_id, older))
            if decision is None:
                raise RuntimeError(
                    f"batch {older} of query {query_id} is prepared in partition "
                    f"{partition} but partition 0 never decided it: Spark does not skip a "
                    f"batch, so this checkpoint's history differs from the farm's; decide "
                    f"it in partition 0 (docs/exactly-once.md, \"An abandoned batch\")")
            markers = decision.metadata.get(MARKERS_KEY) if isinstance(
                decision.metadata, dict) else None
            named = (markers or {}).get(str(partition))
            ask(partition, lambda c: c.commit_batch(
                query_id, older, [],
                metadata={RESOLVES_KEY: named, DECIDED_AT_KEY: decision.index}))
        return prepare()

    def abort(self, query_id: str, batch_id: int) -> None:
        for partition in range(self.partitions):
            self._of(partition).abort(query_id, batch_id)


class _Clients:
    """One client per partition for the calls of one commit (`ask(partition, call)`, one
    thread at a time per partition, as a client serves), all closed at its end; `each`
    runs a step in several partitions at once (their round trips overlap)."""

    def __init__(self, backend: RoutedSinkBackend) -> None:
        self._backend = backend
        self._open: dict[int, "FarmClient"] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> "_Clients":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for client in self._open.values():
            client.close()

    def __call__(self, partition: int, call: Callable[["FarmClient"], T]) -> T:
        with self._lock:
            lock = self._locks.setdefault(partition, threading.Lock())
        with lock:
            client = self._open.get(partition)
            if client is None:
                client = self._backend._of(partition).connection.client()
                self._open[partition] = client
            return call(client)

    def each(self, partitions: Sequence[int], step: Callable[[int], T]) -> dict[int, T]:
        """`step(partition)` for every partition, concurrently; the first error raised."""
        if len(partitions) <= 1:
            return {p: step(p) for p in partitions}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=min(16, self._backend.partitions),
                                            thread_name_prefix="garlicfarm-commit")
        futures = {p: self._pool.submit(step, p) for p in partitions}
        return {p: future.result() for p, future in futures.items()}
