"""The JRaft binary codec against the vectors JRaft itself produced, the layouts of
LAYOUT.md, the limits, the registry and the JSON of the inspector."""
from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import pytest

from consensus.wire import jraft
from consensus.wire.errors import (InvalidField, LimitExceeded, ProtocolError, Truncated,
                                   UnknownMessageType)
from consensus.wire.jraft import (REGISTRY, REQUEST_CODEC, ClusterConfiguration,
                                  ClusterServer, JRaftDecoder, JRaftLimits, LogEntry,
                                  MessageType, RaftRequest, RaftResponse, ServerId,
                                  SnapshotSyncRequest, ValueType)
from consensus.wire.jraft_values import decode_entries, decode_payload

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "garlicfarm"
ALL = [json.loads(line) for line in (VECTORS / "jraft_vectors.jsonl").read_text().splitlines()
       if line.strip()]
MESSAGES = [v for v in ALL if v["kind"] in ("request", "response")]
PAYLOADS = {v["name"]: v for v in ALL if v["kind"] == "entry-payload"}
pytestmark = pytest.mark.timeout(60)


def server_json(server: ClusterServer) -> dict:
    return {"id": server.id, "endpoint": server.endpoint}


def config_json(config: ClusterConfiguration) -> dict:
    return {"logIndex": config.log_index, "lastLogIndex": config.last_log_index,
            "servers": [server_json(s) for s in config.servers]}


def header(message_type: int, log_data_size: int) -> bytes:
    return struct.pack(">Biiqqqqi", message_type, 1, 2, 5, 4, 42, 40, log_data_size)


# ---------------------------------------------------------------------------- vectors

@pytest.mark.parametrize("vector", MESSAGES, ids=[v["name"] for v in MESSAGES])
def test_message_vector_decodes_to_its_fields_and_back(vector: dict) -> None:
    data, fields = bytes.fromhex(vector["hex"]), vector["fields"]
    message = jraft.decode(data)
    assert message.message_type == fields["messageTypeByte"]
    assert message.message_type.wire_name == fields["messageType"]
    assert (message.source, message.destination, message.term) == \
        (fields["source"], fields["destination"], fields["term"])
    if vector["kind"] == "request":
        assert isinstance(message, RaftRequest)
        assert (message.last_log_term, message.last_log_index, message.commit_index) == \
            (fields["lastLogTerm"], fields["lastLogIndex"], fields["commitIndex"])
        assert len(data) - 45 == fields["logDataSize"]
        assert len(message.entries) == fields["entryCount"]
        for entry, expected in zip(message.entries, fields["entries"]):
            assert entry.term == expected["term"]
            assert entry.value_type == expected["valueTypeByte"]
            assert entry.value_type.wire_name == expected["valueType"]
            assert entry.value.hex() == expected["valueHex"]
            payload = entry.payload()
            if isinstance(expected["valueDecoded"], dict):
                assert server_json(payload) == expected["valueDecoded"]
            elif entry.value_type is ValueType.APPLICATION:
                assert payload.decode() == expected["valueDecoded"]
    else:
        assert isinstance(message, RaftResponse)
        assert (message.next_index, message.accepted) == (fields["nextIndex"], fields["accepted"])
    assert jraft.encode(message) == data
    again = jraft.from_json(json.loads(json.dumps(jraft.to_json(message))))
    assert again == message
    assert jraft.encode(again) == data


def test_cluster_server_vector() -> None:
    vector = PAYLOADS["ClusterServer id=4 tcp://localhost:9001"]
    server = decode_payload(ValueType.CLUSTER_SERVER, bytes.fromhex(vector["hex"]))
    assert isinstance(server, ClusterServer) and server_json(server) == vector["fields"]
    assert server.to_bytes().hex() == vector["hex"]


def test_remove_server_bare_id_vector() -> None:
    vector = PAYLOADS["RemoveServer bare id=3"]
    payload = decode_payload(ValueType.CLUSTER_SERVER, bytes.fromhex(vector["hex"]))
    assert payload == ServerId(vector["fields"]["serverId"])
    assert payload.to_bytes().hex() == vector["hex"]


