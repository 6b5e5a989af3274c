"""Dafka nodes on real sockets (127.0.0.1): producer, consumer, store, tower, client."""
from __future__ import annotations

import threading
import time

import pytest
import zmq

from connectors.dafka import (BackpressureTimeout, Consumer, Producer, Store, StoreClient,
                              Tower, TowerUnreachable, deterministic_address, proto)
from tests.dafka.conftest import with_config
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def collect(consumer: Consumer, count: int, timeout: float = 10.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(0.1)
    return got


def offsets(records) -> list[int]:
    return [r.offset for r in records]


def test_produce_then_consume_in_order(config, nodes):
    consumer = nodes(Consumer(config, ["hello"]))
    producer = nodes(Producer(config, "hello"))
    wait_until(lambda: len(consumer.peers_connected) and len(producer.peers_connected),
               message="discovery")
    # The first records may race the subscription; HEAD + FETCH repairs that.
    producer.publish_many(b"m%d" % i for i in range(200))
    got: list = []
    wait_until(lambda: got.extend(consumer.poll(0.05)) or (got and got[-1].offset == 199),
               message="the last record")
    assert offsets(got) == list(range(got[0].offset, 200)), "latest: from where it joined"
    assert all(r.value == b"m%d" % r.offset and r.partition == producer.address
               for r in got)
    producer.publish(b"last")
    tail = collect(consumer, 1)
    assert [(r.offset, r.value) for r in tail] == [(200, b"last")]


def test_earliest_consumer_started_mid_stream_fetches_from_the_producer(config, nodes):
    producer = nodes(Producer(config, "t"))
    producer.publish_many(b"%d" % i for i in range(500))
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["t"]))
    got = collect(consumer, 500)
    assert offsets(got) == list(range(500))
    assert consumer.stats["fetches"] >= 1 and producer.stats["direct_records"] >= 500


def test_latest_consumer_skips_history(config, nodes):
    producer = nodes(Producer(config, "t"))
    producer.publish_many(b"old" for _ in range(50))
    consumer = nodes(Consumer(config, ["t"]))
    wait_until(lambda: consumer.positions(), message="the consumer sees the partition")
    assert consumer.positions()[("t", producer.address)] >= 49   # HEAD 49: from 49 on
    producer.publish(b"new")
    got: list = []
    wait_until(lambda: got.extend(consumer.poll(0.05)) or (got and got[-1].value == b"new"),
               message="the new record")
    assert offsets(got) in ([49, 50], [50]) and got[-1].offset == 50


def test_prefix_sharing_topics_are_filtered(config, nodes):
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["hello"]))
    other = nodes(Producer(config, "hello2"))
    mine = nodes(Producer(config, "hello"))
    wait_until(lambda: len(consumer.peers_connected) >= 2, message="discovery")
    other.publish_many([b"x"] * 20)
    mine.publish_many([b"y"] * 20)
    got = collect(consumer, 20)
    assert [r.topic for r in got] == ["hello"] * 20 and offsets(got) == list(range(20))
    wait_until(lambda: consumer.stats["filtered"] >= 20, message="hello2 seen and dropped")
    assert all(r.partition == mine.address for r in consumer.poll(0.2))


def test_overflowed_receive_buffer_is_repaired_by_fetch(config, nodes):
    release = threading.Event()
    delivered: list = []

    def slow(record):
        release.wait(10)        # stall the consumer's thread: its SUB overflows
        delivered.append(record)

    consumer = nodes(Consumer(with_config(config, high_watermark=50, offset_reset="earliest"),
                              ["big"], on_record=slow))
    producer = nodes(Producer(with_config(config, high_watermark=2000), "big"))
    wait_until(lambda: producer.peers_connected and consumer.peers_connected,
               message="discovery")
    payload = b"z" * 16000
    count = 3000                # 48 MB: far beyond the HWMs and the socket buffers
    producer.publish_many([payload] * count)
    release.set()
    wait_until(lambda: len(delivered) >= count, timeout=30, message="every record")
    assert offsets(delivered) == list(range(count))
    assert consumer.stats["fetches"] >= 1            # records were lost and fetched
    assert producer.stats["direct_records"] >= 1


def test_store_acks_persists_and_serves_a_late_consumer(config, nodes, tmp_path):
    store = nodes(Store(config, tmp_path / "db"))
    producer = nodes(Producer(config, "orders"))
    wait_until(lambda: producer.peers_connected, message="discovery")
    producer.publish_many(b"o%d" % i for i in range(1000))
    assert producer.flush(10) and producer.acked == 999 and len(producer.unacked) == 0
    producer.stop()    # only the store has the records now
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["orders"]))
    got = collect(consumer, 1000)
    assert offsets(got) == list(range(1000)) and got[7].value == b"o7"
    assert store.stats["store-reader.direct_heads"] >= 1
    assert store.stats["store-writer.commits"] < 1000   # group commit, not one per record


