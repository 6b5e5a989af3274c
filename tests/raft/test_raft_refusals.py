"""Issue 13.1: what a leader sends a follower that lags, lost its log, or refuses what it
should take (a JRaft follower that trusted a commit index past its log): the commit index
it announces, and resends that back off instead of flooding."""
from __future__ import annotations

from dataclasses import replace

import pytest

from consensus.raft import (AppendEntries, AppendEntriesResponse, InstallSnapshot,
                            InstallSnapshotResponse, MemoryStorage, Snapshot)
from consensus.raft.progress import ProgressState

from .harness import OPTIONS, Cluster
from .test_raft_paper import of_type

pytestmark = pytest.mark.timeout(30)


def leader_compacted_past_node_2(options) -> tuple[Cluster, object]:
    """Node 1 leads, wrote 20 entries while node 2 was cut off, then compacted them all
    into a snapshot; the network is healed."""
    cluster = Cluster([1, 2, 3], options)
    leader = cluster.elect(1)
    cluster.isolate(2)
    leader.propose_many([b"%d" % i for i in range(20)])
    cluster.deliver()
    storage: MemoryStorage = leader.log.storage
    storage.create_snapshot(Snapshot(leader.commit_index, leader.term,
                                     leader.configuration, b"state"))
    storage.compact(leader.commit_index)
    cluster.heal()
    return cluster, leader


def test_no_append_announces_a_commit_beyond_the_entries_it_vouches_for():
    """A follower behind a compacted log gets heartbeats at prev 0: their commit index
    must be what they vouch for, never the leader's whole commit index (JRaft trusts it
    when lastLogIndex is 0, raises its commit past its log and refuses every snapshot)."""
    cluster, leader = leader_compacted_past_node_2(replace(OPTIONS, max_entries_per_message=2))
    seen = []
    cluster.drop = lambda m: seen.append(m) or False
    cluster.tick(OPTIONS.retry * 4)
    appends = [m for m in of_type(seen, AppendEntries) if m.destination == 2]
    assert any(m.prev_log_index + len(m.entries) < leader.commit_index for m in appends)
    for m in appends:
        assert m.commit <= m.prev_log_index + len(m.entries), m
    assert cluster.nodes[2].commit_index == leader.commit_index     # caught up anyway


def refusing_follower_run(respond) -> list:
    """A leader whose follower 2 answers every InstallSnapshot with `respond(msg)`; the
    snapshots sent to it over 200 ticks."""
    cluster, _ = leader_compacted_past_node_2(replace(OPTIONS, snapshot_chunk_bytes=1 << 20))
    sent = []

    def intercept(msg) -> bool:
        if isinstance(msg, InstallSnapshot) and msg.destination == 2:
            sent.append(msg)
            cluster.queue.append(respond(msg))
            return True
        return False
    cluster.drop = intercept
    cluster.tick(200, ids=[1])
    return sent


def test_a_refused_snapshot_is_resent_with_backoff_not_at_once():
    def refuse(msg: InstallSnapshot):
        return InstallSnapshotResponse(term=msg.term, source=2, destination=1, success=False, next_offset=0, snapshot_index=msg.snapshot_index)
    sent = refusing_follower_run(refuse)
    # At once would be one per delivery round (the cluster never goes quiet); with
    # backoff (retry ticks, doubling up to 8x) 200 ticks hold about a dozen.
    assert 3 <= len(sent) <= 200 // (OPTIONS.retry * 4) + 4, len(sent)


def test_a_follower_asking_to_resume_elsewhere_is_answered_at_once():
    """One refusal that names another offset (a follower that restarted mid-transfer) is
    a resync, not a reason to wait."""
    answers = iter([False, True])

    def resync_then_accept(msg: InstallSnapshot):
        ok = next(answers, True)
        return InstallSnapshotResponse(term=msg.term, source=2, destination=1, success=ok, next_offset=0 if not ok else len(msg.data),
                                       snapshot_index=msg.snapshot_index, done=ok and msg.done)
    sent = refusing_follower_run(resync_then_accept)
    assert len(sent) == 2


def test_an_append_refused_where_the_follower_should_take_it_backs_off():
    """A refusal that moves nothing back (the follower refuses entries right after what
    it acknowledged) pauses replication to it instead of resending in a tight loop."""
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    pr = leader.progress[2]
    refused = []

    def refuse(msg) -> bool:
        if isinstance(msg, AppendEntries) and msg.destination == 2 and msg.entries:
            refused.append(msg)
            end = msg.prev_log_index + 1
            cluster.queue.append(AppendEntriesResponse(term=msg.term, source=2, destination=1, success=False, next_index=end, log_index=end, entry_count=0,
                                                       ctx=msg.ctx))
            return True
        return False
    cluster.drop = refuse
    leader.propose(b"y")
    cluster.tick(100, ids=[1])
    assert pr.state is not ProgressState.REPLICATE or pr.refusals
    assert 2 <= len(refused) <= 10, len(refused)
    assert pr.refusals >= 2 and pr.paused_until > 0
