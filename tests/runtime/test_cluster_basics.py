"""A 3-node garlicfarm cluster of real processes: election, replication, reads, the kv
map and the sink ledger, through FarmClient."""
from __future__ import annotations

import os

import msgpack
import pytest

from consensus.client import BatchCommit, FarmError, IndexOverflow, NotLeaderError
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(3, fsync="never", status_interval=0.5) as cluster:
        cluster.wait_for_leader(20)
        yield cluster


@pytest.fixture
def client(farm):
    with farm.client(timeout=10) as c:
        yield c


def test_append_is_replicated_to_every_member(farm, client):
    index, term = client.append([b"alpha", b"beta"])
    assert term >= 1
    for node_id in farm.node_ids:
        endpoint = farm.endpoint_of(node_id)
        wait_until(lambda: client.log_bounds(endpoint)[1] >= index, 10,
                   message=f"node {node_id} applying {index}")
        [record] = client.read_entries(index, index + 1, endpoint=endpoint)
        assert (record.index, record.term, record.type) == (index, term, "journal")
        assert record.records == [b"alpha", b"beta"]
        assert record.timestamp_ms > 0


def test_read_beyond_applied_is_index_overflow(farm, client):
    first, applied, _ = client.log_bounds()
    with pytest.raises(IndexOverflow) as info:
        client.read_entries(applied + 5, applied + 6)
    assert info.value.last_available >= applied


def test_same_request_id_applies_once(client):
    rid = b"test-request-id-1"
    first = client.append([b"once"], request_id=rid)
    again = client.append([b"once"], request_id=rid)
    assert again == first
    records = client.read_entries(first[0], first[0] + 1)
    assert records[0].records == [b"once"]


def test_kv_map(client):
    assert client.kv_get("missing-key") is None
    client.kv_put("k", "v1")
    assert client.kv_get("k") == "v1"
    assert client.kv_cas("k", "wrong", "v2") is False
    assert client.kv_cas("k", "v1", "v2") is True
    client.kv_append("k", "+")
    assert client.kv_get("k") == "v2+"
    assert client.kv_get("k", consistency="read_index") == "v2+"
    assert client.kv_cas("created", None, "x") is True
    assert client.kv_get("created", consistency="sequential") in (None, "x")


def test_ledger_commit_is_atomic_and_idempotent(client):
    a = client.stage("q1", 7, 0, 0, b"part-0")
    b = client.stage("q1", 7, 1, 0, b"part-1")
    garbage = client.stage("q1", 7, 1, 1, b"retry-attempt")
    commit = client.commit_batch("q1", 7, [a, b], metadata={"rows": 2})
    assert isinstance(commit, BatchCommit)
    assert commit.committed and not commit.duplicate and commit.index > b
    second = client.commit_batch("q1", 7, [garbage])
    assert (second.committed, second.duplicate, second.index) == (False, True, commit.index)
    assert client.last_committed_batch("q1") == 7
    status = client.batch_status("q1", 7)
    assert status.staged == (a, b) and status.metadata == {"rows": 2}
    assert client.batch_status("q1", 8) is None
    visible = list(client.read_committed(a, commit.index + 1))
    batches = [v for v in visible if v.commit is not None]
    assert [v.records for v in batches] == [[b"part-0", b"part-1"]]
    assert batches[0].commit.effective is True


def test_megabyte_payloads_read_back_whole_through_pages_of_large_frames(client):
    """Pages of staged payloads arrive as multi-megabyte Replies, which the client reads
    straight into buffers of their size (JRaftDecoder.pending_buffer)."""
    payloads = [bytes([i]) * 7 + os.urandom(3 << 19) for i in range(3)]
    staged = [client.stage("q-large", 1, i, 0, p) for i, p in enumerate(payloads)]
    commit = client.commit_batch("q-large", 1, staged)
    pages = list(client.read_committed(commit.index, commit.index + 1,
                                       max_bytes=4 << 20))
    assert [p.records for p in pages] == [payloads]
    assert all(type(r) is bytes for r in pages[0].records)


def test_a_write_above_the_entry_limit_is_refused_before_sending(client):
    with pytest.raises(FarmError, match="split it"):
        client.stage("q-big", 1, 0, 0, bytes(33 << 20))


def test_ledger_refuses_unknown_or_foreign_staged_entries(client):
    other = client.stage("q-other", 1, 0, 0, b"x")
    with pytest.raises(FarmError, match="belongs to query"):
        client.commit_batch("q2", 1, [other])
    with pytest.raises(FarmError, match="unknown"):
        client.commit_batch("q2", 1, [10 ** 9])
    assert client.batch_status("q2", 1) is None


