"""Hostile subscriptions and malformed ZMTP at every CHP server socket facing the
network (issue 26 item 7): the server survives, cuts oversized and too many
subscriptions, and its memory comes back. Old code: one 4 MiB subscription took the
server from 159 to 509 MB and kept it (the publisher accepted frames of 16 MiB)."""
from __future__ import annotations

import pytest

from connectors.chp import ChpConfigError
from connectors.chp.client import CloneClient
from tests.support import wait_until
from tests.zmtp import RawPeer, probe, rss_mb

pytestmark = pytest.mark.timeout(60)


def test_no_input_kills_the_server_and_memory_comes_back(servers):
    server = servers("victim")
    pid, port = server.proc.pid, server.port
    before = rss_mb(pid)
    cut = probe(f"tcp://127.0.0.1:{port + 1}", subscriptions=100)
    assert all(cut), cut    # each oversized subscription and the flood: cut
    # the snapshot ROUTER and the collector SUB: frames up to 16 MiB + 1, garbage
    probe(f"tcp://127.0.0.1:{port}", socket_type=b"DEALER", cut_within=0.2)
    probe(f"tcp://127.0.0.1:{port + 2}", socket_type=b"PUB", cut_within=0.2)
    assert server.proc.poll() is None, server.log()
    wait_until(lambda: rss_mb(pid) - before < 20, 10,
               message=f"RSS ({rss_mb(pid):.0f} MB) back within 20 MB of {before:.0f} MB")
    assert "refused" in server.log()
    with CloneClient([server.address], b"/s/") as client:   # still serving
        client.set(b"/s/k", b"v")
        wait_until(lambda: client.get(b"/s/k") == b"v", 10)


def test_a_client_is_told_its_subtree_is_too_long():
    with pytest.raises(ChpConfigError, match="max_subtree_bytes"):
        CloneClient(["127.0.0.1:1"], b"x" * 5000)
