"""Server and client end to end: server processes on 127.0.0.1, real sockets."""
from __future__ import annotations

import math
import time

import pytest
import zmq

from connectors.chp import proto
from connectors.chp.client import CloneClient
from connectors.chp.errors import ChpTimeout, ChpConfigError
from connectors.chp.proto import Channel
from tests.chp.support import free_port_span
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def drain(watch, count: int, timeout: float = 10.0) -> list:
    """The next `count` changes of a watch, failing after `timeout`."""
    deadline = time.monotonic() + timeout
    out = []
    while len(out) < count:
        entry = watch.get(max(0.0, deadline - time.monotonic()))
        assert entry is not None, f"only {len(out)} of {count} changes: {out}"
        out.append(entry)
    return out


def test_snapshot_then_live_updates(servers):
    server = servers("s")
    with CloneClient(server.address) as writer:
        writer.wait_synced(10)
        sequences = [writer.set(f"/s/{n}", f"v{n}", confirm=True).sequence for n in range(3)]
        assert sequences == [1, 2, 3]
        with CloneClient(server.address) as reader:
            assert reader.wait_synced(10) == 3
            assert reader.items() == [(b"/s/0", b"v0"), (b"/s/1", b"v1"), (b"/s/2", b"v2")]
            snap = reader.snapshot("/s/")
            assert snap.sequence == 3 and snap.entries[b"/s/1"].sequence == 2
            watch = reader.watch()
            writer.set("/s/3", "v3")
            writer.delete("/s/0")
            added, deleted = drain(watch, 2)
            assert (added.key, added.sequence, added.body) == (b"/s/3", 4, b"v3")
            assert (deleted.key, deleted.sequence, deleted.deleted) == (b"/s/0", 5, True)
            assert reader.get("/s/0") is None and reader.get("/s/3") == b"v3"
            assert reader.sequence == 5


def test_subtree_filtering(servers):
    server = servers("s")
    with CloneClient(server.address) as writer:
        writer.wait_synced(10)
        for key in ("/a/1", "/b/1", "/ab"):
            writer.set(key, "x", confirm=True)
        with CloneClient(server.address, subtree="/a/") as reader:
            reader.wait_synced(10)
            assert reader.items() == [(b"/a/1", b"x")]
            watch = reader.watch(include_snapshot=True)
            assert drain(watch, 1)[0].key == b"/a/1"
            for key in ("/b/2", "/a/2", "/abc", "HUGZY", "/a/3"):
                writer.set(key, "y")
            keys = [e.key for e in drain(watch, 2)]
            assert keys == [b"/a/2", b"/a/3"]
            assert watch.get(0.3) is None
            assert [k for k, _ in reader.items()] == [b"/a/1", b"/a/2", b"/a/3"]
            with pytest.raises(ChpConfigError, match="subtree"):
                reader.set("/b/9", "z", confirm=True)


def test_ttl_expiry_reaches_every_client_as_a_delete(servers):
    server = servers("s")
    with CloneClient(server.address) as everything, \
            CloneClient(server.address, subtree="/t/") as subtree:
        everything.wait_synced(10)
        subtree.wait_synced(10)
        watches = [everything.watch(), subtree.watch()]
        sent, sent_ms = time.monotonic(), int(time.time() * 1000)
        receipt = subtree.set("/t/x", "temp", ttl=0.6, confirm=True)
        confirmed_ms = math.ceil(time.time() * 1000)   # the server rounds its clock's ms
        for watch in watches:
            update, delete = drain(watch, 2)
            assert update.key == delete.key == b"/t/x"
            assert update.body == b"temp" and delete.deleted
            assert delete.sequence == receipt.sequence + 1 and delete.uuid == receipt.uuid
            # the server's absolute ttl, in epoch ms, set when it received the KVSET
            expiry_ms = proto.parse_absolute_ttl(delete.properties.split(b"=")[1].strip())
            assert sent_ms + 600 <= expiry_ms <= confirmed_ms + 600
        # not before its ttl: sent_ms truncates (up to 1 ms early) and the server's
        # expiry is in whole ms of another clock (up to 1 ms more)
        assert time.monotonic() - sent >= 0.6 - 0.002
        assert everything.get("/t/x") is None and subtree.get("/t/x") is None


def test_restart_with_data_dir_keeps_the_map_and_sequences_increasing(servers, tmp_path):
    data = tmp_path / "data"
    server = servers("s", "--data-dir", str(data), "--hugz-interval", "0.2")
    with CloneClient(server.address) as client:
        client.wait_synced(10)
        client.set("/p/1", "one", confirm=True)
        client.set("/p/2", "two", ttl=3600, confirm=True)
        client.delete("/p/1", confirm=True)
    with CloneClient(server.address) as fresh:   # the server's stored form, via KVSYNC
        fresh.wait_synced(10)
        before = fresh.snapshot()
        assert before.sequence == 3 and list(before.entries) == [b"/p/2"]
    server.kill()   # SIGKILL: only what was fsynced counts
    server.start()
    with CloneClient(server.address) as client:
        assert client.wait_synced(10) == 3
        after = client.snapshot()
        assert after.entries == before.entries
        assert client.set("/p/3", "three", confirm=True).sequence == 4


