"""The chp sink: a KVSET per row, idempotent under replays, and a commit marker per batch.

Each task sends its rows as KVSETs through one `CloneClient` (to every server of
`endpoint`, as Binary Star needs) and waits until the server published them
(`CloneClient.set_many`). A row's UUID is derived from (query id, batch id, partition,
row number in the partition), so a re-run of a batch sends identical KVSETs. When every
task is done, the driver sets the **commit marker** ``<markerPrefix><query id>`` to
``{"batch": N, ...}``; a task of a batch the marker already covers sends nothing (a
restart re-running a committed batch changes nothing). docs/exactly-once.md, "CHP",
says what this guarantees (idempotence, not atomicity: CHP has no transactions) and
the ordering of two rows with one key.
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa

from connectors.chp.client import CloneClient, Update
from connectors.chp.proto import MAX_TTL_SECONDS

from ..errors import GarlicFarmSparkError, SchemaError
from ..sink import (CommitOutcome, FarmBatchWriter, FarmStreamWriter, StagedOutput,
                    TaskTag)

log = logging.getLogger("pyspark_farm.chp.sink")

#: The namespace of the row UUIDs (uuid5): fixed forever, or replays would differ.
ROW_NAMESPACE = uuid.UUID("5b0f5c4e-8d1e-4c57-9a43-6a1f1b2d7c90")
MARKER_PREFIX = "garlicfarm/commits/"
WINDOW = 4096          # KVSETs sent before their confirmations are awaited
MARKER_ROW = -1        # the "partition" of the marker's own UUID

INPUT_COLUMNS = {"key": ("string", "binary"), "value": ("string", "binary"),
                 "ttl": ("byte", "short", "integer", "long", "float", "double", "decimal"),
                 "properties": ("map",)}


def row_uuid(query_id: str, batch_id: int, partition: int, row: int) -> bytes:
    """The UUID of row `row` of `partition` in batch `batch_id` of `query_id`."""
    return uuid.uuid5(ROW_NAMESPACE, f"{query_id}/{batch_id}/{partition}/{row}").bytes


def marker_key(prefix: str, query_id: str) -> bytes:
    return f"{prefix}{query_id}".encode()


def check_input(fields: Sequence[tuple[str, str]]) -> None:
    """What the sink needs of the DataFrame: `key` and `value` (string or binary), and
    optionally `ttl` (seconds) and `properties` (map<string,string>); nothing else."""
    names = [name for name, _ in fields]
    for required in ("key", "value"):
        if required not in names:
            raise SchemaError(f"the chp sink writes a column named {required!r} (string or "
                              f"binary); the DataFrame has {', '.join(names) or 'no columns'}. "
                              f"Select or alias one as {required!r}.")
    for name, type_name in fields:
        allowed = INPUT_COLUMNS.get(name)
        if allowed is None:
            raise SchemaError(f"the chp sink takes the columns key, value, ttl and properties; "
                              f"drop {name!r} (or encode it into value with to_json)")
        if type_name not in allowed:
            raise SchemaError(f"the chp sink's column {name!r} must be "
                              f"{' or '.join(allowed)}, not {type_name}: cast it")


def _as_bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def updates(batch: pa.RecordBatch, tag: TaskTag, first_row: int) -> Iterator[Update]:
    """The KVSETs of a batch of input rows (a null value deletes the key)."""
    columns = batch.to_pydict()
    ttls = columns.get("ttl")
    props = columns.get("properties")
    for offset, (key, value) in enumerate(zip(columns["key"], columns["value"])):
        row = first_row + offset
        if key is None or key == "" or key == b"":
            raise GarlicFarmSparkError(f"the chp sink got a row with an empty key (row {row} of "
                                       f"partition {tag.partition}): filter such rows out")
        ttl = float(ttls[offset]) if ttls is not None and ttls[offset] is not None else None
        if ttl is not None and ttl > MAX_TTL_SECONDS:   # inf too; NaN and <= 0: no ttl
            raise GarlicFarmSparkError(f"the chp sink got ttl {ttl!r} for key {key!r} (row "
                                       f"{row} of partition {tag.partition}): a ttl is at "
                                       f"most {MAX_TTL_SECONDS} seconds; use null for none")
        yield Update(_as_bytes(key), b"" if value is None else _as_bytes(value),
                     row_uuid(tag.query_id, tag.batch_id, tag.partition, row),
                     [(n, v) for n, v in (props[offset] or ())] if props is not None else (),
                     ttl if ttl is not None and ttl > 0 else None)


@dataclass(frozen=True)
class ChpSinkBackend:
    """`sink.SinkBackend` for the chp kind (picklable settings)."""
    servers: tuple[str, ...]
    subtree: bytes
    server_timeout: float
    confirm_timeout: float
    marker_prefix: str = MARKER_PREFIX
    markers: bool = True     # batch writes (one-off query ids) need none

    def _client(self, subtree: bytes) -> CloneClient:
        client = CloneClient(list(self.servers), subtree, server_timeout=self.server_timeout)
        try:
            client.wait_synced(max(10.0, 2 * self.server_timeout))
        except BaseException:
            client.close()
            raise
        return client

    def stage_batches(self, tag: TaskTag, batches: Iterator[pa.RecordBatch]) -> StagedOutput:
        """Send a task's rows as KVSETs and wait until they are published. Before each
        window the marker (followed live by a client of its key alone) is checked: an
        attempt of a batch that is committed already (a re-run, or a zombie attempt
        Spark gave up on while it was still sending) sends nothing more."""
        rows = 0
        sequences = [0]
        key = marker_key(self.marker_prefix, tag.query_id)
        with self._client(key) as marker, self._client(self.subtree) as chp:
            def committed() -> bool:
                done = self.markers and marker_batch(marker.get(key)) >= tag.batch_id
                if done:
                    log.warning("batch %s of query %s is committed already (its marker says "
                                "so): partition %s attempt %s sends nothing more",
                                tag.batch_id, tag.query_id, tag.partition, tag.attempt)
                return done

            for batch in batches:      # each input batch is sent and confirmed in turn
                sent = list(updates(batch, tag, rows))
                rows += len(sent)
                for start in range(0, len(sent), WINDOW):
                    if committed():
                        return StagedOutput(tag)
                    window = sent[start:start + WINDOW]
                    sequences += chp.set_many(window, timeout=self.confirm_timeout).values()
        # refs: the highest sequence the task's KVSETs got (a commit needs some ref)
        return StagedOutput(tag, (max(sequences),) if rows else (), (rows,) if rows else ())

    def commit(self, query_id: str, batch_id: int, outputs: Sequence[StagedOutput]
               ) -> CommitOutcome:
        rows = sum(o.total_rows for o in outputs)
        if not self.markers:
            return CommitOutcome(True, False, None, rows)
        key = marker_key(self.marker_prefix, query_id)
        with self._client(key) as chp:
            if marker_batch(chp.get(key)) >= batch_id:
                return CommitOutcome(False, True, None, rows)
            marker = json.dumps({"batch": batch_id, "rows": rows, "partitions": len(outputs)})
            receipt = chp.set(key, marker, uuid=row_uuid(query_id, batch_id, MARKER_ROW, 0),
                              confirm=True, timeout=self.confirm_timeout)
        return CommitOutcome(True, False, receipt.sequence, rows)

    def abort(self, query_id: str, batch_id: int) -> None:
        log.warning("batch %s of query %s failed: the KVSETs its tasks sent stay applied "
                    "(CHP has no transactions) and its marker is not set; a restart re-runs "
                    "the batch with the same UUIDs", batch_id, query_id)


def marker_batch(raw: bytes | None) -> int:
    """The batch a marker value names (-1 for none, or for a value it did not write)."""
    if not raw:
        return -1
    try:
        batch = json.loads(raw).get("batch")
    except (ValueError, AttributeError):
        return -1
    return batch if isinstance(batch, int) and not isinstance(batch, bool) else -1


class ChpStreamWriter(FarmStreamWriter):
    """The streaming sink: rows to KVSETs (commit and abort as every kind's)."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedOutput:
        return self.backend.stage_batches(TaskTag.current(), iterator)


class ChpBatchWriter(FarmBatchWriter):
    """`df.write`: one batch of a one-off query id, without a marker."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedOutput:
        return self.backend.stage_batches(TaskTag.current(self.query_id, 0), iterator)
