"""garlicfarm nodes (`--wire jraft`) in one Raft cluster with JRaft's dmprinter nodes.

dmprinter's timers are fixed (App.java): elections after 3-5 s, heartbeats every 1.5 s, so
our nodes run with election timeouts of the same order (a follower that times out
between two JRaft heartbeats would disrupt a JRaft leader: the JRaft wire has no
pre-vote). Messages are found by content, never by counting entries: our nodes also
append status entries (issue 13, item 5), which JRaft applications take as messages.
"""
from __future__ import annotations

import msgpack
import pytest

from consensus.wire.jraft import MessageType
from tests.interop.support import jraft_client_request
from tests.support import count_link_attempts, wait_until

pytestmark = pytest.mark.timeout(120)

# 1.5-3 s, below JRaft's shortest election timeout (3 s): when a JRaft node and one of
# ours could both campaign, ours does first. Only where our nodes lead: as followers of
# a JRaft leader (1.5 s heartbeats) ours get 300 ticks (3-6 s).
FARM_ELECTION = ("--election-ticks", "150")


def farm_messages(client, endpoint: str) -> dict[int, bytes]:
    """index -> bytes of the application entries a garlicfarm member committed that are
    neither farm commands nor status entries (dmprinter's messages)."""
    first, commit, _ = client.log_bounds(endpoint)
    found: dict[int, bytes] = {}
    index = first
    while index <= commit:
        page = client.read_entries(index, commit + 1, endpoint=endpoint)
        for record in page:
            if record.type == "control":
                found[record.index] = record.payload
        index = page[-1].index + 1
    return found


def wait_committed_on_farm(cluster, client, node_id: int, index: int, body: str,
                           timeout: float = 20.0) -> None:
    """Wait until our member committed `index`; its message there must be `body`."""
    wait_until(lambda: cluster.commit_of(node_id) >= index, timeout,
               message=f"farm node {node_id} to commit {index}\n{cluster.describe()}")
    assert farm_messages(client, cluster.farm[node_id].endpoint).get(index) == body.encode()


def wait_jraft_commit(node, index: int, timeout: float = 20.0) -> str:
    return wait_until(lambda: node.commits().get(index), timeout,
                      message=f"jraft node {node.id} to commit {index}")


def test_one_jraft_node_with_two_farm_nodes_both_ways(mixed):
    """1 JRaft + 2 garlicfarm: our leader replicates to JRaft; writes both ways; our
    leader killed, our other node elected with JRaft's vote; the dead node catches up."""
    cluster = mixed([3], [1, 2], FARM_ELECTION)
    cluster.start_jraft(3)
    cluster.start_farm(1, 2)        # node 1, the lowest id, campaigns as it starts
    jraft, one, two = cluster.jraft[3], cluster.farm[1], cluster.farm[2]
    with cluster.client() as client:
        wait_until(lambda: (cluster.ping(1) or {}).get("role") == "leader", 30,
                   message=f"node 1 to lead\n{cluster.describe()}")
        term = cluster.ping(1)["term"]

        # garlicfarm -> JRaft: FarmClient journal appends reach dmprinter at their index.
        appended = [client.append([f"farm-a-{k}".encode()]) for k in range(3)]
        for k, (index, entry_term) in enumerate(appended):
            assert entry_term == term
            assert f"farm-a-{k}" in wait_jraft_commit(jraft, index)

        # JRaft -> garlicfarm: a dmprinter client write on the JRaft follower is
        # forwarded to our leader (ClientRequest), committed, applied, answered.
        body = jraft.write("from-dmprinter-1")
        index = jraft.index_of(body)
        for node in (1, 2):
            wait_committed_on_farm(cluster, client, node, index, body)

        # JRaft's client protocol straight to our leader (no handshake): type-4 answer.
        values = [b"raw-1:jraft-client-a", b"raw-2:jraft-client-b"]
        answer = jraft_client_request(one.endpoint, values)
        assert answer.message_type == MessageType.APPEND_ENTRIES_RESPONSE and answer.accepted
        last = answer.next_index - 1
        assert wait_jraft_commit(jraft, last - 1) == values[0].decode()
        assert wait_jraft_commit(jraft, last) == values[1].decode()
        wait_committed_on_farm(cluster, client, 2, last, values[1].decode())

        # The leader dies: the survivors are one JRaft node and one of ours, so whoever
        # wins needed the other implementation's vote. Ours times out first.
        one.kill()
        wait_until(lambda: (cluster.ping(2) or {}).get("role") == "leader", 30,
                   message=f"node 2 to lead\n{cluster.describe()}")
        new_term = cluster.ping(2)["term"]
        assert new_term > term
        body = jraft.write("after-election", timeout=30)
        index = jraft.index_of(body)
        wait_committed_on_farm(cluster, client, 2, index, body)
        index, entry_term = client.append([b"farm-after-election"])
        assert entry_term == new_term
        assert "farm-after-election" in wait_jraft_commit(jraft, index)

        # The killed leader restarts as a follower and gets what it missed.
        one.start()
        wait_until(lambda: (cluster.ping(1) or {}).get("leader") == 2, 30,
                   message=f"node 1 to follow node 2\n{cluster.describe()}")
        wait_until(lambda: cluster.commit_of(1) >= index, 20,
                   message="node 1 to catch up")
        assert farm_messages(client, one.endpoint)[jraft.index_of(body)] == body.encode()


