"""The exactly-once sink's commit protocol, common to every kind (docs/exactly-once.md).

1. Each task stages its output through the kind's `SinkBackend`, tagged with (query id,
   batch id, partition, attempt), and returns a `StagedOutput` naming what it staged.
2. When every task succeeded, Spark calls `commit(messages, batchId)` on the driver: the
   backend appends **one** commit record naming the winning attempts' staged output. The
   farm's ledger makes the batch visible atomically at that record and ignores a second
   commit of the same (query id, batch id), so a batch re-run after a crash or restart
   takes effect once.
3. When a task failed, Spark calls `abort`: the batch's staged output becomes garbage.
   Losers of task retries are never named by a commit, so they never become visible.

Writers keep no state between calls (Spark builds them afresh for each commit in a short
lived worker); the ledger in the farm is the memory. The stream ids come from Spark's task
local properties: `sql.streaming.queryId` is the query's id kept in its checkpoint (the
same across restarts), `streaming.sql.batchId` the micro-batch being written.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from .compat import DataSourceStreamArrowWriter
from .errors import CommitConflict, GarlicFarmSparkError
from .value_formats import encode_values

log = logging.getLogger("pyspark_farm.sink")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class TaskTag:
    """Who wrote a piece of staged output."""
    query_id: str
    batch_id: int
    partition: int
    attempt: int

    @classmethod
    def current(cls, query_id: str | None = None, batch_id: int | None = None) -> "TaskTag":
        """The running Spark task's tag; stream ids from the task's local properties unless
        given (batch writes pass their own)."""
        from pyspark import TaskContext
        context = TaskContext.get()
        if context is None:
            raise GarlicFarmSparkError("the garlicfarm sink's write() runs inside a Spark task")
        if query_id is None:
            query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch_id is None:
            raw = context.getLocalProperty(BATCH_ID_PROPERTY)
            batch_id = int(raw) if raw is not None else None
        if not query_id or batch_id is None:
            raise GarlicFarmSparkError(
                "this Spark task carries no streaming query id / batch id "
                f"({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); the garlicfarm stream writer "
                "must run inside a streaming query")
        # The attempt is informational (a stage retry restarts it at 0): staged output is
        # identified by its log position, and a commit names exact positions.
        return cls(query_id, batch_id, context.partitionId(), context.attemptNumber())


@dataclass
class StagedOutput(WriterCommitMessage):
    """A task's commit message: what it staged (`refs`, in write order), with the rows
    each ref holds. Picklable; it travels from the executor to the driver."""
    tag: TaskTag
    refs: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()
    nbytes: int = 0

    @property
    def total_rows(self) -> int:
        return sum(self.rows)


@dataclass(frozen=True)
class CommitOutcome:
    """What committing a batch did."""
    committed: bool        # this call made the batch visible
    duplicate: bool        # the batch had been committed before; this one was ignored
    position: int | None   # where it became visible (a log index for raft)
    rows: int = 0
    refs: tuple[int, ...] = field(default=())


class SinkBackend(Protocol):
    """What a kind provides to the commit protocol. Instances are picklable settings; each
    call opens what it needs and closes it."""

    def stage(self, tag: TaskTag, values: Iterator[pa.Array]) -> StagedOutput:
        """Stage a task's values (binary arrays, in order) invisibly; run in executors."""

    def commit(self, query_id: str, batch_id: int, outputs: Sequence[StagedOutput]) -> CommitOutcome:
        """Make the outputs one visible batch, at most once per (query id, batch id)."""

    def abort(self, query_id: str, batch_id: int) -> None:
        """Turn the batch's staged output into garbage."""

    # A backend may also have `stage_batches(tag, batches) -> StagedOutput`, which then
    # stages the task's record batches itself (to route rows by a column: raft partitions).


def winning_outputs(messages: Sequence[WriterCommitMessage | None], batch_id: int | None = None
                    ) -> tuple[str | None, list[StagedOutput]]:
    """The query id and the outputs to commit, in partition order, after checking that
    they belong to one batch (Spark hands one message per partition: the attempt whose
    output it accepted)."""
    outputs = [m for m in messages if m is not None]
    for message in outputs:
        if not isinstance(message, StagedOutput):
            raise CommitConflict(f"unexpected commit message {type(message).__name__}")
    query_ids = {m.tag.query_id for m in outputs}
    batch_ids = {m.tag.batch_id for m in outputs}
    if len(query_ids) > 1 or len(batch_ids) > 1:
        raise CommitConflict(f"commit messages of several batches in one commit: queries "
                             f"{sorted(query_ids)}, batches {sorted(batch_ids)}")
    if batch_id is not None and batch_ids and batch_ids != {batch_id}:
        raise CommitConflict(f"Spark commits batch {batch_id} with task output of batch "
                             f"{batch_ids.pop()}")
    partitions = [m.tag.partition for m in outputs]
    if len(set(partitions)) != len(partitions):
        raise CommitConflict(f"two commit messages for one partition: {sorted(partitions)}")
    outputs.sort(key=lambda m: m.tag.partition)
    return (query_ids.pop() if query_ids else None), outputs


def _stage_task(backend: SinkBackend, value_format: str, tag: TaskTag,
                batches: Iterator[pa.RecordBatch]) -> StagedOutput:
    stage_batches = getattr(backend, "stage_batches", None)
    if stage_batches is not None:       # a backend that routes rows by their columns
        return stage_batches(tag, batches)
    values = (encode_values(b, value_format) for b in batches if b.num_rows)
    return backend.stage(tag, values)


def _commit(backend: SinkBackend, messages: Sequence[WriterCommitMessage | None],
            batch_id: int) -> CommitOutcome | None:
    query_id, outputs = winning_outputs(messages, batch_id)
    if query_id is None or not any(o.refs for o in outputs):
        log.info("batch %s wrote no rows: nothing to commit", batch_id)
        return None
    outcome = backend.commit(query_id, batch_id, outputs)
    if outcome.duplicate:
        log.warning("batch %s of query %s was committed before (at %s); this re-run's "
                    "output is garbage and stays invisible", batch_id, query_id,
                    outcome.position)
    return outcome


def _abort(backend: SinkBackend, messages: Sequence[WriterCommitMessage | None],
           batch_id: int) -> None:
    query_ids = {m.tag.query_id for m in messages if isinstance(m, StagedOutput)}
    for query_id in query_ids:
        backend.abort(query_id, batch_id)


class FarmStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink of every kind; the kind's behaviour is its `backend`."""

    def __init__(self, backend: SinkBackend, value_format: str) -> None:
        self.backend = backend
        self.value_format = value_format

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedOutput:
        return _stage_task(self.backend, self.value_format, TaskTag.current(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.backend, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.backend, messages, batchId)


class FarmBatchWriter(DataSourceArrowWriter):
    """`df.write`: one job is one batch of a one-off query id, made when Spark plans the
    write (this object is pickled to the tasks and to the commit, so all share it)."""

    def __init__(self, backend: SinkBackend, value_format: str) -> None:
        self.backend = backend
        self.value_format = value_format
        self.query_id = f"batch-write-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedOutput:
        tag = TaskTag.current(self.query_id, 0)
        return _stage_task(self.backend, self.value_format, tag, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.backend, messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.backend.abort(self.query_id, 0)
