"""The bulk snapshot extension (KVBULK): the codec against good, corrupt and truncated
input, the slicing, and real server processes answering our client in bulk, zguide-style
clients with KVSYNCs only, and everyone with KVSYNCs under --no-bulk."""
from __future__ import annotations

import struct
import threading

import pytest
import zmq
from hypothesis import given, settings, strategies as st

from connectors.chp import bulk, proto
from connectors.chp.client import CloneClient, Update, read_snapshot
from connectors.chp.kvmap import Entry
from connectors.chp.proto import Channel
from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)
from tests.support import wait_until

U = [bytes([n]) * 16 for n in range(256)]


def entries(count: int, start: int = 0) -> list[Entry]:
    return [Entry(b"/b/%06d" % n, n + 1, U[n % 256] if n % 3 else b"",
                  b"ttl=%d\nx=a=b\n" % (1_700_000_000_000 + n) if n % 5 == 0 else b"",
                  b"v%d" % n * (1 + n % 4)) for n in range(start, start + count)]


def rows(items) -> list[tuple]:
    return [(e.key, e.sequence, e.uuid, e.properties, e.body) for e in items]


# ----------------------------------------------------------------- codec
def test_round_trip_through_decode_and_encode():
    given_entries = entries(100)
    frames = proto.encode_bulk(given_entries)
    assert len(frames) == proto.BULK_FRAMES and frames[0] == proto.KVBULK
    for channel in (Channel.SNAPSHOT_REPLY, None):
        msg = proto.decode(frames, channel)
        assert isinstance(msg, proto.KvBulk) and msg.count == 100
        assert rows(msg.entries()) == rows(given_entries)
        assert proto.encode(msg) == frames
    assert list(msg.rows()) == rows(given_entries)
    assert msg.key_offsets.dtype.name == "int32" and msg.sequences.dtype.name == "int64"
    empty = proto.decode_bulk(proto.encode_bulk([]))
    assert empty.count == 0 and list(empty.key_offsets) == [0]


def test_json_shows_a_kvbulk_as_its_kvsyncs():
    import json
    msg = proto.decode_bulk(proto.encode_bulk(entries(4)))
    obj = json.loads(json.dumps(proto.to_json(msg)))
    assert obj["message"] == "KVBULK" and [e["message"] for e in obj["entries"]] == \
        ["KVSYNC"] * 4
    assert proto.from_json(obj).same(msg)
    with pytest.raises(InvalidField):
        proto.from_json({"message": "KVBULK", "entries": [{"message": "HUGZ"}]})


def test_a_kvmsg_keyed_kvbulk_is_still_a_kvsync():
    """Five frames are a kvmsg whatever the key: KVBULK is told apart by its 8 frames."""
    msg = proto.decode([proto.KVBULK, proto.pack_sequence(3), b"", b"", b"v"],
                       Channel.SNAPSHOT_REPLY)
    assert type(msg) is proto.Kvsync and msg.key == proto.KVBULK


def test_the_layout_is_the_documented_one():
    """docs/protocol.md: header >B3xI, sequences >q, lengths >u4 by column."""
    frames = proto.encode_bulk([Entry(b"ab", 7, U[1], b"p=1\n", b"xyz")])
    assert frames[1] == struct.pack(">BxxxI", 1, 1)
    assert frames[2] == struct.pack(">q", 7)
    assert frames[3] == struct.pack(">4I", 2, 16, 4, 3)
    assert frames[4:] == [b"ab", U[1], b"p=1\n", b"xyz"]


def test_encode_refuses_what_no_peer_could_decode():
    with pytest.raises(InvalidField, match="uuid"):
        proto.encode_bulk([Entry(b"k", 1, b"short", b"", b"v")])
    with pytest.raises(InvalidField, match="sequence"):
        proto.encode_bulk([Entry(b"k", 1 << 63, b"", b"", b"v")])


def _frames(count: int = 3) -> list[bytes]:
    return proto.encode_bulk(entries(count))


def _with(frames: list[bytes], index: int, value: bytes) -> list[bytes]:
    out = list(frames)
    out[index] = value
    return out


def _lengths(frames: list[bytes], column: int, row: int, length: int) -> list[bytes]:
    count = len(frames[2]) // 8
    values = list(struct.unpack(f">{4 * count}I", frames[3]))
    values[column * count + row] = length
    return _with(frames, 3, struct.pack(f">{4 * count}I", *values))