def test_store_client_heads_and_ranges(config, nodes, tmp_path):
    nodes(Store(config, tmp_path / "db"))
    a = nodes(Producer(config, "sales"))
    b = nodes(Producer(config, "sales"))
    c = nodes(Producer(config, "sales-eu"))
    for producer, n in ((a, 300), (b, 5), (c, 2)):
        producer.publish_many(b"%d" % i for i in range(n))
    for producer in (a, b, c):
        assert producer.flush(10)
    with StoreClient(config) as client:
        assert client.heads("sales") == {("sales", a.address): 299, ("sales", b.address): 4}
        assert len(client.heads("sales", exact=False)) == 3
        assert set(client.heads()) >= {("sales-eu", c.address)}
        got = list(client.read_range("sales", a.address, 10, 260))
        assert offsets(got) == list(range(10, 260)) and got[0].value == b"10"
        assert [r.value for r in client.read_range("sales", b.address, 4, 5)] == [b"4"]
        with pytest.raises(TimeoutError):
            list(client.read_range("sales", b.address, 5, 6, timeout=0.5))


def test_republishing_with_a_deterministic_address_is_idempotent(config, nodes, tmp_path):
    nodes(Store(config, tmp_path / "db"))
    address = deterministic_address("query-1", "task-0")
    assert address == deterministic_address("query-1", "task-0") != deterministic_address(
        "query-1", "task-1")
    first = nodes(Producer(config, "sink", address=address))
    first.publish_many([b"a", b"b", b"c"])
    assert first.flush(10)
    first.stop()
    replay = nodes(Producer(config, "sink", address=address, start_sequence=1))
    assert replay.publish(b"b") == 1 and replay.publish(b"c") == 2
    assert replay.flush(10), "a store re-ACKs records it already has"
    assert replay.publish(b"d") == 3 and replay.flush(10)
    with StoreClient(config) as client:
        assert [r.value for r in client.read_range("sink", address, 0, 4)] == \
            [b"a", b"b", b"c", b"d"]


def test_producer_backpressure_blocks_until_a_store_acks(config, nodes, tmp_path):
    bounded = with_config(config, max_unacked=100)
    producer = nodes(Producer(bounded, "bp"))
    producer.publish_many([b"x"] * 100)
    started = time.monotonic()
    with pytest.raises(BackpressureTimeout, match="max_unacked=100"):
        producer.publish(b"y", timeout=0.3)
    assert time.monotonic() - started >= 0.3 and len(producer.unacked) == 100
    result = {}
    blocked = threading.Thread(target=lambda: result.update(seq=producer.publish(b"z", 20)))
    blocked.start()
    nodes(Store(bounded, tmp_path / "db"))
    blocked.join(25)
    assert result == {"seq": 100}
    assert producer.flush(10)


def test_malformed_frames_are_dropped_and_counted(config, nodes, tmp_path):
    store = nodes(Store(config, tmp_path / "db"))
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["t"]))
    ctx = zmq.Context.instance()
    rogue = ctx.socket(zmq.PUB)
    rogue.setsockopt(zmq.LINGER, 0)
    port = rogue.bind_to_random_port("tcp://127.0.0.1")
    rogue_id = "0" * 32
    stop = threading.Event()

    def beacon_until_stopped() -> None:
        """The rogue beacons for as long as the test runs (its own socket, its thread):
        a peer that stopped beaconing is forgotten after beacon_timeout, and a slow
        machine may take longer than that to reach the last send."""
        beacon = ctx.socket(zmq.PUB)
        beacon.setsockopt(zmq.LINGER, 0)
        beacon.connect(config.tower_sub[0])
        try:
            while not stop.wait(config.beacon_interval):
                beacon.send_multipart(proto.encode(proto.Beacon(rogue_id, "", port)))
        finally:
            beacon.close(0)
    beaconing = threading.Thread(target=beacon_until_stopped, daemon=True)
    beaconing.start()
    try:
        wait_until(lambda: f"tcp://127.0.0.1:{port}" in store.writer.peers_connected
                   and f"tcp://127.0.0.1:{port}" in consumer.peers_connected,
                   message="the rogue node is discovered")
        good = proto.encode(proto.Record("t", rogue_id, "t", 0, b"fine"))
        garbage = [
            [b"Mt\x00\x01\x05abc"],                              # truncated
            [b"Mt\x00\x02" + good[0][4:], b"v2"],                # bad version
            [b"Z" * 40],                                          # unknown command
            [good[0], b"x" * (17 << 20)],                         # oversize content
            [b"Mt\x00\x01 " + b"g" * 32 + b"\x01t" + b"\x00" * 8, b""],  # bad address
            [b"M"],
        ]

        def dropped_everywhere() -> bool:
            for frames in garbage:      # again each round: a SUB may join after a send
                rogue.send_multipart(frames)
            return (consumer.stats["dropped_malformed"] >= 3
                    and consumer.stats["dropped_oversize"] >= 1
                    and store.writer.stats["dropped_malformed"] >= 3
                    and store.writer.stats["dropped_oversize"] >= 1)

        wait_until(dropped_everywhere, timeout=10, interval=0.05,
                   message="the consumer and the store to drop the garbage")
        assert consumer.stats["dropped_unknown"] == 0      # an unknown command: not subscribed
        rogue.send_multipart(good)
        got = collect(consumer, 1)
        assert [(r.offset, r.value) for r in got] == [(0, b"fine")]
        assert consumer.running and store.writer.running and store.reader.running
    finally:
        stop.set()
        beaconing.join(5)
        rogue.close(0)


