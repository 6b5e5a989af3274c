"""The runtime's sans-I/O parts: entry envelopes, the built-in state machines, the
publisher rule, the extension codec, the JRaft and marker mappings, the settings."""
from __future__ import annotations

import dataclasses
import json
import typing

import msgpack
import pytest

from consensus.common.errors import ConfigError, ErrorCode
from consensus.raft import (AppendEntries, AppendEntriesResponse, Configuration, Entry,
                            EntryType, InstallSnapshot, PullEntriesResponse, PullStatus,
                            RequestVote)
from consensus.raft import messages as m
from consensus.runtime.config import NodeConfig, parse_members
from consensus.runtime.machines import FarmStateMachine
from consensus.runtime.marker_wire import entry_bytes, entry_from_bytes
from consensus.runtime.status import choose_publisher, parse_status, status_json
from consensus.wire import envelope, extensions as ext, jraft_mapping as jm
from consensus.wire.errors import InvalidField, LimitExceeded, ProtocolError, Truncated
from consensus.wire.jraft import (JRaftDecoder, JRaftLimits, LogEntry, MessageType, RaftRequest,
                                  ValueType, encode)


def command(kind, *args, rid=b"r1", ts=0):
    return envelope.stamp(envelope.encode_command(kind, rid, *args), ts)


def app(index, data, term=1):
    return Entry(term, index, EntryType.APPLICATION, data)


# -- envelopes ------------------------------------------------------------------------------

def test_envelope_round_trip_and_stamp():
    data = envelope.encode_journal([b"a", b"b"], b"rid")
    assert data[0] == envelope.MAGIC and not envelope.is_status(data)
    stamped = envelope.stamp(data, 1234)
    command_ = envelope.decode_command(stamped)
    assert (command_.kind, command_.request_id, command_.timestamp_ms, command_.args) == \
        (envelope.CommandKind.JOURNAL, b"rid", 1234, ([b"a", b"b"],))
    assert envelope.request_id_of(stamped) == (envelope.CommandKind.JOURNAL, b"rid")
    assert envelope.stamp(b'{"id":1}', 5) == b'{"id":1}'


@pytest.mark.parametrize("data, field", [
    (b"\xc1\x01", "header"),
    (b"\xc1\x02" + bytes(8) + msgpack.packb([1, b"r", []]), "version"),
    (b"\xc1\x01" + bytes(8) + b"\xff\xff", "body"),
    (b"\xc1\x01" + bytes(8) + msgpack.packb([99, b"r"]), "kind"),
    (b"\xc1\x01" + bytes(8) + msgpack.packb([1, "text-id", []]), "request_id"),
    (b"\xc1\x01" + bytes(8) + msgpack.packb([2, b"r", "k"]), "kv_put"),
    (b"\xc1\x01" + bytes(8) + msgpack.packb([1, b"r", ["not bytes"]]), "records"),
    (b"\xc1\x01" + bytes(8) + msgpack.packb([6, b"r", "q", 1, [0], {}]), "staged"),
    (b"\xc1\x01" + bytes(8) + msgpack.packb([8, b"r", "k", 0, "q", 1]), "count"),
])
def test_malformed_commands_name_the_field(data, field):
    with pytest.raises(ProtocolError) as info:
        envelope.decode_command(data)
    assert info.value.field == field


def test_log_record_views():
    stage = app(5, command(envelope.CommandKind.STAGE, "q", 1, 2, 0, "arrow", b"payload", ts=7))
    record = envelope.log_record(stage)
    assert record.type == "staged" and record.payload == b"payload" and record.timestamp_ms == 7
    assert record.staged.partition == 2
    commit = app(6, command(envelope.CommandKind.COMMIT, "q", 1, [5], {"n": 1}))
    assert envelope.log_record(commit, effective=False).commit.effective is False
    status = app(7, b'{"cluster":"farm","date":99,"id":1}')
    assert envelope.log_record(status).type == "status"
    assert envelope.log_record(status).timestamp_ms == 99
    assert envelope.log_record(Entry(1, 8, EntryType.NOOP)).type == "noop"
    header = envelope.header_of(envelope.described(commit, True))
    assert envelope.record_from_header(header).commit.staged == (5,)
    journal = envelope.described(app(9, command(envelope.CommandKind.JOURNAL, [b"x"])), False)
    assert journal.duplicate and journal.count == 1


