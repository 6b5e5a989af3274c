"""The heads extension and store discovery (docs/protocol.md, "Heads extension"):
BULK-GET-HEADS to each store reader, complete answers with no settle wait, the
GET-HEADS fallback for stores without it, and a store client that finds every live
store (not just the first) before it answers heads: a partial answer would understate
the latest offsets (the bug of c65d4d7).

Real stores, clients and a tower on 127.0.0.1 in this process; waits have deadlines.
"""
from __future__ import annotations

import pytest

from connectors.dafka import Store, StoreClient, proto
from connectors.dafka.node import Node, new_address
from connectors.dafka.partitions import PartitionStore
from connectors.dafka.store import StoreReader
from tests.spark.helpers import dafka_source_schema
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)
TOPIC = "heads"


def stored(data_dir, heads: dict[tuple[str, str], int]) -> None:
    """A store directory holding records 0..head of each (subject, partition)."""
    partitions = PartitionStore(data_dir)
    for key, head in heads.items():
        for seq in range(head + 1):
            partitions.stage(key, seq, b"r%d" % seq)
    partitions.commit()
    partitions.close()


def highest(*stores: dict) -> dict:
    merged: dict = {}
    for heads in stores:
        for key, head in heads.items():
            merged[key] = max(merged.get(key, -1), head)
    return merged


def test_a_fresh_client_answers_the_highest_head_over_every_store(config, nodes, tmp_path):
    """Each store is behind on some partition: any store left out of the answer would
    show (the c65d4d7 guarantee: heads never understate). Fresh clients, as a batch
    read's planning opens, each find all three stores and ask each once, no settle."""
    p, q, r = new_address(), new_address(), new_address()
    contents = [{(TOPIC, p): 40, (TOPIC, q): 3},
                {(TOPIC, p): 12, (TOPIC, q): 30, (TOPIC, r): 5},
                {(TOPIC, p): 7, ("other", r): 9}]
    stores = []
    for number, heads in enumerate(contents):
        stored(tmp_path / str(number), heads)
        stores.append(nodes(Store(config, tmp_path / str(number))))
    expect = {k: v for k, v in highest(*contents).items() if k[0] == TOPIC}
    for attempt in range(5):
        with StoreClient(config) as client:
            assert client.heads(TOPIC) == expect, attempt
            assert len(client.ready_stores) == 3
            assert client.stats["bulk_get_heads"] == 3
            assert not client.stats["heads_fallbacks"]
            assert client.bulk_heads_readers == {s.reader.address for s in stores}
            assert client.heads("", exact=False) == highest(*contents)
    # Each reader answered only the requests addressed to it: 2 per client. (A store
    # counts a message just after sending it: wait for its last count.)
    wait_until(lambda: [s.stats.get("store-reader.bulk_heads_messages") for s in stores]
               == [10] * 3, message="each store's count of answers")
    assert all(not s.stats.get("store-reader.direct_heads") for s in stores)


