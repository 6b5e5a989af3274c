"""The bulk read extension between our store and `StoreClient` (docs/protocol.md):
BULK-FETCH to one chosen store reader, BULK-RECORDS slices as Arrow arrays, the
replacement rule, byte budgets, stores that lack a range, and the fallback to plain
FETCH when a store does not speak the extension (a C store; here `Store(bulk=False)`).

Real stores, clients and a tower on 127.0.0.1 in this process; waits have deadlines.
"""
from __future__ import annotations

import zlib

import pyarrow as pa
import pytest

from connectors.dafka import Store, StoreClient, proto
from connectors.dafka.node import new_address
from connectors.dafka.partitions import PartitionStore
from tests.spark.helpers import dafka_source_schema
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)
TOPIC = "bulk"


def stored_partition(data_dir, count: int, address: str | None = None) -> str:
    """A store directory holding records b"r<seq>" 0..count-1 of one partition."""
    address = address or new_address()
    partitions = PartitionStore(data_dir)
    for seq in range(count):
        partitions.stage((TOPIC, address), seq, b"r%d" % seq)
    partitions.commit()
    partitions.close()
    return address


def read_all(client: StoreClient, address: str, start: int, end: int, **kwargs
             ) -> list[tuple[int, pa.BinaryArray]]:
    return list(client.read_range_arrays(TOPIC, address, start, end, **kwargs))


def assert_contiguous(pieces: list[tuple[int, pa.BinaryArray]], start: int, end: int
                      ) -> None:
    """Offsets start..end-1 in order, no gap, no overlap, the stored values, and the
    Arrow type Spark's schema declares (binary, not large_binary)."""
    expect = start
    for first, values in pieces:
        assert first == expect
        assert values.type == pa.binary()
        expect += len(values)
    assert expect == end
    values = pa.concat_arrays([v for _, v in pieces]) if pieces else pa.array([], pa.binary())
    assert values.to_pylist() == [b"r%d" % seq for seq in range(start, end)]


