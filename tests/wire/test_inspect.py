"""`garlicfarm decode` / `garlicfarm encode`: every vector of the four protocols decodes and
encodes back to the same bytes; bad input gives one line naming the field and exit 1."""
from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consensus.wire import handshake
from garlicfarm.inspect import PROTOCOLS, command_main, format_frames, parse_hex

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
GARLICFARM = Path(sys.executable).with_name("garlicfarm")
pytestmark = pytest.mark.timeout(60)
# The channel each CHP command is read from (the frames alone do not tell KVSYNC apart).
CHP_CHANNELS = {"KVSET": "collector", "KVPUB": "publisher", "HUGZ": "publisher",
                "KVSYNC": "snapshot-reply", "KTHXBAI": "snapshot-reply",
                "ICANHAZ": "snapshot-request", "bstar state": "bstar"}


def load(path: str) -> list[dict]:
    return [json.loads(line) for line in (VECTORS / path).read_text().splitlines() if line]


def vector_cases():
    """(protocol, name, argv after --protocol, hex arguments, expected message name)."""
    for v in load("marker/taskflux_vectors.jsonl"):
        yield "marker", v["name"], [v["hex"]], v["fields"]["packetType"], []
    for v in load("garlicfarm/jraft_vectors.jsonl"):
        if v["kind"] in ("request", "response"):
            for protocol in ("garlicfarm", "jraft"):    # JRaft's types travel on both
                yield protocol, v["name"], [v["hex"]], v["fields"]["messageType"], []
    for v in load("dafka/dafka_vectors.jsonl"):
        yield "dafka", v["name"], v["frames_hex"], None, []
    for v in load("chp/chp_vectors.jsonl"):
        command = v["fields"]["command"]
        expected = command if command in CHP_CHANNELS and command != "bstar state" else None
        yield "chp", v["name"], v["frames_hex"], expected, ["--channel", CHP_CHANNELS[command]]


CASES = list(vector_cases())