def test_two_jraft_nodes_with_one_farm_node_both_ways(mixed):
    """2 JRaft + 1 garlicfarm: a JRaft leader replicates to our node; our follower
    redirects JRaft clients; the JRaft leader killed, the survivors (JRaft and ours)
    elect; writes go through; the killed JRaft node restarts and catches up."""
    cluster = mixed([1, 2], [3], ("--election-ticks", "300"))
    cluster.start_jraft(1, 2)
    first = cluster.jraft[1].write("jraft-only", timeout=40)   # the JRaft pair elected
    cluster.start_farm(3)
    ours = cluster.farm[3]
    with cluster.client() as client:
        view = wait_until(lambda: (lambda p: p if p and p.get("leader") in (1, 2) and
                                   p.get("role") == "follower" else None)(
            cluster.ping(3)), 30, message=f"node 3 to follow\n{cluster.describe()}")
        leader = cluster.jraft[view["leader"]]
        other = cluster.jraft[3 - view["leader"]]

        # JRaft -> garlicfarm: entries written before and after our node joined.
        wait_committed_on_farm(cluster, client, 3, cluster.jraft[1].index_of(first), first)
        bodies = [leader.write("via-leader"), other.write("via-follower")]
        for body in bodies:
            index = leader.index_of(body)
            assert other.index_of(body) == index
            wait_committed_on_farm(cluster, client, 3, index, body)

        # A JRaft client at our follower is told who leads (type 4, destination).
        answer = jraft_client_request(ours.endpoint, [b"raw:refused"])
        assert not answer.accepted and answer.destination == leader.id
        assert "raw:refused" not in "".join(leader.commits().values())

        # The JRaft leader dies: JRaft `other` and our node 3 elect one of them, each
        # needing the other's vote.
        leader.kill()
        body = other.write("after-election", timeout=40)
        index = other.index_of(body)
        wait_committed_on_farm(cluster, client, 3, index, body)
        view = cluster.ping(3)
        assert view["leader"] in (other.id, 3) and view["term"] >= 2
        if view["leader"] == 3:       # ours won: FarmClient writes reach JRaft as well
            index, _ = client.append([b"farm-leads"])
            assert "farm-leads" in wait_jraft_commit(other, index)

        # The killed JRaft node restarts from its saved state and catches up.
        leader.start()
        assert wait_jraft_commit(leader, index, 30) == other.commits()[index]
        assert leader.index_of(body) == other.index_of(body)


def test_snapshot_from_a_farm_leader_to_a_lagging_jraft_follower(mixed, procs):
    """Our leader compacts past a JRaft follower cut off by a fault proxy; when the link
    heals, dmprinter installs our snapshot (its bytes are our state machine's) and then
    commits the entries after it. The follower is cut off, not restarted: a restarted
    JRaft follower is flooded by our leader (issue 13, item 1), another test's concern."""
    from consensus.torture.faultproxy import FaultProxy
    proxy = FaultProxy()
    procs.on_close(proxy.close)
    cluster = mixed([3], [1, 2], ("--election-ticks", "150", "--snapshot-interval", "40",
                                  "--retain-entries", "5", "--segment-bytes", "4096"))
    jraft = cluster.jraft[3]
    for i, node in cluster.farm.items():
        node.args += ["--peer-address", f"3={proxy.add_link(i, jraft.endpoint)}"]
    cluster.start_jraft(3)
    cluster.start_farm(1, 2)
    with cluster.client() as client:
        client.kv_put("snap-key", "snap-value")
        index, _ = client.append([b"before-the-cut"])
        assert "before-the-cut" in wait_jraft_commit(jraft, index)
        held = cluster.commit_of(1)         # JRaft holds everything up to here
        wait_jraft_commit(jraft, held)

        proxy.block(1)
        proxy.block(2)
        for batch in range(6):          # a snapshot every 40 entries, compaction behind
            client.append_many([[f"cut-{batch}-{k}".encode()] for k in range(60)])
        first, commit, snapshot = client.log_bounds(cluster.farm[1].endpoint)
        assert first > held + 1, "the leader's log must start past what JRaft holds"
        assert not jraft.snapshots()
        proxy.heal()

        final, _ = client.append([b"after-the-heal"])
        assert "after-the-heal" in wait_jraft_commit(jraft, final, 30)
    (snap_index, _, path), = jraft.snapshots()
    assert held < snap_index < final
    state = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    assert state["applied"] == snap_index and state["kv"] == {"snap-key": "snap-value"}
    assert jraft.restored_lines(), "dmprinter applied no snapshot"
    commits = jraft.commits()
    assert set(range(snap_index + 1, final + 1)) <= set(commits)
    assert not set(range(held + 1, snap_index + 1)) & set(commits)