# -- state machines ---------------------------------------------------------------------------

def test_request_ids_apply_once_across_snapshots():
    machine = FarmStateMachine()
    first = machine.apply(app(1, command(envelope.CommandKind.KV_APPEND, "k", "a", rid=b"x")))
    again = machine.apply(app(2, command(envelope.CommandKind.KV_APPEND, "k", "a", rid=b"x")))
    assert machine.kv["k"] == "a"
    assert (again.index, again.result, again.duplicate) == (1, first.result, True)
    assert machine.verdict(app(2, command(envelope.CommandKind.KV_APPEND, "k", "a",
                                            rid=b"x"))) is False
    restored = FarmStateMachine()
    restored.restore(machine.snapshot())
    third = restored.apply(app(3, command(envelope.CommandKind.KV_APPEND, "k", "a", rid=b"x")))
    assert third.index == 1 and restored.kv == {"k": "a"} and restored.applied == 3


def test_snapshots_of_the_previous_format_still_restore():
    machine = FarmStateMachine()
    machine.apply(app(1, command(envelope.CommandKind.KV_PUT, "k", "v", rid=b"x")))
    state = msgpack.unpackb(machine.snapshot(), raw=False, strict_map_key=False)
    assert state["v"] == 2
    state["v"], state["requests"] = 1, [[rid, *v] for rid, v in state["requests"]]
    restored = FarmStateMachine()
    restored.restore(msgpack.packb(state, use_bin_type=True))
    again = restored.apply(app(2, command(envelope.CommandKind.KV_PUT, "k", "w", rid=b"x")))
    assert again.duplicate and again.index == 1 and restored.kv == {"k": "v"}


def test_ledger_rules():
    m = FarmStateMachine()
    m.apply(app(1, command(envelope.CommandKind.STAGE, "q", 1, 0, 0, "arrow", b"a", rid=b"1")))
    m.apply(app(2, command(envelope.CommandKind.STAGE, "q", 1, 0, 1, "arrow", b"b", rid=b"2")))
    m.apply(app(3, command(envelope.CommandKind.STAGE, "q", 0, 0, 0, "arrow", b"c", rid=b"3")))
    done = m.apply(app(4, command(envelope.CommandKind.COMMIT, "q", 1, [1], {}, rid=b"4")))
    assert done.result == [True, 4, False]
    assert m.ledger.staged == {}            # attempt 1 and the older batch are garbage
    dup = m.apply(app(5, command(envelope.CommandKind.COMMIT, "q", 1, [2], {}, rid=b"5")))
    assert dup.result == [False, 4, True]
    assert m.ledger.commit_effective(4, "q", 1) and not m.ledger.commit_effective(5, "q", 1)
    bad = m.apply(app(6, command(envelope.CommandKind.COMMIT, "q", 2, [2], {}, rid=b"6")))
    assert bad.error[0] == ErrorCode.FAILED and "unknown" in bad.error[1]
    start = m.apply(app(7, command(envelope.CommandKind.ALLOCATE, "seq", 3, "q", 1, rid=b"7")))
    same = m.apply(app(8, command(envelope.CommandKind.ALLOCATE, "seq", 3, "q", 1, rid=b"8")))
    nxt = m.apply(app(9, command(envelope.CommandKind.ALLOCATE, "seq", 2, "q", 2, rid=b"9")))
    assert (start.result, same.result, nxt.result) == (0, 0, 3)
    copy = FarmStateMachine()
    copy.restore(m.snapshot())
    assert copy.ledger.dump() == m.ledger.dump()


