"""A consumer catching up from stores: by the bulk read extension from ours (one probe
per store, then BULK-FETCH windows, past the 100000-record FETCH window without a
producer's HEAD), by plain FETCH from a store without the extension."""
from __future__ import annotations

import copy

import pytest

from connectors.dafka import Consumer, Store, proto
from connectors.dafka.consumer import BULK_WINDOW, OffsetTracker
from connectors.dafka.node import new_address
from connectors.dafka.partitions import PartitionStore
from tests.dafka.conftest import with_config
from tests.dafka.test_nodes import collect, offsets
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)
TOPIC = "catch-up"


def stored(data_dir, count: int) -> str:
    """A store directory holding `count` records of one partition; its address."""
    address = new_address()
    partitions = PartitionStore(data_dir, fsync="never")
    partitions.stage_many((TOPIC, address), 0, [b"r%d" % seq for seq in range(count)])
    partitions.commit()
    partitions.close()
    return address


def steady(config):
    """Beacons a loaded machine cannot miss: a consumer that forgets the store forgets
    that it answers bulk, and catches up by FETCH (test_plain_catch_up_...)."""
    return with_config(config, beacon_timeout=30.0)


def subscribed_after_the_probe(nodes, consumer: Consumer) -> Consumer:
    """`consumer` started, then subscribed once the store answered its bulk probe: the
    heads that a hello brings can overtake the probe's answer (a PUB drops what a
    subscriber not yet connected to it would get), and a catch-up asked for before the
    answer goes by FETCH."""
    nodes(consumer)
    wait_until(lambda: consumer.bulk_readers, 15, message="the store answering the probe")
    consumer.subscribe(TOPIC)
    return consumer


def test_bulk_catch_up_crosses_fetch_windows_without_a_producer(config, nodes, tmp_path):
    count = proto.FETCH_BLOCK + BULK_WINDOW // 2           # two FETCH windows
    address = stored(tmp_path / "db", count)
    nodes(Store(steady(config), tmp_path / "db"))
    consumer = subscribed_after_the_probe(
        nodes, Consumer(with_config(steady(config), offset_reset="earliest")))
    got = collect(consumer, count, timeout=60)
    assert offsets(got) == list(range(count))
    assert got[-1].value == b"r%d" % (count - 1) and got[-1].partition == address
    assert consumer.stats["bulk_records"] == count and consumer.stats["fetches"] == 0
    assert consumer.stats["bulk_fetches"] >= count // BULK_WINDOW
    # a silence on a loaded machine may ask a window again: its records come twice
    assert consumer.stats["bulk_duplicates"] <= consumer.stats["bulk_silences"] * BULK_WINDOW


def test_a_lost_slice_of_a_bulk_answer_is_asked_again(config, nodes, tmp_path):
    """Without a producer no HEAD reveals the gap a lost slice leaves (a reconnect after
    missed beacons on a loaded machine loses one): the consumer's silence timer must."""
    count = BULK_WINDOW + 1000
    address = stored(tmp_path / "db", count)
    store = Store(steady(config), tmp_path / "db")
    send, dropped = store.reader._send_bulk, []

    def lose_first_last_slice(answer, lengths, data):
        # the loss made certain: the first answer's final slice never leaves the store
        if not dropped and len(lengths) and answer.next + len(lengths) >= answer.stop:
            dropped.append(answer.next)
            return
        send(answer, lengths, data)

    store.reader._send_bulk = lose_first_last_slice
    nodes(store)
    consumer = subscribed_after_the_probe(
        nodes, Consumer(with_config(steady(config), offset_reset="earliest")))
    got = collect(consumer, count, timeout=30)
    assert len(dropped) == 1 and 0 < dropped[0] < BULK_WINDOW
    assert offsets(got) == list(range(count))
    assert got[-1].partition == address
    assert consumer.stats["bulk_silences"] >= 1 and consumer.stats["fetches"] == 0