def test_snapshot_from_a_jraft_leader_to_a_lagging_farm_follower(mixed):
    """JRaft snapshots every 5,000 entries and compacts; our follower, down meanwhile,
    is sent the snapshot when it returns, then the entries after it. (Down for fewer
    than 1,000 entries: a JRaft leader cannot read entries older than its 1,000-entry
    buffer, FileBasedSequentialLogStore.getLogEntries, and stalls.)"""
    cluster = mixed([1, 2], [3], ("--election-ticks", "300"))
    cluster.start_jraft(1, 2)
    cluster.jraft[1].write("jraft-only", timeout=40)
    cluster.start_farm(3)
    ours = cluster.farm[3]
    with cluster.client() as client:
        view = wait_until(lambda: (lambda p: p if p and p.get("leader") in (1, 2) else None)(
            cluster.ping(3)), 30, message=f"node 3 to follow\n{cluster.describe()}")
        leader = cluster.jraft[view["leader"]]

        def send(batches: range, follow: bool) -> int:
            for b in batches:
                answer = jraft_client_request(leader.endpoint, [
                    f"k{b}-{k}:bulk".encode() for k in range(100)])
                assert answer.accepted
                if follow:      # keep node 3 within JRaft's buffer (see above)
                    wait_until(lambda: cluster.commit_of(3) >= answer.next_index
                               - 1, 30, message="node 3 to follow the bulk")
            return answer.next_index - 1

        last = send(range(47), follow=True)
        ours.kill()
        last = send(range(47, 53), follow=False)
        (snap_index, _, _), = wait_until(leader.snapshots, 30, message="a JRaft snapshot")
        assert snap_index > 4800
        ours.start()
        body = leader.write("after-the-snapshot")
        index = leader.index_of(body)
        wait_until(lambda: not ours.running() or cluster.commit_of(3) >= index,
                   30, message="node 3 to catch up")
        assert ours.running(), f"node 3 exited:\n{ours.log()[-1500:]}"
        assert client.log_bounds(ours.endpoint)[0] > snap_index
        assert farm_messages(client, ours.endpoint)[index] == body.encode()
        assert last < index


def test_a_restarted_jraft_follower_catches_up_from_a_compacting_farm_leader(mixed):
    """Issue 13.1's reproduction: stop the JRaft follower, write 300 entries through our
    leader (snapshots every 40, 5 entries kept), restart it. Our leader used to announce
    its whole commit index to the empty-logged follower, which JRaft trusts; JRaft then
    refused every snapshot and our leader resent at once, forever (88,021 requests in
    40 s). Now JRaft installs the snapshot and commits what follows."""
    cluster = mixed([3], [1, 2], ("--election-ticks", "150", "--snapshot-interval", "40",
                                  "--retain-entries", "5", "--segment-bytes", "4096"))
    cluster.start_jraft(3)
    cluster.start_farm(1, 2)
    jraft = cluster.jraft[3]
    with cluster.client() as client:
        index, _ = client.append([b"before-the-stop"])
        wait_jraft_commit(jraft, index)
        jraft.kill()
        wait_until(lambda: not jraft.running(), 20, message="the JRaft node to die")
        for batch in range(6):
            client.append_many([[f"away-{batch}-{k}".encode()] for k in range(50)])
        first = client.log_bounds(cluster.farm[1].endpoint)[0]
        assert first > index + 1, "the leader's log must start past what JRaft holds"
        jraft.start()
        final, _ = client.append([b"after-the-restart"])
        assert "after-the-restart" in wait_jraft_commit(jraft, final, 40)
    leader_log = cluster.farm[1].log() + cluster.farm[2].log()
    refused = leader_log.count("refused snapshot")
    assert refused <= 4, f"our leader logged {refused} refused snapshots"


def test_a_client_of_a_farm_follower_under_a_jraft_leader_backs_off_and_says_why(
        mixed, monkeypatch):
    """Issue 13.2's reproduction: FarmClient(<our follower>).append(...) while a JRaft
    node leads: the members name a leader that does not speak the Garlic Farm handshake.
    It opened 1,422 connections in 5 s; now a handful, and the error says why."""
    from consensus.client import FarmError
    attempts = count_link_attempts(monkeypatch)
    cluster = mixed([1, 2], [3], ("--election-ticks", "300"))   # the JRaft pair leads
    cluster.start_jraft(1, 2)
    cluster.start_farm(3)
    view = wait_until(lambda: (lambda p: p if p and p.get("leader") in (1, 2) else None)(
        cluster.ping(3)), 40, message=f"node 3 to follow a JRaft leader\n{cluster.describe()}")
    ours = cluster.farm[3].endpoint
    with cluster.client(endpoints=ours, timeout=5) as client:
        with pytest.raises(FarmError) as failed:
            client.append([b"x"])
    assert "does not speak the Garlic Farm handshake" in str(failed.value)
    assert cluster.jraft[view["leader"]].endpoint in str(failed.value)
    assert 1 <= attempts[ours] <= 10 and sum(attempts.values()) <= 40, attempts
