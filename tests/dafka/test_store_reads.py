"""Large FETCH answers: a store answers in slices and stays responsive, re-FETCHes replace
(not pile up on) the rest of an answer, and a slow reader crosses FETCH-window boundaries.

Regression: `benchmarks/spark_dafka_chp.py --dafka-rows 500000` stalled at offset
100000. A store sent a whole 100000-record answer in one loop turn (seconds of Python)
without beaconing, so the reading client forgot it and dropped what was queued; the
client's re-FETCHes (one per 0.5 s, and one after every batch its caller held that
long) each queued another whole window in the store, which fell further behind (and
kept a store busy long after its reader died).
"""
from __future__ import annotations

import time

import pytest

from connectors.dafka import Store, StoreClient, proto
from connectors.dafka.node import new_address
from connectors.dafka.partitions import PartitionStore
from connectors.dafka.store import READ_CHUNK
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)
TOPIC = "reads"


def stored_partition(data_dir, count: int) -> str:
    """A store directory holding `count` small records of one partition; its address."""
    address = new_address()
    partitions = PartitionStore(data_dir)
    for seq in range(count):
        partitions.stage((TOPIC, address), seq, b"r%d" % seq)
    partitions.commit()
    partitions.close()
    return address


def drain(client: StoreClient, until, timeout: float = 20.0) -> None:
    """Run the client until `until()`; the client keeps what arrives in its buffers."""
    assert client.run_until(until, timeout), "the store did not answer in time"


def test_a_large_fetch_is_answered_in_slices_while_other_requests_are_served(
        config, nodes, tmp_path):
    count = 20 * READ_CHUNK
    address = stored_partition(tmp_path / "db", count)
    nodes(Store(config, tmp_path / "db"))
    with StoreClient(config) as client:
        client.wait_for_stores()
        client.send(proto.Fetch(address, client.address, TOPIC, 0, count - 1))
        client.send(proto.GetHeads(TOPIC, client.address))
        drain(client, lambda: client._heads)
        before_head = len(client._records)
        drain(client, lambda: len(client._records) >= count)
    # The head was answered while the FETCH answer was still going out (before the fix
    # it came after every one of the records).
    assert before_head < count
    assert client._heads[0].sequence == count - 1
    assert [r.sequence for r in client._records] == list(range(count))


def test_a_refetch_replaces_the_rest_of_the_previous_answer(config, nodes, tmp_path):
    count, repeats = 20 * READ_CHUNK, 10
    address = stored_partition(tmp_path / "db", count)
    store = nodes(Store(config, tmp_path / "db"))
    with StoreClient(config) as client:
        client.wait_for_stores()
        for _ in range(repeats):     # a reader's retries while the store is busy
            client.send(proto.Fetch(address, client.address, TOPIC, 0, count - 1))
        drain(client, lambda: store.stats.get("store-reader.fetches") == repeats
              and not store.reader.answers)
    sent = store.stats["store-reader.direct_records"]
    assert store.stats.get("store-reader.fetches_superseded", 0) >= 1
    # One whole answer plus the slices sent before each replacement, not `repeats`.
    assert count <= sent <= count + repeats * READ_CHUNK, sent


def test_a_slow_reader_crosses_fetch_window_boundaries(config, nodes, tmp_path):
    window, count = 4 * READ_CHUNK, 12 * READ_CHUNK + 7
    address = stored_partition(tmp_path / "db", count)
    store = nodes(Store(config, tmp_path / "db"))
    got: list[int] = []
    with StoreClient(config) as client:
        for batch in client.read_range_batches(TOPIC, address, 0, count, window=window,
                                               retry=0.2, timeout=15):
            got += [r.offset for r in batch]
            assert batch[-1].value == b"r%d" % batch[-1].offset
            time.sleep(0.25)    # the behaviour under test: a caller slower than `retry`
        fetches = client.stats["fetches"]
    assert got == list(range(count))
    windows = -(-count // window)
    # The caller's time is no silence of the stores: no re-FETCH per batch held.
    assert windows <= fetches <= windows + 2, fetches
    wait_until(lambda: not store.reader.answers, message="the store finished answering")
    assert store.stats["store-reader.direct_records"] < 2 * count


def test_read_range_rejects_an_empty_window(config):
    with StoreClient(config) as client:
        with pytest.raises(ValueError, match="window 0"):
            next(client.read_range_batches(TOPIC, new_address(), 0, 1, window=0))