def test_compaction_keeps_what_committed_batches_need():
    m = FarmStateMachine()
    m.apply(app(10, command(envelope.CommandKind.STAGE, "q", 1, 0, 0, "arrow", b"a", rid=b"1")))
    m.apply(app(20, command(envelope.CommandKind.COMMIT, "q", 1, [10], {}, rid=b"2")))
    m.apply(app(30, command(envelope.CommandKind.STAGE, "q", 2, 0, 0, "arrow", b"b", rid=b"3")))
    assert m.ledger.referenced_floor(15) == 10      # the commit at 20 names 10
    assert m.ledger.referenced_floor(25) == 25      # pending staged 30 is above
    assert m.ledger.referenced_floor(40) == 30      # pending staged entry 30


def test_queries():
    m = FarmStateMachine()
    m.apply(app(1, command(envelope.CommandKind.KV_PUT, "k", "v")))
    assert msgpack.unpackb(m.query(msgpack.packb(["kv_get", "k"]))) == "v"
    with pytest.raises(Exception, match="not a built-in query"):
        m.query(b"free-form")


# -- status and the publisher ------------------------------------------------------------------

def _status(node_id, date, commit, last=None, interval=1.0, publish="auto"):
    return parse_status(status_json(cluster="farm", date_ms=date, node_id=node_id,
                                    config={"statusInterval": interval},
                                    raft={"commit": commit, "last": last or commit},
                                    uptime_ms=5, publishing=False, publish_config=publish))


def test_publisher_is_the_freshest_best_status():
    statuses = {1: _status(1, 10_000, 50), 2: _status(2, 10_500, 60), 3: _status(3, 4_000, 90)}
    assert choose_publisher(statuses) == 2          # 3 is stale (more than 3 intervals)
    statuses[2] = _status(2, 10_500, 60, publish="off")
    assert choose_publisher(statuses) == 1
    assert choose_publisher({}) is None
    assert parse_status(b"not json") is None and parse_status(b'{"id":"x"}') is None
    body = json.loads(status_json(cluster="c", date_ms=1, node_id=4, config={}, raft={},
                                  uptime_ms=2, publishing=True))
    assert body["router"]["uptime"] == 2 and body["meta"]["publishing"] is True


# -- extension frames --------------------------------------------------------------------------

def test_extension_frames_round_trip_in_any_chunking():
    frames = [ext.Hello(0, 0, 0, b"client", 1),
              ext.Call(0, 0, 0, 7, "query", {"query": b"\x01", "n": [1, 2]}),
              ext.WriteResult(1, 0, 3, b"rid", 10, 3, 0, [True, 10, False], "", {}),
              PullEntriesResponse(term=4, source=2, destination=3, status=PullStatus.SUCCESS,
                                  index=5, entries=[Entry(4, 5, EntryType.APPLICATION, b"x")],
                                  min_index=1, commit=5)]
    data = b"".join(encode(f, ext.GARLICFARM_REGISTRY) for f in frames)
    decoder = JRaftDecoder(registry=ext.GARLICFARM_REGISTRY)
    out = []
    for i in range(0, len(data), 3):
        out += decoder.feed(data[i:i + 3])
    assert out == frames


@pytest.mark.parametrize("mutate, error, field", [
    (lambda f: f[:17] + b"\x7f\xff\xff\xff" + f[21:], LimitExceeded, "bodySize"),
    (lambda f: f[:17] + b"\xff\xff\xff\xff" + f[21:], InvalidField, "bodySize"),
    (lambda f: f[:21] + b"\xc1" + f[22:], InvalidField, "body"),
])
def test_corrupt_extension_frames_are_typed_errors(mutate, error, field):
    frame = encode(ext.Call(0, 0, 0, 7, "ping", {}), ext.GARLICFARM_REGISTRY)
    decoder = JRaftDecoder(JRaftLimits(max_log_data_size=1 << 20), ext.GARLICFARM_REGISTRY)
    with pytest.raises(error) as info:
        decoder.feed(mutate(frame))
    assert info.value.field == field


def test_wrong_field_type_names_the_field():
    body = msgpack.packb([7, "ping", "not a map"])
    frame = bytes([ext.ExtType.CALL]) + bytes(16) + len(body).to_bytes(4, "big") + body
    with pytest.raises(InvalidField) as info:
        JRaftDecoder(registry=ext.GARLICFARM_REGISTRY).feed(frame)
    assert info.value.field == "args"


