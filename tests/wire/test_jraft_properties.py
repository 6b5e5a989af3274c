"""Property tests of the JRaft codec: round trips for every message type and payload,
any chunking of a stream, and fuzzing (random and mutated input raises only
ProtocolError)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consensus.wire import jraft
from consensus.wire.errors import ProtocolError
from consensus.wire.jraft import (ClusterConfiguration, ClusterServer, JRaftDecoder,
                                  JRaftLimits, LogEntry, LogPack, LogPackFormat, MessageType,
                                  RaftRequest, RaftResponse, ServerId, SnapshotSyncRequest,
                                  ValueType)
from consensus.wire.jraft_logpack import gzip_java
from consensus.wire.jraft_values import decode_payload

pytestmark = pytest.mark.timeout(120)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
small_bytes = st.binary(max_size=24)
servers = st.builds(ClusterServer, i32, st.text(max_size=12))
configs = st.builds(ClusterConfiguration, i64, i64, st.lists(servers, max_size=3).map(tuple))
snapshots = st.builds(SnapshotSyncRequest, i64, i64, configs, i64, small_bytes, st.booleans())
# Records inside a pack: what a log store holds. H2 terms stay below 2**32, as real terms
# do (the layouts are told apart by sizes; jraft_logpack's docstring says when they can't).
record_payloads = st.one_of(small_bytes, configs)
records = st.builds(LogEntry.of, st.integers(0, (1 << 32) - 1), record_payloads)
packs = st.one_of(
    st.builds(LogPack, st.just(LogPackFormat.FILE_BASED),
              st.lists(records, min_size=1, max_size=3).map(tuple), st.integers(0, 1 << 40)),
    st.builds(LogPack, st.sampled_from([LogPackFormat.FILE_BASED, LogPackFormat.H2])),
    st.builds(LogPack, st.just(LogPackFormat.H2), st.lists(records, max_size=3).map(tuple)),
    st.just(LogPack(LogPackFormat.EMPTY)))
payloads = st.one_of(small_bytes, servers, st.builds(ServerId, i32), configs, packs, snapshots)
entries = st.builds(LogEntry.of, i64, payloads)


def requests(message_type: int) -> st.SearchStrategy[RaftRequest]:
    return st.builds(RaftRequest, st.just(message_type), i32, i32, i64, i64, i64, i64,
                     st.lists(entries, max_size=3).map(tuple))


def responses(message_type: int) -> st.SearchStrategy[RaftResponse]:
    return st.builds(RaftResponse, st.just(message_type), i32, i32, i64, i64, st.booleans())


def of_type(message_type: MessageType) -> st.SearchStrategy:
    return requests(message_type) if message_type.is_request else responses(message_type)


messages = st.one_of([of_type(t) for t in MessageType])


@pytest.mark.parametrize("message_type", list(MessageType), ids=lambda t: t.wire_name)
@FAST
@given(data=st.data())
def test_every_message_type_round_trips(message_type: MessageType, data: st.DataObject) -> None:
    message = data.draw(of_type(message_type))
    wire = jraft.encode(message)
    decoded = jraft.decode(wire)
    assert decoded == message and type(decoded.message_type) is MessageType
    as_json = json.loads(json.dumps(jraft.to_json(decoded)))
    assert jraft.from_json(as_json) == message
    assert jraft.encode(jraft.from_json(as_json)) == wire


@FAST
@given(payload=payloads)
def test_every_payload_round_trips(payload: object) -> None:
    entry = LogEntry.of(1, payload)
    decoded = decode_payload(entry.value_type, entry.value)
    assert decoded == payload
    if isinstance(payload, LogPack):
        assert decoded.content() == payload.content()
        assert decoded.to_bytes() == entry.value                 # relayed unchanged


@FAST
@given(batch=st.lists(messages, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 4000)))
def test_any_chunking_gives_the_same_messages(batch: list, cuts: list[int]) -> None:
    stream = b"".join(jraft.encode(m) for m in batch)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    decoder = JRaftDecoder()
    got = []
    for start, end in zip([0] + points, points + [len(stream)]):
        got += decoder.feed(stream[start:end])
    decoder.eof()
    assert got == batch


# ----------------------------------------------------------------------------- fuzzing

SMALL = JRaftLimits(max_log_data_size=1 << 16, max_value_size=1 << 14, max_log_pack_size=1 << 16,
                    max_snapshot_data=1 << 12)


def decode_everything(data: bytes) -> None:
    """Decode a stream and render every message as JSON: only ProtocolError may escape."""
    decoder = JRaftDecoder(SMALL)
    try:
        for message in decoder.feed(data):
            jraft.to_json(message)
        decoder.eof()
    except ProtocolError:
        pass


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_errors(data: bytes) -> None:
    decode_everything(data)


@FUZZ
@given(data=st.one_of(st.binary(max_size=60).map(lambda b: bytes([3]) + b),
                      st.binary(max_size=60).map(lambda b: bytes([2]) + b)))
def test_random_bodies_after_a_known_type_raise_only_protocol_errors(data: bytes) -> None:
    decode_everything(data)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    wire = bytearray(jraft.encode(draw(messages)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(wire) - 1, 0)))
        if kind == "flip" and wire:
            wire[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and wire:
            wire[at] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
        elif kind == "insert":
            wire[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del wire[at:at + draw(st.integers(1, 4))]
        else:
            del wire[at:]
    return bytes(wire)


@FUZZ
@given(data=mutated())
def test_mutated_messages_raise_only_protocol_errors(data: bytes) -> None:
    decode_everything(data)


@FUZZ
@given(value_type=st.sampled_from(list(ValueType)),
       value=st.one_of(st.binary(max_size=80),
                       payloads.map(lambda p: LogEntry.of(0, p).value).map(
                           lambda v: v[:len(v) // 2] + bytes([len(v) % 256]) + v[len(v) // 2:])))
def test_payload_decoders_raise_only_protocol_errors(value_type: ValueType, value: bytes) -> None:
    try:
        decode_payload(value_type, value, SMALL)
    except ProtocolError:
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pack=packs.filter(lambda p: p.format is not LogPackFormat.EMPTY), data=st.data())
def test_log_pack_content_fuzz_raises_only_protocol_errors(pack: LogPack,
                                                           data: st.DataObject) -> None:
    """Mutate the uncompressed content and gzip it again, so the layout parsers (not just
    the gzip checks) see the damage."""
    content = bytearray(pack.content())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(content)))
        content[at:at + data.draw(st.integers(0, 2))] = data.draw(st.binary(max_size=3))
    try:
        decoded = LogPack.from_bytes(gzip_java(bytes(content)), SMALL)
    except ProtocolError:
        return
    assert decoded.content() == bytes(content)      # whatever parses, re-lays out exactly


@FUZZ
@given(obj=st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(
                                ["message", "term", "entries", "valueType", "value", "text",
                                 "configuration", "servers", "id", "endpoint", "logPack",
                                 "format", "gzip", "source", "accepted"]), inner, max_size=4)),
    max_leaves=12))
def test_from_json_raises_only_protocol_errors(obj: object) -> None:
    for name in ("AppendEntriesRequest", "RequestVoteResponse"):
        candidate = {**obj, "message": name} if isinstance(obj, dict) else obj
        try:
            jraft.from_json(candidate)
        except ProtocolError:
            pass
