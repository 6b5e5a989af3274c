"""The dafka sink's backend: one Dafka partition per (query, task partition), sequences
from the partition's index in the farm, one ledger commit per batch.

A task spools its values to a local Arrow file (bounded memory) while counting them and
hashing them, then allocates its range by (batch, digest) in the partition index
(`index.py`): a replay with the same output gets the same range and republishes the same
records at the same offsets (stores keep the first copy of a sequence, so a third-party
consumer sees them once). If an earlier attempt left a hole below the range (it died
mid-publish), the task fills it with empty records, because a store never skips a
sequence. It publishes with a producer whose address is the partition, waits until a
store acknowledged everything, and returns the range. The driver's commit appends one
ledger commit naming each partition's range; readers with readCommitted see exactly the
committed ranges.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from connectors.dafka import DafkaConfig, NoStoreError, Producer, deterministic_address

from ..connection import FarmClientOptions
from ..errors import GarlicFarmSparkError
from ..sink import CommitOutcome, StagedOutput, TaskTag
from ..value_formats import contiguous_data
from .deployment import open_store_client
from .index import GapNotFillable, PartitionIndex
from .ledger import change_index, decided, load_index

log = logging.getLogger("pyspark_farm.dafka")
VALUE_SCHEMA = pa.schema([("value", pa.binary())])
FILLER = b""


SPECULATION = "spark.speculation"


def refuse_speculation() -> None:
    """Fail the running task when the query runs with speculative execution: a second
    live attempt of a task could fill with empty records the range the first one is
    publishing (docs/exactly-once.md, "Limits"). Spark hands the Python worker that
    makes the writer only the options; a task of a SQL query carries the session's
    spark.* settings as local properties. Called before a task publishes anything."""
    from pyspark import TaskContext
    context = TaskContext.get()
    value = context.getLocalProperty(SPECULATION) if context is not None else None
    if value is not None and value.strip().lower() == "true":
        raise GarlicFarmSparkError(
            f"the dafka sink does not write with {SPECULATION}=true: a speculative copy of "
            "a task could fill with empty records the sequences the first attempt is "
            f"publishing. Start the Spark session with {SPECULATION}=false (the default; "
            "it cannot be changed while the session runs) to write to Dafka. Nothing of "
            "this batch was published.")


def sink_partition(query_id: str, topic: str, task_partition: int) -> str:
    """The Dafka partition (producer address) of one task partition of a query: the same
    after a restart from the checkpoint, so replays land in the same partition."""
    return deterministic_address("garlicfarm-sink", query_id, topic, str(task_partition))


@dataclass
class DafkaStagedOutput(StagedOutput):
    """A task's commit message: `refs` = (start, stop) of its range in `address`."""
    topic: str = ""
    address: str = ""
    digest: str = ""