def test_a_truncated_frame_is_reported_at_end_of_stream():
    frame = encode(ext.Call(0, 0, 0, 7, "ping", {}), ext.GARLICFARM_REGISTRY)
    decoder = JRaftDecoder(registry=ext.GARLICFARM_REGISTRY)
    assert decoder.feed(frame[:-1]) == []
    with pytest.raises(Truncated):
        decoder.eof()


# -- JRaft mapping ------------------------------------------------------------------------------

CONFIG = Configuration(frozenset({1, 2}), frozenset({1, 3}), frozenset({4}),
                       {1: "h:1", 2: "h:2", 3: "h:3", 4: "h:4"})


def test_entries_survive_the_jraft_wire():
    entries = [Entry(2, 5, EntryType.NOOP), Entry(2, 6, EntryType.APPLICATION, b"data"),
               Entry(3, 7, EntryType.CONFIGURATION, CONFIG.encode())]
    msg = AppendEntries(term=3, source=1, destination=2, prev_log_index=4, prev_log_term=2, entries=entries, commit=4, ctx=99)
    wire, echo = jm.to_wire(msg, extensions=True)
    back = jm.from_wire(JRaftDecoder(registry=ext.GARLICFARM_REGISTRY).feed(
        encode(wire, ext.GARLICFARM_REGISTRY))[0])
    assert back.entries == entries and back.prev_log_index == 4 and back.commit == 4
    assert Configuration.decode(back.entries[2].data) == CONFIG
    response = jm.response_from_wire(
        jm.to_wire(AppendEntriesResponse(term=3, source=2, destination=1, success=True, next_index=8, log_index=5, entry_count=3), True)[0], echo)
    assert (response.log_index, response.entry_count, response.ctx) == (5, 3, 99)
    plain, _ = jm.to_wire(msg, extensions=False)
    voters_only = jm.entries_from_wire(plain.entries, 5)[2]
    assert Configuration.decode(voters_only.data).voters == {1, 2}


def test_hot_frames_are_the_generic_codec_s_bytes():
    """The fast paths (AppendEntries, its response, a client's values) read and write
    exactly what the generic codec does, and leave every other shape to it."""
    registry = ext.GARLICFARM_REGISTRY
    limits = JRaftLimits()
    entries = [Entry(2, 5, EntryType.NOOP), Entry(2, 6, EntryType.APPLICATION, b"data"),
               Entry(3, 7, EntryType.APPLICATION, b"x" * 300)]
    msg = AppendEntries(term=3, source=1, destination=2, prev_log_index=4, prev_log_term=2, entries=entries, commit=4, ctx=99)
    bodies: dict = {}
    frame = jm.append_entries_frame(msg, bodies)
    assert frame == encode(jm.to_wire(msg, extensions=True)[0], registry)
    assert jm.append_entries_frame(AppendEntries(term=3, source=1, destination=3, prev_log_index=4, prev_log_term=2, entries=entries, commit=5), bodies)[45:] \
        == frame[45:]                                   # the body is encoded once
    assert jm.append_entries_frame(AppendEntries(term=3, source=1, destination=2, prev_log_index=7, prev_log_term=3, entries=[], commit=7), bodies) == \
        encode(jm.to_wire(AppendEntries(term=3, source=1, destination=2, prev_log_index=7, prev_log_term=3, entries=[], commit=7), True)[0], registry)
    generic = jm.from_wire(JRaftDecoder(registry=registry).feed(frame)[0])
    assert jm.append_entries_from_frame(frame, limits) == generic
    # a configuration entry, a value type that is not Application, too many entries:
    # not the common shape (None), and the generic decoder names what is wrong
    with_config = AppendEntries(term=3, source=1, destination=2, prev_log_index=4, prev_log_term=2, entries=[Entry(3, 5, EntryType.CONFIGURATION,
                                                      CONFIG.encode())], commit=4)
    assert jm.append_entries_frame(with_config, {}) is None
    bad_type = bytearray(frame)
    bad_type[45 + 8] = 9                                # entries[0].valueType
    assert jm.append_entries_from_frame(bytes(bad_type), limits) is None
    with pytest.raises(ProtocolError) as info:
        JRaftDecoder(registry=registry).feed(bytes(bad_type))
    assert info.value.field.startswith("entries[0]")
    assert jm.append_entries_from_frame(frame, JRaftLimits(max_entries=2)) is None
    assert jm.append_entries_from_frame(frame[:-1], limits) is None         # cut short
    # the response, paired with its request's echo
    _, echo = jm.to_wire(msg, extensions=True)
    answer = AppendEntriesResponse(term=3, source=2, destination=1, success=True, next_index=8, log_index=5, entry_count=3, ctx=99)
    answer_frame = jm.append_response_frame(answer)
    assert answer_frame == encode(jm.to_wire(answer, True)[0], registry)
    assert jm.append_response_from_frame(answer_frame, echo) == answer
    # a client's values; an empty request is not the common shape
    request = encode(RaftRequest(MessageType.CLIENT_REQUEST, entries=(
        LogEntry(0, ValueType.APPLICATION, b"a"), LogEntry(0, ValueType.APPLICATION, b"bc"))),
        registry)
    assert jm.client_values_from_frame(request, limits) == [b"a", b"bc"]
    assert jm.client_values_from_frame(request[:45], limits) is None


