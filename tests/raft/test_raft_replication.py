"""JournalKeeper's parallel replication (SPECS §5): several AppendEntries in flight per
follower, repStartIndex, out-of-order responses, the receiver processing requests in log
order - and the regression for stale requests that must never truncate a log."""
from __future__ import annotations

from dataclasses import replace

import pytest

from consensus.raft import (AppendEntries, AppendEntriesResponse, Entry, EntryType,
                            MemoryStorage, RaftNode, Role)
from consensus.raft.progress import Progress, ProgressState

from .harness import OPTIONS, Cluster, take
from .test_raft_paper import lone, of_type, storage_with

pytestmark = pytest.mark.timeout(30)


def pipelined_leader(window: int = 4, per_message: int = 2) -> tuple[Cluster, RaftNode]:
    options = replace(OPTIONS, max_inflight=window, max_entries_per_message=per_message)
    cluster = Cluster([1, 2, 3], options)
    leader = cluster.elect(1)
    cluster.deliver()
    assert leader.progress[2].state is ProgressState.REPLICATE
    return cluster, leader


def test_several_requests_in_flight_up_to_the_window():
    cluster, leader = pipelined_leader(window=3, per_message=2)
    first = leader.last_index + 1
    leader.propose_many([b"%d" % i for i in range(10)])
    sent = [m for m in of_type(cluster.process(1), AppendEntries) if m.destination == 2]
    assert [(m.prev_log_index + 1, len(m.entries)) for m in sent] == \
        [(first, 2), (first + 2, 2), (first + 4, 2)]      # window of 3, 2 entries each
    pr = leader.progress[2]
    assert pr.rep_start == first and pr.next == first + 6 and len(pr.inflight) == 3


def reply(msg: AppendEntries, success: bool = True, next_index: int | None = None) -> AppendEntriesResponse:
    end = msg.prev_log_index + len(msg.entries)
    return AppendEntriesResponse(term=msg.term, source=msg.destination, destination=msg.source, success=success,
                                 next_index=end + 1 if next_index is None else next_index,
                                 log_index=msg.prev_log_index + 1, entry_count=len(msg.entries), ctx=msg.ctx)


def test_out_of_order_success_is_held_until_rep_start_reaches_it():
    """A success whose logIndex is not repStartIndex is applied only once the earlier
    requests are answered (JournalKeeper's response rule)."""
    cluster, leader = pipelined_leader(window=3, per_message=2)
    leader.propose_many([b"%d" % i for i in range(6)])
    a, b, c = [m for m in of_type(cluster.process(1), AppendEntries) if m.destination == 2]
    pr = leader.progress[2]
    match_before = pr.match
    leader.step(reply(c))
    leader.step(reply(b))
    assert pr.match == match_before and pr.rep_start == a.prev_log_index + 1
    leader.step(reply(a))
    assert pr.match == c.prev_log_index + 2 and not pr.inflight and not pr.held


def test_refusal_at_rep_start_backs_off_but_later_refusals_are_ignored():
    cluster, leader = pipelined_leader(window=3, per_message=2)
    leader.propose_many([b"%d" % i for i in range(6)])
    a, b, c = [m for m in of_type(cluster.process(1), AppendEntries) if m.destination == 2]
    pr = leader.progress[2]
    leader.step(reply(c, success=False, next_index=2))   # later request refused: ignored
    assert pr.state is ProgressState.REPLICATE and len(pr.inflight) == 3
    leader.step(reply(a, success=False, next_index=2))   # the one at rep_start: back off
    assert pr.state is ProgressState.PROBE and pr.next == 2 and not pr.inflight


def test_lost_response_is_retried_after_retry_ticks():
    cluster, leader = pipelined_leader(window=2, per_message=2)
    cluster.drop = lambda m: isinstance(m, AppendEntriesResponse)
    index = leader.propose(b"x")
    cluster.deliver()
    assert leader.progress[2].match < index
    cluster.drop = lambda m: False
    cluster.tick(OPTIONS.retry + OPTIONS.heartbeat_interval, ids=[1])
    assert leader.progress[2].match == leader.progress[3].match == index
    assert leader.commit_index == index


def test_duplicated_and_reordered_requests_converge():
    """The receiver answers duplicates harmlessly and the leader's state ends up exact."""
    cluster, leader = pipelined_leader(window=4, per_message=1)
    leader.propose_many([b"%d" % i for i in range(4)])
    msgs = [m for m in of_type(cluster.process(1), AppendEntries) if m.destination == 2]
    follower = cluster.nodes[2]
    for msg in reversed(msgs + msgs):
        follower.step(msg)
    cluster.process(2)
    cluster.deliver()
    assert cluster.log_terms(2) == cluster.log_terms(1)
    assert leader.progress[2].match == leader.last_index


def test_receiver_processes_a_batch_in_log_order():
    """JournalKeeper's receiver keeps pending requests sorted by log position: a batch
    that arrived out of order is applied in order (every request succeeds), and the
    responses keep the arrival order."""
    cluster, leader = pipelined_leader(window=4, per_message=1)
    leader.propose_many([b"%d" % i for i in range(4)])
    msgs = [m for m in of_type(cluster.process(1), AppendEntries) if m.destination == 2]
    follower = cluster.nodes[2]
    shuffled = [msgs[2], msgs[0], msgs[3], msgs[1]]
    follower.step_many(shuffled)
    replies = of_type(take(follower), AppendEntriesResponse)
    assert [r.log_index for r in replies] == [m.prev_log_index + 1 for m in shuffled]
    assert all(r.success for r in replies)
    assert follower.last_index == leader.last_index