class Spool:
    """A task's values in a temporary Arrow file, counted and hashed on the way in. The
    digest does not depend on how the values were cut into arrays."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="garlicfarm-dafka-")
        self._writer = pa.ipc.new_stream(self._file, VALUE_SCHEMA)
        self._lengths = hashlib.blake2b(digest_size=16)
        self._data = hashlib.blake2b(digest_size=16)
        self.rows = 0
        self.nbytes = 0

    def add(self, values: pa.Array) -> None:
        if not len(values):
            return
        lengths = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False)
        self._lengths.update(lengths.astype("<i8").tobytes())
        data = contiguous_data(values)
        self._data.update(memoryview(data))
        self._writer.write_batch(pa.RecordBatch.from_arrays([values], schema=VALUE_SCHEMA))
        self.rows += len(values)
        self.nbytes += data.size

    @property
    def digest(self) -> str:
        return f"{self._lengths.hexdigest()}{self._data.hexdigest()}"

    def records(self) -> Iterator[bytes]:
        """The values in order (nulls as empty records)."""
        self._writer.close()
        self._file.seek(0)
        for batch in pa.ipc.open_stream(self._file):
            for value in batch.column(0).to_pylist():
                yield value or FILLER

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class DafkaSinkBackend:
    """`sink.SinkBackend` for the dafka kind (picklable settings)."""
    connection: FarmClientOptions
    config: DafkaConfig
    topic: str
    ack_timeout: float = 60.0

    def stage(self, tag: TaskTag, values: Iterator[pa.Array]) -> StagedOutput:
        refuse_speculation()
        address = sink_partition(tag.query_id, self.topic, tag.partition)
        spool = Spool()
        try:
            for array in values:
                spool.add(array)
            empty = DafkaStagedOutput(tag, topic=self.topic, address=address)
            if not spool.rows:
                return empty
            start, fill_from = self._allocate(tag, address, spool)
            self._publish(address, fill_from, start, spool)
            return DafkaStagedOutput(tag, (start, start + spool.rows), (spool.rows,),
                                     spool.nbytes, self.topic, address, spool.digest)
        finally:
            spool.close()

    def _allocate(self, tag: TaskTag, address: str, spool: Spool) -> tuple[int, int]:
        """(start of the task's range, first sequence to publish)."""
        def allocate(current: PartitionIndex | None) -> tuple[PartitionIndex, int]:
            index = current or PartitionIndex(tag.query_id, self.topic)
            if index.query != tag.query_id:
                raise GarlicFarmSparkError(
                    f"Dafka partition {address} of topic {self.topic!r} belongs to query "
                    f"{index.query}, not {tag.query_id}")
            return decided(client, index, address).allocate(tag.batch_id, spool.digest,
                                                             spool.rows)

        with self.connection.client() as client:
            start = change_index(client, self.topic, address, allocate)
            if load_index(client, self.topic, address).covered_below(start):
                return start, start
            return start, self._fill(client, address, start)

    def _fill(self, client, address: str, start: int) -> int:
        """Mark the hole below `start` filled in the index and return where it begins;
        waits (up to ack_timeout) for stores holding committed data in the hole."""
        deadline = time.monotonic() + self.ack_timeout
        while True:
            head = self._stored_head(address)
            try:
                return change_index(client, self.topic, address,
                                    lambda c: decided(client, c, address).fill(start, head))
            except GapNotFillable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(self.config.beacon_interval)   # a store coming back: rediscovery

    def _stored_head(self, address: str) -> int:
        try:
            stores = open_store_client(self.config, self.ack_timeout)
        except NoStoreError as exc:
            raise GarlicFarmSparkError(
                f"Dafka partition {self.topic}/{address}: a failed attempt left sequences "
                f"to fill, which needs every store's head first: {exc}. Check that the "
                "stores run and that the option tower names the deployment's towers; "
                f"ackTimeout ({self.ack_timeout:g} s) bounds the wait.") from None
        try:
            heads = stores.heads(self.topic, timeout=self.ack_timeout)
        finally:
            stores.stop()
        return heads.get((self.topic, address), -1)

    def _publish(self, address: str, fill_from: int, start: int, spool: Spool) -> None:
        if fill_from < start:
            log.warning("Dafka partition %s/%s: filling sequences [%d, %d) left by a failed "
                        "attempt with empty records", self.topic, address, fill_from, start)
        producer = Producer(self.config, self.topic, address=address,
                            start_sequence=fill_from)
        producer.start()
        try:
            fillers = itertools.repeat(FILLER, start - fill_from)
            producer.publish_many(itertools.chain(fillers, spool.records()),
                                  timeout=self.ack_timeout)
            if not producer.flush(self.ack_timeout):
                raise GarlicFarmSparkError(
                    f"Dafka partition {self.topic}/{address}: {len(producer.unacked)} records "
                    f"not acknowledged by any store within {self.ack_timeout:g} s (option "
                    "ackTimeout); is a store running and reachable through the towers?")
        finally:
            producer.stop()

    def commit(self, query_id: str, batch_id: int, outputs: Sequence[StagedOutput]
               ) -> CommitOutcome:
        ranges = {o.address: [o.refs[0], o.refs[1], o.digest]
                  for o in outputs if isinstance(o, DafkaStagedOutput) and o.refs}
        rows = [o.total_rows for o in outputs]
        metadata = {"dafka": {"topic": self.topic, "partitions": ranges}, "rows": rows,
                    "partitions": len(outputs), "writer": "pyspark_farm"}
        with self.connection.client() as client:
            result = client.commit_batch(query_id, batch_id, [], metadata=metadata)
            # Decide the batch's ranges in every partition now, so readers need not.
            for output in outputs:
                address = sink_partition(query_id, self.topic, output.tag.partition)
                change_index(client, self.topic, address,
                             lambda c, a=address: (c and decided(client, c, a), None))
        return CommitOutcome(result.committed, result.duplicate, result.index, sum(rows),
                             tuple(s for r in ranges.values() for s in r[:2]))

    def abort(self, query_id: str, batch_id: int) -> None:
        """Nothing to undo: the batch's ranges stay pending until the query commits the
        batch again (the same output reuses them) or a later batch (they become garbage)."""
