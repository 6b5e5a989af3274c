"""The sans-I/O parts of the Dafka nodes, and the option parsing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from connectors.dafka.beacon import PeerTable
from connectors.dafka.config import (DafkaConfigError, DafkaConfig, config_from_zpl, parse_zpl,
                                     tower_endpoints)
from connectors.dafka.consumer import OffsetTracker
from connectors.dafka.node import FetchFilter
from connectors.dafka.producer import UnackedWindow


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=120))
def test_tracker_delivers_each_offset_once_in_order_whatever_arrives(arrivals):
    """Records arrive in any order, duplicated, with gaps; what is delivered is always
    0..k in order without repeats, and a FETCH names the first missing offset."""
    tracker = OffsetTracker(earliest=True)
    delivered: list = []
    for seq in arrivals:
        fetch = tracker.on_record("t", "P", seq, b"%d" % seq, delivered)
        offsets = [r.offset for r in delivered]
        assert offsets == list(range(len(offsets)))
        if fetch is not None:
            assert fetch == len(offsets) and fetch < seq
    assert all(r.value == b"%d" % r.offset for r in delivered)
    assert tracker.positions()[("t", "P")] == len(delivered)
    # Filling every gap delivers everything that was buffered.
    for seq in range(max(arrivals) + 1):
        tracker.on_record("t", "P", seq, b"%d" % seq, delivered)
    assert [r.offset for r in delivered] == list(range(max(arrivals) + 1))


def test_tracker_latest_and_heads_follow_the_c_consumer():
    latest = OffsetTracker(earliest=False)
    assert latest.on_head("t", "P", 7) == 7          # unknown: fetch the last record
    assert latest.on_head("t", "P", 6) is None       # behind what we know
    out: list = []
    assert latest.on_record("t", "Q", 41, b"x", out) is None and out[0].offset == 41
    earliest = OffsetTracker(earliest=True)
    assert earliest.on_head("t", "P", 7) == 0
    assert earliest.on_record("t", "P", 3, b"", out) == 0
    bounded = OffsetTracker(earliest=True, max_ahead=2)
    for seq in (5, 6, 7):
        bounded.on_record("t", "P", seq, b"", out)
    assert bounded.overflow == 1 and len(bounded.cursors[("t", "P")].ahead) == 2


def test_unacked_window_acks_and_fetch_windows():
    window = UnackedWindow(start_sequence=10)
    for i in range(5):
        window.records[window.next] = b"%d" % i
        window.next += 1
    assert list(window.window(11, 2)) == [11, 12] and list(window.window(13, 100)) == [13, 14]
    assert window.ack(12) == 3 and window.first == 13 and len(window) == 2
    assert list(window.window(12, 5)) == []        # acked: a store has it
    assert window.ack(12) == 0 and window.ack(100) == 2 and len(window) == 0


def test_fetch_filter_lets_one_identical_request_through_per_second():
    fetches = FetchFilter()
    assert fetches.allow("t", "P", 5, 100.1)
    assert not fetches.allow("t", "P", 5, 100.9)
    assert fetches.allow("t", "P", 6, 100.9)       # another gap: at once
    assert fetches.allow("t", "P", 5, 101.0)


def test_peer_table_ignores_itself_and_expires_the_silent():
    table = PeerTable("ME", timeout=4.0)
    assert not table.seen("ME", "tcp://a:1", 0.0)
    assert table.seen("P1", "tcp://a:2", 0.0) and not table.seen("P1", "tcp://a:2", 3.0)
    assert table.seen("P2", "tcp://a:3", 1.0)
    assert table.expire(5.5) == ["tcp://a:3"]      # P1 refreshed at 3.0
    assert table.expire(7.1) == ["tcp://a:2"] and table.peers == {}


def test_zpl_config_maps_the_c_paths():
    values = parse_zpl(
        "# comment\n"
        "beacon\n"
        "    sub_address = \"tcp://10.0.0.5:5556,tcp://10.0.0.6:5556\"\n"
        "    pub_address = tcp://10.0.0.5:5557,tcp://10.0.0.6:5557   # two towers\n"
        "    interval = 500\n"
        "consumer\n"
        "    offset\n"
        "        reset = earliest\n"
        "producer\n"
        "    head_interval = 250\n")
    config = config_from_zpl(values)
    assert config.tower_sub == ("tcp://10.0.0.5:5556", "tcp://10.0.0.6:5556")
    assert config.tower_pub[1] == "tcp://10.0.0.6:5557"
    assert config.beacon_interval == 0.5 and config.head_interval == 0.25
    assert config.offset_reset == "earliest" and config.beacon_timeout == 4.0
    assert config.bind_endpoint == "tcp://*:*"             # remote towers
    assert DafkaConfig().bind_endpoint == "tcp://127.0.0.1:*"  # local ones


@pytest.mark.parametrize("text, message", [
    ("beacon\n        interval = 5\n", "deeper"),
    ("beacon\n    interval = fast\n", "beacon/interval"),
    ("not a zpl line\n", "not a ZPL line"),
])
def test_zpl_errors_name_the_line_or_option(text, message):
    with pytest.raises(DafkaConfigError, match=message):
        config_from_zpl(parse_zpl(text))


def test_options_are_validated():
    assert tower_endpoints("tcp://h:5556") == ("tcp://h:5556", "tcp://h:5557")
    with pytest.raises(DafkaConfigError, match="--tower"):
        tower_endpoints("h:5556")
    with pytest.raises(DafkaConfigError, match="offset/reset"):
        DafkaConfig(offset_reset="middle").validate()
    with pytest.raises(DafkaConfigError, match="max_unacked"):
        DafkaConfig(max_unacked=0).validate()
    with pytest.raises(DafkaConfigError, match="at least one tower"):
        DafkaConfig().with_towers([]).validate()
