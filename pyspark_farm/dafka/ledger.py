"""The farm side of the Dafka kind: partition indexes in the farm's key-value map, read
and changed by compare-and-set, and decided from the sink ledger's batch commits.

Why not `FarmClient.allocate_sequences`: it hands out a start per (key, query, batch)
but keeps neither the count nor the content it was for, and nobody can ask it later
which ranges exist. Readers need exactly that, and an allocation must be recorded with
the range it made in one atomic step, so the index *is* the allocator: one
compare-and-set of the partition's index value allocates and records a range.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeVar

from ..errors import GarlicFarmSparkError
from .index import PartitionIndex, Range, commit_ranges, index_key

if TYPE_CHECKING:
    from consensus.client import FarmClient

T = TypeVar("T")
CAS_ATTEMPTS = 100


def load_index(client: "FarmClient", topic: str, partition: str) -> PartitionIndex | None:
    """The partition's index, None when no garlicfarm sink wrote the partition."""
    key = index_key(topic, partition)
    raw = client.kv_get(key)
    return None if raw is None else PartitionIndex.from_json(raw, key)


def change_index(client: "FarmClient", topic: str, partition: str,
                 change: Callable[[PartitionIndex | None], tuple[PartitionIndex, T]]) -> T:
    """Apply `change` (current index -> new index, result) by compare-and-set, again on
    the newer value when another writer got there first; returns the result."""
    key = index_key(topic, partition)
    for _ in range(CAS_ATTEMPTS):
        raw = client.kv_get(key)
        current = None if raw is None else PartitionIndex.from_json(raw, key)
        updated, result = change(current)
        if updated == current or client.kv_cas(key, raw, updated.to_json()):
            return result
    raise GarlicFarmSparkError(
        f"the Dafka partition index {key!r} changed {CAS_ATTEMPTS} times while this task "
        "tried to update it: is another query writing with the same query id?")


def decided(client: "FarmClient", index: PartitionIndex, partition: str) -> PartitionIndex:
    """`index` with every pending range the ledger has decided moved out."""
    if not index.pending:
        return index
    last = client.last_committed_batch(index.query)
    if last is None:
        return index
    winners: dict[int, Range | None] = {}
    for batch in index.undecided_batches:
        if batch > last:
            continue
        status = client.batch_status(index.query, batch)
        if status is not None:
            ranges = commit_ranges(status.metadata, index.topic) or {}
            winners[batch] = ranges.get(partition)
    return index.decide(last, winners)