@pytest.mark.parametrize("name", ["ClusterConfiguration 3 servers", "ClusterConfiguration empty"])
def test_configuration_vectors(name: str) -> None:
    vector = PAYLOADS[name]
    config = decode_payload(ValueType.CONFIGURATION, bytes.fromhex(vector["hex"]))
    assert config_json(config) == vector["fields"]
    assert config.to_bytes().hex() == vector["hex"]
    assert len(config.to_bytes()) == vector["length"]


def test_snapshot_sync_request_vector() -> None:
    vector = PAYLOADS["SnapshotSyncRequest offset=2048 not done"]
    fields = vector["fields"]
    snapshot = decode_payload(ValueType.SNAPSHOT_SYNC_REQUEST, bytes.fromhex(vector["hex"]))
    assert isinstance(snapshot, SnapshotSyncRequest)
    assert (snapshot.last_log_index, snapshot.last_log_term, snapshot.offset, snapshot.done) \
        == (fields["snapshotLastLogIndex"], fields["snapshotLastLogTerm"], fields["offset"],
            fields["done"])
    assert config_json(snapshot.last_config) == fields["lastConfig"]
    assert snapshot.data.hex() == fields["dataHex"] and len(snapshot.data) == fields["dataSize"]
    assert len(snapshot.last_config.to_bytes()) == fields["configSize"]
    assert snapshot.to_bytes().hex() == vector["hex"]


@pytest.mark.parametrize("name", ["LogEntry Application term=5 'hello'",
                                  "LogEntry Application term=5 empty value"])
def test_log_entry_vectors(name: str) -> None:
    vector = PAYLOADS[name]
    data, fields = bytes.fromhex(vector["hex"]), vector["fields"]
    (entry,) = decode_entries(data, 0, len(data), JRaftLimits())
    assert (entry.term, entry.value_type.wire_name, entry.value.hex()) == \
        (fields["term"], fields["valueType"], fields["valueHex"])
    assert len(data) == fields["entryBytes"] == 13 + fields["valueSize"]
    assert jraft.encode(RaftRequest(MessageType.CLIENT_REQUEST, entries=(entry,)))[45:] == data


def test_layout_worked_example_remove_server_request() -> None:
    """LAYOUT.md's 62-byte RemoveServerRequest, spelled out there byte by byte."""
    data = bytes.fromhex("08" + "00000000" * 2 + "0000000000000000" * 4 + "00000011"
                         + "0000000000000000" + "03" + "00000004" + "00000003")
    assert len(data) == 62
    message = jraft.decode(data)
    assert message == RaftRequest(MessageType.REMOVE_SERVER_REQUEST,
                                  entries=(LogEntry.of(0, ServerId(3)),))
    jraft.check_shape(message)
    assert jraft.encode(message) == data


def test_requests_the_vectors_lack_are_built_from_their_parts() -> None:
    """JoinCluster / InstallSnapshot / AppendEntries with a Configuration entry have no
    message vector: their entries are the payload vectors, framed as LAYOUT.md says."""
    config = bytes.fromhex(PAYLOADS["ClusterConfiguration 3 servers"]["hex"])
    snapshot = bytes.fromhex(PAYLOADS["SnapshotSyncRequest offset=2048 not done"]["hex"])
    for message_type, value_type, value in (
            (MessageType.JOIN_CLUSTER_REQUEST, 2, config),
            (MessageType.INSTALL_SNAPSHOT_REQUEST, 5, snapshot),
            (MessageType.APPEND_ENTRIES_REQUEST, 2, config)):
        entry = struct.pack(">qbi", 5, value_type, len(value)) + value
        data = header(message_type, len(entry)) + entry
        message = jraft.decode(data)
        jraft.check_shape(message)
        assert message.entries[0].value == value
        assert message.entries[0].payload().to_bytes() == value
        assert jraft.encode(message) == data


