"""A farm starved of CPU keeps its leader (issue 26): on a shared machine every node of a
farm can get no CPU for a while, then deliver the missed ticks at once. A stall is not
silence: the leader must not step down (CheckQuorum) before its followers could answer,
nor a follower time out before the leader could speak."""
from __future__ import annotations

import os
import re
import time

import pytest

from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

#: longer than two CheckQuorum periods and the longest election timeout (default 30
#: ticks of 10 ms, timeouts in [300, 600) ms): the old catch-up deposed the leader
STALL = 1.5


def test_a_farm_stalled_as_a_whole_keeps_its_leader():
    with LocalCluster(3, fsync="never", status_interval=5.0) as farm:
        leader = farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            index, term = client.append([b"before"])
            wait_until(lambda: all(client.ping(farm.endpoint_of(i))["term"] == term
                                   and client.ping(farm.endpoint_of(i))["leader"] == leader
                                   for i in farm.node_ids), 10, message="every node following")
            logs = {i: os.path.getsize(farm.log_path(i)) for i in farm.node_ids}
            for node_id in farm.node_ids:       # the machine gives the farm no CPU
                farm.pause(node_id)
            time.sleep(STALL)
            for node_id in farm.node_ids:
                farm.resume(node_id)
            # writes go on at the same leader and term; what deposed it did so in the
            # first turn after the stall, a follower's campaign within its timeout
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                _, after = client.append([b"after"])
                assert after == term, f"a term change after the stall: {term} -> {after}"
            pings = {i: client.ping(farm.endpoint_of(i)) for i in farm.node_ids}
        assert {(p["term"], p["leader"]) for p in pings.values()} == {(term, leader)}, pings
        for node_id, offset in logs.items():
            with open(farm.log_path(node_id), "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            assert not re.search(r"-> (pre-candidate|candidate|follower)", text), \
                f"node {node_id} changed role after the stall:\n{text}"
