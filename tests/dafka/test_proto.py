"""The Dafka codec against the vectors captured from zeromq/dafka, plus property tests."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from connectors.dafka import proto
from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)

from tests.conftest import VECTORS

VECTOR_LINES = [json.loads(line) for line in
                (VECTORS / "dafka" / "dafka_vectors.jsonl").read_text().splitlines() if line]


def _frames(vector: dict) -> list[bytes]:
    return [bytes.fromhex(h) for h in vector["frames_hex"]]


@pytest.mark.parametrize("vector", VECTOR_LINES, ids=[v["name"] for v in VECTOR_LINES])
def test_vector_decodes_to_its_fields_and_reencodes(vector):
    frames = _frames(vector)
    msg = proto.decode(frames)
    fields = vector["fields"]
    if "subscribe" in fields:
        assert isinstance(msg, proto.Subscription)
        assert msg.subscribe == fields["subscribe"]
        assert chr(msg.command) == fields["id"]
        if "command" in fields:
            assert msg.command.wire_name == fields["command"]
            assert msg.topic == fields["topic_prefix"]
        prefix = fields.get("prefix_ascii", "")
        assert proto.subscription_prefix(msg.command, msg.topic) == prefix.encode()
    elif "command" in fields:
        assert msg.COMMAND.wire_name == fields["command"]
        assert chr(msg.COMMAND) == fields["id"]
        assert fields["version"] == proto.VERSION
        assert len(frames[0]) == fields["frame0_length"]
        for name in ("topic", "address", "subject", "sequence", "count", "subjects"):
            if name in fields:
                assert getattr(msg, name) == fields[name], name
        if "content_hex" in fields:
            assert msg.content.hex() == fields["content_hex"]
    elif fields["type"] == "W":
        assert isinstance(msg, proto.Welcome)
    elif fields["frames"] == 4:
        assert msg == proto.Beacon(fields["sender"], fields["host"],
                                   int(fields["port_decimal_string"]))
    else:
        assert msg == proto.TowerBeacon(fields["sender"], fields["endpoint"])
    assert proto.encode(msg) == frames
    assert proto.from_json(json.loads(json.dumps(proto.to_json(msg)))) == msg


def test_decoder_cache_gives_the_full_decode_result():
    decoder = proto.Decoder(cache_size=2)
    msgs = [proto.Record("t", "A" * 32, "t", seq, b"x%d" % seq) for seq in range(5)]
    msgs += [proto.Head("t", "A" * 32, "t", 9), proto.DirectRecord("B" * 32, "A" * 32, "t", 3)]
    for msg in msgs * 2:
        assert decoder.decode(proto.encode(msg)) == msg
    # A HEAD whose header equals a cached RECORD header cannot exist (the command byte
    # differs), but a RECORD frame 0 without its content frame must still be rejected.
    with pytest.raises(InvalidField) as err:
        decoder.decode(proto.encode(msgs[0])[:1])
    assert err.value.field == "frames"


# ----------------------------------------------------------------- hypothesis round trips
addresses = st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32)
topics = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                 max_size=60).filter(lambda t: len(t.encode()) <= 255)
u64 = st.integers(0, proto.MAX_SEQUENCE)
content = st.binary(max_size=300)

MESSAGES = st.one_of(
    st.builds(proto.Record, topics, addresses, topics, u64, content),
    st.builds(proto.DirectRecord, addresses, addresses, topics, u64, content),
    st.builds(proto.Fetch, addresses, addresses, topics, u64, st.integers(0, proto.MAX_COUNT)),
    st.builds(proto.Ack, addresses, topics, u64),
    st.builds(proto.Head, topics, addresses, topics, u64),
    st.builds(proto.DirectHead, addresses, addresses, topics, u64),
    st.builds(proto.GetHeads, topics, addresses),
    st.builds(proto.ConsumerHello, addresses, addresses, st.lists(topics, max_size=5)),
    st.builds(proto.StoreHello, addresses, addresses),
    st.builds(proto.BulkFetch, addresses, addresses, addresses, topics, u64,
              st.integers(0, proto.MAX_COUNT), st.integers(0, proto.MAX_COUNT)),
    st.builds(lambda to, by, part, subject, seq, last, records: proto.BulkRecords(
        to, by, part, subject, seq, len(records), last,
        proto.pack_bulk([len(r) for r in records], b"".join(records))),
        addresses, addresses, addresses, topics, u64, st.booleans(),
        st.lists(content, max_size=8)),
    st.builds(proto.Beacon, addresses, st.sampled_from(["", "127.0.0.1", "node-1"]),
              st.integers(1, 65535)),
    st.builds(proto.TowerBeacon, addresses,
              st.integers(1, 65535).map(lambda p: f"tcp://127.0.0.1:{p}")),
    st.just(proto.Welcome()),
    st.builds(proto.Subscription, st.booleans(), st.sampled_from(list(proto.Command)), topics),
)


@settings(max_examples=300, deadline=None)
@given(MESSAGES)
def test_every_message_type_round_trips(msg):
    frames = proto.encode(msg)
    assert proto.decode(frames) == msg
    assert proto.Decoder().decode(frames) == msg
    assert proto.from_json(json.loads(json.dumps(proto.to_json(msg)))) == msg


# ----------------------------------------------------------------- fuzz
def _valid_samples() -> list[list[bytes]]:
    return [_frames(v) for v in VECTOR_LINES]


def _mutate(frames: list[bytes], rng: random.Random) -> list[bytes]:
    frames = [bytearray(f) for f in frames]
    action = rng.randrange(6)
    target = frames[rng.randrange(len(frames))]
    if action == 0 and target:
        target[rng.randrange(len(target))] = rng.randrange(256)
    elif action == 1 and target:
        del target[rng.randrange(len(target)):]
    elif action == 2:
        target[rng.randrange(len(target) + 1):0] = rng.randbytes(rng.randrange(1, 8))
    elif action == 3 and len(frames) > 1:
        frames.pop(rng.randrange(len(frames)))
    elif action == 4:
        frames.insert(rng.randrange(len(frames) + 1), bytearray(rng.randbytes(rng.randrange(5))))
    elif target:
        i = rng.randrange(len(target))
        target[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
    return [bytes(f) for f in frames]


def _decode_and_tally(decoders, frames: list[bytes], outcomes: dict[str, int]) -> None:
    """Each decoder either refuses `frames` with a ProtocolError naming the field, or
    accepts them in their canonical form (they encode back to the same bytes)."""
    for dec in decoders:
        try:
            msg = dec.decode(frames)
        except ProtocolError as exc:
            assert exc.field, exc
            outcomes["error"] += 1
        else:
            outcomes["ok"] += 1
            assert proto.encode(msg) == frames  # accepted means canonical


def test_fuzz_random_and_mutated_inputs_raise_only_protocol_error():
    rng = random.Random(46)
    samples = _valid_samples()
    decoder = proto.Decoder()
    tiny = proto.Decoder(proto.DafkaLimits(max_frame_bytes=64, max_content_bytes=4,
                                      max_topic_bytes=3, max_subjects=1))
    outcomes = {"ok": 0, "error": 0}
    for i in range(20000):
        if i % 4 == 0:
            frames = [rng.randbytes(rng.randrange(0, 90)) for _ in range(rng.randrange(0, 5))]
        else:
            frames = _mutate(rng.choice(samples), rng)
        _decode_and_tally((decoder, tiny), frames, outcomes)
    assert outcomes["error"] > 1000 and outcomes["ok"] > 100, outcomes


# ----------------------------------------------------------------- specific faults
RECORD = proto.encode(proto.Record("hello", "9444D7B67D82418AADA743B8378EFD6A", "hello", 7,
                                   b"payload"))


@pytest.mark.parametrize("frames, error, field", [
    ([], Truncated, "frames"),
    ([b""], Truncated, "command"),
    ([b"Zhello\x00\x01"], UnknownMessageType, "command"),
    ([RECORD[0]], InvalidField, "frames"),
    ([RECORD[0][:5]] + RECORD[1:], Truncated, "topic"),
    ([RECORD[0][:7]] + RECORD[1:], Truncated, "version"),
    ([RECORD[0][:7] + b"\x02" + RECORD[0][8:]] + RECORD[1:], InvalidField, "version"),
    ([RECORD[0][:-3]] + RECORD[1:], Truncated, "sequence"),
    ([RECORD[0] + b"\x00"] + RECORD[1:], InvalidField, "frame0"),
    ([RECORD[0][:9] + b"a" + RECORD[0][10:]] + RECORD[1:], InvalidField, "address"),
    ([b"Mhel\xfflo\x00\x01" + RECORD[0][8:]] + RECORD[1:], InvalidField, "topic"),
    ([b"B", b"9444D7B67D82418AADA743B8378EFD6A", b"", b"99999"], InvalidField, "port"),
    ([b"B", b"9444D7B67D82418AADA743B8378EFD6A", b"", b"-1"], InvalidField, "port"),
    ([b"B", b"9444D7B67D82418AADA743B8378EFD6A", b"nowhere"], InvalidField, "endpoint"),
    ([b"B", b"xx", b"", b"80"], InvalidField, "sender"),
    ([b"\x01Z"], UnknownMessageType, "command"),
])
def test_malformed_frames_name_the_field(frames, error, field):
    with pytest.raises(error) as err:
        proto.decode(frames)
    assert err.value.field == field


def test_limits_are_checked_before_allocation():
    hello = proto.ConsumerHello("A" * 32, "B" * 32, ["a", "b"])
    frame = proto.encode(hello)[0]
    count_at = frame.index(b"\x00\x00\x00\x02")
    huge = frame[:count_at] + b"\xff\xff\xff\xff"
    with pytest.raises(LimitExceeded) as err:
        proto.decode([huge])
    assert err.value.field == "subjects"
    lying = frame[:count_at] + b"\x00\x00\x10\x00" + frame[count_at + 4:]
    with pytest.raises(Truncated) as err:
        proto.decode([lying])
    assert err.value.field == "subjects"
    item = frame[:count_at] + b"\x00\x00\x00\x01\x7f\xff\xff\xff"
    with pytest.raises(LimitExceeded):
        proto.decode([item])
    small = proto.DafkaLimits(max_content_bytes=3, max_frame_bytes=60, max_topic_bytes=5)
    for frames, field in ((RECORD, "content"), ([RECORD[0] * 2, b""], "frame0"),
                          (proto.encode(proto.Head("hello!", "A" * 32, "s", 1)), "topic")):
        with pytest.raises(LimitExceeded) as err:
            proto.Decoder(small).decode(frames)
        assert err.value.field == field


def test_lax_addresses_accept_other_ids_when_asked():
    msg = proto.Head("t", "not-a-uuid", "t", 1)
    with pytest.raises(InvalidField):
        proto.decode(proto.encode(msg))
    assert proto.decode(proto.encode(msg), proto.DafkaLimits(strict_addresses=False)) == msg


def test_encode_rejects_what_the_wire_cannot_carry():
    for msg, field in ((proto.Record("a\x00b", "A" * 32, "s", 0), "topic"),
                       (proto.Head("t", "A" * 32, "s" * 256, 0), "subject"),
                       (proto.Head("t", "A" * 32, "s", -1), "sequence"),
                       (proto.Fetch("A" * 32, "B" * 32, "s", 0, 1 << 32), "count")):
        with pytest.raises(InvalidField) as err:
            proto.encode(msg)
        assert err.value.field == field


def test_helpers():
    assert proto.subscription_prefix(proto.Command.RECORD, "hello") == b"Mhello"
    assert proto.subscription_prefix(proto.Command.FETCH) == b"F"
    assert [proto.fetch_count(s) for s in (0, 1, 99999, 100000, 250001)] == \
        [100000, 99999, 1, 100000, 49999]
    assert proto.is_address("9444D7B67D82418AADA743B8378EFD6A")
    assert not proto.is_address("9444d7b67d82418aada743b8378efd6a")
    assert not proto.is_address("é" * 32)
    head = proto.Head("t", "A" * 32, "t", 5)
    prefix = proto.frame0_prefix(proto.Command.HEAD, "t", "A" * 32, "t")
    assert [prefix + proto.pack_sequence(5)] == proto.encode(head)


@pytest.mark.parametrize("obj, field", [
    ({"message": "NOPE"}, "message"),
    ([], "message"),
    ({"message": "HEAD", "topic": "t", "address": "A" * 32, "subject": "t"}, "sequence"),
    ({"message": "HEAD", "topic": "t", "address": "A" * 32, "subject": "t",
      "sequence": -1}, "sequence"),
    ({"message": "RECORD", "topic": "t", "address": "A" * 32, "subject": "t",
      "sequence": 1, "content": "zz"}, "content"),
    ({"message": "SUBSCRIPTION", "subscribe": 1, "command": "RECORD"}, "subscribe"),
    ({"message": "SUBSCRIPTION", "subscribe": True, "command": "X"}, "command"),
    ({"message": "CONSUMER-HELLO", "topic": "t", "address": "a", "subjects": [1]}, "subjects"),
    ({"message": "GET-HEADS", "topic": 5, "address": "a"}, "topic"),
])
def test_from_json_names_the_bad_key(obj, field):
    with pytest.raises(ProtocolError) as err:
        proto.from_json(obj)
    assert err.value.field == field


# ----------------------------------------------------------------- bulk read extension
A, B, C = "A" * 32, "B" * 32, "C" * 32
BULK = proto.encode(proto.BulkRecords(B, A, C, "topic", 5, 3, True,
                                      proto.pack_bulk([3, 0, 2], b"abcde")))


def _bulk(frame1: bytes, count: int, flags: int = 1) -> list[bytes]:
    """BULK-RECORDS frames with a given count, flags byte and frame 1, valid or not."""
    frame0 = BULK[0][:-5] + count.to_bytes(4, "big") + bytes((flags,))
    return [frame0, frame1]


def test_bulk_layout_and_arrow_offsets():
    frame0, frame1 = BULK
    assert frame0.startswith(b"Y" + B.encode() + b"\x00\x01\x20" + A.encode() + b"\x20"
                             + C.encode() + b"\x05topic")
    assert frame0.endswith((5).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"\x01")
    assert frame1 == bytes([3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]) + b"abcde"
    msg = proto.decode(BULK)
    assert proto.bulk_lengths(msg).tolist() == [3, 0, 2]
    assert proto.bulk_offsets(msg).tolist() == [0, 3, 3, 5]
    assert proto.bulk_offsets(msg).dtype == "int32"
    fetch = proto.BulkFetch(A, B, C, "topic", 7, 100, 1 << 20)
    assert proto.encode(fetch) == [b"X" + A.encode() + b"\x00\x01\x20" + B.encode()
                                   + b"\x20" + C.encode() + b"\x05topic"
                                   + (7).to_bytes(8, "big") + (100).to_bytes(4, "big")
                                   + (1 << 20).to_bytes(4, "big")]
    # The command ids are none of the C code's, nor the beacon's / welcome's.
    assert {proto.Command.BULK_FETCH, proto.Command.BULK_RECORDS}.isdisjoint(
        {ord(c) for c in "MDFKHEGWLB"})


def test_pack_bulk_takes_arrays_lists_and_numpy_alike():
    import numpy as np
    from array import array
    data = b"xyzzy"
    packed = {proto.pack_bulk(lengths, data) for lengths in
              ([1, 4], array("I", [1, 4]), np.array([1, 4], np.int64),
               np.array([1, 4], ">u4"))}
    assert packed == {b"\x01\x00\x00\x00\x04\x00\x00\x00xyzzy"}
    assert proto.pack_bulk([], b"") == b""


@pytest.mark.parametrize("frames, error, field", [
    (_bulk(BULK[1], 0xFFFFFFFF), LimitExceeded, "count"),        # before any allocation
    (_bulk(BULK[1][:10], 3), Truncated, "content"),               # lengths cut short
    (_bulk(BULK[1] + b"!", 3), InvalidField, "content"),          # data longer than said
    (_bulk(BULK[1][:-1], 3), InvalidField, "content"),            # data shorter than said
    (_bulk(b"\xff\xff\xff\xff" + BULK[1][4:], 3), InvalidField, "content"),  # huge length
    (_bulk(BULK[1], 3, flags=2), InvalidField, "flags"),
    ([BULK[0]], InvalidField, "frames"),
    ([BULK[0][:-1], BULK[1]], Truncated, "flags"),
    ([BULK[0][:-3], BULK[1]], Truncated, "count"),
    ([BULK[0] + b"\x00", BULK[1]], InvalidField, "frame0"),
    ([BULK[0].replace(C.encode(), b"c" * 32), BULK[1]], InvalidField, "partition"),
    ([proto.encode(proto.BulkFetch(A, B, C, "t", 0, 1, 1))[0][:-2]], Truncated, "max_bytes"),
])
def test_corrupt_bulk_frames_raise_the_codecs_error(frames, error, field):
    with pytest.raises(error) as err:
        proto.decode(frames)
    assert err.value.field == field


def test_bulk_limits_are_checked_before_use():
    small = proto.Decoder(proto.DafkaLimits(max_bulk_records=2, max_bulk_bytes=16))
    with pytest.raises(LimitExceeded) as err:
        small.decode(BULK)                                         # 3 records > 2
    assert err.value.field == "count"
    one = proto.encode(proto.BulkRecords(B, A, C, "t", 0, 1, False,
                                         proto.pack_bulk([13], b"x" * 13)))
    with pytest.raises(LimitExceeded) as err:
        small.decode(one)                                          # 17 bytes > 16
    assert err.value.field == "content"
    with pytest.raises(ProtocolError):                             # encode checks too
        proto.encode(proto.BulkRecords(B, A, C, "t", 0, 2, False, b"\x01\x00\x00\x00x"))


def test_fuzz_bulk_frames_raise_only_protocol_error():
    rng = random.Random(4646)
    samples = [BULK, proto.encode(proto.BulkFetch(A, B, C, "topic", 1, 2, 3)),
               proto.encode(proto.BulkRecords(B, A, C, "", 0, 0, True, b""))]
    tiny = proto.Decoder(proto.DafkaLimits(max_bulk_records=2, max_bulk_bytes=12))
    outcomes = {"ok": 0, "error": 0}
    for _ in range(10000):
        frames = _mutate(rng.choice(samples), rng)
        _decode_and_tally((proto.Decoder(), tiny), frames, outcomes)
    assert outcomes["error"] > 1000 and outcomes["ok"] > 100, outcomes


# ----------------------------------------------------------------- heads extension
HEADS = proto.encode(proto.BulkHeads(B, A, 9, 2, 5, [("orders", C, 41), ("o", A, 0)]))


def _heads(first: int, count: int, total: int, frame1: bytes = HEADS[1]) -> list[bytes]:
    """BULK-HEADS frames with given first / count / total and frame 1, valid or not."""
    return [HEADS[0][:-12] + b"".join(n.to_bytes(4, "big") for n in (first, count, total)),
            frame1]


def test_heads_layout():
    frame0, frame1 = HEADS
    assert frame0 == (b"R" + B.encode() + b"\x00\x01\x20" + A.encode()
                      + (9).to_bytes(4, "big") + (2).to_bytes(4, "big")
                      + (2).to_bytes(4, "big") + (5).to_bytes(4, "big"))
    assert frame1 == (b"\x06orders\x20" + C.encode() + (41).to_bytes(8, "big")
                      + b"\x01o\x20" + A.encode() + (0).to_bytes(8, "big"))
    msg = proto.decode(HEADS)
    assert (msg.request, msg.first, msg.total, msg.heads) == \
        (9, 2, 5, [("orders", C, 41), ("o", A, 0)])
    request = proto.BulkGetHeads(A, B, 7, "ord")
    assert proto.encode(request) == [b"Q" + A.encode() + b"\x00\x01\x20" + B.encode()
                                     + (7).to_bytes(4, "big") + b"\x03ord"]
    empty = proto.BulkHeads(B, A, 1, 0, 0)
    assert proto.encode(empty)[1] == b"" and proto.decode(proto.encode(empty)) == empty
    # None of the C code's command ids, the beacon's, or the bulk read extension's.
    assert {proto.Command.BULK_GET_HEADS, proto.Command.BULK_HEADS}.isdisjoint(
        {ord(c) for c in "MDFKHEGWLBXY"})


@pytest.mark.parametrize("frames, error, field", [
    (_heads(0, 0xFFFFFFFF, 0xFFFFFFFF), LimitExceeded, "count"),     # before any slicing
    (_heads(4, 2, 5), InvalidField, "total"),                        # 4 + 2 > 5
    (_heads(0, 3, 5), Truncated, "heads"),                           # 3 entries can't fit
    (_heads(0, 1, 5), InvalidField, "heads"),                        # 2 entries' bytes for 1
    (_heads(0, 2, 5, HEADS[1] + b"\x00" * 600), LimitExceeded, "heads"),  # > 2 * 297
    (_heads(0, 2, 5, HEADS[1] + b"\x00"), InvalidField, "heads"),    # a trailing byte
    (_heads(0, 2, 5, HEADS[1][:-1]), Truncated, "heads"),            # the last u64 cut
    (_heads(0, 2, 5, HEADS[1].replace(C.encode(), b"c" * 32)), InvalidField, "heads"),
    (_heads(0, 2, 5, b"\x06ord\xffrs" + HEADS[1][7:]), InvalidField, "heads"),  # UTF-8
    (_heads(0, 2, 5, b"\xff" + HEADS[1][1:]), Truncated, "heads"),   # subject too long
    ([HEADS[0]], InvalidField, "frames"),
    ([HEADS[0][:-2], HEADS[1]], Truncated, "total"),
    ([HEADS[0] + b"\x00", HEADS[1]], InvalidField, "frame0"),
    ([proto.encode(proto.BulkGetHeads(A, B, 1, "pre"))[0][:-1]], Truncated, "prefix"),
    ([proto.encode(proto.BulkGetHeads(A, B, 1, "pre"))[0][:-5]], Truncated, "request"),
    ([proto.encode(proto.BulkGetHeads(A, B, 1, "pre"))[0] + b"!"], InvalidField, "frame0"),
    ([b"Q" + b"a" * 32 + proto.encode(proto.BulkGetHeads(A, B, 1, ""))[0][33:]],
     InvalidField, "topic"),                                         # not an address
])
def test_corrupt_heads_frames_raise_the_codecs_error(frames, error, field):
    with pytest.raises(error) as err:
        proto.decode(frames)
    assert err.value.field == field


def test_heads_limits_are_checked_before_use():
    small = proto.Decoder(proto.DafkaLimits(max_bulk_heads=1, max_topic_bytes=32))
    with pytest.raises(LimitExceeded) as err:
        small.decode(HEADS)                                       # 2 entries > 1
    assert err.value.field == "count"
    one = proto.encode(proto.BulkHeads(B, A, 1, 0, 1, [("s" * 33, C, 1)]))
    with pytest.raises(LimitExceeded) as err:
        small.decode(one)                                         # subject 33 > 32 bytes
    assert err.value.field == "heads"
    with pytest.raises(LimitExceeded) as err:
        small.decode(proto.encode(proto.BulkGetHeads(A, B, 1, "p" * 33)))
    assert err.value.field == "prefix"
    for msg, field in ((proto.BulkHeads(B, A, 1, 3, 2, [("t", C, 1)]), "total"),
                       (proto.BulkHeads(B, A, 1 << 32, 0, 0), "request"),
                       (proto.BulkHeads(B, A, 1, 0, 1, [("t", C, -1)]), "head"),
                       (proto.BulkGetHeads(A, B, 1, "p" * 256), "prefix")):
        with pytest.raises(InvalidField) as err:                  # encode checks too
            proto.encode(msg)
        assert err.value.field == field


HEADS_MESSAGES = st.one_of(
    st.builds(proto.BulkGetHeads, addresses, addresses, st.integers(0, proto.MAX_COUNT),
              topics),
    st.builds(lambda to, by, request, first, extra, heads: proto.BulkHeads(
        to, by, request, first, first + len(heads) + extra, heads),
        addresses, addresses, st.integers(0, proto.MAX_COUNT), st.integers(0, 1000),
        st.integers(0, 1000), st.lists(st.tuples(topics, addresses, u64), max_size=6)),
)


@settings(max_examples=200, deadline=None)
@given(HEADS_MESSAGES)
def test_heads_messages_round_trip(msg):
    frames = proto.encode(msg)
    assert proto.decode(frames) == msg
    assert proto.from_json(json.loads(json.dumps(proto.to_json(msg)))) == msg


def test_heads_from_json_names_the_bad_key():
    base = proto.to_json(proto.decode(HEADS))
    for heads in ([["t", C]], [["t", C, -1]], [["t", C, True]], "no", [[1, C, 1]]):
        with pytest.raises(ProtocolError) as err:
            proto.from_json({**base, "heads": heads})
        assert err.value.field == "heads"


def test_fuzz_heads_frames_raise_only_protocol_error():
    rng = random.Random(4747)
    samples = [HEADS, proto.encode(proto.BulkGetHeads(A, B, 3, "topic")),
               proto.encode(proto.BulkHeads(B, A, 0, 0, 0))]
    tiny = proto.Decoder(proto.DafkaLimits(max_bulk_heads=1, max_topic_bytes=32))
    outcomes = {"ok": 0, "error": 0}
    for _ in range(10000):
        frames = _mutate(rng.choice(samples), rng)
        _decode_and_tally((proto.Decoder(), tiny), frames, outcomes)
    assert outcomes["error"] > 1000 and outcomes["ok"] > 100, outcomes