def test_a_silent_peer_is_forgotten(config, nodes):
    consumer = nodes(Consumer(config, ["t"]))
    producer = nodes(Producer(config, "t"))
    wait_until(lambda: producer.endpoint in consumer.peers_connected, message="discovery")
    producer.stop()
    started = time.monotonic()
    wait_until(lambda: producer.endpoint not in consumer.peers_connected, timeout=5,
               message="expiry")
    assert time.monotonic() - started >= config.beacon_timeout - 0.2
    assert consumer.stats["peers_expired"] >= 1


def test_two_towers_either_one_suffices(config, nodes, tower):
    with Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as second:
        both = with_config(config, tower_sub=(tower.sub_endpoint, second.sub_endpoint),
                           tower_pub=(tower.pub_endpoint, second.pub_endpoint))
        only_second = with_config(config, tower_sub=(second.sub_endpoint,),
                                  tower_pub=(second.pub_endpoint,))
        producer = nodes(Producer(both, "t"))
        consumer = nodes(Consumer(with_config(only_second, offset_reset="earliest"), ["t"]))
        producer.publish_many([b"1", b"2"])
        assert offsets(collect(consumer, 2)) == [0, 1]


def test_start_without_a_tower_fails_clearly(config):
    lonely = with_config(config, tower_sub=("tcp://127.0.0.1:9",),
                         tower_pub=("tcp://127.0.0.1:9",), tower_wait=0.3)
    with pytest.raises(TowerUnreachable, match="no tower answered"):
        Producer(lonely, "t").start()


@pytest.mark.timeout(60)
def test_real_default_timers(tower, nodes, tmp_path):
    """Beacons every 1 s, expiry 4 s, HEAD every 1 s: discovery and repair still work."""
    from connectors.dafka import DafkaConfig
    config = DafkaConfig(tower_sub=(tower.sub_endpoint,), tower_pub=(tower.pub_endpoint,),
                         bind="tcp://127.0.0.1:*")
    producer = nodes(Producer(config, "slow"))
    producer.publish_many([b"a", b"b", b"c"])
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["slow"]))
    assert offsets(collect(consumer, 3, timeout=10)) == [0, 1, 2]   # via HEAD -> FETCH
    assert consumer.stats["fetches"] >= 1


@pytest.mark.parametrize("advertise, host, announced", [
    (None, "", "127.0.0.1"),              # peer address of the connection
    ("localhost", "", "localhost"),        # a loopback peer gets the tower's host name
    (None, "127.0.0.1", "127.0.0.1"),      # the node's beacon/address wins
])
def test_tower_fills_in_the_announced_host(advertise, host, announced):
    ctx = zmq.Context.instance()
    with Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", advertise_host=advertise) as tower:
        listener = ctx.socket(zmq.SUB)
        listener.setsockopt(zmq.LINGER, 0)
        listener.setsockopt(zmq.SUBSCRIBE, b"B")
        listener.connect(tower.pub_endpoint)
        node = ctx.socket(zmq.PUB)
        node.setsockopt(zmq.LINGER, 0)
        node.connect(tower.sub_endpoint)
        try:
            beacon = proto.encode(proto.Beacon("A" * 32, host, 4242))
            got = wait_until(lambda: node.send_multipart(beacon) or (
                listener.poll(50) and listener.recv_multipart()), message="an announcement")
            assert proto.decode(got) == proto.TowerBeacon("A" * 32, f"tcp://{announced}:4242")
            node.send_multipart([b"B", b"junk"])
            wait_until(lambda: node.send_multipart([b"B", b"junk"]) or
                       tower.stats["dropped_malformed"], message="garbage counted")
        finally:
            listener.close(0)
            node.close(0)