def test_split_returns_the_frames_feed_decodes_in_any_chunking():
    registry = ext.GARLICFARM_REGISTRY
    msgs = [AppendEntries(term=3, source=1, destination=2, prev_log_index=4, prev_log_term=2, entries=[Entry(3, 5, EntryType.APPLICATION, b"v" * i)], commit=4)
            for i in range(1, 6)]
    data = b"".join(jm.append_entries_frame(m, {}) for m in msgs) + \
        encode(ext.Call(0, 0, 0, 7, "ping", {}), registry)
    for step in (1, 7, 64, len(data)):
        decoder = JRaftDecoder(registry=registry)
        frames = []
        for i in range(0, len(data), step):
            frames += decoder.split(data[i:i + step])
        assert b"".join(f for _, f in frames) == data
        assert [r.codec.decode(f, r.message_type, decoder.limits) for r, f in frames] == \
            JRaftDecoder(registry=registry).feed(data)
        assert decoder.buffered == 0


def test_only_the_garlicfarm_wire_carries_extensions():
    pre_vote = RequestVote(term=4, source=1, destination=2, last_log_index=10, last_log_term=3, pre_vote=True)
    assert jm.to_wire(pre_vote, extensions=False) is None
    wire, echo = jm.to_wire(pre_vote, extensions=True)
    assert wire.message_type == ext.ExtType.PRE_VOTE_REQUEST and echo is None
    pulled = PullEntriesResponse(term=1, source=2, destination=3, status=PullStatus.SUCCESS, index=7, entries=[Entry(1, 7, EntryType.NOOP)],
                                 min_index=1, commit=7)
    assert jm.to_wire(pulled, extensions=False) is None
    wire, _ = jm.to_wire(pulled, extensions=True)
    assert jm.from_wire(wire) == pulled


def test_snapshot_chunks_carry_the_configuration():
    chunk = InstallSnapshot(term=5, source=1, destination=2, snapshot_index=40, snapshot_term=4, configuration=CONFIG, offset=0, data=b"state", done=True, commit=40)
    wire, echo = jm.to_wire(chunk, extensions=True)
    assert jm.from_wire(wire) == chunk and echo.done
    assert wire.message_type == MessageType.INSTALL_SNAPSHOT_REQUEST


def test_a_response_of_the_wrong_type_is_refused():
    _, echo = jm.to_wire(RequestVote(term=1, source=1, destination=2, last_log_index=0, last_log_term=0), extensions=True)
    wrong, _ = jm.to_wire(AppendEntriesResponse(term=1, source=2, destination=1, success=True, next_index=1, log_index=1, entry_count=0), True)
    with pytest.raises(InvalidField):
        jm.response_from_wire(wrong, echo)


