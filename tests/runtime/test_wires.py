"""3- and 5-node clusters on each wire: elect, replicate, every member holds the same
committed log, every node's status reaches the log."""
from __future__ import annotations

import pytest

from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("wire", ["garlicfarm", "jraft", "marker"])
@pytest.mark.parametrize("nodes", [3, 5])
def test_cluster_replicates_on_every_wire(wire, nodes):
    # status entries are off by default on the raw JRaft wire: asked for here
    with LocalCluster(nodes, wire=wire, fsync="never", status_interval=0.3,
                      extra_args=["--status-entries", "on"]) as farm:
        leader = farm.wait_for_leader(30)
        with farm.client(timeout=20) as client:
            written = client.append_many([[b"%s-%d" % (wire.encode(), i)] for i in range(40)])
            assert [i for i, _ in written] == sorted({i for i, _ in written})
            client.kv_put("wire", wire)
            last = client.log_bounds()[1]

            def log_at(node_id):
                endpoint = farm.endpoint_of(node_id)
                if client.log_bounds(endpoint)[1] < last:
                    return None
                return [(r.index, r.term, r.type, r.records)
                        for r in client.read_entries(1, last + 1, endpoint=endpoint)]

            reference = wait_until(lambda: log_at(leader), 20)
            journal = [r[3][0] for r in reference if r[2] == "journal"]
            assert journal == [b"%s-%d" % (wire.encode(), i) for i in range(40)]
            for node_id in farm.node_ids:
                assert wait_until(lambda: log_at(node_id), 20,
                                  message=f"node {node_id} applying {last}") == reference
            wait_until(lambda: len([m for m in client.status().members.values()
                                    if m.status]) == nodes, 30,
                       message="every node's status in the log")


def test_raw_jraft_wire_keeps_status_json_out_of_the_log_unless_asked():
    """JRaft applications (dmprinter) take every application entry for their own data:
    on --wire jraft the status JSON is logged, not appended (issue 13.5)."""
    with LocalCluster(3, wire="jraft", fsync="never", status_interval=0.1,
                      extra_args=["--log-level", "debug"]) as farm:   # status at DEBUG
        farm.wait_for_leader(30)
        with farm.client(timeout=20) as client:
            client.append([b"only data"])
            # ten status intervals: with status entries on, each node would add ~10
            wait_until(lambda: all(_text(farm.log_path(i)).count("status: {") >= 10
                                   for i in farm.node_ids), 30, message="status log lines")
            last = client.log_bounds()[1]
            kinds = [r.type for r in client.read_entries(1, last + 1)]
            assert "status" not in kinds and kinds.count("journal") == 1, kinds


def _text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()