def run(capsys, command: str, *argv: str, stdin: str | None = None,
        monkeypatch=None) -> tuple[int, list[str], list[str]]:
    """command_main in-process: (exit status, stdout lines, stderr lines)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    status = command_main(command, list(argv))
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def codec_available(protocol: str) -> None:
    PROTOCOLS[protocol].module()        # our own code: it must load (no skip)


@pytest.mark.parametrize("protocol,name,hexes,expected,extra", CASES,
                         ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_every_vector_decodes_and_encodes_back_to_the_same_bytes(
        capsys, protocol, name, hexes, expected, extra):
    codec_available(protocol)
    status, out, err = run(capsys, "decode", "--protocol", protocol, *extra, *hexes)
    assert (status, err) == (0, [])
    assert len(out) == 1
    obj = json.loads(out[0])
    assert obj["protocol"] == protocol
    if expected is not None:
        assert obj["message"] == expected
    status, encoded, err = run(capsys, "encode", out[0])   # protocol from the JSON
    assert (status, err) == (0, [])
    if PROTOCOLS[protocol].framed:
        assert encoded == [format_frames([bytes.fromhex(h) for h in hexes])]
    else:
        assert encoded == [hexes[0]]


def test_a_tcp_stream_of_several_messages_decodes_in_order(capsys):
    vectors = load("marker/taskflux_vectors.jsonl")
    stream = [v["hex"] for v in vectors]
    status, out, err = run(capsys, "decode", "-p", "marker", *stream)
    assert (status, err) == (0, [])
    assert [json.loads(line)["message"] for line in out] == \
        [v["fields"]["packetType"] for v in vectors]
    # and encode prints one line per message: the stream again
    status, again, _ = run(capsys, "encode", "-p", "marker", *out)
    assert status == 0 and again == stream


def test_hex_is_accepted_with_spaces_colons_and_0x():
    assert parse_hex("63 01:4a:C9 0xa203", "x") == bytes.fromhex("63014ac9a203")
    assert parse_hex("0x63,0x01", "x") == b"\x63\x01"
    assert parse_hex('""', "x") == b"" == parse_hex("", "x")


@pytest.mark.parametrize("argv,message", [
    (["ab", "zz"], r"argument 2: not hex: 'z' at digit 1"),
    (["abc"], r"argument 1: odd number of hex digits \(3\)"),
])
def test_bad_hex_is_one_line_naming_the_argument(capsys, argv, message):
    status, out, err = run(capsys, "decode", "-p", "marker", *argv)
    assert status == 1 and out == [] and len(err) == 1
    assert re.match(r"garlicfarm decode: " + message, err[0])


HEARTBEAT = load("marker/taskflux_vectors.jsonl")[0]["hex"]


@pytest.mark.parametrize("protocol,hexes,where", [
    ("marker", [HEARTBEAT[:-1] + "8"], "marker: crc"),
    ("marker", [HEARTBEAT[:44]], "marker: prevLogTerm"),
    ("marker", ["7300000000000000006904bb59"], "marker: currentTerm"),
    ("marker", ["5a"], "marker: marker"),
    ("marker", ["41ffffffff"], "marker: size"),
    ("garlicfarm", ["ff00"], "jraft: messageType"),
    ("garlicfarm", ["03" + "00" * 40 + "ffffffff"], "jraft: logDataSize"),
    ("dafka", ["4d68656c6c6f000105776f726c640000000000000001", "68656c6c6f"], "dafka: address"),
    ("chp", ["2f61", "0001", '""', '""', "68"], "chp: sequence"),
])
def test_invalid_input_is_one_line_naming_the_field_and_exit_1(capsys, protocol, hexes, where):
    codec_available(protocol)
    status, out, err = run(capsys, "decode", "-p", protocol, *hexes)
    assert status == 1 and out == [] and len(err) == 1
    assert err[0].startswith(f"garlicfarm decode: {where}: "), err[0]


def test_the_crc_error_reads_as_documented(capsys):
    _, _, err = run(capsys, "decode", "-p", "marker", HEARTBEAT[:-1] + "8")
    assert err == ["garlicfarm decode: marker: crc: checksum mismatch "
                   "(expected 7f4216f9, got 7f4216f8) at byte 45"]


def test_a_corrupt_packet_mid_stream_is_reported_and_the_rest_still_decodes(capsys):
    bad = HEARTBEAT[:-1] + "8"
    status, out, err = run(capsys, "decode", "-p", "marker", "52ffffffff", bad, "63014ac9a203")
    assert status == 1
    assert [json.loads(line)["message"] for line in out] == ["RetransmitRequest",
                                                             "ConnectResponse"]
    assert len(err) == 1 and "crc: checksum mismatch" in err[0] and "at byte 50" in err[0]


def test_lenient_input_is_decoded_with_a_note_that_it_is_not_canonical(capsys):
    status, out, err = run(capsys, "decode", "-p", "marker", "6302478a84da")  # Bool byte 2
    assert status == 0 and json.loads(out[0])["success"] is True
    assert len(err) == 1 and "not in canonical form" in err[0] and "differs at byte 1" in err[0]


@pytest.mark.parametrize("argv,field", [
    (['{"message": "ConnectRequest"}'], "nodeId: missing"),
    (['{"message": "ConnectRequest", "nodeId": -4}'], "nodeId: -4 is out of range"),
    (['{"message": "Hello", "x": 1}'], "message: unknown message 'Hello'"),
    (['{"message": "ConnectRequest", "nodeId": 1, "protocol": "dafka"}'],
     "protocol: the JSON says 'dafka'"),
    (['{"message": "ConnectRequest",'], "not JSON: Expecting property name"),
    (["[1]"], "expected a JSON object"),
])
def test_encode_errors_are_one_line_naming_the_key(capsys, argv, field):
    status, out, err = run(capsys, "encode", "-p", "marker", *argv)
    assert status == 1 and out == [] and len(err) == 1
    assert field in err[0] and err[0].startswith("garlicfarm encode: "), err[0]


def test_encode_without_a_protocol_says_how_to_give_one(capsys):
    status, _, err = run(capsys, "encode", '{"message": "RetransmitRequest"}')
    assert status == 1 and "--protocol (or a \"protocol\" key) is missing" in err[0]


def test_stdin_tcp_stream_and_zeromq_lines(capsys, monkeypatch):
    status, out, _ = run(capsys, "decode", "-p", "marker", monkeypatch=monkeypatch,
                         stdin="52 ff ff ff ff\n63:01:4a:c9:a2:03\n")
    assert status == 0 and [json.loads(o)["message"] for o in out] == \
        ["RetransmitRequest", "ConnectResponse"]
    codec_available("chp")
    lines = '# a KVSYNC then ICANHAZ\n2f61 0000000000000001 "" "" 68\n4943414e48415a3f 2f\n'
    status, out, _ = run(capsys, "decode", "-p", "chp", "--channel", "snapshot-reply",
                         monkeypatch=monkeypatch, stdin=lines)
    assert status == 1   # ICANHAZ is not read from the snapshot-reply socket
    status, out, err = run(capsys, "decode", "-p", "chp", monkeypatch=monkeypatch, stdin=lines)
    assert (status, err) == (0, [])
    assert [json.loads(o)["message"] for o in out] == ["KVPUB", "ICANHAZ"]
    # encode reads the JSON back from stdin (compact or pretty) and prints the same lines
    status, again, _ = run(capsys, "encode", monkeypatch=monkeypatch, stdin="\n".join(out))
    assert status == 0 and again == [line for line in lines.splitlines()[1:]]


def test_pretty_output_is_indented_json(capsys):
    status, out, _ = run(capsys, "decode", "-p", "marker", "--pretty", HEARTBEAT)
    assert status == 0 and len(out) > 3 and out[1].startswith("  ")
    assert json.loads("\n".join(out))["message"] == "AppendEntriesRequest"


def test_colour_is_forced_with_always_and_stripping_it_leaves_the_same_json(capsys):
    status, out, _ = run(capsys, "decode", "-p", "marker", "--color", "always", HEARTBEAT)
    text = "\n".join(out)
    assert status == 0 and "\x1b[" in text
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert json.loads(plain) == json.loads(run(capsys, "decode", "-p", "marker", HEARTBEAT)[1][0])


# ------------------------------------------------------------ the real console command

def garlicfarm(*argv: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([str(GARLICFARM), *argv], input=stdin, capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})


def test_console_command_decodes_and_round_trips_through_a_pipe():
    decoded = garlicfarm("decode", "--protocol", "marker", HEARTBEAT, "62ffffffff")
    assert decoded.returncode == 0 and decoded.stderr == ""
    assert [json.loads(line)["message"] for line in decoded.stdout.splitlines()] == \
        ["AppendEntriesRequest", "InstallSnapshotChunkResponse"]
    encoded = garlicfarm("encode", stdin=decoded.stdout)
    assert encoded.returncode == 0
    assert encoded.stdout.split() == [HEARTBEAT, "62ffffffff"]


def test_console_command_bad_input_is_one_line_without_a_traceback():
    result = garlicfarm("decode", "--protocol", "marker", HEARTBEAT[:-2])
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "garlicfarm decode: marker: crc: the input ends inside the AppendEntriesRequest "
        "(48 of 49 bytes) at byte 48"]
    assert "Traceback" not in result.stderr


def test_no_input_at_all_is_an_error_that_says_how_to_give_some(capsys, monkeypatch):
    for protocol in ("marker", "dafka"):
        status, out, err = run(capsys, "decode", "-p", protocol, monkeypatch=monkeypatch,
                               stdin="\n# only a comment\n")
        assert status == 1 and out == []
        assert err == ["garlicfarm decode: no bytes to decode: give HEX arguments or pipe "
                       "hex into stdin"]


def test_with_several_messages_an_encode_error_names_the_one_at_fault(capsys):
    status, out, err = run(capsys, "encode", "-p", "marker", '{"message": "RetransmitRequest"}',
                           '{"message": "ConnectRequest"}')
    assert status == 1 and out == ["52ffffffff"]
    assert err == ["garlicfarm encode: argument 2: marker: nodeId: missing"]


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.binary(max_size=80), min_size=1, max_size=6))
def test_random_bytes_never_make_the_inspector_crash(capsys, protocol, frames):
    codec_available(protocol)
    status, out, err = run(capsys, "decode", "-p", protocol, *[f.hex() or '""' for f in frames])
    assert status in (0, 1) and (status == 0 or len(err) >= 1), err
    assert not any("internal error" in line for line in err), err


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_mutated_vectors_never_make_the_inspector_crash(capsys, protocol):
    codec_available(protocol)
    rng = random.Random(protocol)
    seeds = [(hexes, extra) for p, _, hexes, _, extra in CASES if p == protocol]
    for _ in range(150):
        hexes, extra = rng.choice(seeds)
        frames = [bytearray.fromhex(h if h != '""' else "") for h in hexes]
        frame = rng.choice(frames)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(frame) + 1)
            if rng.random() < 0.6 and frame:
                frame[at % len(frame)] ^= 1 << rng.randrange(8)
            elif rng.random() < 0.5:
                del frame[at:at + rng.randint(1, 4)]
            else:
                frame[at:at] = rng.randbytes(rng.randint(1, 4))
        status, _, err = run(capsys, "decode", "-p", protocol, *extra,
                             *[f.hex() or '""' for f in frames])
        assert status in (0, 1), err
        assert not any("internal error" in line for line in err), err


# ------------------------------------------- Garlic Farm: the handshake in front of JRaft

def handshake_bytes() -> dict[str, bytes]:
    """The four HTTP messages of a real handshake, from the project's state machines."""
    fixed = lambda n: bytes(i % 256 for i in range(n))   # noqa: E731 (deterministic nonces)
    initiator = handshake.HandshakeInitiator(host="127.0.0.1:9001", username="spark",
                                             password="pw", cache=handshake.CredentialCache(),
                                             random=fixed)
    nonces = handshake.NonceStore(fixed)
    out = {"request 1": initiator.start(1000.0)}
    first = handshake.HandshakeReceiver(credentials=lambda user: "pw", nonces=nonces)
    first.receive_data(out["request 1"])
    out["response 1"] = first.next_event(1000.0).data
    initiator.receive_data(out["response 1"])
    out["request 2"] = initiator.next_event().request
    second = handshake.HandshakeReceiver(credentials=lambda user: "pw", nonces=nonces)
    second.receive_data(out["request 2"])
    accepted = second.next_event(1000.0)
    assert isinstance(accepted, handshake.Accepted)
    out["response 2"] = accepted.data
    return out