def _one_of_each() -> list:
    """A core message of every type in `RaftMessage`, with fields a wire must carry."""
    entries = [Entry(2, 5, EntryType.NOOP), Entry(2, 6, EntryType.APPLICATION, b"data")]
    return [
        RequestVote(term=4, source=1, destination=2, last_log_index=10, last_log_term=3), RequestVote(term=4, source=1, destination=2, last_log_index=10, last_log_term=3, pre_vote=True),
        RequestVote(term=4, source=1, destination=2, last_log_index=10, last_log_term=3, leader_transfer=True),
        m.RequestVoteResponse(term=4, source=2, destination=1, granted=True),
        m.RequestVoteResponse(term=4, source=2, destination=1, granted=False, pre_vote=True),
        AppendEntries(term=3, source=1, destination=2, prev_log_index=4, prev_log_term=2, entries=entries, commit=4, ctx=9),
        AppendEntriesResponse(term=3, source=2, destination=1, success=True, next_index=7, log_index=5, entry_count=2, ctx=9),
        InstallSnapshot(term=5, source=1, destination=2, snapshot_index=40, snapshot_term=4, configuration=CONFIG, offset=0, data=b"state", done=True, commit=40),
        m.InstallSnapshotResponse(term=5, source=2, destination=1, success=True, next_offset=5, snapshot_index=40, done=True),
        m.TimeoutNow(term=5, source=1, destination=2), m.ReadIndexRequest(term=5, source=2, destination=1, ctx=b"ctx", lease=True),
        m.ReadIndexResponse(term=5, source=1, destination=2, ctx=b"ctx", index=11, success=True),
        m.JoinClusterRequest(term=5, source=1, destination=4, configuration=CONFIG, commit=30, last_log_index=31), m.JoinClusterResponse(term=5, source=4, destination=1, accepted=True, next_index=32),
        m.SyncLogRequest(term=5, source=1, destination=4, start_index=5, entries=entries, commit=30), m.SyncLogResponse(term=5, source=4, destination=1, accepted=True, next_index=7),
        m.LeaveClusterRequest(term=5, source=1, destination=3, commit=30, last_log_index=31), m.LeaveClusterResponse(term=5, source=3, destination=1, accepted=True),
        m.PullEntries(term=0, source=4, destination=1, index=7, max_entries=100, max_bytes=1 << 20),
        PullEntriesResponse(term=0, source=1, destination=4, status=PullStatus.SUCCESS, index=5, entries=entries, min_index=1, commit=6),
        m.PullSnapshot(term=0, source=4, destination=1, snapshot_index=0, offset=0),
        m.PullSnapshotResponse(term=0, source=1, destination=4, snapshot_index=40, snapshot_term=4, configuration=CONFIG, offset=0, data=b"s", done=True),
    ]


def test_every_core_message_crosses_the_garlicfarm_wire_unchanged():
    """Each type of the closed `RaftMessage` set is registered once: it goes to bytes and
    back (a paired response with the Echo of the request it answers)."""
    msgs = _one_of_each()
    assert {type(m) for m in msgs} == set(typing.get_args(m.RaftMessage))
    registry = ext.GARLICFARM_REGISTRY
    echoes = {}
    for msg in msgs:
        wire, echo = jm.to_wire(msg, extensions=True)
        if echo is not None:
            echoes[echo.response_type] = echo
        decoded = JRaftDecoder(registry=registry).feed(encode(wire, registry))[0]
        type_byte = registry.of(decoded).message_type
        assert type_byte == registry.of(wire).message_type
        paired = jm.route(type_byte).route is jm.Route.PAIRED_RESPONSE
        assert (jm.fifo_response_type(msg) is not None) == paired
        back = jm.from_wire(decoded, echoes[type_byte] if paired else None)
        if isinstance(msg, AppendEntries):
            msg = dataclasses.replace(msg, ctx=0)   # the stamp stays in the leader's Echo
        assert back == msg, type(msg).__name__


# -- marker entries ------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", [
    Entry(1, 3, EntryType.NOOP), Entry(1, 3, EntryType.APPLICATION, b"plain"),
    Entry(1, 3, EntryType.APPLICATION, b"\xc2looks like a tag"),
    Entry(1, 3, EntryType.APPLICATION, b"\xc3escaped"),
    Entry(2, 3, EntryType.CONFIGURATION, CONFIG.encode())])
