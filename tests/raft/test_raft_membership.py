"""Membership: JRaft's single-server flows, JournalKeeper's joint consensus and observers,
leader transfer."""
from __future__ import annotations

from dataclasses import replace

import pytest

from consensus.raft import (AppendEntries, Configuration, ConfigurationError, EntryType,
                            InstallSnapshot,
                            JoinClusterRequest, LeaveClusterRequest, MembershipChangeError,
                            NotLeader, ProposalDropped, PullEntries, Role, SyncLogRequest,
                            TimeoutNow)

from .harness import OPTIONS, Cluster

pytestmark = pytest.mark.timeout(30)


def settle(cluster: Cluster, ticks: int = 20) -> None:
    cluster.tick(ticks)


def test_add_server_invites_syncs_then_joins():
    """JRaft AddServer: JoinClusterRequest, SyncLogRequests of committed entries, and
    only then the configuration with the new voter."""
    options = replace(OPTIONS, log_sync_batch=5, log_sync_stop_gap=3)
    cluster = Cluster([1, 2, 3, 4], options, voters=[1, 2, 3])
    leader = cluster.elect(1)
    leader.propose_many([b"%d" % i for i in range(20)])
    cluster.deliver()
    seen = []
    cluster.drop = lambda m: seen.append(type(m)) and False
    leader.add_server(4, "tcp://127.0.0.1:9004")
    settle(cluster)
    assert seen.index(JoinClusterRequest) < seen.index(SyncLogRequest)
    assert seen.count(SyncLogRequest) >= 4                 # 21 entries, 5 per request
    assert leader.configuration.voters == {1, 2, 3, 4}
    assert leader.configuration.addresses[4] == "tcp://127.0.0.1:9004"
    new = cluster.nodes[4]
    assert new.configuration.voters == {1, 2, 3, 4} and new.role is Role.FOLLOWER
    assert cluster.log_terms(4) == cluster.log_terms(1)
    assert leader.progress[4].match == leader.last_index


def test_add_server_gives_up_on_a_silent_server():
    cluster = Cluster([1, 2, 3, 4], voters=[1, 2, 3])
    leader = cluster.elect(1)
    cluster.isolate(4)
    leader.add_server(4)
    settle(cluster, OPTIONS.retry * (OPTIONS.membership_retries + 2))
    assert leader.configuration.voters == {1, 2, 3}
    leader.add_server(4)                                   # free to try again


def test_add_server_uses_a_snapshot_when_entries_are_compacted():
    cluster = Cluster([1, 2, 3, 4], voters=[1, 2, 3])
    leader = cluster.elect(1)
    leader.propose_many([b"x"] * 10)
    settle(cluster, 4)
    snap = leader.snapshot_at(leader.applied_index, b"state")
    cluster.storages[1].create_snapshot(snap)
    cluster.storages[1].compact(snap.index)
    sent = []
    cluster.drop = lambda m: sent.append(m) and False
    leader.add_server(4)
    settle(cluster)
    assert any(isinstance(m, InstallSnapshot) and m.destination == 4 for m in sent)
    assert cluster.storages[4].snapshot().index == snap.index
    assert leader.configuration.voters == {1, 2, 3, 4}


def test_remove_server_asks_it_to_leave_first():
    """JRaft RemoveServer: LeaveClusterRequest, then the configuration without it; the
    removed server reports itself removed (two election timeouts later, as in JRaft)."""
    cluster = Cluster([1, 2, 3, 4])
    leader = cluster.elect(1)
    seen = []
    cluster.drop = lambda m: seen.append(m) and False
    leader.remove_server(4)
    settle(cluster, 4)
    assert any(isinstance(m, LeaveClusterRequest) and m.destination == 4 for m in seen)
    assert leader.configuration.voters == {1, 2, 3}
    gone = cluster.nodes[4]
    assert not gone.removed
    settle(cluster, OPTIONS.election_timeout_max * 3)
    assert gone.removed and gone.role is not Role.CANDIDATE and gone.soft_state().removed


def test_remove_server_refuses_the_leader_and_strangers():
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    with pytest.raises(MembershipChangeError, match="transfer leadership first"):
        leader.remove_server(1)
    with pytest.raises(MembershipChangeError, match="not a voter"):
        leader.remove_server(9)
    with pytest.raises(NotLeader):
        cluster.nodes[2].remove_server(3)


def test_one_change_at_a_time():
    cluster = Cluster([1, 2, 3, 4])
    leader = cluster.elect(1)
    cluster.deliver()
    leader.change_voters([1, 2, 3])
    with pytest.raises(MembershipChangeError, match="in progress"):
        leader.change_voters([1, 2])
    settle(cluster, 6)
    assert leader.configuration == Configuration.of([1, 2, 3])
    leader.change_voters([1, 2])                        # the previous one is done


def test_joint_change_replaces_several_voters_at_once():
    cluster = Cluster([1, 2, 3, 4, 5, 6], voters=[1, 2, 3])
    leader = cluster.elect(1)
    cluster.deliver()
    index = leader.change_voters([1, 4, 5, 6])
    settle(cluster, 10)
    for node_id in (1, 4, 5, 6):
        node = cluster.nodes[node_id]
        assert node.configuration.voters == {1, 4, 5, 6}
        assert node.commit_index > index
    for node_id in (2, 3):                  # removed, and told the change committed
        cluster.tick(OPTIONS.election_timeout_max * 3, ids=[node_id])
        assert cluster.nodes[node_id].removed