def test_prefixes_and_answers_in_many_slices(config, nodes, tmp_path):
    heads = {(f"{TOPIC}-{n % 3}", new_address()): n for n in range(50)}
    stored(tmp_path / "db", heads)
    store = nodes(Store(config, tmp_path / "db", heads_slice=7))
    with StoreClient(config) as client:
        assert client.heads(TOPIC, exact=False) == heads
        assert client.heads(f"{TOPIC}-1") == {k: v for k, v in heads.items()
                                               if k[0] == f"{TOPIC}-1"}
        assert client.heads("nothing") == {}           # an empty answer: total 0
        assert not client.stats["heads_fallbacks"]
    wait_until(lambda: store.stats.get("store-reader.bulk_heads_messages")
               == -(-50 // 7) + -(-17 // 7) + 1, message="the store's count of answers")


def test_a_store_without_the_extension_is_asked_by_get_heads(config, nodes, tmp_path):
    """A C store (here `bulk=False`: no ``Q`` subscription) is known for one from its
    subscriptions, so it is asked by GET-HEADS at once; its higher heads count."""
    p = new_address()
    stored(tmp_path / "ours", {(TOPIC, p): 10})
    stored(tmp_path / "c", {(TOPIC, p): 20})
    ours = nodes(Store(config, tmp_path / "ours"))
    c_like = nodes(Store(config, tmp_path / "c", bulk=False))
    with StoreClient(config) as client:
        assert client.heads(TOPIC) == {(TOPIC, p): 20}
        assert client.stats["bulk_get_heads"] == 1     # only ours: the other lacks it
        assert client.stats["heads_fallbacks"] == 1
        assert client.bulk_heads_readers == {ours.reader.address}
        assert proto.Command.BULK_GET_HEADS not in \
            client.peer_subscriptions[c_like.reader.address]
    assert not c_like.stats.get("store-reader.dropped_unexpected")
    wait_until(lambda: c_like.stats.get("store-reader.direct_heads"),
               message="the plain store's DIRECT-HEADs counted")


class SilentHeadsReader(StoreReader):
    """A store reader that subscribes to the heads extension but never answers it (a
    broken or overloaded peer): the client must fall back, not hang or understate."""

    def _send_bulk_heads(self, request: proto.BulkGetHeads) -> None:
        self.stats["ignored_bulk_get_heads"] += 1


def test_a_store_silent_to_the_extension_falls_back_and_is_remembered(config, nodes,
                                                                       tmp_path):
    p = new_address()
    stored(tmp_path / "db", {(TOPIC, p): 33})
    store = Store(config, tmp_path / "db")
    store.reader = SilentHeadsReader(config, store.partitions, store.writer.address)
    nodes(store)
    with StoreClient(config) as client:
        assert client.heads(TOPIC, fallback=0.3) == {(TOPIC, p): 33}
        assert client.plain_heads_readers == {store.reader.address}
        assert client.stats["heads_fallbacks"] == 1
        asked = client.stats["bulk_get_heads"]
        assert client.heads(TOPIC) == {(TOPIC, p): 33}      # straight to GET-HEADS
        assert client.stats["bulk_get_heads"] == asked == 1
    assert store.reader.stats["ignored_bulk_get_heads"] == 1


def test_discovery_waits_for_every_store_and_leaves_a_silent_peer_out(config, nodes,
                                                                      tmp_path):
    """`wait_for_stores(every=True)` returns with every store ready, not the first;
    a peer that beacons but never identifies itself (a bare node: no SUB, so it never
    subscribes on our XPUB) is waited for a bounded time, then left out."""
    stores = [nodes(Store(config, tmp_path / str(n))) for n in range(3)]
    mute = nodes(Node(config))
    readers = {s.reader.address for s in stores}
    for _ in range(3):
        with StoreClient(config) as client:
            assert client.wait_for_stores(1, 20, every=True) == readers
            assert mute.address not in client.peer_subscriptions
            assert mute.address in client.beacon.table.senders.values()


def test_the_source_plans_min_partitions_tasks_that_read_the_whole_range(tmp_path):
    """The dafka source's planning (heads through the extension, then `minPartitions`)
    and its tasks' reads, against a real store, no Spark session: 5 tasks of about the
    same size, together every offset once, in order."""
    import pyarrow as pa
    from connectors.dafka import DafkaConfig
    from pyspark_farm.dafka import kind
    from pyspark_farm.dafka.local import _tower_on_free_ports

    count, address = 1003, new_address()
    stored(tmp_path / "db", {(TOPIC, address): count - 1})
    schema = dafka_source_schema()
    tower = _tower_on_free_ports()
    try:
        config = DafkaConfig(beacon_interval=0.05, beacon_timeout=0.6,
                             bind="tcp://127.0.0.1:*").with_towers([tower.sub_endpoint])
        with Store(config, tmp_path / "db"):
            reader = kind.batch_reader({
                "kind": "dafka", "tower": tower.sub_endpoint, "subscribe": TOPIC,
                "dafka.beacon/interval": "50", "dafka.beacon/timeout": "600",
                "fetchTimeout": "20", "readCommitted": "false", "minPartitions": "5"},
                schema)
            tasks = reader.partitions()
            batches = [b for task in tasks for b in reader.read(task)]
    finally:
        tower.stop()
    assert [t.task.offsets for t in tasks] == [201, 201, 201, 200, 200]
    offsets = pa.Table.from_batches(batches).column("offset").to_pylist()
    assert offsets == list(range(count))
