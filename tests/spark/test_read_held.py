"""The driver's reads of the log (`read_held`, behind a stream's latestOffset) wait, with
backoff, for entries the leader has not applied yet: after a leader change the new
leader may be a little behind what the log's end was reported at a moment before (the
demo's raft stream failed so once, on a loaded machine)."""
from __future__ import annotations

import threading

import pytest

from consensus.client import IndexOverflow
from consensus.torture.local import LocalCluster
from pyspark_farm.log_access import read_held


def test_a_read_past_the_applied_index_waits_for_it():
    with LocalCluster(1, status_interval=5.0) as farm:
        farm.wait_for_leader()
        with farm.client(timeout=5) as client, farm.client() as writer:
            applied = client.last_applied()
            later = threading.Timer(0.3, lambda: writer.append([b"later"]))
            later.start()
            try:
                records = read_held(client, applied, applied + 2)
            finally:
                later.join()
            assert [r.index for r in records] == [applied, applied + 1]


def test_a_read_of_what_never_comes_fails_at_the_client_timeout():
    with LocalCluster(1, status_interval=60.0) as farm:
        farm.wait_for_leader()
        with farm.client(timeout=0.5) as client:
            applied = client.last_applied()
            with pytest.raises(IndexOverflow, match="is not there yet"):
                read_held(client, applied, applied + 5)