def test_observer_pulls_committed_entries_and_never_votes_or_counts():
    options = replace(OPTIONS, observer_pull_interval=1)
    cluster = Cluster([1, 2, 3, 4], options, voters=[1, 2, 3])
    observer = cluster.start(4, observer=True)
    assert observer.role is Role.OBSERVER
    leader = cluster.elect(1)
    leader.update_observers(add=[4])
    leader.propose_many([b"a", b"b"])
    pulls = []
    cluster.drop = lambda m: pulls.append(m) and False
    settle(cluster, 10)
    assert any(isinstance(m, PullEntries) and m.source == 4 for m in pulls)
    assert observer.commit_index == leader.commit_index
    assert [e.data for e in cluster.applied[4]] == [b"a", b"b"]
    assert 4 not in leader.progress                     # transparent to the leader
    assert observer.configuration.observers == {4}
    cluster.isolate(1)                                  # observers never campaign
    pulls.clear()
    cluster.tick(OPTIONS.election_timeout_max * 3, ids=[4])
    assert observer.role is Role.OBSERVER
    assert not [m for m in pulls if m.source == 4 and not isinstance(m, PullEntries)]


def test_observer_resets_from_a_snapshot_after_underflow():
    options = replace(OPTIONS, observer_pull_interval=1, snapshot_chunk_bytes=3)
    cluster = Cluster([1, 2, 3, 4], options, voters=[1, 2, 3])
    leader = cluster.elect(1)
    leader.propose_many([b"x"] * 5)
    settle(cluster, 4)
    for node_id in (1, 2, 3):
        node = cluster.nodes[node_id]
        snap = node.snapshot_at(node.applied_index, b"snapshot-data")
        cluster.storages[node_id].create_snapshot(snap)
        cluster.storages[node_id].compact(snap.index)
    observer = cluster.start(4, observer=True)
    settle(cluster, 20)
    assert cluster.storages[4].snapshot().data == b"snapshot-data"
    assert observer.commit_index == leader.commit_index


def test_observer_promoted_to_voter_starts_following():
    cluster = Cluster([1, 2, 3, 4], voters=[1, 2, 3])
    cluster.start(4, observer=True)
    leader = cluster.elect(1)
    leader.update_observers(add=[4])
    settle(cluster, 6)
    leader.change_voters([1, 2, 3, 4])
    settle(cluster, 10)
    node = cluster.nodes[4]
    assert node.role is Role.FOLLOWER and leader.progress[4].match == leader.last_index


def test_transfer_leadership_to_a_named_node():
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.isolate(3)
    leader.propose(b"behind")                          # 3 must catch up first
    cluster.deliver()
    sent = []
    cluster.drop = lambda m: sent.append(m) and False
    leader.transfer_leader(3)
    with pytest.raises(ProposalDropped, match="node 3"):
        leader.propose(b"paused")
    cluster.deliver()
    assert not any(isinstance(m, TimeoutNow) for m in sent)
    cluster.heal()
    settle(cluster, 6)
    assert any(isinstance(m, TimeoutNow) for m in sent)
    assert cluster.nodes[3].role is Role.LEADER and leader.role is Role.FOLLOWER


def test_transfer_gives_up_after_an_election_timeout():
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.isolate(3)
    leader.transfer_leader(3)
    cluster.tick(OPTIONS.election_timeout_max + 1, ids=[1])
    assert leader.transferring_to is None and leader.role is Role.LEADER
    leader.propose(b"writes resume")


def test_configuration_encoding_round_trips_and_rejects_garbage():
    config = Configuration(frozenset({1, 2}), frozenset({1, 3}), frozenset({7}), {7: "tcp://h:1"})
    assert Configuration.decode(config.encode()) == config
    assert Configuration.decode(config.encode()).addresses == {7: "tcp://h:1"}
    for bad, field in [(b"\xff", "configuration"), (b"[]", "configuration"),
                       (b'{"voters": [0]}', "voters"), (b'{"voters": ["1"]}', "voters"),
                       (b'{"voters": [1], "addresses": {"x": "y"}}', "addresses")]:
        with pytest.raises(ConfigurationError) as info:
            Configuration.decode(bad)
        assert info.value.field == field


def test_a_leader_that_removed_itself_still_campaigns_until_c_new_commits():
    """Raft dissertation §4.2.2: while C_new (without it) is uncommitted, a server that
    was a voter before may be needed to elect anyone - even if it started as an
    observer. Found by the simulator: without this, no leader could ever be elected."""
    cluster = Cluster([6, 7])
    leader = cluster.elect(7)
    cluster.deliver()

    def c_new_to_6(msg) -> bool:
        return isinstance(msg, AppendEntries) and msg.destination == 6 and any(
            e.type == EntryType.CONFIGURATION and not Configuration.decode(e.data).is_joint
            for e in msg.entries)

    cluster.drop = c_new_to_6
    joint = leader.change_voters([6])
    cluster.tick(OPTIONS.heartbeat_interval * 3, ids=[7])
    assert leader.commit_index >= joint and leader.configuration.voters == {6}
    assert cluster.nodes[6].configuration.is_joint
    cluster.drop = lambda m: False
    reborn = cluster.start(7, observer=True)  # restarts, as the observer it once was
    assert reborn.role is Role.FOLLOWER
    cluster.tick(OPTIONS.election_timeout_max * 6)
    six = cluster.nodes[6]
    assert six.role is Role.LEADER and six.configuration == Configuration.of([6])
    assert six.commit_index >= six.log.configuration_index
