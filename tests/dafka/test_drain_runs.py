"""`drain_runs`, the record hot path of the store writer and the consumer: records that
continue an open run skip decoding, everything else reaches the handler, and a run the
handler closes gets nothing more (regression: `Runs.take` replaced the prefix table
that the drain loop held, so later records of the partition went into the closed run
and were lost)."""
from __future__ import annotations

from collections import Counter

import pytest
import zmq

from connectors.dafka import proto
from connectors.dafka.node import new_address
from connectors.dafka.sockets import Runs, drain_runs
from tests.support import wait_until

TOPIC = "runs"


@pytest.fixture
def pair():
    ctx = zmq.Context()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    pub.bind("inproc://drain-runs")
    sub.connect("inproc://drain-runs")
    # PUB drops what it sends before the subscription arrives: send a probe until one
    # comes through, then drain the probes, so the test's messages are all delivered.
    def subscribed() -> bool:
        pub.send(b"probe")
        return sub.poll(10) != 0
    wait_until(subscribed, 5, message="the SUB socket's subscription reaching PUB")
    while sub.poll(0):
        assert sub.recv() == b"probe"
    yield pub, sub
    pub.close(0)
    sub.close(0)
    ctx.term()


def test_runs_take_records_and_a_closed_run_gets_no_more(pair):
    pub, sub = pair
    address = new_address()
    key = (TOPIC, address)
    sent = [proto.Record(TOPIC, address, TOPIC, seq, b"r%d" % seq) for seq in range(3)]
    sent.append(proto.Head(TOPIC, address, TOPIC, 2))
    sent += [proto.Record(TOPIC, address, TOPIC, seq, b"r%d" % seq) for seq in (3, 4)]
    sent.append(proto.Record(TOPIC, address, TOPIC, 9, b"r9"))     # a gap: not the next
    for msg in sent:
        pub.send_multipart(proto.encode(msg))
    pub.send_multipart([b"M garbage"])                               # dropped, counted
    runs, stats, closed, handled = Runs(), Counter(), [], []

    def handle(msg, frame0):
        handled.append(msg)
        run = runs.take(key)
        if run is not None:
            closed.append((run.first, list(run.contents)))
        if type(msg) is proto.Record and msg.sequence in (0, 3):
            runs.open(frame0, key, msg.sequence + 1)

    drain_runs(sub, proto.Decoder(), stats, runs, handle)
    assert [type(m).__name__ for m in handled] == ["Record", "Head", "Record", "Record"]
    assert [m.sequence for m in handled] == [0, 2, 3, 9]
    assert closed == [(1, [b"r1", b"r2"]), (4, [b"r4"])]
    assert not runs.by_key and not runs.by_prefix
    assert stats["dropped_malformed"] == 1
