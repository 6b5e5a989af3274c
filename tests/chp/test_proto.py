"""The CHP codec against the vectors captured from the zguide clone servers, plus
property and fuzz tests."""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from connectors.chp import proto
from connectors.chp.proto import Channel
from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)

from tests.conftest import VECTORS

VECTORS_CHP = [json.loads(line) for line in
               (VECTORS / "chp" / "chp_vectors.jsonl").read_text().splitlines() if line]

_CHANNEL = {"KVSET": Channel.COLLECTOR, "KVPUB": Channel.PUBLISHER, "HUGZ": Channel.PUBLISHER,
            "KVSYNC": Channel.SNAPSHOT_REPLY, "KTHXBAI": Channel.SNAPSHOT_REPLY,
            "ICANHAZ": Channel.SNAPSHOT_REQUEST, "bstar state": Channel.BSTAR}
_NAME = {"bstar state": "BSTAR"}


def _frames(vector: dict) -> list[bytes]:
    return [bytes.fromhex(h) for h in vector["frames_hex"]]


def _check_fields(msg: proto.Message, fields: dict) -> None:
    assert msg.NAME == _NAME.get(fields["command"], fields["command"])
    if isinstance(msg, proto.BstarStatus):
        assert msg.state == fields["state"] and msg.state.name == fields["state_name"]
        return
    if isinstance(msg, proto.Icanhaz):
        assert msg.subtree == (fields["subtree"] or "").encode()
        assert msg.subtree_frame == (fields["subtree"] is not None)
        return
    key = msg.KEY if isinstance(msg, (proto.Hugz, proto.Kthxbai)) else msg.key
    assert key == fields["key"].encode()
    assert msg.sequence == fields["sequence"]
    assert msg.uuid.hex() == fields["uuid_hex"]
    assert msg.properties == fields["properties_raw"].encode()
    pairs = [tuple(line.encode().split(b"=", 1)) for line in fields["properties"]]
    tail = fields["properties_unterminated_tail"]
    if tail:
        pairs.append(tuple(tail.encode().split(b"=", 1)))
    assert list(proto.parse_properties(msg.properties)) == pairs
    assert msg.body == fields["body_text"].encode() and len(msg.body) == fields["body_len"]


@pytest.mark.parametrize("vector", VECTORS_CHP, ids=[v["name"] for v in VECTORS_CHP])
def test_vector_decodes_to_its_fields_and_reencodes(vector):
    frames = _frames(vector)
    fields = vector["fields"]
    msg = proto.decode(frames, _CHANNEL[fields["command"]])
    _check_fields(msg, fields)
    assert proto.encode(msg) == frames
    assert proto.from_json(json.loads(json.dumps(proto.to_json(msg)))) == msg


@pytest.mark.parametrize("vector", VECTORS_CHP, ids=[v["name"] for v in VECTORS_CHP])
def test_vector_without_channel_hint_infers_the_kind(vector):
    frames = _frames(vector)
    msg = proto.decode(frames)
    command = vector["fields"]["command"]
    if command in ("KVSET", "KVPUB", "KVSYNC"):
        expected = proto.Kvset if vector["fields"]["sequence"] == 0 else proto.Kvpub
        assert type(msg) is expected
    else:
        assert msg.NAME == _NAME.get(command, command)
    assert proto.encode(msg) == frames


def test_properties_keep_equals_in_values_and_the_unterminated_tail():
    assert proto.parse_properties(b"p1=v1\nx=a=b\nlast=nonl") == (
        (b"p1", b"v1"), (b"x", b"a=b"), (b"last", b"nonl"))
    assert proto.parse_properties(b"a=1\n\nb=\n") == ((b"a", b"1"), (b"b", b""))
    msg = proto.Kvset(b"/k", properties=b"ttl=3\nx=a=b\nttl=4\n")
    assert msg.get_property(b"ttl") == b"4" and msg.get_property(b"x") == b"a=b"
    assert msg.get_property(b"nope") is None


def test_replace_property_keeps_other_lines_verbatim():
    raw = b"p1=v1\nttl=3\nx=a=b\nlast=nonl"
    assert proto.replace_property(raw, b"ttl", b"1795333620584") == \
        b"p1=v1\nx=a=b\nlast=nonl\nttl=1795333620584\n"
    assert proto.replace_property(raw, b"ttl", None) == b"p1=v1\nx=a=b\nlast=nonl\n"


@pytest.mark.parametrize("raw, field", [
    (b"novalue\n", "properties"), (b"=v\n", "properties"), (b"a=1\nbad", "properties")])
def test_malformed_properties_name_the_field(raw, field):
    with pytest.raises(InvalidField) as err:
        proto.decode([b"/k", bytes(8), b"", raw, b"v"], Channel.COLLECTOR)
    assert err.value.field == field


