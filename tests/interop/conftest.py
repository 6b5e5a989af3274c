"""Fixtures for the interoperability tests against the real reference implementations.

The peers live beside the repository, in ``<repo root>/../shared/peers`` (its README.md
says what each is and its quirks): JRaft's dmprinter (a jar and run-node.sh), zeromq/dafka's
C tools with CZMQ, and the zguide's Python Clone examples. CI always has that folder;
without it every test here is skipped, with the path in the reason. A missing runtime
dependency of a peer (Java, a Debian library) is *not* a skip: the test fails and the
peer's own message names the package (.ci/run installs them).

Everything binds 127.0.0.1 on ports nobody else uses. Every process a test starts is
registered in the `procs` bag and killed at teardown, whatever happened, and every wait
is a condition with a deadline (`tests.support.wait_until`).
"""
from __future__ import annotations

import pytest

from tests.interop import support
from tests.interop.support import DafkaPeers, MixedCluster, Processes, Zguide


@pytest.fixture(autouse=True)
def _peers_present() -> None:
    if not support.PEERS.is_dir():
        pytest.skip(f"the reference peers are not there: {support.PEERS} is absent (CI "
                    f"provides it as ../shared/peers beside the clone)")


@pytest.fixture
def procs(tmp_path):
    bag = Processes(tmp_path)
    try:
        yield bag
    finally:
        bag.close()


@pytest.fixture
def mixed(procs, tmp_path):
    """`mixed(jraft_ids, farm_ids, farm_args)`: a MixedCluster (nothing started yet)."""
    def make(jraft_ids, farm_ids, farm_args=()) -> MixedCluster:
        return MixedCluster(procs, tmp_path, jraft_ids, farm_ids, farm_args)
    return make


@pytest.fixture
def cdafka(procs, tmp_path):
    return DafkaPeers(procs, tmp_path)


@pytest.fixture
def dafka_nodes():
    """`dafka_nodes(node)` starts one of our Dafka nodes (Store, Producer, Consumer,
    Tower) and stops it at teardown; `dafka_nodes.stop(node)` stops it earlier."""
    started: list = []

    def start(node, **kwargs):
        started.append(node)
        return node.start(**kwargs)

    def stop(node) -> None:
        node.stop()
        if node in started:
            started.remove(node)

    start.stop = stop
    yield start
    for node in reversed(started):
        node.stop()


@pytest.fixture
def zguide(procs, tmp_path):
    return Zguide(procs, tmp_path)