@pytest.mark.parametrize("make, error, field", [
    (lambda f: f[:7], Truncated, "frames"),
    (lambda f: f + [b""], InvalidField, "frames"),
    (lambda f: _with(f, 0, b"KVBULL"), UnknownMessageType, "command"),
    (lambda f: _with(f, 1, f[1][:7]), Truncated, "header"),
    (lambda f: _with(f, 1, f[1] + b"\0"), InvalidField, "header"),
    (lambda f: _with(f, 1, struct.pack(">BxxxI", 2, 3)), InvalidField, "header"),
    (lambda f: _with(f, 1, b"\x01\x00\x01\x00" + f[1][4:]), InvalidField, "header"),
    # a huge declared count is refused before anything is sized from it
    (lambda f: _with(f, 1, struct.pack(">BxxxI", 1, 0xFFFFFFFF)), LimitExceeded, "count"),
    (lambda f: _with(f, 1, struct.pack(">BxxxI", 1, 4)), Truncated, "sequences"),
    (lambda f: _with(f, 2, f[2][:-1]), Truncated, "sequences"),
    (lambda f: _with(f, 3, f[3] + b"\0\0\0\0"), InvalidField, "lengths"),
    (lambda f: _with(f, 3, f[3][:-4]), Truncated, "lengths"),
    (lambda f: _with(f, 4, f[4][:-1]), Truncated, "keys"),
    (lambda f: _with(f, 7, f[7] + b"x"), InvalidField, "bodies"),
    (lambda f: _lengths(f, 0, 0, 1 << 20), LimitExceeded, "key"),
    (lambda f: _lengths(f, 1, 1, 17), LimitExceeded, "uuid"),
    # lengths 8, 12, 12 add up to the frame's 32 bytes but are no UUIDs
    (lambda f: _lengths(_lengths(_lengths(f, 1, 0, 8), 1, 1, 12), 1, 2, 12), InvalidField,
     "uuid"),
    (lambda f: _lengths(f, 2, 0, 1 << 20), LimitExceeded, "properties"),
    (lambda f: _lengths(f, 3, 0, 0xFFFFFFFF), LimitExceeded, "body"),
])
def test_corrupt_and_truncated_frames_raise_the_typed_error(make, error, field):
    with pytest.raises(error) as err:
        proto.decode_bulk(make(_frames()))
    assert err.value.field == field


