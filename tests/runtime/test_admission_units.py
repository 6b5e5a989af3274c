"""The gate's policy (consensus/runtime/admission.py) without sockets: pools and their
evictions, deadlines under pressure, the tarpit, max-connections, the refusal log; and
max-connections at the edge (config, CLI)."""
from __future__ import annotations

import pytest

from consensus.common.errors import ConfigError
from consensus.runtime.accept import Opening, WrongOpening, claimed_node, sniff
from consensus.runtime.admission import (AdmissionLimits, Established, Pending, Pool,
                                         RefusalLog, Tarpit)
from consensus.runtime.cli import build_parser
from consensus.runtime.config import NodeConfig

LIMITS = AdmissionLimits(pending_clients=6, pending_per_address=3, pending_per_peer=2)


def test_an_address_over_its_share_loses_its_oldest_handshake_not_the_new_one():
    pending = Pending(LIMITS)
    assert [pending.add(k, "10.0.0.1") for k in "abc"] == [[], [], []]
    assert pending.add("d", "10.0.0.1") == ["a"]
    assert pending.add("x", "10.0.0.2") == []          # another address is untouched
    assert "a" not in pending and "d" in pending and "x" in pending


def test_a_full_client_pool_evicts_its_oldest_across_addresses():
    pending = Pending(LIMITS)
    for i in range(6):
        assert pending.add(i, f"10.0.0.{i}") == []
    assert pending.add("new", "10.0.0.9") == [0]
    assert pending.count[Pool.CLIENTS] == 6


def test_peers_have_their_own_slots_clients_cannot_take():
    pending = Pending(LIMITS)
    pending.add("peer", "127.0.0.1")
    assert pending.claim_peer("peer", 2) == []
    assert pending.pool_of("peer") is Pool.PEERS
    for i in range(20):                                  # a client flood from its address
        pending.add(i, "127.0.0.1")
    assert "peer" in pending and pending.count == {Pool.CLIENTS: 3, Pool.PEERS: 1}
    pending.add("p2", "127.0.0.1")
    pending.claim_peer("p2", 2)
    pending.add("p3", "127.0.0.1")
    assert pending.claim_peer("p3", 2) == ["peer"]       # a claimed id has its own share


def test_deadlines_shorten_once_the_client_pool_is_half_full():
    pending = Pending(LIMITS)
    assert pending.deadline(100.0) == 100.0 + LIMITS.handshake_timeout
    for i in range(3):
        pending.add(i, f"10.0.0.{i}")
    assert pending.deadline(100.0) == 100.0 + LIMITS.pressed_timeout


def test_the_tarpit_doubles_per_address_and_user_and_forgets():
    tarpit = Tarpit(AdmissionLimits(tarpit_first=0.1, tarpit_max=1.0, tarpit_forget=60))
    delays = [tarpit.failed("10.0.0.1", "farm", t) for t in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert tarpit.failed("10.0.0.1", "other", 6) == 0.1
    assert tarpit.failed("10.0.0.2", "farm", 6) == 0.1
    assert tarpit.failed("10.0.0.1", "farm", 6 + 60) == 0.1      # quiet for 60 s


def test_established_clients_stop_at_max_connections_and_peers_never():
    established = Established(2)
    assert established.open(False) and established.open(False)
    assert not established.open(False)
    assert all(established.open(True) for _ in range(10))
    established.release(False)
    assert established.open(False)
    assert (established.clients, established.peers) == (2, 10)


def test_refusals_are_logged_once_per_window_then_summed():
    log = RefusalLog(interval=10.0)
    first = log.refused("127.0.0.1", 5000, "wrong password", 0.0, "handshakes")
    assert first == "refused connection from 127.0.0.1:5000: wrong password"
    assert all(log.refused("127.0.0.1", p, "wrong password", 1.0, "handshakes") is None
               for p in range(110_960))
    assert log.due(9.9) == []
    assert log.due(10.0) == ["refused 110,960 more handshakes from 127.0.0.1 in 10 s: "
                             "wrong password"]
    assert log.refused("127.0.0.1", 1, "wrong password", 11.0) is not None   # new window


def test_the_refusal_log_is_bounded_in_keys():
    log = RefusalLog(interval=10.0, keys=4)
    lines = [log.refused(f"10.0.{i}.1", 1, f"reason {i}", 0.0) for i in range(100)]
    assert sum(line is not None for line in lines) == 4
    assert log.due(10.0) == ["refused 96 more connections from other addresses in 10 s: "
                             "various reasons"]


def test_first_bytes_and_a_peer_claim():
    assert sniff(b"GE", "garlicfarm") is None
    assert sniff(b"GET /", "garlicfarm") is Opening.HANDSHAKE
    assert sniff(b"C\x00", "marker") is Opening.MARKER
    with pytest.raises(WrongOpening, match="JRaft bytes without a handshake"):
        sniff(b"\x01\x00", "garlicfarm")
    head = b"GET /GarlicFarm/farm/1/websocket HTTP/1.1\r\nHost: h\r\nx-garlicfarm-node: 12\r\n"
    assert claimed_node(head) == 12
    assert claimed_node(head[:-2]) is None               # the line is not complete yet
    assert claimed_node(b"GET / HTTP/1.1\r\nHost: h\r\n") is None


def test_max_connections_is_validated_at_the_edge(tmp_path):
    base = dict(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path), username="u",
                password="p")
    assert NodeConfig(**base, max_connections=5).max_connections == 5
    for bad in (0, -1, "10", 10**7, True):
        with pytest.raises(ConfigError, match="--max-connections"):
            NodeConfig(**base, max_connections=bad)
    args = vars(build_parser().parse_args(["--max-connections", "7"]))
    assert NodeConfig.from_mapping({**base, **args}).max_connections == 7
    assert NodeConfig.from_mapping({**base, "max-connections": 9}).max_connections == 9
    with pytest.raises(ValueError, match="pending_per_address"):
        AdmissionLimits(pending_per_address=0)
