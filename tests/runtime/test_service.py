"""The service API beyond writes: events, lease reads at a stale leader, two-step reads
below the log, a pluggable state machine, the node's config file and clean exit."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import msgpack
import pytest

from consensus.client import (FarmClient, FarmError, IndexOverflow, IndexUnderflow,
                              NotLeaderError, Unavailable)
from consensus.torture import LocalCluster
from tests.support import free_port, wait_until

pytestmark = pytest.mark.timeout(180)


def test_subscribers_see_leader_state_and_voter_events():
    with LocalCluster(3, observers=0, fsync="never", status_interval=5.0) as farm:
        leader = farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            events = []
            stream = client.subscribe(("leader-changed", "state-changed", "voters-changed"))
            reader = threading.Thread(target=lambda: events.extend(
                e for _, e in zip(range(1000), stream)), daemon=True)
            reader.start()
            wait_until(lambda: stream.link is not None, 10, message="the subscription")
            index, _ = client.append([b"observed"])
            wait_until(lambda: any(e.name == "state-changed" and e.data["applied"] >= index
                                   for e in events), 10, message="a state-changed event")
            extra = farm.spawn(observer=True)
            client.update_observers(add={extra: farm.endpoint_of(extra)})
            wait_until(lambda: any(e.name == "voters-changed" and extra in e.data["observers"]
                                   for e in events), 10, message="a voters-changed event")
            target = next(i for i in (1, 2, 3) if i != leader)
            client.transfer_leader(target, timeout=15)
            wait_until(lambda: any(e.name == "leader-changed" and e.leader_id == target
                                   for e in events), 10, message="a leader-changed event")
            stream.close()
            reader.join(10)
            assert not reader.is_alive()


def test_a_paused_leader_never_serves_a_stale_lease_read():
    with LocalCluster(3, fsync="never", status_interval=5.0) as farm:
        old = farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            client.kv_put("fresh", "old value")
        farm.pause(old)
        try:
            others = ",".join(farm.endpoint_of(i) for i in farm.node_ids if i != old)
            with farm.client(endpoints=others, timeout=20) as client:
                client.kv_put("fresh", "new value")
        finally:
            farm.resume(old)
        with farm.client(endpoints=farm.endpoint_of(old), timeout=3) as stale:
            outcomes = {}
            for consistency in ("lease", "read_index"):
                try:
                    outcomes[consistency] = stale.kv_get("fresh", consistency=consistency)
                except (NotLeaderError, Unavailable):
                    outcomes[consistency] = "refused"   # it noticed it no longer leads
            assert set(outcomes.values()) <= {"new value", "refused"}, \
                f"a stale read at the old leader: {outcomes}"

            def fresh_at_old() -> bool:
                try:
                    return stale.kv_get("fresh", consistency="read_index") == "new value"
                except (NotLeaderError, Unavailable):
                    return False
            # the reads above met a live node: once it follows, it serves the new value
            wait_until(fresh_at_old, 30, message="a read at the old leader, now following")


def test_two_step_reads_below_the_log_use_sparse_snapshots():
    args = ["--snapshot-interval", "20", "--retain-entries", "1", "--segment-bytes", "2048"]
    with LocalCluster(3, fsync="never", status_interval=5.0, extra_args=args) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:
            client.kv_put("k", "early")
            early = client.last_applied()
            for i in range(8):
                client.kv_put("k", f"v{i}")
                client.append_many([[b"pad"]] * 20)
            first, applied, snapshot = client.log_bounds()
            assert first > early, "the log was not compacted past the early index"
            query = msgpack.packb(["kv_get", "k"])

            def at_early():
                try:
                    return "answer", msgpack.unpackb(client.query_snapshot(early, query))
                except IndexUnderflow as exc:
                    return "underflow", exc.first_available
                except IndexOverflow:   # the member asked has not applied it yet: retry
                    return None
            kind, found = wait_until(at_early, 20, message=f"a two-step read at {early}")
            if kind == "answer":
                assert found == "early"            # a sparse snapshot at or below it
            else:
                assert found > early
            later = client.last_applied()

            def at_later():
                try:
                    return msgpack.unpackb(client.query_snapshot(later, query))
                except IndexOverflow:   # the member asked has not applied it yet: retry
                    return None
            assert wait_until(at_later, 20, message=f"a two-step read at {later}") == "v7"


class Counter:
    """A pluggable application state machine: counts the bytes of plain entries."""

    def __init__(self) -> None:
        self.total = 0

    def apply(self, entry) -> None:
        self.total += len(entry.data)

    def snapshot(self) -> bytes:
        return str(self.total).encode()

    def restore(self, data: bytes) -> None:
        self.total = int(data)

    def query(self, query: bytes) -> bytes:
        return str(self.total).encode()


def test_a_pluggable_state_machine_and_plain_jraft_client_requests():
    args = ["--state-machine", "tests.runtime.test_service:Counter"]
    with LocalCluster(3, fsync="never", status_interval=5.0, extra_args=args) as farm:
        leader = farm.wait_for_leader(30)
        import socket

        from consensus.net.dial import dial
        from consensus.net.security import Security
        from consensus.wire.jraft import (JRaftDecoder, LogEntry, MessageType, RaftRequest,
                                          ValueType, encode)
        dialed = dial(farm.endpoint_of(leader), Security(username=farm.username,
                                                         password=farm.password))
        sock: socket.socket = dialed.sock
        request = RaftRequest(MessageType.CLIENT_REQUEST,
                              entries=(LogEntry(0, ValueType.APPLICATION, b"12345"),))
        sock.sendall(encode(request))                       # no Hello: plain JRaft client
        sock.settimeout(10)
        decoder = JRaftDecoder()
        answers = decoder.feed(dialed.initial)
        while not answers:
            answers = decoder.feed(sock.recv(4096))
        answer = answers[0]
        assert answer.message_type == MessageType.APPEND_ENTRIES_RESPONSE and answer.accepted
        sock.close()
        with farm.client(timeout=10) as client:
            assert client.query(b"total?") == b"5"
            assert client.query(msgpack.packb(["no_such_op"])) == b"5"   # the app's too
            assert msgpack.unpackb(client.query(msgpack.packb(["applied"]))) > 0


def test_config_file_and_clean_sigterm(tmp_path):
    port = free_port()
    config = tmp_path / "node.toml"
    config.write_text(f'id = 1\nlisten = "127.0.0.1:{port}"\ndata-dir = "{tmp_path / "d"}"\n'
                      f'user = "farm"\npassword = "pw"\nstatus-interval = 0.2\n'
                      f'fsync = "always"\n')
    proc = subprocess.Popen([sys.executable, "-m", "consensus.cli", "node", "--config",
                             str(config), "--cluster", "cfg"], stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        with FarmClient(f"127.0.0.1:{port}", cluster="cfg", username="farm", password="pw",
                        timeout=20) as client:
            wait_until(lambda: _role(client) == "leader", 20, message="a one-node farm")
            client.append([b"configured"])
        proc.terminate()
        assert proc.wait(15) == 0
        err = proc.stderr.read().decode()
        assert "node 1 listening" in err and "cluster 'cfg'" in err and "node 1 stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    bad = subprocess.run([sys.executable, "-m", "consensus.cli", "node", "--config",
                          str(config), "--wire", "udp"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "--wire" in bad.stderr


def _role(client):
    try:
        return client.ping()["role"]
    except FarmError:
        return None


def test_a_fresh_client_seeded_with_a_follower_reads_its_writes_at_the_leader():
    """log_bounds and read_entries default to the leader's view. A client that knows only
    a follower learns the leader from the follower's Welcome and asks it there: the
    follower itself learns a commit index at the next tick at the latest, so it may not
    have applied a write the leader acknowledged a moment ago."""
    with LocalCluster(3, fsync="never", status_interval=5.0) as farm:
        leader = farm.wait_for_leader(30)
        follower = farm.endpoint_of(next(i for i in farm.node_ids if i != leader))
        with farm.client(timeout=10) as writer:
            for n in range(20):
                index, term = writer.append([b"w%d" % n])
                with FarmClient(follower, username=farm.username, password=farm.password,
                                cluster=farm.cluster, timeout=10) as reader:
                    [record] = reader.read_entries(index, index + 1)
                    assert (record.index, record.term, record.records) == \
                        (index, term, [b"w%d" % n])
                    assert reader.log_bounds()[1] >= index
