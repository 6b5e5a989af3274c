"""The client through failures of real node processes: a dead member costs one bounded
connection attempt, a stalled leader one bounded wait for an answer, and failed calls
say whether they may have taken effect (`FarmError.maybe_applied`, R4)."""
from __future__ import annotations

import time

import pytest

from consensus.client import FarmError, Unavailable
from consensus.torture import LocalCluster
from tests.runtime.test_failures import Writer, check_history
from tests.support import free_port, wait_until

pytestmark = pytest.mark.timeout(240)


def _longest_gap(writers: list[Writer], since: float) -> float:
    """The longest time without any acknowledged write, from `since` on."""
    times = sorted(t for w in writers for t in w.acked_at if t >= since)
    times = [since] + times
    return max(b - a for a, b in zip(times, times[1:])) if len(times) > 1 else float("inf")


def _progress(writers: list[Writer], more: int, message: str) -> None:
    before = sum(len(w.acked) for w in writers)
    wait_until(lambda: sum(len(w.acked) for w in writers) >= before + more, 30,
               message=message)


@pytest.mark.slow
def test_writes_flow_through_kill_9_and_sigstop_of_the_leader():
    """Writers with a 10 s call timeout never fail while the leader is killed (kill -9,
    its listening socket kept open by LocalCluster, so a dial hangs as on a crashed
    machine) and then stalled (SIGSTOP): each failover stalls the writes for a few
    seconds at most, and every acknowledged write is in the log exactly once."""
    with LocalCluster(3, fsync="batch", status_interval=1.0) as farm:
        farm.wait_for_leader(30)
        writers = [Writer(farm, f"w{i}", timeout=10) for i in range(2)]
        for writer in writers:
            writer.start()
        gaps = {}
        try:
            _progress(writers, 20, "writes going through")
            leader = farm.wait_for_leader(30)
            killed_at = time.monotonic()
            farm.kill(leader)
            _progress(writers, 20, "writes after the kill")
            gaps["kill"] = _longest_gap(writers, killed_at)
            farm.restart(leader)

            leader = farm.wait_for_leader(30)
            paused_at = time.monotonic()
            farm.pause(leader)
            try:
                _progress(writers, 20, "writes while the leader is stopped")
                gaps["sigstop"] = _longest_gap(writers, paused_at)
            finally:
                farm.resume(leader)
            _progress(writers, 20, "writes after the old leader resumed")
        finally:
            for writer in writers:
                writer.stop()
        assert not any(w.unknown or w.refused for w in writers), \
            [(len(w.unknown), len(w.refused)) for w in writers]
        print("write stalls (s):", gaps)
        assert max(gaps.values()) < 8, gaps
        check_history(farm, writers)


def test_maybe_applied_says_when_a_write_certainly_did_not_happen():
    nobody = f"127.0.0.1:{free_port()}"
    from consensus.client import FarmClient
    with FarmClient(nobody, username="u", password="p", timeout=1) as client:
        with pytest.raises(Unavailable) as refused:
            client.append([b"to nobody"])
        assert refused.value.maybe_applied is False        # nothing was ever sent

    with LocalCluster(3, fsync="never", status_interval=5.0) as farm:
        leader = farm.wait_for_leader(30)
        followers = [i for i in farm.node_ids if i != leader]
        with farm.client(timeout=10) as client:
            client.append([b"before"])
            # the leader stops (its socket takes our write, nobody answers it), the
            # others die (their listening sockets hang our dials): unknown
            farm.pause(leader)
            for node_id in followers:
                farm.kill(node_id)
            client.timeout = 3.0
            with pytest.raises(FarmError) as unknown:
                client.append([b"maybe"])
            assert unknown.value.maybe_applied is True
        farm.resume(leader)
        # the lone node knows it leads nobody (CheckQuorum): every attempt is a definite
        # NOT_LEADER or a dial that never completed
        with farm.client(endpoints=farm.endpoint_of(leader), timeout=5) as client:
            wait_until(lambda: client.ping(farm.endpoint_of(leader))["role"] != "leader", 20,
                       message="the lone leader stepping down")
            client.timeout = 2.0
            with pytest.raises(Unavailable) as definite:
                client.append([b"never"])
            assert definite.value.maybe_applied is False


def test_a_leader_call_follows_a_transfer_to_the_new_leader():
    """log_bounds and read_entries are served by any member, so a former leader would
    answer a reader's leader calls from its own view for as long as its connection
    lives. Sent as to the leader, they are refused with the leader's name instead."""
    with LocalCluster(3, status_interval=60.0) as farm, farm.client() as admin, \
            farm.client() as reader:
        old = farm.wait_for_leader(30)
        admin.append([b"x"])
        assert reader.log_bounds()[1] >= 1
        assert reader.directory.leader == farm.endpoint_of(old)
        new = next(n for n in farm.node_ids if n != old)
        admin.transfer_leader(new, timeout=30)
        wait_until(lambda: admin.ping(farm.endpoint_of(old))["leader"] == new, 30,
                   message=f"node {old} following {new}")
        assert reader.log_bounds()[1] >= 1
        assert reader.directory.leader == farm.endpoint_of(new)
        assert reader.read_entries(1, 2)[0].index == 1
        # a call to a member named, and a call not asking for the leader, are its own
        assert reader.ping(farm.endpoint_of(old))["node"] == old
        assert reader.log_bounds(farm.endpoint_of(old))[1] >= 1