JRAFT = {v["kind"]: v["hex"] for v in load("garlicfarm/jraft_vectors.jsonl")
         if v["name"] in ("RequestVoteRequest", "RequestVoteResponse granted")}


@pytest.mark.parametrize("http,binary,expected", [
    (["request 1"], None, [("HttpRequest", "GET")]),
    (["response 1"], None, [("HttpResponse", 401)]),
    (["request 2"], "request", [("HttpRequest", "GET"), ("RequestVoteRequest", None)]),
    (["response 2"], "response", [("HttpResponse", 101), ("RequestVoteResponse", None)]),
])
def test_a_garlicfarm_transcript_decodes_its_handshake_then_the_binary(capsys, http, binary,
                                                                        expected):
    codec_available("garlicfarm")
    messages = handshake_bytes()
    stream = [messages[name].hex() for name in http] + ([JRAFT[binary]] if binary else [])
    status, out, err = run(capsys, "decode", "-p", "garlicfarm", *stream)
    assert (status, err) == (0, [])
    objs = [json.loads(line) for line in out]
    assert [(o["message"], o.get("method", o.get("status"))) for o in objs] == expected
    assert all(o["protocol"] == "garlicfarm" for o in objs)
    if objs[0]["message"] == "HttpRequest":
        assert objs[0]["target"] == "/GarlicFarm/farm/1/websocket"
    status, again, _ = run(capsys, "encode", *out)
    assert status == 0 and again == stream


