"""The raft sink's backend: staging entries and one commit entry in the same log.

A task streams its values into Arrow IPC payloads of about `stage_bytes` (before
compression: zstd by default, which shrinks typical JSON or text rows 5-10x and with them
the bytes the farm replicates and fsyncs) and stages each
one (`FarmClient.stage`, a log entry readers do not see). `in_flight` background threads
send payloads while the task builds the next one, so encoding, replication and fsync
overlap (the order of the staged indexes is the order of the payloads). The
driver's commit appends one COMMIT entry naming every staged index of the winning
attempts, in partition order, with each payload's row count in its metadata (the
source's planner reads them to cut tasks and apply row limits).
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa

from ..connection import FarmClientOptions
from ..sink import CommitOutcome, StagedOutput, TaskTag
from .rows import ARROW_CONTENT

VALUE_SCHEMA = pa.schema([("value", pa.binary())])
IN_FLIGHT = 2


COMPRESSIONS = ("zstd", "lz4", "none")


def ipc_payload(chunks: Sequence[pa.Array], compression: str = "none") -> bytes:
    """One Arrow IPC stream with a binary `value` column holding `chunks`, its buffers
    compressed with `compression` (readers decompress transparently)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with pa.ipc.new_stream(sink, VALUE_SCHEMA, options=options) as writer:
        for chunk in chunks:
            writer.write_batch(pa.RecordBatch.from_arrays([chunk], schema=VALUE_SCHEMA))
    return sink.getvalue().to_pybytes()


def payload_chunks(values: Iterator[pa.Array], stage_bytes: int
                   ) -> Iterator[tuple[list[pa.Array], int]]:
    """Groups value arrays into payloads of about `stage_bytes` (an array bigger than that
    is cut), yielding (arrays, rows)."""
    pending: list[pa.Array] = []
    size = rows = 0
    for array in values:
        offset = 0
        while offset < len(array):
            room = max(1, stage_bytes - size)
            piece = array.slice(offset)
            if piece.nbytes > room and len(piece) > 1:
                per_row = max(1, piece.nbytes // len(piece))
                piece = piece.slice(0, max(1, room // per_row))
            pending.append(piece)
            size += piece.nbytes
            rows += len(piece)
            offset += len(piece)
            if size >= stage_bytes:
                yield pending, rows
                pending, size, rows = [], 0, 0
    if pending:
        yield pending, rows


class _Stager:
    """Sends staged payloads from `threads` threads, each with its own FarmClient (a
    client serves one thread at a time), so several entries are in flight at once and the
    farm can replicate and fsync them together."""

    def __init__(self, connection: FarmClientOptions, threads: int) -> None:
        self._connection = connection
        self._local = threading.local()
        self._clients: list = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads,
                                        thread_name_prefix="garlicfarm-stage")

    def _client(self):
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._connection.client()
            with self._lock:
                self._clients.append(client)
        return client

    def _stage(self, tag: TaskTag, payload: bytes) -> int:
        return self._client().stage(tag.query_id, tag.batch_id, tag.partition, tag.attempt,
                                    payload, content_type=ARROW_CONTENT)

    def submit(self, tag: TaskTag, payload: bytes) -> Future:
        return self._pool.submit(self._stage, tag, payload)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for client in self._clients:
            client.close()


@dataclass(frozen=True)
class RaftSinkBackend:
    """`sink.SinkBackend` for the raft kind (picklable settings)."""
    connection: FarmClientOptions
    stage_bytes: int = 4 << 20
    in_flight: int = IN_FLIGHT
    compression: str = "zstd"

    def stage(self, tag: TaskTag, values: Iterator[pa.Array]) -> StagedOutput:
        stager = _Stager(self.connection, self.in_flight)
        refs: list[int] = []
        rows: list[int] = []
        nbytes = 0
        pending: deque[Future] = deque()
        try:
            for chunks, count in payload_chunks(values, self.stage_bytes):
                payload = ipc_payload(chunks, self.compression)
                nbytes += len(payload)
                rows.append(count)
                pending.append(stager.submit(tag, payload))
                while len(pending) > self.in_flight:    # backpressure: bounded memory
                    refs.append(pending.popleft().result())
            refs.extend(f.result() for f in pending)
        finally:
            stager.close()
        return StagedOutput(tag, tuple(refs), tuple(rows), nbytes)

    def commit(self, query_id: str, batch_id: int, outputs: Sequence[StagedOutput]
               ) -> CommitOutcome:
        staged = [ref for output in outputs for ref in output.refs]
        rows = [count for output in outputs for count in output.rows]
        metadata = {"rows": rows, "partitions": len(outputs), "writer": "pyspark_farm"}
        client = self.connection.client()
        try:
            result = client.commit_batch(query_id, batch_id, staged, metadata=metadata)
        finally:
            client.close()
        return CommitOutcome(result.committed, result.duplicate, result.index, sum(rows),
                             tuple(staged))

    def abort(self, query_id: str, batch_id: int) -> None:
        client = self.connection.client()
        try:
            client.abort_batch(query_id, batch_id)
        finally:
            client.close()