def test_marker_entry_kinds_round_trip(entry):
    assert entry_from_bytes(entry.term, entry.index, entry_bytes(entry)) == entry


# -- settings ------------------------------------------------------------------------------------

def test_settings_name_the_option_at_fault(tmp_path):
    assert parse_members("2=127.0.0.1:9002, 3=h:9003", "--peers") == {2: "127.0.0.1:9002",
                                                                       3: "h:9003"}
    for text, option in (("x=h:1", "--peers"), ("2=nohost", "--peers"), ("0=h:1", "--peers")):
        with pytest.raises(ConfigError) as info:
            parse_members(text, option)
        assert info.value.option == option
    base = dict(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="--wire"):
        NodeConfig(**base, wire="udp")
    with pytest.raises(ConfigError, match="--fsync"):
        NodeConfig(**base, fsync="sometimes")
    with pytest.raises(ConfigError, match="--user"):
        NodeConfig(**base).security()
    with pytest.raises(ConfigError, match="unknown setting"):
        NodeConfig.from_mapping({**base, "colour": "blue"})
    config = NodeConfig.from_mapping({**base, "peers": "2=h:2", "user": "u", "password": "p",
                                      "peer-address": ["2=127.0.0.1:7"]})
    assert config.peers == {2: "h:2"} and config.peer_address == {2: "127.0.0.1:7"}
    assert config.security().password_of("u") == "p"


def test_commit_verdicts_stay_exact_after_batch_details_are_forgotten(monkeypatch):
    from consensus.runtime import machines
    monkeypatch.setattr(machines, "BATCHES_KEPT_PER_QUERY", 2)
    m = FarmStateMachine()
    index = 0
    commits = {}
    for batch in range(5):
        index += 1
        m.apply(app(index, command(envelope.CommandKind.STAGE, "q", batch, 0, 0, "a", b"p",
                                   rid=b"s%d" % batch)))
        index += 1
        commits[batch] = index
        m.apply(app(index, command(envelope.CommandKind.COMMIT, "q", batch, [index - 1], {},
                                   rid=b"c%d" % batch)))
    assert len(m.ledger.commits["q"]) == 2                  # details of 0..2 forgotten
    index += 1
    late_duplicate = app(index, command(envelope.CommandKind.COMMIT, "q", 0, [], {},
                                        rid=b"late"))
    m.apply(late_duplicate)
    assert all(m.ledger.commit_effective(i, "q", b) for b, i in commits.items())
    assert m.verdict(late_duplicate) is False
    copy = FarmStateMachine()
    copy.restore(m.snapshot())
    assert copy.ledger.commit_effective(commits[0], "q", 0)


def test_a_node_process_never_imports_pyspark():
    import subprocess
    import sys
    code = ("import sys, consensus.cli, consensus.runtime.cli, consensus.runtime.node; "
            "sys.exit(any(m.split('.')[0] == 'pyspark' for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_the_directory_does_not_send_leader_calls_to_a_leader_that_failed_us():
    """A member's Welcome may still name a leader that just died: the client then lets
    that member answer a leader's call instead of waiting for the dead one (it tries it
    last for a while), and goes back to it once a Welcome names it and it is not suspect."""
    from consensus.client.links import Directory
    a, b, c = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"
    config = Configuration.of({1, 2, 3}, set(), {1: a, 2: b, 3: c}).encode()
    directory = Directory([a, b, c], connect_timeout=1.0)
    welcome = ext.Welcome(2, 0, 1, 2, "farm", 1, "follower", config)
    directory.learn(welcome)
    assert directory.leader == a and directory.reachable_leader() == a
    assert directory.candidates(leader=True)[0] == a
    directory.failed(a)
    assert directory.leader is None and directory.reachable_leader() is None
    directory.learn(welcome)                # another member still believes in node 1
    assert directory.leader == a and directory.reachable_leader() is None
    assert directory.candidates(leader=True)[-1] == a