def caught_up_with_a_slow_last_slice(config, nodes, tmp_path, release_when):
    """A catch-up of 3 bulk windows in which the store holds back the first answer's last
    slice until `release_when(consumer.stats)`; (consumer, held, records got)."""
    count = 3 * BULK_WINDOW
    stored(tmp_path / "db", count)
    store = Store(steady(config), tmp_path / "db")
    consumer = Consumer(with_config(steady(config), offset_reset="earliest"))
    send, held = store.reader._send_bulk, []

    def hold_first_last_slice(answer, lengths, data):
        if not held and len(lengths) and answer.next + len(lengths) >= answer.stop:
            # sent once released (as the answer stands now)
            held.append((copy.copy(answer), lengths, data))
            return
        send(answer, lengths, data)

    def release(now):
        if len(held) == 1 and release_when(consumer.stats):
            send(*held[0])
            held.append("sent")

    store.reader._send_bulk = hold_first_last_slice
    store.reader.add_timer(0.05, release)
    nodes(store)
    subscribed_after_the_probe(nodes, consumer)
    return consumer, held, collect(consumer, count, timeout=60)


def test_a_slow_answer_ending_after_it_was_asked_again_does_not_end_the_new_ask(
        config, nodes, tmp_path):
    """A silent answer may only be slow (a starved store): its last slice, sent before
    our new ask replaced it at the store, ends short of the new ask's window. Taken as
    the new ask's end it stopped the catch-up there (no producer's HEAD to resume it)."""
    consumer, held, got = caught_up_with_a_slow_last_slice(
        config, nodes, tmp_path, lambda stats: stats["bulk_silences"])
    assert held[1:] == ["sent"] and held[0][0].stop == BULK_WINDOW
    assert offsets(got) == list(range(3 * BULK_WINDOW))
    assert consumer.stats["bulk_records"] == 3 * BULK_WINDOW
    assert consumer.stats["fetches"] == 0
    assert consumer.stats["bulk_duplicates"] > 0          # the slow slice came after all


def test_a_slow_answer_ending_after_the_next_window_was_asked_does_not_end_it(
        config, nodes, tmp_path):
    """The same slow last slice, arriving later still: after the ask that replaced its
    answer was answered in full and the next window asked (a store starved longer, or
    one that answered the new ask before the old slice left its queue). That next ask
    must wait for it too; taken as its end, the catch-up stopped (the suite saw it)."""
    consumer, held, got = caught_up_with_a_slow_last_slice(   # the first ask, the one
        config, nodes, tmp_path,                              # after its silence, then
        lambda stats: stats["bulk_silences"] and stats["bulk_fetches"] >= 3)  # the next
    assert held[1:] == ["sent"] and held[0][0].stop == BULK_WINDOW
    assert offsets(got) == list(range(3 * BULK_WINDOW))
    assert consumer.stats["fetches"] == 0 and consumer.stats["bulk_duplicates"] > 0


def test_a_store_without_the_extension_is_read_by_plain_fetch(config, nodes, tmp_path):
    stored(tmp_path / "db", 5000)
    nodes(Store(config, tmp_path / "db", bulk=False))
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), [TOPIC]))
    assert offsets(collect(consumer, 5000)) == list(range(5000))
    assert consumer.stats["fetches"] >= 1 and consumer.stats["bulk_records"] == 0
    assert not consumer.bulk_readers


def test_plain_catch_up_crosses_fetch_windows_without_a_producer(config, nodes, tmp_path):
    """A FETCH answers one window; with no producer's HEAD to come, the store's HEAD
    heard at the start must ask the next (the C consumer stopped at 100,001)."""
    count = proto.FETCH_BLOCK + 2000
    stored(tmp_path / "db", count)
    nodes(Store(config, tmp_path / "db", bulk=False))
    consumer = nodes(Consumer(with_config(config, offset_reset="earliest"), [TOPIC]))
    got = collect(consumer, count, timeout=60)
    assert offsets(got) == list(range(count))
    assert consumer.stats["fetches"] >= 2 and consumer.stats["bulk_records"] == 0


def test_tracker_on_records_skips_duplicates_buffers_ahead_and_chains():
    tracker, out = OffsetTracker(earliest=True), []
    key = (TOPIC, new_address())
    assert tracker.on_records(*key, 5, [b"5", b"6"], out) == 0      # ahead: FETCH from 0
    assert tracker.on_records(*key, 0, [b"0", b"1", b"2"], out) is None
    assert tracker.on_records(*key, 1, [b"1", b"2", b"3", b"4"], out) is None
    assert [r.offset for r in out] == [0, 1, 2, 3, 4, 5, 6]
    assert tracker.duplicates == 2 and not tracker.cursors[key].ahead
    assert tracker.on_records(*key, 6, [b"6", b"7"], out) is None
    assert [r.value for r in out[-1:]] == [b"7"] and tracker.duplicates == 3
