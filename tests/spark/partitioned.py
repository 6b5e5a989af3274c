"""Journal entries written to a farm of several partitions, for the raft kind's readers
(tests/spark/test_raft_partitions.py, test_columnar_partitions.py)."""
from __future__ import annotations


def append_entries(farm, partition: int, entries: int, tag: str,
                   records: int = 2) -> list[tuple[int, bytes]]:
    """(partition, record) of each record appended to `partition`, `records` per journal
    entry, in write order."""
    written = []
    with farm.client(partition=partition) as client:
        for e in range(entries):
            batch = [f"{tag}-p{partition}-{e}-{r}".encode() for r in range(records)]
            client.append(batch)
            written += [(partition, value) for value in batch]
    return written