def test_a_broken_http_head_is_one_line_naming_it(capsys):
    codec_available("garlicfarm")
    for data, where in ((b"GET / HTTP/1.1\r\nHost x\r\n\r\n", "handshake: http: not a valid"),
                        (b"GET / HTTP/1.1\r\nHost: x\r\n", "handshake: http: the input ends"),
                        (b"HTTP/1.1 401 No\r\nContent-Length: 9\r\n\r\nab",
                         "handshake: http.body: Content-Length is 9")):
        status, out, err = run(capsys, "decode", "-p", "garlicfarm", data.hex())
        assert status == 1 and out == [] and len(err) == 1
        assert err[0].startswith(f"garlicfarm decode: {where}"), err[0]


def extension_frames() -> list:
    """One of every extension frame of the Garlic Farm wire, nested bytes included (the
    reads and pulls are the Raft core's messages themselves)."""
    from consensus.raft import Configuration, Entry, EntryType, PullStatus
    from consensus.raft import messages as rm
    from consensus.wire import extensions as x
    config = Configuration.of([1, 2, 3])
    return [x.Hello(0, 0, 0, bytes(range(16)), 1),
            x.Welcome(1, 0, 3, 1, "farm", 2, "follower", b'{"voters": [1, 2, 3]}'),
            x.Call(0, 0, 0, 7, "append", {"records": [b"ab", b""], "request_id": b"\x01"}),
            x.Reply(1, 0, 3, 7, 0, [1, b"\x00\x01", {"k": b"v"}], "a message", {"a": 1}),
            x.WriteResult(1, 0, 3, b"r" * 16, 5, 3, 0, None, "", {}),
            x.EventMessage(1, 0, 3, "leader-changed", 2, {"applied": 9}),
            x.GroupSelect(1, 0, 0, 5),
            x.Quiesce(1, 2, 3, 40),
            x.NodeHeartbeat(1, 2, 0),
            rm.ReadIndexRequest(term=3, source=2, destination=1, ctx=b"ctx", lease=True),
            rm.ReadIndexResponse(term=3, source=1, destination=2, ctx=b"ctx", index=10,
                                 success=True),
            rm.PullEntries(term=3, source=4, destination=1, index=11, max_entries=8,
                           max_bytes=4096),
            rm.PullEntriesResponse(term=3, source=1, destination=4, status=PullStatus.SUCCESS,
                                   index=11, entries=[Entry(3, 11, EntryType.APPLICATION,
                                                            b"data")],
                                   min_index=1, commit=12),
            rm.PullSnapshot(term=3, source=4, destination=1, snapshot_index=10, offset=0),
            rm.PullSnapshotResponse(term=3, source=1, destination=4, snapshot_index=10,
                                    snapshot_term=3, configuration=config, offset=0,
                                    data=b"state", done=True)]


