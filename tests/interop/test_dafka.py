"""Our Dafka nodes with zeromq/dafka's C tower, store, producer and consumer.

The C nodes get their config from the peer's mkcfg.sh (beacon/address 127.0.0.1: the C
tower's quirk) with 200 ms beacons and heads; ours the same timers and
`beacon_host="127.0.0.1"`. The C producer answers a FETCH beyond its first 256 unacked
records with first-chunk contents (README quirk), so a store must have it live before
it publishes: its first record is held back until a store has it, and where no store
of ours can tell, fewer than 256 records are published.
"""
from __future__ import annotations

import pytest

from connectors.dafka import Consumer, Producer, Store, StoreClient, Tower
from tests.interop.support import our_dafka_config
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)


def collect(consumer: Consumer, count: int, timeout: float = 30.0) -> list:
    """Exactly the next `count` records (fails at the deadline with what came)."""
    got: list = []

    def enough() -> bool:
        got.extend(consumer.poll(timeout=0.1))
        return len(got) >= count

    wait_until(enough, timeout, message=f"{count} records (got {len(got)})")
    got.extend(consumer.poll(timeout=0.3))          # nothing more may come
    return got


def c_records(lines, count: int, timeout: float = 30.0) -> list[tuple[str, str, str]]:
    wait_until(lambda: len(lines.records()) >= count, timeout,
               message=f"the C consumer to print {count} records "
                       f"(printed {len(lines.records())}):\n{lines.proc.log()[-500:]}")
    return lines.records()


def store_heads(config, topic: str) -> dict:
    with StoreClient(config) as client:
        return client.heads(topic, timeout=5)


def test_our_producer_c_store_consumers_and_late_stores_both_ways(cdafka, dafka_nodes,
                                                                   tmp_path):
    """Our producer publishes with no store yet; a late C store catches up from it (the
    producer's ACK count says so); the C consumer and ours read it back from the C
    store; then a late store of ours catches up from the C store, which is stopped,
    and the C consumer reads everything from our store."""
    towers = cdafka.tower()
    config = our_dafka_config(towers)
    records = [f"ours-{i:04d}".encode() for i in range(600)]
    producer = dafka_nodes(Producer(config, "orders", settle=0))
    assert producer.publish_many(records) == len(records) - 1
    assert producer.acked == -1                     # no store heard it yet

    c_store = cdafka.store(towers, tmp_path / "c-store.db")
    wait_until(lambda: producer.acked == len(records) - 1, 30,
               message=f"the C store to ACK every record (acked {producer.acked})")
    assert store_heads(config, "orders") == {("orders", producer.address): len(records) - 1}

    # Our producer dropped what was ACKed: only the C store can serve these readers.
    lines = cdafka.consumer(towers, "orders")
    ours = dafka_nodes(Consumer(config, ["orders"]))
    got = collect(ours, len(records))
    assert [(r.partition, r.offset, r.value) for r in got] == \
        [(producer.address, i, v) for i, v in enumerate(records)]
    assert c_records(lines, len(records)) == \
        [("orders", producer.address, v.decode()) for v in records]

    # A late store of ours: the producer's HEADs tell it what exists, the C store
    # answers its FETCHes.
    store = dafka_nodes(Store(config, tmp_path / "our-store"))
    key = ("orders", producer.address)
    wait_until(lambda: store.partitions.heads("orders") == [(*key, len(records) - 1)], 30,
               message=f"our late store to catch up ({store.partitions.heads('orders')})")
    assert store.partitions.read(key, 0, len(records)) == records
    c_store.stop()
    dafka_nodes.stop(producer)
    again = cdafka.consumer(towers, "orders")
    assert c_records(again, len(records)) == \
        [("orders", producer.address, v.decode()) for v in records]


def test_c_producer_to_our_store_read_by_both_consumers(cdafka, dafka_nodes, tmp_path):
    """The C console producer publishes into our store (its first record held back until
    the store has it, then 599 more: past its 256-record chunk); the C consumer and ours
    read all 600 back, in order."""
    towers = cdafka.tower()
    config = our_dafka_config(towers)
    store = dafka_nodes(Store(config, tmp_path / "our-store"))
    producer = cdafka.producer(towers, "events")
    lines = [f"c-{i:04d}" for i in range(600)]
    producer.popen.stdin.write(f"{lines[0]}\n".encode())
    producer.popen.stdin.flush()
    heads = wait_until(lambda: store.partitions.heads("events"), 30,
                       message=f"our store to get the first record\n{producer.log()}")
    (_, address, head), = heads
    assert head == 0
    producer.popen.stdin.write("".join(f"{line}\n" for line in lines[1:]).encode())
    producer.popen.stdin.flush()
    wait_until(lambda: store.partitions.heads("events") == [("events", address, 599)], 30,
               message=f"our store to get 600 records ({store.partitions.heads('events')})")
    assert store.partitions.read(("events", address), 0, 600) == [x.encode() for x in lines]

    c_lines = cdafka.consumer(towers, "events")
    ours = dafka_nodes(Consumer(config, ["events"]))
    got = collect(ours, len(lines))
    assert [(r.partition, r.offset, r.value.decode()) for r in got] == \
        [(address, i, v) for i, v in enumerate(lines)]
    assert c_records(c_lines, len(lines)) == [("events", address, v) for v in lines]


def test_our_tower_with_c_nodes(cdafka, dafka_nodes, tmp_path):
    """Our tower introduces C nodes to each other and to ours: the C producer's records
    reach the C store (its heads, asked by our client), the C consumer and ours."""
    tower = Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    dafka_nodes(tower)
    towers = (tower.sub_endpoint, tower.pub_endpoint)
    config = our_dafka_config(towers)
    cdafka.store(towers, tmp_path / "c-store.db")
    with StoreClient(config) as client:
        client.wait_for_stores(1, timeout=30)       # the C store beaconed through ours
    c_lines = cdafka.consumer(towers, "metrics")
    ours = dafka_nodes(Consumer(config, ["metrics"]))
    producer = cdafka.producer(towers, "metrics")
    lines = [f"m-{i:03d}" for i in range(200)]      # within the C producer's first chunk
    producer.popen.stdin.write(f"{lines[0]}\n".encode())
    producer.popen.stdin.flush()
    first, = collect(ours, 1)
    assert (first.offset, first.value) == (0, lines[0].encode())
    producer.popen.stdin.write("".join(f"{line}\n" for line in lines[1:]).encode())
    producer.popen.stdin.flush()
    got = [first] + collect(ours, len(lines) - 1)
    assert [(r.partition, r.offset, r.value.decode()) for r in got] == \
        [(first.partition, i, v) for i, v in enumerate(lines)]
    assert c_records(c_lines, len(lines)) == [("metrics", first.partition, v) for v in lines]
    wait_until(lambda: store_heads(config, "metrics") == {("metrics", first.partition): 199},
               30, message="the C store to hold the 200 records")
