"""Issue 18 at the runtime level: the staged entries a committed (or still open) batch
needs survive snapshots, InstallSnapshot and restarts at every member (retention.py)."""
from __future__ import annotations

import pytest

from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(180)

COMPACTING = ["--snapshot-interval", "50", "--retain-entries", "60", "--segment-bytes", "4096"]


def _members_bounds(client, farm):
    return {i: client.log_bounds(farm.endpoint_of(i)) for i in farm.node_ids}


def test_a_member_caught_up_by_snapshot_holds_every_staged_entry_of_its_batches():
    with LocalCluster(3, fsync="never", status_interval=5.0, extra_args=COMPACTING) as farm:
        leader = farm.wait_for_leader(30)
        lagging = next(i for i in farm.node_ids if i != leader)
        farm.stop(lagging)
        with farm.client(timeout=20) as client:
            client.append_many([[b"journal %d" % i] for i in range(300)])
            staged = [client.stage("q", 1, p % 4, 0, b"payload %d" % p) for p in range(240)]
            open_batch = [client.stage("q", 2, 0, 0, b"open %d" % p) for p in range(60)]
            commit = client.commit_batch("q", 1, staged, metadata={"rows": [1] * 240})
            assert commit.committed
            client.append_many([[b"tail %d" % i] for i in range(5)])
            end = client.last_applied() + 1
            leader_first, _, leader_snapshot = client.log_bounds()
            # The condition that lost entries before: the leader's latest snapshot is past
            # the batch's first staged entry (a member installing it alone lacks them).
            assert leader_snapshot > staged[0] and leader_first <= staged[0]
            farm.restart(lagging)
            where = farm.endpoint_of(lagging)
            wait_until(lambda: client.log_bounds(where)[1] >= end - 1, 60,
                       message=f"node {lagging} catching up")
            for member in farm.node_ids:     # read at each below: each has applied it
                wait_until(lambda: client.log_bounds(farm.endpoint_of(member))[1] >= end - 1,
                           30, message=f"node {member} applying the batch")
            first, _, snapshot = client.log_bounds(where)
            assert snapshot > 0, "the restarted member did not install a snapshot"
            assert first <= staged[0], (f"node {lagging}'s log starts at {first}, after the "
                                        f"batch's first staged entry {staged[0]}")
            expected = [b"payload %d" % p for p in range(240)]
            for member in farm.node_ids:
                visible = list(client.read_committed(commit.index, commit.index + 1,
                                                     endpoint=farm.endpoint_of(member)))
                assert [v.records for v in visible] == [expected], f"at node {member}"
            # A commit that comes after the snapshot finds every payload it names.
            late = client.commit_batch("q", 2, open_batch, metadata={"rows": [1] * 60})
            assert late.committed
            for member in farm.node_ids:
                wait_until(lambda: client.log_bounds(farm.endpoint_of(member))[1] >= late.index,
                           30, message=f"node {member} applying the late commit")
            for member in farm.node_ids:
                visible = list(client.read_committed(late.index, late.index + 1,
                                                     endpoint=farm.endpoint_of(member)))
                assert [v.records for v in visible] == [[b"open %d" % p for p in range(60)]]