def test_a_range_arrives_as_arrow_arrays_from_one_store(config, nodes, tmp_path):
    count = 5000
    address = stored_partition(tmp_path / "a", count)
    stored_partition(tmp_path / "b", count, address)
    stores = [nodes(Store(config, tmp_path / "a", bulk_slice_records=700)),
              nodes(Store(config, tmp_path / "b", bulk_slice_records=700))]
    with StoreClient(config) as client:
        client.wait_for_stores(2)
        pieces = read_all(client, address, 3, count)
        assert_contiguous(pieces, 3, count)
        assert client.stats["bulk_fetches"] == 1 and not client.stats["fetches"]
    # Only the chosen store did the work: the other never heard of the request.
    # (A store counts a slice just after sending it: wait for its last count.)
    served = wait_until(lambda: (lambda got: sorted(got) == [0, count - 3] and got)(
        [s.stats.get("store-reader.bulk_records", 0) for s in stores]),
        message="the chosen store's count of records sent")
    assert all(not s.stats.get("store-reader.fetches") for s in stores)
    # In slices of at most 700 records, each one message.
    busy = stores[served.index(count - 3)]
    assert busy.stats["store-reader.bulk_messages"] == -(-(count - 3) // 700)


def test_tasks_of_different_partitions_spread_over_the_stores(config, nodes, tmp_path):
    addresses = [new_address() for _ in range(16)]
    for directory in ("a", "b"):
        for address in addresses:
            stored_partition(tmp_path / directory, 10, address)
    stores = [nodes(Store(config, tmp_path / d)) for d in ("a", "b")]
    with StoreClient(config) as client:
        client.wait_for_stores(2)
        for address in addresses:
            assert_contiguous(read_all(client, address, 0, 10), 0, 10)
    # 16 partitions hashed over 2 stores: both get some (crc32 of these addresses).
    picks = {zlib.crc32(a.encode()) % 2 for a in addresses}
    assert picks == {0, 1}
    assert all(s.stats.get("store-reader.bulk_fetches", 0) > 0 for s in stores)


def test_a_small_byte_budget_is_followed_by_further_requests(config, nodes, tmp_path):
    count = 3000
    address = stored_partition(tmp_path / "db", count)
    store = nodes(Store(config, tmp_path / "db", bulk_slice_records=128))
    with StoreClient(config) as client:
        pieces = read_all(client, address, 0, count, max_bytes=2000)
        assert_contiguous(pieces, 0, count)
        # ~5 bytes a record: an answer of 2000 bytes holds ~400 records.
        assert client.stats["bulk_fetches"] >= count * 4 // 2000
    wait_until(lambda: store.stats["store-reader.bulk_records"] == count,
               message="the store's count of records sent")


def test_a_store_that_lacks_the_rest_hands_over_to_one_that_has_it(config, nodes, tmp_path):
    short, full = 400, 1000
    short_reader, full_reader = new_address(), new_address()
    ordered = sorted([short_reader, full_reader])
    # A partition the client asks of the short store first (the pick is by hash).
    address = next(a for a in iter(new_address, None)
                   if ordered[zlib.crc32(a.encode()) % 2] == short_reader)
    stored_partition(tmp_path / "short", short, address)
    stored_partition(tmp_path / "full", full, address)
    short_store = nodes(Store(config, tmp_path / "short", reader_address=short_reader))
    nodes(Store(config, tmp_path / "full", reader_address=full_reader))
    with StoreClient(config) as client:
        client.wait_for_stores(2)
        assert client._bulk_store(address, set()) == short_reader
        assert_contiguous(read_all(client, address, 0, full), 0, full)
        assert not client.stats["fetches"]      # no fallback: both speak the extension
    wait_until(lambda: short_store.stats["store-reader.bulk_records"] == short,
               message="the short store's count of records sent")


def test_an_unknown_partition_is_answered_at_once_with_an_empty_last_slice(
        config, nodes, tmp_path):
    store = nodes(Store(config, tmp_path / "db"))
    with StoreClient(config) as client:
        reader = next(iter(client.wait_for_stores()))
        partition = new_address()
        client.send(proto.BulkFetch(reader, client.address, partition, TOPIC, 5, 10, 1000))
        assert client.run_until(lambda: client._bulk, 10)
        answer = client._bulk[0]
    assert (answer.address, answer.partition, answer.sequence, answer.count, answer.last) \
        == (store.reader.address, partition, 5, 0, True)


def test_a_store_without_the_extension_is_read_by_plain_fetch(config, nodes, tmp_path):
    count = 2500
    address = stored_partition(tmp_path / "db", count)
    store = nodes(Store(config, tmp_path / "db", bulk=False))
    with StoreClient(config) as client:
        pieces = read_all(client, address, 0, count, retry=0.3)
        assert_contiguous(pieces, 0, count)
        assert client.plain_readers == {store.reader.address}
        assert client.stats["bulk_fallbacks"] == 1 and client.stats["fetches"] >= 1
        # Known now: the next read goes straight to plain FETCH, no bulk request.
        asked = client.stats["bulk_fetches"]
        assert_contiguous(read_all(client, address, 10, 20), 10, 20)
        assert client.stats["bulk_fetches"] == asked
    # Like a C store, it never even received the request (not subscribed to it).
    assert not store.stats.get("store-reader.bulk_fetches")
    assert not store.stats.get("store-reader.dropped_unexpected")
    assert not store.stats.get("store-reader.dropped_unknown")


def test_a_bulk_request_replaces_the_rest_of_the_previous_one(config, nodes, tmp_path):
    count, repeats, slice_records = 20_000, 10, 500
    address = stored_partition(tmp_path / "db", count)
    store = nodes(Store(config, tmp_path / "db", bulk_slice_records=slice_records))
    with StoreClient(config) as client:
        reader = next(iter(client.wait_for_stores()))
        for _ in range(repeats):     # a reader's retries while the store is busy
            client.send(proto.BulkFetch(reader, client.address, address, TOPIC, 0, count,
                                        1 << 30))
        assert client.run_until(
            lambda: store.stats.get("store-reader.bulk_fetches") == repeats
            and not store.reader.answers, 30)
    sent = wait_until(lambda: (lambda n: n >= count and n)(
        store.stats["store-reader.bulk_records"]), message="the last slice counted")
    assert store.stats.get("store-reader.fetches_superseded", 0) >= 1
    # One whole answer plus the slices sent before each replacement (the store sends a
    # slice per loop turn while the requests arrive), far from `repeats` whole answers.
    assert count <= sent < 3 * count, sent


def test_a_range_crossing_many_slices_and_windows_has_no_gap(config, nodes, tmp_path):
    count = 30_000
    address = stored_partition(tmp_path / "db", count)
    store = nodes(Store(config, tmp_path / "db", bulk_slice_records=1000))
    with StoreClient(config) as client:
        pieces = read_all(client, address, 0, count, window=7000)
        assert_contiguous(pieces, 0, count)
        assert client.stats["bulk_fetches"] == -(-count // 7000)
    wait_until(lambda: store.stats["store-reader.bulk_records"] == count,
               message="the store's count of records sent")


def test_read_range_arrays_checks_its_arguments(config):
    with StoreClient(config) as client:
        with pytest.raises(ValueError, match="partition"):
            next(client.read_range_arrays(TOPIC, "nope", 0, 1))
        with pytest.raises(ValueError, match="window 0"):
            next(client.read_range_arrays(TOPIC, new_address(), 0, 1, window=0))
        assert read_all(client, new_address(), 5, 5) == []


# ----------------------------------------------------------------- the Spark source's reads
@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "fallback-plain"])
def test_the_dafka_source_reads_arrow_batches_of_its_exact_schema(tmp_path, bulk):
    """`read_task` (what a Spark executor runs) against real stores, no Spark session:
    batches carry Spark's schema exactly (value `binary`), offsets and values in order,
    with stores that speak the extension and with stores that do not."""
    from connectors.dafka import DafkaConfig
    from pyspark_farm.dafka import kind
    from pyspark_farm.dafka.local import _tower_on_free_ports

    count = 3000
    address = stored_partition(tmp_path / "db", count)
    schema = dafka_source_schema()
    tower = _tower_on_free_ports()
    try:
        config = DafkaConfig(beacon_interval=0.05, beacon_timeout=0.6,
                             bind="tcp://127.0.0.1:*").with_towers([tower.sub_endpoint])
        store = Store(config, tmp_path / "db", bulk=bulk, bulk_slice_records=500).start()
        try:
            reader = kind.batch_reader({
                "kind": "dafka", "tower": tower.sub_endpoint, "subscribe": TOPIC,
                "dafka.beacon/interval": "50", "dafka.beacon/timeout": "600",
                "fetchTimeout": "20", "readCommitted": "false"}, schema)
            batches = [batch for task in reader.partitions() for batch in reader.read(task)]
            bulk_records = store.stats.get("store-reader.bulk_records", 0)
        finally:
            store.stop()
    finally:
        tower.stop()
    assert batches and all(b.schema == reader.settings.schema for b in batches)
    assert reader.settings.schema.field("value").type == pa.binary()
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(count))
    assert table.column("value").to_pylist() == [b"r%d" % s for s in range(count)]
    assert set(table.column("partition").to_pylist()) == {address}
    assert (bulk_records > 0) == bulk



def test_a_store_dying_mid_read_hands_the_rest_to_another(config, nodes, tmp_path):
    """The chosen store stops after the first piece: silence, a re-request, silence
    again, then the other store is asked from the first missing offset; no gap."""
    count = 20_000
    address = stored_partition(tmp_path / "a", count)
    stored_partition(tmp_path / "b", count, address)
    stores = [nodes(Store(config, tmp_path / d, bulk_slice_records=100)) for d in "ab"]
    expect = 0
    with StoreClient(config) as client:
        client.wait_for_stores(2)
        chosen = next(s for s in stores
                      if s.reader.address == client._bulk_store(address, set()))
        for first, values in client.read_range_arrays(TOPIC, address, 0, count, retry=0.2,
                                                      timeout=20):
            assert first == expect
            assert values.to_pylist() == [b"r%d" % s for s in range(first, first + len(values))]
            expect += len(values)
            if chosen.reader.running:
                chosen.stop()                 # dies after its first piece was read
        assert expect == count
        assert not client.stats["fetches"]    # the other store spoke the extension too
    other = stores[1 - stores.index(chosen)]
    assert other.stats.get("store-reader.bulk_records", 0) > 0