def _type_byte(frame) -> int:
    from consensus.wire.extensions import GARLICFARM_REGISTRY
    return GARLICFARM_REGISTRY.of(frame).message_type


def test_every_extension_frame_of_the_garlicfarm_wire_round_trips(capsys):
    """Issue 13.4: a client session's Hello (type 0x30) was 'no message type 48 is
    registered'. Every frame our wire carries decodes, and encodes back to its bytes."""
    from consensus.wire.extensions import ExtType, GARLICFARM_REGISTRY, encode
    frames = extension_frames()
    covered = {_type_byte(f) for f in frames} | {ExtType.PRE_VOTE_REQUEST,
                                                  ExtType.PRE_VOTE_RESPONSE,
                                                  ExtType.TIMEOUT_NOW_REQUEST,
                                                  ExtType.TRANSFER_VOTE_REQUEST}
    assert covered == set(ExtType), set(ExtType) - covered
    stream = [encode(f).hex() for f in frames]
    status, out, err = run(capsys, "decode", "-p", "garlicfarm", "".join(stream))
    assert (status, err) == (0, [])
    names = [json.loads(line)["message"] for line in out]
    assert names == [GARLICFARM_REGISTRY.of(f).name for f in frames]
    hello = json.loads(out[0])
    assert hello["client_id"] == bytes(range(16)).hex() and hello["version"] == 1
    assert json.loads(out[3])["text"] == "a message"
    status, again, err = run(capsys, "encode", *out)
    assert (status, err) == (0, []) and again == stream


def test_the_raw_jraft_wire_names_extension_frames_unknown(capsys):
    from consensus.wire.extensions import encode
    status, out, err = run(capsys, "decode", "-p", "jraft", encode(extension_frames()[0]).hex())
    assert status == 1 and out == []
    assert err == ["garlicfarm decode: jraft: messageType: no message type 48 is registered "
                   "at byte 0"]


def test_group_select_frame_is_the_encoded_message():
    """The transport's fast GroupSelect builder writes what the codec reads back."""
    from consensus.wire.extensions import GroupSelect, group_select_frame
    from consensus.wire.extensions import encode
    assert group_select_frame(2, 5) == encode(GroupSelect(2, 0, 0, 5))


def test_the_quiesce_frame_builders_write_what_the_codec_reads():
    """The transport's Quiesce and NodeHeartbeat builders write what the codec reads back."""
    from consensus.wire.extensions import (NodeHeartbeat, Quiesce, encode,
                                           node_heartbeat_frame, quiesce_frame)
    assert quiesce_frame(2, 3, 7, 41) == encode(Quiesce(2, 3, 7, 41))
    assert node_heartbeat_frame(2, 3) == encode(NodeHeartbeat(2, 3, 0))
