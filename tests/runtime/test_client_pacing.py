"""Issue 13.2: a client that cannot reach a usable leader backs off instead of opening
connections as fast as it can (1,206 handshaked connections in 5 s before), and its error
says why when no retry can help."""
from __future__ import annotations

import time
from collections import Counter

import pytest

from consensus.client import FarmError
from consensus.client.links import CONNECTS_PER_SECOND, Directory
from consensus.torture import LocalCluster
from tests.support import count_link_attempts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dialed(monkeypatch) -> Counter:
    return count_link_attempts(monkeypatch)


@pytest.mark.parametrize("call", ["append", "last_applied"])
def test_a_member_without_a_leader_is_not_reconnected_in_a_tight_loop(dialed, call):
    with LocalCluster(3, fsync="never", status_interval=5.0) as farm:
        leader = farm.wait_for_leader(30)
        lone = next(i for i in farm.node_ids if i != leader)
        for node_id in farm.node_ids:
            if node_id != lone:
                farm.stop(node_id)
        with farm.client(endpoints=farm.endpoint_of(lone), timeout=5) as client:
            started = time.monotonic()
            with pytest.raises(FarmError):
                client.append([b"x"]) if call == "append" else client.last_applied()
            took = time.monotonic() - started
        assert dialed[farm.endpoint_of(lone)] >= 1
        # the bound holds by construction, per member; what it was before: ~1,200
        assert max(dialed.values()) <= CONNECTS_PER_SECOND * (took + 1), dialed
        assert dialed[farm.endpoint_of(lone)] <= 10, dialed


def test_connection_attempts_per_member_are_bounded_with_jitter():
    directory = Directory(["127.0.0.1:1"], 0.5)
    waits = [directory.connect_wait("127.0.0.1:1") for _ in range(3 * CONNECTS_PER_SECOND)]
    assert waits[:CONNECTS_PER_SECOND] == [0.0] * CONNECTS_PER_SECOND
    assert all(w > 0.9 for w in waits[CONNECTS_PER_SECOND:2 * CONNECTS_PER_SECOND])
    assert all(w > 1.9 for w in waits[2 * CONNECTS_PER_SECOND:])
    assert len(set(waits[CONNECTS_PER_SECOND:])) > 1                 # jittered
    assert directory.connect_wait("127.0.0.1:2") == 0.0             # per member
