"""Poison values against Dafka nodes on real sockets (issue 13 item 3): a beacon whose
endpoint ZeroMQ refuses (relayed by a tower, or sent by a tower that does not check
them, as the C one) leaves every node running; a node whose thread died says why on
the next call; numbers in options and config files are checked and named."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest
import zmq
from hypothesis import given, settings, strategies as st

from connectors.dafka import (DafkaConfigError, Consumer, DafkaConfig, NodeFailed, Producer, Store,
                              Tower, new_address, proto)
from connectors.dafka.config import config_from_zpl
from connectors.dafka.consumer import OffsetTracker
from tests.dafka.conftest import with_config
from tests.dafka.test_nodes import collect, offsets
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

HOSTILE_ENDPOINTS = [b"tcp://a b:5", b"tcp://host", b"tcp://127.0.0.1:-1", b"foo://bar",
                     b"tcp://-a:5", b"tcp://_:5", b"tcp://127.0.0.1:99999"]


def subscribed_xpub(ctx: zmq.Context, connect: str | None = None) -> zmq.Socket:
    """A verbose XPUB, bound or connected to `connect` (`wait_for_subscriptions` says
    when what it sends reaches its subscribers)."""
    sock = ctx.socket(zmq.XPUB)
    sock.linger = 0
    sock.setsockopt(zmq.XPUB_VERBOSE, 1)
    if connect:
        sock.connect(connect)
    else:
        sock.bind("tcp://127.0.0.1:*")
    return sock


def wait_for_subscriptions(sock: zmq.Socket, count: int) -> None:
    """Until `count` peers subscribed to beacons ('B')."""
    seen = 0
    deadline = time.monotonic() + 20
    while seen < count:
        assert sock.poll(max(0, deadline - time.monotonic()) * 1000), \
            f"{seen} of {count} subscriptions"
        if sock.recv() == b"\x01B":
            seen += 1


def test_a_hostile_beacon_leaves_every_node_running(config, nodes, tower, tmp_path):
    ctx = zmq.Context()
    try:
        # A second "tower" that relays whatever it likes, as a C tower does.
        rogue = subscribed_xpub(ctx)
        rogue_endpoint = rogue.getsockopt(zmq.LAST_ENDPOINT).decode()
        both = replace(config, tower_pub=config.tower_pub + (rogue_endpoint,))
        earliest = with_config(both, offset_reset="earliest")
        store = Store(both, tmp_path / "store")
        nodes(store.writer)
        nodes(store.reader)
        consumer = nodes(Consumer(earliest, ["t"]))
        producer = nodes(Producer(both, "t"))
        wait_for_subscriptions(rogue, 4)
        for endpoint in HOSTILE_ENDPOINTS:
            rogue.send_multipart([b"B", new_address().encode(), endpoint])
        # and a node beacon with a host no endpoint can hold, to our own tower
        beaconing = subscribed_xpub(ctx, tower.sub_endpoint)
        wait_for_subscriptions(beaconing, 1)
        beaconing.send_multipart([b"B", new_address().encode(), b"a b", b"5"])

        producer.publish_many(b"r%d" % i for i in range(50))
        got = collect(consumer, 50, timeout=20)
        assert offsets(got) == list(range(50))
        assert producer.flush(20)
        for node in (store.writer, store.reader, consumer, producer):
            assert node.running and node.error is None, (node.ROLE, node.error)
            assert node.stats["dropped_malformed"] >= len(HOSTILE_ENDPOINTS)
        wait_until(lambda: tower.stats["dropped_malformed"] >= 1, 10,
                   message="the tower to drop the hostile beacon")
    finally:
        ctx.destroy(linger=0)


def test_a_consumer_whose_thread_died_says_why(config, nodes):
    def handle(record) -> None:
        raise RuntimeError(f"the application cannot take {record.value!r}")

    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), ["t"],
                              on_record=handle))
    producer = nodes(Producer(config, "t"))
    producer.publish(b"first")
    wait_until(lambda: consumer.error is not None, 20, message="the callback to fail")
    with pytest.raises(NodeFailed, match="cannot take b'first'") as failed:
        consumer.poll(5)
    assert isinstance(failed.value.__cause__, RuntimeError)
    started = time.monotonic()
    with pytest.raises(NodeFailed):
        consumer.poll(5)
    assert time.monotonic() - started < 1   # no wait for records that cannot come


@pytest.mark.parametrize("change, named", [
    (dict(beacon_interval=float("nan")), "beacon/interval"),
    (dict(beacon_timeout=float("inf")), "beacon/timeout"),
    (dict(head_interval=-1.0), "producer/head_interval"),
    (dict(tower_wait=float("nan")), "node/tower_wait"),
    (dict(max_unacked=10 ** 20), "producer/max_unacked"),
    (dict(high_watermark=1 << 40), "high_watermark"),
    (dict(beacon_host="a b"), "beacon/address"),
])
def test_options_out_of_range_are_refused_naming_them(change, named):
    with pytest.raises(DafkaConfigError, match=named):
        replace(DafkaConfig(), **change).validate()


@pytest.mark.parametrize("line, value", [
    ("producer/max_unacked", "inf"), ("producer/max_unacked", "1.5"),
    ("store/high_watermark", "nan"), ("beacon/interval", "1e400"),
])
def test_config_file_numbers_are_checked(line, value):
    with pytest.raises(DafkaConfigError, match=line):
        config_from_zpl({line: value}).validate()


def test_tower_endpoints_and_hosts_are_checked():
    with pytest.raises(DafkaConfigError, match="--tower"):
        DafkaConfig().with_towers(["tcp://127.0.0.1:99999"])
    with pytest.raises(DafkaConfigError, match="--advertise-host"):
        Tower(advertise_host="a b")
    for endpoint in HOSTILE_ENDPOINTS:
        with pytest.raises(proto.ProtocolError):
            proto.decode([b"B", new_address().encode(), endpoint])


events = st.lists(st.tuples(st.sampled_from(["record", "head"]), st.sampled_from(["t", "u"]),
                            st.sampled_from(["A" * 32, "B" * 32]),
                            st.one_of(st.integers(min_value=0, max_value=proto.MAX_SEQUENCE),
                                      st.sampled_from([0, 1, proto.MAX_SEQUENCE,
                                                       proto.MAX_SEQUENCE - 1]))),
                  max_size=30)


@settings(max_examples=300, deadline=None)
@given(events, st.booleans())
def test_a_consumer_follows_any_sequences_with_fetches_it_can_send(seen, earliest):
    """Every u64 a RECORD or HEAD may carry: what the consumer asks for is a FETCH the
    codec encodes (a FETCH past the last sequence would kill its thread)."""
    tracker = OffsetTracker(earliest, max_ahead=8)
    delivered: list = []
    for kind, subject, address, sequence in seen:
        fetch = (tracker.on_record(subject, address, sequence, b"", delivered)
                 if kind == "record" else tracker.on_head(subject, address, sequence))
        if fetch is not None:
            proto.encode(proto.Fetch(address, "C" * 32, subject, fetch,
                                     proto.fetch_count(fetch)))
    for key in tracker.positions():
        offsets = [r.offset for r in delivered if (r.topic, r.partition) == key]
        assert offsets == sorted(set(offsets))   # in order, none twice