def test_abort_then_commit_again(client):
    staged = client.stage("q3", 1, 0, 0, b"first try")
    client.abort_batch("q3", 1)
    with pytest.raises(FarmError, match="unknown"):
        client.commit_batch("q3", 1, [staged])
    again = client.stage("q3", 1, 0, 1, b"second try")
    assert client.commit_batch("q3", 1, [again]).committed


def test_sequences_are_idempotent_per_owner(client):
    start = client.allocate_sequences("producer-a", 10, owner=("q4", 1))
    assert client.allocate_sequences("producer-a", 10, owner=("q4", 1)) == start
    assert client.allocate_sequences("producer-a", 5, owner=("q4", 2)) == start + 10


def test_two_step_read_at_a_follower_equals_the_leader_state(farm, client):
    client.kv_put("two-step", "before")
    index = client.last_applied()
    client.kv_put("two-step", "after")
    leader = client.ping()["leader"]
    follower = next(i for i in farm.node_ids if i != leader)
    query = msgpack.packb(["kv_get", "two-step"])
    endpoint = farm.endpoint_of(follower)
    answer = wait_until(lambda: _snapshot_query(client, index, query, endpoint), 10,
                        message="the follower applying the index")
    assert msgpack.unpackb(answer) == "before"


def _snapshot_query(client, index, query, endpoint):
    try:
        return client.query_snapshot(index, query, endpoint=endpoint)
    except IndexOverflow:
        return None


def test_query_server_at_a_follower_is_local():
    """query_server answers from the member's own state: with the leader stopped
    (SIGSTOP) a follower still answers at once, which a forwarded query could not."""
    with LocalCluster(3) as farm, farm.client(timeout=20.0) as client:
        farm.wait_for_leader(timeout=30)
        client.kv_put("local", "1")
        leader = client.ping()["leader"]
        follower = farm.endpoint_of(next(i for i in farm.node_ids if i != leader))
        query = msgpack.packb(["kv_get", "local"])
        wait_until(lambda: msgpack.unpackb(client.query_server(follower, query)) == "1", 10)
        farm.pause(leader)
        try:
            with pytest.raises(FarmError):        # the leader really cannot answer
                with farm.client(timeout=1.0, endpoints=farm.endpoint_of(leader)) as stuck:
                    stuck.query_server(farm.endpoint_of(leader), query)
            assert msgpack.unpackb(client.query_server(follower, query)) == "1"
        finally:
            farm.resume(leader)


def test_status_entries_name_a_publisher(farm, client):
    status = wait_until(lambda: (s := client.status()).publisher is not None and
                        len([m for m in s.members.values() if m.status]) == 3 and s, 15,
                        message="every node's status in the log")
    assert status.publisher in farm.node_ids
    member = status.members[status.leader_id]
    assert member.role == "leader" and member.status["cluster"] == "farm"
    assert status.to_dict()["members"][str(status.leader_id)]["voter"] is True


def test_client_knowing_only_a_follower_finds_the_leader(farm, client):
    leader = client.ping()["leader"]
    follower = farm.endpoint_of(next(i for i in farm.node_ids if i != leader))
    with farm.client(endpoints=follower) as lone:
        index, _ = lone.append([b"via a follower"])
        assert lone.read_entries(index, index + 1)[0].records == [b"via a follower"]
        with pytest.raises(NotLeaderError) as info:
            lone._call("transfer_leader", {"to": leader}, endpoint=follower)  # noqa: SLF001
    assert info.value.leader_id == leader
    assert info.value.leader_endpoint == farm.endpoint_of(leader)
    assert info.value.members == {i: farm.endpoint_of(i) for i in farm.node_ids}


def test_any_password_reaches_the_nodes_and_stays_off_their_command_lines(tmp_path):
    """A password that starts with "-" once made every node exit at start (argparse read
    it as an option): the farm then waited 30 s for a leader that could not come."""
    password = "-looks-like-an-option"
    with LocalCluster(1, data_dir=str(tmp_path / "farm"), password=password,
                      fsync="never") as cluster:
        cluster.wait_for_leader(20)
        with cluster.client(timeout=10) as c:
            assert c.append([b"in"])[0] >= 1
        pid = cluster._procs[1].pid
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert password.encode() not in f.read()
        assert os.stat(tmp_path / "farm" / "credentials").st_mode & 0o077 == 0


def test_nodes_that_exit_at_start_fail_the_wait_at_once_with_their_logs(tmp_path):
    with LocalCluster(2, data_dir=str(tmp_path / "farm"),
                      extra_args=["--no-such-option"]) as cluster:
        with pytest.raises(FarmError) as failure:
            cluster.wait_for_leader(60)
    message = str(failure.value)
    assert "every node exited" in message
    assert "node 1 (exited with 2)" in message and "node 2 (exited with 2)" in message
    assert "--no-such-option" in message      # argparse's complaint, from the log's tail