# ------------------------------------------------------------------------ semantics

def test_accepted_is_true_only_for_byte_1() -> None:
    base = bytes.fromhex(MESSAGES[-1]["hex"])[:25]
    assert jraft.decode(base + b"\x01").accepted is True
    assert jraft.decode(base + b"\x00").accepted is False
    assert jraft.decode(base + b"\x02").accepted is False
    assert jraft.decode(base + b"\xff").accepted is False


def test_snapshot_done_is_true_only_for_byte_1() -> None:
    data = bytearray.fromhex(PAYLOADS["SnapshotSyncRequest offset=2048 not done"]["hex"])
    for byte, done in ((1, True), (2, False), (0, False)):
        data[-1] = byte
        assert decode_payload(ValueType.SNAPSHOT_SYNC_REQUEST, bytes(data)).done is done


def test_mixed_stream_of_all_vectors_in_any_two_pieces() -> None:
    stream = b"".join(bytes.fromhex(v["hex"]) for v in MESSAGES)
    expected = [jraft.decode(bytes.fromhex(v["hex"])) for v in MESSAGES]
    for cut in range(len(stream) + 1):
        decoder = JRaftDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        decoder.eof()
        assert got == expected, cut
    decoder = JRaftDecoder()
    got = [m for i in range(len(stream)) for m in decoder.feed(stream[i:i + 1])]
    assert got == expected and decoder.buffered == 0


def test_eof_inside_a_message_is_truncated_naming_it() -> None:
    data = bytes.fromhex(MESSAGES[2]["hex"])      # AppendEntriesRequest 1 entry
    decoder = JRaftDecoder()
    assert decoder.feed(data[:50]) == []
    with pytest.raises(Truncated) as caught:
        decoder.eof()
    assert caught.value.field == "AppendEntriesRequest"


def test_an_error_after_good_messages_comes_on_the_next_call() -> None:
    good = bytes.fromhex(MESSAGES[0]["hex"])
    decoder = JRaftDecoder()
    assert decoder.feed(good + b"\x63" + bytes(44)) == [jraft.decode(good)]
    with pytest.raises(UnknownMessageType) as caught:
        decoder.feed(b"")
    assert caught.value.field == "messageType" and caught.value.offset == len(good)
    with pytest.raises(UnknownMessageType):
        decoder.eof()


# ------------------------------------------------------------- large messages, in place