def test_a_client_follows_a_server_that_restarted_without_its_data(servers):
    server = servers("s", "--hugz-interval", "0.2")
    with CloneClient(server.address, server_timeout=5.0) as client:
        client.wait_synced(10)
        for n in range(3):
            client.set(f"/r/{n}", "old", confirm=True)
        watch = client.watch()
        server.kill()
        server.start()   # sequence back to 0: the reference client would ignore it forever
        deletes = drain(watch, 3)
        assert sorted(e.key for e in deletes) == [b"/r/0", b"/r/1", b"/r/2"]
        assert all(e.deleted for e in deletes)
        assert client.set("/r/new", "fresh", confirm=True).sequence == 1
        assert client.items() == [(b"/r/new", b"fresh")]


def _raw_kvset(key: bytes, body: bytes) -> list[bytes]:
    return proto.encode(proto.Kvset(key, 0, bytes(16), b"", body))


def test_malformed_frames_are_survived(servers):
    server = servers("s")
    ctx = zmq.Context()
    try:
        pub = ctx.socket(zmq.XPUB)
        pub.linger = 0
        pub.connect(f"tcp://127.0.0.1:{server.port + 2}")
        assert pub.poll(10000), "the collector never subscribed"
        pub.recv()
        garbage = [
            [b"only", b"two"],                                   # too few frames
            [b"/k", bytes(7), b"", b"", b"v"],                   # short sequence
            [b"/k", bytes(8), b"shortuuid", b"", b"v"],          # bad uuid
            [b"/k", bytes(8), b"", b"no-equals\n", b"v"],        # bad properties
            [b"/k", bytes(8), b"", b"ttl=soon\n", b"v"],         # bad ttl
            [b"HUGZ", bytes(8), b"", b"", b"v"],                 # reserved key
            [b"/k", bytes(8), b"", b"", b"v", b"6", b"7"],       # too many frames
            [b""],                                               # empty
        ]
        for n, frames in enumerate(garbage):
            pub.send_multipart(frames)
            pub.send_multipart(_raw_kvset(b"/ok/%d" % n, b"after"))
        expected = [(b"/ok/%d" % n, b"after") for n in range(len(garbage))]
        with CloneClient(server.address) as client:
            client.wait_synced(10)
            # every valid KVSET sent right after a malformed one was applied, in order
            wait_until(lambda: client.items() == expected, 10, message="the valid KVSETs")
            assert client.sequence == len(garbage)
            assert client.set("/still/alive", "yes", confirm=True).sequence == len(garbage) + 1
        dealer = ctx.socket(zmq.DEALER)
        dealer.linger = 0
        dealer.connect(f"tcp://127.0.0.1:{server.port}")
        dealer.send_multipart([b"GIMME", b""])                  # unknown request
        dealer.send_multipart([b"ICANHAZ?", b"/", b"extra"])    # too many frames
        dealer.send_multipart([b"ICANHAZ?"])                    # no subtree frame: all keys
        replies = []
        while not replies or replies[-1][0] != b"KTHXBAI":
            assert dealer.poll(10000), f"no KTHXBAI, got {replies}"
            replies.append(dealer.recv_multipart())
        kthxbai = proto.decode(replies[-1], Channel.SNAPSHOT_REPLY)
        assert kthxbai.sequence == len(garbage) + 1
        assert len(replies) - 1 == len(garbage) + 1
        assert not dealer.poll(200), "the malformed requests must get no answer"
        assert server.proc.poll() is None
        assert server.log().count("dropped a malformed message") >= len(garbage) + 2
    finally:
        ctx.destroy(linger=0)


def test_client_errors_name_what_is_wrong():
    with pytest.raises(ChpConfigError, match="HOST:PORT"):
        CloneClient("localhost")
    port = free_port_span()
    with CloneClient(f"127.0.0.1:{port}", server_timeout=0.2) as client:
        with pytest.raises(ChpTimeout, match=f"127.0.0.1:{port}"):
            client.wait_synced(0.5)
        with pytest.raises(ChpConfigError, match="reserved"):
            client.set("HUGZ", "x")
        with pytest.raises(ChpConfigError, match="uuid"):
            client.set("/k", "x", uuid=b"short")
        with pytest.raises(ChpConfigError, match="ttl"):
            client.set("/k", "x", ttl=0)
        assert client.failovers >= 1


def test_set_waits_for_the_collector_so_a_short_lived_client_loses_nothing(servers):
    server = servers("s")
    for n in range(5):   # each client sends at once, before any subscription settled
        with CloneClient(server.address, subtree="/quick/") as client:
            client.set(f"/quick/{n}", "v")
            wait_until(lambda: client.synced and client.get(f"/quick/{n}") == b"v", 10,
                       message=f"/quick/{n} to arrive")
    with CloneClient(server.address) as reader:
        assert reader.wait_synced(10) == 5