def test_bad_properties_and_oversized_frames_are_refused():
    bad = proto.encode_bulk([Entry(b"k", 1, b"", b"novalue\n", b"v")])
    with pytest.raises(InvalidField) as err:
        proto.decode_bulk(bad)
    assert err.value.field == "properties"
    small = proto.ChpLimits(max_bulk_entries=2, max_bulk_bytes=64)
    with pytest.raises(LimitExceeded) as err:
        proto.decode_bulk(_frames(3), small)
    assert err.value.field == "count"
    with pytest.raises(LimitExceeded) as err:
        proto.decode_bulk(proto.encode_bulk([Entry(b"k", 1, b"", b"", b"x" * 65)]), small)
    assert err.value.field == "bodies"


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mangled_frames_raise_only_protocol_errors(data):
    frames = _frames(data.draw(st.integers(0, 6)))
    index = data.draw(st.integers(1, 7))
    frame = bytearray(frames[index])
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        if action == "flip" and frame:
            at = data.draw(st.integers(0, len(frame) - 1))
            frame[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut" and frame:
            del frame[data.draw(st.integers(0, len(frame) - 1)):]
        else:
            frame += data.draw(st.binary(min_size=1, max_size=8))
    try:
        msg = proto.decode_bulk(_with(frames, index, bytes(frame)))
    except ProtocolError:
        return
    assert proto.decode_bulk(proto.encode(msg)).count == msg.count   # still coherent


# ----------------------------------------------------------------- slicing
def test_slices_keep_within_entries_and_bytes_and_lose_nothing():
    items = entries(1000)
    parts = list(bulk.slices(items, max_entries=64, max_bytes=1000))
    assert [e for part in parts for e in part] == items
    for part in parts:
        assert len(part) <= 64
        assert len(part) == 1 or sum(len(e.body) for e in part) <= 1000
    big = [Entry(b"k%d" % n, n, b"", b"", b"x" * 5000) for n in range(3)]
    assert [len(p) for p in bulk.slices(big, max_bytes=4000)] == [1, 1, 1]
    assert list(bulk.slices([])) == []


def test_routing_ids_ask_for_bulk_and_are_distinct():
    first, second = bulk.routing_id(), bulk.routing_id()
    assert bulk.wants_bulk(first) and first != second and len(first) < 256
    assert not bulk.wants_bulk(b"\x00\x6b\x8b\x45\x67")   # libzmq's own ids


# ----------------------------------------------------------------- real servers
def fill(address: str, count: int) -> dict[bytes, bytes]:
    """Sets `count` keys (every 7th with a ttl an hour away); returns key -> value."""
    with CloneClient([address]) as chp:
        chp.wait_synced(30)
        updates = [Update(b"/m/%06d" % n, b"value-%d" % n, ttl=3600 if n % 7 == 0 else None)
                   for n in range(count)]
        for start in range(0, count, 10_000):
            chp.set_many(updates[start:start + 10_000], timeout=60)
    return {u.key: u.value for u in updates}


def snapshot_rows(found) -> list[tuple]:
    return sorted(row for part in found.parts for row in part.rows())


def raw_snapshot(address: str, routing_id: bytes | None) -> list[list[bytes]]:
    """Every message of an ICANHAZ? answer, as a DEALER with `routing_id` sees them."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    try:
        dealer.linger = 0
        if routing_id is not None:
            dealer.setsockopt(zmq.ROUTING_ID, routing_id)
        dealer.connect(f"tcp://{address}")
        dealer.send_multipart([proto.ICANHAZ, b""])
        messages = []
        while True:
            assert dealer.poll(10_000), "no answer within 10 s"
            frames = dealer.recv_multipart()
            messages.append(frames)
            if frames[0] == proto.KTHXBAI:
                return messages
    finally:
        dealer.close(0)
        ctx.term()


@pytest.mark.timeout(120)
def test_our_client_gets_kvbulk_slices_with_the_same_entries_as_kvsyncs(servers):
    server = servers("bulk", "--hugz-interval", "0.2")
    expected = fill(server.address, 40_000)
    fast = read_snapshot([server.address], server_timeout=5)
    classic = read_snapshot([server.address], server_timeout=5, bulk=False)
    assert fast.bulk and not classic.bulk
    assert len(fast.parts) >= 3          # 40,000 entries in slices of 16,384 at most
    assert fast.sequence == classic.sequence == 40_000
    assert snapshot_rows(fast) == snapshot_rows(classic)
    assert {row[0]: row[4] for row in snapshot_rows(fast)} == expected
    ttls = [row for row in snapshot_rows(fast) if row[3]]
    assert len(ttls) == len(range(0, 40_000, 7)) and all(r[3].startswith(b"ttl=") for r in ttls)
    narrow = read_snapshot([server.address], b"/m/0001", server_timeout=5)
    assert sorted(row[0] for row in snapshot_rows(narrow)) == sorted(
        k for k in expected if k.startswith(b"/m/0001"))


@pytest.mark.timeout(120)
def test_a_zguide_style_client_sees_only_kvsyncs_from_a_bulk_server(servers):
    server = servers("bulk", "--hugz-interval", "0.2")
    fill(server.address, 20)
    plain = raw_snapshot(server.address, None)                     # libzmq's routing id
    named = raw_snapshot(server.address, b"zguide-client-7")       # any other id
    for answer in (plain, named):
        assert len(answer) == 21 and all(len(m) == 5 for m in answer)
        assert all(type(proto.decode(m, Channel.SNAPSHOT_REPLY)) is proto.Kvsync
                   for m in answer[:-1])
    ours = raw_snapshot(server.address, bulk.routing_id())
    assert [len(m) for m in ours] == [proto.BULK_FRAMES, 5]
    assert proto.decode(ours[0], Channel.SNAPSHOT_REPLY).count == 20
    end = proto.decode(ours[-1], Channel.SNAPSHOT_REPLY)
    assert type(end) is proto.Kthxbai and end.sequence == 20


@pytest.mark.timeout(120)
def test_a_server_without_the_extension_is_read_the_classic_way(servers):
    server = servers("classic", "--hugz-interval", "0.2", "--no-bulk")
    expected = fill(server.address, 3000)
    assert all(len(m) == 5 for m in raw_snapshot(server.address, bulk.routing_id()))
    found = read_snapshot([server.address], server_timeout=5)
    assert not found.bulk and found.sequence == 3000
    assert {row[0]: row[4] for row in snapshot_rows(found)} == expected
    with CloneClient([server.address]) as chp:
        chp.wait_synced(30)
        assert {k: e.body for k, e in chp.snapshot().entries.items()} == expected


@pytest.mark.timeout(120)
def test_a_bulk_sync_under_live_updates_ends_at_the_servers_map(servers):
    """Updates published while the slices are sent are buffered and applied after the
    snapshot's sequence: the client ends with exactly the server's map."""
    server = servers("busy", "--hugz-interval", "0.2")
    fill(server.address, 40_000)
    stop = threading.Event()

    def write() -> None:
        with CloneClient([server.address]) as writer:
            writer.wait_synced(30)
            n = 0
            while not stop.is_set():
                writer.set_many([Update(b"/m/%06d" % ((n * 7919 + i) % 40_000), b"w%d" % n)
                                 for i in range(50)], timeout=30)
                n += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        with CloneClient([server.address], server_timeout=5) as chp:
            chp.wait_synced(30)
            synced_at = chp.sequence
            wait_until(lambda: chp.sequence > synced_at + 200, 30,
                       message="updates after the bulk sync")
            stop.set()
            thread.join(30)
            final = read_snapshot([server.address], server_timeout=5)
            wait_until(lambda: chp.sequence == final.sequence, 30,
                       message="the client to reach the server's last sequence")
            mine = sorted(rows(chp.snapshot().entries.values()))
        assert [r[:3] + r[4:] for r in mine] == \
            [r[:3] + r[4:] for r in snapshot_rows(final)]
    finally:
        stop.set()
        thread.join(30)


@pytest.mark.timeout(60)
def test_a_corrupt_bulk_answer_fails_a_one_shot_read():
    """A scripted peer on a real socket answers with a KVBULK whose keys frame is cut:
    `read_snapshot` raises rather than return a snapshot with a hole."""
    from connectors.chp.errors import ChpError
    from tests.chp.support import free_port_span
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    port = free_port_span(1)
    router.bind(f"tcp://127.0.0.1:{port}")
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            if router.poll(100):
                identity, *request = router.recv_multipart()
                assert request[0] == proto.ICANHAZ and bulk.wants_bulk(identity)
                frames = proto.encode_bulk(entries(5))
                frames[4] = frames[4][:-2]
                router.send_multipart([identity, *frames])
                router.send_multipart([identity, *proto.encode(proto.Kthxbai(5))])

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        with pytest.raises(ChpError, match="malformed"):
            read_snapshot([f"127.0.0.1:{port}"], server_timeout=5, timeout=10)
    finally:
        done.set()
        thread.join(10)
        router.close(0)
        ctx.term()


@pytest.mark.timeout(90)
def test_the_active_server_of_a_binary_star_pair_answers_in_bulk(servers):
    """The passive server answers no snapshot (it is no vote while the active lives): a
    one-shot read asking it first moves on to the active, which answers in bulk."""
    from tests.chp.test_pair import start_pair
    primary, backup = start_pair(servers)
    expected = fill(primary.address, 2000)
    found = read_snapshot([backup.address, primary.address], server_timeout=1.0, timeout=20)
    assert found.bulk and found.server == primary.address and found.sequence == 2000
    assert {row[0]: row[4] for row in snapshot_rows(found)} == expected


@pytest.mark.timeout(60)
def test_a_client_asks_again_after_a_corrupt_bulk_answer():
    """A scripted server on real sockets (ROUTER on P, XPUB on P+1) answers bulk
    requests with a cut KVBULK, others with KVSYNCs: the client asks again without bulk
    and ends with exactly the entries, never a snapshot with a hole."""
    from tests.chp.support import free_port_span
    good = entries(5)
    ctx = zmq.Context()
    router, publisher = ctx.socket(zmq.ROUTER), ctx.socket(zmq.XPUB)
    port = free_port_span(3)
    for sock in (router, publisher):
        sock.linger = 0
    router.bind(f"tcp://127.0.0.1:{port}")
    publisher.bind(f"tcp://127.0.0.1:{port + 1}")
    done = threading.Event()
    requests: list[bytes] = []

    def serve() -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(publisher, zmq.POLLIN)
        while not done.is_set():
            ready = dict(poller.poll(100))
            if publisher in ready:
                publisher.recv_multipart()       # a subscription: greet it
                publisher.send_multipart(proto.encode(proto.Hugz(5)))
            if router in ready:
                identity, *_ = router.recv_multipart()
                requests.append(identity)
                if bulk.wants_bulk(identity):
                    frames = proto.encode_bulk(good)
                    frames[7] = frames[7][:-1]   # the bodies frame cut short
                    router.send_multipart([identity, *frames])
                else:
                    for entry in good:
                        router.send_multipart([identity, *proto.encode(entry.to_kvsync())])
                router.send_multipart([identity, *proto.encode(proto.Kthxbai(5))])

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with CloneClient([f"127.0.0.1:{port}"], server_timeout=5) as chp:
            assert chp.wait_synced(20) == 5
            assert sorted(rows(chp.snapshot().entries.values())) == sorted(rows(good))
        # asked again from a fresh DEALER, for KVSYNCs: a server whose KVBULKs cannot be
        # read must not keep the client asking
        assert len(requests) == 2
        assert bulk.wants_bulk(requests[0]) and not bulk.wants_bulk(requests[1])
    finally:
        done.set()
        thread.join(10)
        router.close(0)
        publisher.close(0)
        ctx.term()