def test_stale_append_entries_never_truncates_the_log():
    """Regression (a Python Raft we measured truncates here): an AppendEntries whose
    entries the follower already holds - a duplicate, or an old request overtaken by
    later ones - must not cut the entries after them."""
    node = lone(2, storage=storage_with([1, 1, 1, 1, 1], term=1))
    old = AppendEntries(term=1, source=1, destination=2, prev_log_index=1, prev_log_term=1, entries=[Entry(1, 2, EntryType.APPLICATION, b"e2t1"),
                                        Entry(1, 3, EntryType.APPLICATION, b"e3t1")], commit=0)
    node.step(old)
    replies = of_type(take(node), AppendEntriesResponse)
    assert node.last_index == 5
    assert replies[0].success and replies[0].log_index == 2 and replies[0].entry_count == 2
    assert [node.log.term(i) for i in range(1, 6)] == [1] * 5


def test_stale_request_below_the_commit_index_is_acknowledged_not_applied():
    node = lone(2, storage=storage_with([1, 1, 1, 1], term=1))
    node.step(AppendEntries(term=1, source=1, destination=2, prev_log_index=4, prev_log_term=1, entries=[], commit=4))          # commit 4
    take(node)
    node.step(AppendEntries(term=1, source=1, destination=2, prev_log_index=0, prev_log_term=0, entries=[Entry(1, 1, EntryType.APPLICATION, b"e1t1")], commit=4))
    replies = of_type(take(node), AppendEntriesResponse)
    assert replies[-1].success and node.last_index == 4 and node.commit_index == 4


def test_follower_commit_never_passes_what_the_request_vouches_for():
    """Raft Figure 2: commitIndex = min(leaderCommit, index of last new entry) - not the
    follower's last index, which may hold entries the leader does not have."""
    node = lone(2, storage=storage_with([1, 1, 1, 2, 2], term=3))
    node.step(AppendEntries(term=3, source=1, destination=2, prev_log_index=2, prev_log_term=1, entries=[], commit=10))
    take(node)
    assert node.commit_index == 2


def test_rejection_hint_skips_a_whole_conflicting_term():
    node = lone(2, storage=storage_with([1, 2, 2, 2, 2], term=3))
    node.step(AppendEntries(term=3, source=1, destination=2, prev_log_index=5, prev_log_term=3, entries=[], commit=0))
    reply_ = of_type(take(node), AppendEntriesResponse)[0]
    assert not reply_.success and reply_.next_index == 2     # first index of term 2


def test_progress_partly_covered_request_is_trimmed():
    pr = Progress(10, 4)
    pr.become_replicate()
    pr.match = 9
    pr.next = 10
    pr.sent(10, 4, 0)
    assert pr.on_success(10, 11)           # a resend covered 10-11 only
    assert pr.inflight[0].log_index == 12 and pr.inflight[0].count == 2


def test_leader_does_not_count_itself_before_its_own_fsync():
    """The leader may send in parallel with its own fsync, but its entries count toward
    commit only once persisted (advance), so a majority always holds them durably."""
    node = lone(1, voters=(1,))
    for _ in range(OPTIONS.election_timeout_max):
        node.tick()
    take(node)
    index = node.propose(b"x")
    rd = node.ready()
    assert node.commit_index < index and rd.entries and rd.must_sync
    node.log.storage.persist(rd)
    node.advance(rd)
    assert node.commit_index == index


def test_propose_on_a_follower_names_the_leader():
    cluster = Cluster([1, 2, 3])
    cluster.elect(1)
    cluster.deliver()
    from consensus.raft import NotLeader
    with pytest.raises(NotLeader) as info:
        cluster.nodes[2].propose(b"x")
    assert info.value.leader_id == 1 and "node 1" in str(info.value)


def test_a_large_batch_commits_in_few_messages():
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    leader.propose_many([b"x" * 10] * 1000)
    sent = of_type(cluster.process(1), AppendEntries)
    assert len(sent) == 2 and all(len(m.entries) == 1000 for m in sent)
    cluster.deliver()
    assert leader.commit_index == leader.last_index
    # The followers learn the commit index with the next entries or at the next tick,
    # not from a notice of their own right away.
    assert not cluster.applied[2] and not of_type(cluster.process(1), AppendEntries)
    leader.tick()
    notices = of_type(cluster.process(1), AppendEntries)
    assert len(notices) == 2 and all(not m.entries for m in notices)
    cluster.deliver()
    assert len(cluster.applied[2]) == 1000


def test_empty_storage_node_restarts_from_its_persisted_state():
    storage = MemoryStorage()
    cluster = Cluster([1, 2, 3], storages={1: storage, 2: MemoryStorage(), 3: MemoryStorage()})
    leader = cluster.elect(1)
    leader.propose(b"persisted")
    cluster.deliver()
    cluster.tick(2)
    state = storage.initial_state()
    reborn = cluster.start(1)
    assert (reborn.term, reborn.vote) == (state.term, state.vote) and reborn.role is Role.FOLLOWER
    assert reborn.commit_index == state.commit and reborn.last_index == leader.last_index