def test_ttl_forms():
    assert proto.parse_relative_ttl(b"3") == 3.0
    assert proto.parse_relative_ttl(b"2.5") == 2.5
    assert proto.parse_relative_ttl(b"0") is None
    assert proto.parse_relative_ttl(b"-1") == -1.0
    # the C peer's integer epoch milliseconds, the Python peer's float epoch seconds
    assert proto.parse_absolute_ttl(b"1795333620584") == 1795333620584
    assert proto.parse_absolute_ttl(b"1795333598.384966") == 1795333598385
    assert proto.parse_absolute_ttl(b"1795333598") == 1795333598000
    assert proto.parse_absolute_ttl(b"0") is None
    assert proto.format_absolute_ttl(1795333620584) == b"1795333620584"
    for bad in (b"", b"abc", b"nan", b"inf", b"1_000", b" 3", b"3s", b"1e999"):
        with pytest.raises(InvalidField) as err:
            proto.parse_relative_ttl(bad)
        assert err.value.field == "properties.ttl"


@pytest.mark.parametrize("frames, channel, error, field", [
    ([], None, Truncated, "frames"),
    ([b"k", bytes(8), b"", b""], None, Truncated, "frames"),
    ([b"k", bytes(8), b"", b"", b"", b""], None, InvalidField, "frames"),
    ([b"k", bytes(7), b"", b"", b""], None, Truncated, "sequence"),
    ([b"k", bytes(9), b"", b"", b""], None, InvalidField, "sequence"),
    ([b"k", bytes(8), bytes(15), b"", b""], None, InvalidField, "uuid"),
    ([b"KTHXBAI", bytes(8), b"", b"", b""], Channel.PUBLISHER, UnknownMessageType, "key"),
    ([b"HUGZ", bytes(8), b"", b"", b""], Channel.SNAPSHOT_REPLY, UnknownMessageType, "key"),
    ([b"ICANHAZ?", bytes(8), b"", b"", b""], None, UnknownMessageType, "key"),
    ([b"GIMME", b""], Channel.SNAPSHOT_REQUEST, UnknownMessageType, "command"),
    ([b"ICANHAZ?", b"/a/", b"x"], None, InvalidField, "properties"),
    ([b"ICANHAZ?", b"/a/", b"since=1\n", b""], None, InvalidField, "frames"),
    ([b"5"], Channel.BSTAR, InvalidField, "state"),
    ([b"3", b""], Channel.BSTAR, InvalidField, "frames"),
    ([b"33"], None, InvalidField, "state"),
])
def test_malformed_frames_raise_typed_errors(frames, channel, error, field):
    with pytest.raises(error) as err:
        proto.decode(frames, channel)
    assert err.value.field == field


def test_limits_are_checked_before_parsing():
    limits = proto.ChpLimits(max_key_bytes=4, max_properties_bytes=16, max_properties=2,
                          max_body_bytes=3)
    ok = [b"/k", bytes(8), b"", b"a=1\nb=2", b"abc"]
    assert proto.decode(ok, Channel.COLLECTOR, limits).body == b"abc"
    cases = {"key": [b"/key", b"/toolong"], "body": [b"abc", b"abcd"],
             "properties": [b"a=1\nb=2\n", b"a=1\nb=2\nc=3"]}
    index = {"key": 0, "body": 4, "properties": 3}
    for field, (fits, too_big) in cases.items():
        frames = list(ok)
        frames[index[field]] = fits
        proto.decode(frames, Channel.COLLECTOR, limits)
        frames[index[field]] = too_big
        with pytest.raises(LimitExceeded) as err:
            proto.decode(frames, Channel.COLLECTOR, limits)
        assert err.value.field == field
    with pytest.raises(LimitExceeded) as err:
        proto.decode([b"ICANHAZ?", b"/subtree/"], None, limits)
    assert err.value.field == "subtree"
    with pytest.raises(LimitExceeded):
        proto.decode([b"/k", bytes(8), b"", b"x=" + b"y" * 20, b""], None, limits)


def test_reserved_keys_on_the_collector_stay_kvsets():
    msg = proto.decode([b"HUGZ", bytes(8), b"", b"", b"x"], Channel.COLLECTOR)
    assert type(msg) is proto.Kvset and msg.key == b"HUGZ"


def test_encode_rejects_what_no_peer_could_decode():
    with pytest.raises(InvalidField, match="uuid"):
        proto.encode(proto.Kvset(b"/k", uuid=b"short"))
    with pytest.raises(InvalidField, match="sequence"):
        proto.encode(proto.Kvpub(b"/k", 1 << 63))
    with pytest.raises(InvalidField, match="subtree"):
        proto.encode(proto.Icanhaz(b"/a/", subtree_frame=False))
    with pytest.raises(InvalidField, match="properties"):
        proto.format_properties([(b"a=b", b"1")])