def large_request(value_size: int) -> tuple[bytes, RaftRequest]:
    message = RaftRequest(MessageType.APPEND_ENTRIES_REQUEST, 1, 2, 5, 4, 42, 40,
                          (LogEntry(7, ValueType.APPLICATION, bytes(range(256)) *
                                    (value_size // 256)),))
    return jraft.encode(message), message


@pytest.mark.parametrize("first", [45, 46 + jraft.LARGE_FRAME // 8, 200_000])
def test_a_large_message_is_assembled_whole_however_it_arrives(first: int) -> None:
    data, message = large_request(jraft.LARGE_FRAME * 4)
    small = bytes.fromhex(MESSAGES[0]["hex"])
    stream = small + data + small
    start = len(small) + first
    decoder = JRaftDecoder()
    got = decoder.feed(stream[:start])
    assert decoder.buffered == first
    for cut in range(start, len(stream), 70_001):
        got += decoder.feed(stream[cut:cut + 70_001])
    decoder.eof()
    assert got == [jraft.decode(small), message, jraft.decode(small)]
    assert type(got[1].entries[0].value) is bytes and decoder.buffered == 0


def test_a_large_message_fills_the_buffer_its_reader_receives_into() -> None:
    data, message = large_request(jraft.LARGE_FRAME * 4)
    decoder = JRaftDecoder()
    assert decoder.pending_buffer() is None
    assert decoder.feed(data[:len(data) // 4]) == []
    got, pos = [], len(data) // 4
    while (view := decoder.pending_buffer()) is not None:
        step = min(len(view), 50_000)
        view[:step] = data[pos:pos + step]
        view.release()
        pos += step
        got += decoder.filled(step)
    assert got == [message] and pos == len(data) and decoder.buffered == 0
    assert decoder.feed(data[:100]) == [] and decoder.pending_buffer() is None


def test_filling_more_than_the_pending_buffer_holds_is_refused() -> None:
    data, _ = large_request(jraft.LARGE_FRAME * 2)
    decoder = JRaftDecoder()
    decoder.feed(data[:len(data) // 2])
    with pytest.raises(ValueError):
        decoder.filled(len(data))
    with pytest.raises(ValueError):
        JRaftDecoder().filled(1)


def test_eof_and_errors_inside_a_large_message_keep_their_offsets() -> None:
    data, _ = large_request(jraft.LARGE_FRAME * 2)
    small = bytes.fromhex(MESSAGES[0]["hex"])
    decoder = JRaftDecoder()
    assert decoder.feed(small + data[:-10]) == [jraft.decode(small)]
    with pytest.raises(Truncated) as caught:
        decoder.eof()
    assert caught.value.field == "AppendEntriesRequest"
    assert caught.value.offset == len(small) + len(data) - 10
    corrupt = bytearray(data)
    corrupt[45 + 9:45 + 13] = struct.pack(">i", len(data))   # the entry's value size
    decoder = JRaftDecoder()
    decoder.feed(small + bytes(corrupt[:len(data) // 2]))
    with pytest.raises(ProtocolError) as caught:
        decoder.feed(bytes(corrupt[len(data) // 2:]))
    assert caught.value.offset is not None and caught.value.offset > len(small)
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


# --------------------------------------------------------------------------- limits

def test_two_gib_log_data_size_is_refused_from_the_header_alone() -> None:
    decoder = JRaftDecoder()
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as caught:
            decoder.feed(header(MessageType.APPEND_ENTRIES_REQUEST, 0x7FFFFFFF))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.field == "logDataSize" and caught.value.offset == 41
    assert peak < 256 * 1024


def test_a_raised_limit_waits_for_the_body_without_allocating_it() -> None:
    decoder = JRaftDecoder(JRaftLimits(max_log_data_size=0x7FFFFFFF))
    tracemalloc.start()
    try:
        assert decoder.feed(header(MessageType.APPEND_ENTRIES_REQUEST, 0x7FFFFFFF)) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 45 and peak < 256 * 1024


@pytest.mark.parametrize("size, error", [(-1, InvalidField), (-(1 << 31), InvalidField)])
def test_negative_log_data_size(size: int, error: type) -> None:
    with pytest.raises(error) as caught:
        JRaftDecoder().feed(header(3, size))
    assert caught.value.field == "logDataSize"


def entry_bytes(term: int, value_type: int, size: int, value: bytes) -> bytes:
    return struct.pack(">qbi", term, value_type, size) + value


@pytest.mark.parametrize("body, error, field", [
    (entry_bytes(1, 1, 100, b"x" * 10), Truncated, "entries[0].size"),
    (entry_bytes(1, 1, -5, b""), InvalidField, "entries[0].size"),
    (entry_bytes(1, 9, 0, b""), InvalidField, "entries[0].valueType"),
    (entry_bytes(1, 1, 0, b"") + b"\x00" * 5, Truncated, "entries[1]"),
    (entry_bytes(1, 1, 2000, b"x" * 2000), LimitExceeded, "entries[0].size"),
    (entry_bytes(1, 2, 8, bytes(8)), Truncated, "entries[0].configuration.lastLogIndex"),
    (entry_bytes(1, 3, 5, bytes(5)), Truncated, "entries[0].server.endpointLength"),
    (entry_bytes(1, 3, 12, struct.pack(">ii", 1, 4) + b"\xff\xfe\xfd\xfc"), InvalidField,
     "entries[0].server.endpoint"),
    (entry_bytes(1, 3, 12, struct.pack(">ii", 1, 2000) + b"abcd"), LimitExceeded,
     "entries[0].server.endpointLength"),
    (entry_bytes(1, 4, 3, b"\x1f\x8b\x08"), Truncated, "entries[0].logPack.gzip"),
])
def test_malformed_entries_name_their_field(body: bytes, error: type, field: str) -> None:
    limits = JRaftLimits(max_value_size=1000, max_endpoint_length=100)
    with pytest.raises(error) as caught:
        jraft.decode(header(3, len(body)) + body, limits)
    assert caught.value.field == field


def test_entry_count_limit() -> None:
    body = entry_bytes(1, 1, 0, b"") * 5
    assert len(jraft.decode(header(3, len(body)) + body, JRaftLimits(max_entries=5)).entries) == 5
    with pytest.raises(LimitExceeded) as caught:
        jraft.decode(header(3, len(body)) + body, JRaftLimits(max_entries=4))
    assert caught.value.field == "entries"


def test_server_and_snapshot_limits() -> None:
    config = ClusterConfiguration(1, 0, tuple(ClusterServer(i, "h") for i in range(3)))
    assert len(decode_payload(ValueType.CONFIGURATION, config.to_bytes(),
                              JRaftLimits(max_servers=3)).servers) == 3
    with pytest.raises(LimitExceeded) as caught:
        decode_payload(ValueType.CONFIGURATION, config.to_bytes(), JRaftLimits(max_servers=2))
    assert caught.value.field == "servers"
    snapshot = SnapshotSyncRequest(10, 2, config, 0, b"d" * 50, True).to_bytes()
    with pytest.raises(LimitExceeded) as caught:
        decode_payload(ValueType.SNAPSHOT_SYNC_REQUEST, snapshot, JRaftLimits(max_snapshot_data=49))
    assert caught.value.field == "dataSize"


def test_payload_with_bytes_after_its_last_field_is_refused() -> None:
    value = ClusterServer(1, "tcp://a:1").to_bytes() + b"\x00"
    with pytest.raises(InvalidField) as caught:
        decode_payload(ValueType.CLUSTER_SERVER, value)
    assert caught.value.field == "endpoint"


def test_decode_wants_exactly_one_message() -> None:
    data = bytes.fromhex(MESSAGES[0]["hex"])
    with pytest.raises(InvalidField) as caught:
        jraft.decode(data + b"\x02")
    assert caught.value.field == "message" and caught.value.offset == len(data)
    with pytest.raises(Truncated):
        jraft.decode(b"")
    with pytest.raises(Truncated):
        jraft.decode(data[:-1])


# ------------------------------------------------------------------------- encoding

def test_encode_names_a_field_that_does_not_fit() -> None:
    with pytest.raises(InvalidField) as caught:
        jraft.encode(RaftRequest(MessageType.APPEND_ENTRIES_REQUEST, source=1 << 31))
    assert caught.value.field == "source"
    with pytest.raises(InvalidField) as caught:
        jraft.encode(RaftRequest(3, entries=(LogEntry(1 << 63, ValueType.APPLICATION, b""),)))
    assert caught.value.field == "entries[0].term"
    with pytest.raises(InvalidField) as caught:
        jraft.encode(RaftResponse(MessageType.APPEND_ENTRIES_REQUEST))
    assert caught.value.field == "messageType"


def test_client_request_reply_is_type_4_with_a_leader_hint() -> None:
    reply = RaftResponse(MessageType.APPEND_ENTRIES_RESPONSE, source=2, destination=1,
                         term=5, next_index=0, accepted=False)
    assert jraft.encode(reply)[0] == 4 and jraft.decode(jraft.encode(reply)) == reply


# ------------------------------------------------------------------------- registry

class EchoCodec(jraft.MessageCodec):
    """An extension shape: type byte, u16 length, text."""
    head_size = 3
    message_class = dict

    def frame_size(self, head: bytes, limits: JRaftLimits) -> int:
        return 3 + int.from_bytes(head[1:3], "big")

    def decode(self, frame: bytes, message_type: int, limits: JRaftLimits) -> dict:
        return {"message_type": message_type, "text": frame[3:].decode()}

    def encode(self, message: dict) -> bytes:
        text = message["text"].encode()
        return bytes([message["message_type"]]) + len(text).to_bytes(2, "big") + text

    def fields_to_json(self, message: dict) -> dict:
        return {"text": message["text"]}

    def fields_from_json(self, obj: dict, message_type: int) -> dict:
        return {"message_type": message_type, "text": obj["text"]}


class AttrDict(dict):
    @property
    def message_type(self) -> int:
        return self["message_type"]


def test_extension_types_join_a_copy_of_the_registry() -> None:
    registry = REGISTRY.copy()
    registry.register(0x20, "PreVoteRequest", REQUEST_CODEC)
    registry.register(0x21, "Echo", EchoCodec())
    registry.register(0x20, "PreVoteRequest", REQUEST_CODEC)      # idempotent
    with pytest.raises(ValueError):
        registry.register(0x20, "TimeoutNow", REQUEST_CODEC)
    with pytest.raises(ValueError):
        registry.register(0x22, "AppendEntriesRequest", REQUEST_CODEC)
    pre_vote = RaftRequest(0x20, source=1, term=7, last_log_index=3)
    echo = AttrDict(message_type=0x21, text="hé")
    stream = jraft.encode(pre_vote, registry) + EchoCodec().encode(echo) \
        + bytes.fromhex(MESSAGES[-1]["hex"])
    decoder = JRaftDecoder(registry=registry)
    got = [m for i in range(len(stream)) for m in decoder.feed(stream[i:i + 1])]
    assert got[:2] == [pre_vote, {"message_type": 0x21, "text": "hé"}]
    assert jraft.to_json(pre_vote, registry)["message"] == "PreVoteRequest"
    assert jraft.from_json(jraft.to_json(pre_vote, registry), registry) == pre_vote
    with pytest.raises(UnknownMessageType):          # the shared registry is untouched
        jraft.decode(jraft.encode(pre_vote, registry))


def test_unknown_type_bytes() -> None:
    for type_byte in (0, 18, 255):
        with pytest.raises(UnknownMessageType) as caught:
            JRaftDecoder().feed(bytes([type_byte]))
        assert caught.value.field == "messageType"
    with pytest.raises(UnknownMessageType) as caught:
        jraft.from_json({"message": "Nope"})
    assert caught.value.field == "message"


# --------------------------------------------------------------------------- shapes

@pytest.mark.parametrize("message, field", [
    (RaftRequest(MessageType.REQUEST_VOTE_REQUEST, entries=(LogEntry.of(0, b"x"),)), "entries"),
    (RaftRequest(MessageType.ADD_SERVER_REQUEST), "entries"),
    (RaftRequest(MessageType.ADD_SERVER_REQUEST, entries=(LogEntry.of(0, ServerId(3)),)),
     "entries[0].value"),
    (RaftRequest(MessageType.REMOVE_SERVER_REQUEST, entries=(LogEntry.of(0, ClusterServer(3, "a")),)),
     "entries[0].value"),
    (RaftRequest(MessageType.CLIENT_REQUEST,
                 entries=(LogEntry.of(0, ClusterConfiguration(0, 0)),)), "entries[0].valueType"),
    (RaftRequest(MessageType.SYNC_LOG_REQUEST, entries=(LogEntry.of(0, b"a"),) * 2), "entries"),
])
def test_check_shape_refuses_what_jraft_handlers_refuse(message: RaftRequest, field: str) -> None:
    with pytest.raises(InvalidField) as caught:
        jraft.check_shape(message)
    assert caught.value.field == field


def test_check_shape_accepts_what_jraft_sends() -> None:
    for vector in MESSAGES:
        message = jraft.decode(bytes.fromhex(vector["hex"]))
        if isinstance(message, RaftRequest):
            jraft.check_shape(message)


# ----------------------------------------------------------------------------- JSON

def test_json_shows_payloads_readably() -> None:
    add = jraft.to_json(jraft.decode(bytes.fromhex(
        next(v for v in MESSAGES if v["name"] == "AddServerRequest")["hex"])))
    assert add["entries"][0]["server"] == {"id": 4, "endpoint": "tcp://localhost:9001"}
    sync = jraft.to_json(jraft.decode(bytes.fromhex(
        next(v for v in MESSAGES if v["name"] == "SyncLogRequest")["hex"])))
    pack = sync["entries"][0]["logPack"]
    assert pack["format"] == "FileBased" and pack["baseOffset"] == 0x20
    assert [e["text"] for e in pack["entries"]] == ["del x", "set z=33", "noop"]
    remove = jraft.to_json(RaftRequest(8, entries=(LogEntry.of(0, ServerId(3)),)))
    assert remove["entries"][0]["serverId"] == 3


def test_hand_written_json_with_defaults_and_text() -> None:
    message = jraft.from_json({"message": "ClientRequest",
                               "entries": [{"valueType": "Application", "text": "put a 1"}]})
    vector = next(v for v in MESSAGES if v["name"] == "ClientRequest 2 entries")
    assert jraft.encode(message) == bytes.fromhex(vector["hex"])[:45 - 4] + \
        struct.pack(">i", 20) + bytes.fromhex(vector["hex"])[45:65]
    config = jraft.from_json({"message": "JoinClusterRequest", "term": 5, "entries": [
        {"term": 5, "valueType": "Configuration", "configuration": {
            "logIndex": 37, "lastLogIndex": 12, "servers": [{"id": 1, "endpoint": "a"}]}}]})
    assert config.entries[0].payload() == ClusterConfiguration(37, 12, (ClusterServer(1, "a"),))


@pytest.mark.parametrize("obj, field", [
    ({"message": "AppendEntriesRequest", "trem": 1}, "trem"),
    ({"message": "AppendEntriesRequest", "term": "1"}, "term"),
    ({"message": "AppendEntriesRequest", "term": True}, "term"),
    ({"message": "AppendEntriesRequest", "source": 1 << 31}, "source"),
    ({"message": "RequestVoteResponse", "accepted": 1}, "accepted"),
    ({"message": "ClientRequest", "entries": [{"valueType": "Nope"}]}, "entries[0].valueType"),
    ({"message": "ClientRequest", "entries": [{"valueType": "Application", "value": "zz"}]},
     "entries[0].value"),
    ({"message": "ClientRequest", "entries": [{"valueType": "Application", "value": "61",
                                                "text": "b"}]}, "entries[0].text"),
    ({"message": "ClientRequest", "entries": [{"valueType": "Configuration",
                                                "server": {"id": 1, "endpoint": "a"}}]},
     "entries[0].server"),
    ({"message": "ClientRequest", "entries": [{"valueType": "ClusterServer",
                                                "server": {"id": 1}}]}, "entries[0].server.endpoint"),
    ({"message": "SyncLogRequest", "entries": [{"valueType": "LogPack", "logPack": {
        "format": "FileBased", "entries": [], "gzip": "1f8b"}}]}, "entries[0].logPack.gzip"),
    ({"message": "SyncLogRequest", "entries": [{"valueType": "LogPack", "logPack": {
        "format": "Zip"}}]}, "entries[0].logPack.format"),
    ("not an object", "message"),
])
def test_bad_json_names_the_key(obj: object, field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        jraft.from_json(obj)
    assert caught.value.field == field


def test_json_of_an_unparsable_payload_keeps_the_bytes() -> None:
    message = RaftRequest(3, entries=(LogEntry(1, ValueType.CONFIGURATION, b"\x01\x02"),))
    entry = jraft.to_json(message)["entries"][0]
    assert entry["value"] == "0102" and "logIndex" in entry["invalid"]
    assert jraft.from_json(jraft.to_json(message)) == message