@pytest.mark.parametrize("obj, field", [
    ({"message": "NOPE"}, "message"),
    ({"message": "KVSET"}, "key"),
    ({"message": "KVSET", "key": "zz"}, "key"),
    ({"message": "KVPUB", "key": "", "sequence": "1"}, "sequence"),
    ({"message": "KVPUB", "key": "", "color": "red"}, "color"),
    ({"message": "BSTAR", "state": "SLEEPING"}, "state"),
    ({"message": "BSTAR"}, "state"),
    ({"message": "ICANHAZ", "subtree_frame": "yes"}, "subtree_frame"),
])
def test_from_json_names_the_bad_key(obj, field):
    with pytest.raises(ProtocolError) as err:
        proto.from_json(obj)
    assert err.value.field == field


# --------------------------------------------------------------------------- properties
_keys = st.binary(max_size=40).filter(lambda k: k not in proto.RESERVED_KEYS)
_uuids = st.one_of(st.just(b""), st.binary(min_size=16, max_size=16))
_names = st.binary(min_size=1, max_size=12).filter(lambda n: b"=" not in n and b"\n" not in n)
_values = st.binary(max_size=20).filter(lambda v: b"\n" not in v)
_props = st.lists(st.tuples(_names, _values), max_size=5).map(proto.format_properties)
_seqs = st.integers(proto.MIN_SEQUENCE, proto.MAX_SEQUENCE)


def _kvmsgs(cls):
    return st.builds(cls, _keys, _seqs, _uuids, _props, st.binary(max_size=64))


_messages = st.one_of(
    _kvmsgs(proto.Kvset), _kvmsgs(proto.Kvpub), _kvmsgs(proto.Kvsync),
    st.builds(proto.Hugz, _seqs, _uuids, _props, st.binary(max_size=8)),
    st.builds(proto.Kthxbai, _seqs, _uuids, _props, st.binary(max_size=16)),
    st.builds(proto.Icanhaz, st.binary(max_size=16)),
    st.just(proto.Icanhaz(b"", subtree_frame=False)),
    st.builds(proto.BstarStatus, st.sampled_from(list(proto.BstarState))),
)
_CHANNEL_OF = {proto.Kvset: Channel.COLLECTOR, proto.Kvpub: Channel.PUBLISHER,
               proto.Hugz: Channel.PUBLISHER, proto.Kvsync: Channel.SNAPSHOT_REPLY,
               proto.Kthxbai: Channel.SNAPSHOT_REPLY, proto.Icanhaz: Channel.SNAPSHOT_REQUEST,
               proto.BstarStatus: Channel.BSTAR}


@settings(max_examples=300, deadline=None)
@given(_messages)
def test_round_trip_every_message_type(msg):
    frames = proto.encode(msg)
    assert proto.decode(frames, _CHANNEL_OF[type(msg)]) == msg
    assert proto.encode(proto.decode(frames)) == frames
    assert proto.from_json(json.loads(json.dumps(proto.to_json(msg)))) == msg


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=24), max_size=7),
       st.sampled_from([None, *Channel]))
def test_fuzz_random_frames_raise_only_protocol_errors(frames, channel):
    try:
        msg = proto.decode(frames, channel)
    except ProtocolError:
        return
    assert proto.encode(msg) == frames


def test_frames_may_be_any_bytes_like_object():
    frames = [bytearray(b"/k"), memoryview(bytes(8)), bytearray(16), b"a=1\n", bytearray(b"v")]
    assert proto.decode(frames) == proto.Kvset(b"/k", 0, bytes(16), b"a=1\n", b"v")
    assert proto.decode([memoryview(b"ICANHAZ?"), bytearray(b"/a/")]) == proto.Icanhaz(b"/a/")
    assert proto.decode([bytearray(b"3")]) == proto.BstarStatus(proto.BstarState.ACTIVE)


def test_fuzz_mutated_vectors_raise_only_protocol_errors():
    rng = random.Random(12)
    originals = [_frames(v) for v in VECTORS_CHP]
    for _ in range(4000):
        frames = [bytearray(f) for f in rng.choice(originals)]
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(4)
            if op == 0 and frames:
                frame = rng.choice(frames)
                if frame:
                    frame[rng.randrange(len(frame))] = rng.randrange(256)
            elif op == 1 and frames:
                frame = rng.choice(frames)
                del frame[rng.randrange(len(frame) + 1):]
            elif op == 2:
                frames.insert(rng.randrange(len(frames) + 1), bytearray(rng.randbytes(9)))
            elif frames:
                del frames[rng.randrange(len(frames))]
        wire = [bytes(f) for f in frames]
        for channel in (None, *Channel):
            try:
                proto.decode(frames, channel)   # the bytearrays themselves too
            except ProtocolError:
                pass
            try:
                msg = proto.decode(wire, channel)
            except ProtocolError:
                continue
            assert proto.encode(msg) == wire
