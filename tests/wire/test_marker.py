"""The marker-byte codec against TaskFlux's vectors, its edge cases and its invariants."""
from __future__ import annotations

import json
import random
import struct
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consensus.wire import marker as m
from consensus.wire.errors import (ChecksumMismatch, InvalidField, LimitExceeded,
                                   ProtocolError, Truncated, UnknownMessageType)

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "marker"
pytestmark = pytest.mark.timeout(60)


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (VECTORS / name).read_text().splitlines() if line]


PACKET_VECTORS = load("taskflux_vectors.jsonl")
EDGE_CASES = load("taskflux_decode_edge_cases.jsonl")
CRC_VECTORS = load("crc32_mpeg2.jsonl")
# The 75-byte packet of TaskFlux's NodePacketTests integrity test.
A75 = bytes.fromhex(next(v["hex"] for v in PACKET_VECTORS if v["length"] == 75))
HEARTBEAT = bytes.fromhex(PACKET_VECTORS[0]["hex"])


def with_crc(marker_and_span: bytes) -> bytes:
    """Seal a hand-made packet with a good CRC (crc32_mpeg2 is checked by its own vectors)."""
    return marker_and_span + struct.pack(">I", m.crc32_mpeg2(marker_and_span[1:]))


def decode_stream(data: bytes, chunks: list[int] | None = None) -> list[m.Event]:
    """Feed `data` cut at the given chunk sizes (the rest in one piece), then end it."""
    decoder, events, at = m.MarkerDecoder(), [], 0
    for size in chunks or []:
        events += decoder.feed(data[at:at + size])
        at += size
    events += decoder.feed(data[at:])
    decoder.eof()
    return events


# --------------------------------------------------------------------------- vectors

def expected_fields(vector: dict) -> dict:
    """The vector's fields in our JSON vocabulary (data / chunk as hex, no wire extras)."""
    out = {"message": vector["fields"]["packetType"]}
    for key, value in vector["fields"].items():
        if key in ("packetType", "marker", "markerByte", "fullSizeField", "crc32",
                   "chunkLength", "padLength"):
            continue
        if key == "entries":
            value = [{"term": e["term"], "data": e["dataHex"]} for e in value]
        out["chunk" if key == "chunkHex" else key] = value
    return out


@pytest.mark.parametrize("vector", PACKET_VECTORS, ids=lambda v: v["name"])
def test_every_taskflux_vector_decodes_to_its_fields_and_encodes_back(vector):
    wire = bytes.fromhex(vector["hex"])
    assert len(wire) == vector["length"]
    packet = m.decode(wire)
    assert packet.MARKER == vector["fields"]["markerByte"] == wire[0]
    assert m.to_json(packet) == expected_fields(vector)
    assert m.encode(packet) == wire
    assert m.from_json(json.loads(json.dumps(m.to_json(packet)))) == packet
    assert wire[-4:].hex() == vector["fields"]["crc32"]
    if "fullSizeField" in vector["fields"]:
        assert struct.unpack_from(">i", wire, 1)[0] == vector["fields"]["fullSizeField"]
        assert len(wire) == vector["fields"]["fullSizeField"] + 9


def test_padding_is_length_mod_8_for_entries_and_mod_4_for_chunks():
    for vector in PACKET_VECTORS:
        for entry in vector["fields"].get("entries", []):
            assert entry["padLength"] == entry["dataLength"] % 8
        if "chunkLength" in vector["fields"]:
            chunk = vector["fields"]["chunkLength"]
            assert vector["fields"]["padLength"] == chunk % 4
            assert vector["length"] == 9 + chunk + chunk % 4
    for n in range(0, 40):
        wire = m.encode(m.AppendEntriesRequest(0, 1, 1, 0, 0, [m.LogEntry(1, b"\x01" * n)]))
        assert len(wire) == 45 + 12 + n + n % 8 + 4
        assert wire[57 + n:57 + n + n % 8] == bytes(n % 8)


@pytest.mark.parametrize("vector", CRC_VECTORS, ids=lambda v: v["name"][:40])
def test_crc32_mpeg2_vectors_whole_and_incremental(vector):
    data = bytes.fromhex(vector["inputHex"])
    assert f"{m.crc32_mpeg2(data):08x}" == vector["crc"]
    half = len(data) // 2
    assert m.crc32_mpeg2(data[half:], m.crc32_mpeg2(data[:half])) == int(vector["crc"], 16)


# ---------------------------------------------------------------- TaskFlux edge cases

def check_integrity_exception(wire: bytes) -> None:
    with pytest.raises(ChecksumMismatch) as caught:
        m.decode(wire)
    assert caught.value.field == "crc"
    assert caught.value.offset == len(wire) - 4
    # On a stream the packet becomes a CorruptPacket (answered with R) and the next
    # packet still decodes: the stream stays in sync.
    events = decode_stream(wire + HEARTBEAT)
    assert isinstance(events[0], m.CorruptPacket)
    assert (events[0].marker, events[0].offset, events[0].length) == (wire[0], 0, len(wire))
    assert events[1:] == [m.decode(HEARTBEAT)]


def check_accepted(wire: bytes, expect: str) -> None:
    packet = m.decode(wire)
    name, value = expect[len("accepted ("):-1].split("=")
    assert m.to_json(packet)[name] == json.loads(value)
    if isinstance(packet, m.ConnectRequest):
        crc_matches = m.crc32_mpeg2(wire[1:-4]) == struct.unpack(">I", wire[-4:])[0]
        assert packet.checksum_ok is crc_matches is False
        assert m.to_json(packet)["checksumOk"] is False


def check_argument_out_of_range(wire: bytes) -> None:
    with pytest.raises(InvalidField) as caught:
        m.decode(wire)
    assert caught.value.field == "currentTerm"
    assert "term must be >= 1" in str(caught.value)
    # The CRC was good, so on a stream this is fatal (TaskFlux drops the connection).
    decoder = m.MarkerDecoder()
    with pytest.raises(InvalidField):
        decoder.feed(wire)


def check_end_of_stream(wire: bytes) -> None:
    # TaskFlux reads the flipped length (31 instead of 15), then ReadExactly runs off the
    # end of the stream: EndOfStreamException. We do the same in typed form: on its own the
    # input is Truncated inside "chunk"; on a live stream the decoder waits for the 16
    # missing bytes (nothing is lost, nothing raised) and reports Truncated at eof().
    with pytest.raises(Truncated) as caught:
        m.decode(wire)
    assert (caught.value.field, caught.value.offset) == ("chunk", len(wire))
    decoder = m.MarkerDecoder()
    assert decoder.feed(wire) == [] and decoder.buffered == len(wire)
    with pytest.raises(Truncated):
        decoder.eof()
    # If more bytes do come, the too-long packet fails its CRC and becomes a CorruptPacket.
    events = decoder.feed(bytes(16))
    assert isinstance(events[0], m.CorruptPacket) and events[0].length == 43


EDGE_CHECKS = {
    "IntegrityException": check_integrity_exception,
    "ArgumentOutOfRangeException": check_argument_out_of_range,
    "EndOfStreamException": check_end_of_stream,
}


@pytest.mark.parametrize("case", EDGE_CASES, ids=lambda v: v["name"])
def test_taskflux_decode_edge_cases(case):
    wire = bytes.fromhex(case["hex"])
    assert len(wire) == case["length"]
    expect = case["expect"]
    if expect.startswith("accepted ("):
        check_accepted(wire, expect)
    else:
        EDGE_CHECKS[expect.split()[0]](wire)


# ---------------------------------------------------------------- hypothesis round trips

def values_of(kind):
    if kind is m.BOOL:
        return st.booleans()
    if kind is m.BYTES:
        return st.binary(max_size=70)
    if kind is m.ENTRIES:
        return st.lists(st.builds(m.LogEntry, values_of(m.TERM), values_of(m.BYTES)),
                        max_size=6).map(tuple)
    return st.one_of(st.sampled_from([kind.low, kind.low + 1, kind.high]),
                     st.integers(kind.low, kind.high))


def packets_of(cls):
    wire = {f.name: values_of(f.metadata["wire"]) for f in fields(cls) if "wire" in f.metadata}
    return st.builds(cls, **wire)


PACKETS = st.one_of([packets_of(cls) for cls in m.PACKET_TYPES])


@pytest.mark.parametrize("cls", m.PACKET_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip_every_packet_type(cls, data):
    packet = data.draw(packets_of(cls))
    wire = m.encode(packet)
    assert wire[0] == cls.MARKER
    assert struct.unpack(">I", wire[-4:])[0] == m.crc32_mpeg2(wire[1:-4])
    assert m.decode(wire) == packet
    assert m.from_json(json.loads(json.dumps(m.to_json(packet)))) == packet
    if cls is m.AppendEntriesRequest:
        assert struct.unpack_from(">i", wire, 1)[0] == len(wire) - 9


@settings(max_examples=150, deadline=None)
@given(packets=st.lists(PACKETS, min_size=1, max_size=8), data=st.data())
def test_any_chunking_of_a_stream_gives_the_same_packets(packets, data):
    stream = b"".join(map(m.encode, packets))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert decode_stream(stream, cuts) == packets


def test_every_split_point_and_byte_at_a_time():
    packets = [m.decode(bytes.fromhex(v["hex"])) for v in PACKET_VECTORS]
    stream = b"".join(map(m.encode, packets))
    for cut in range(len(stream) + 1):
        assert decode_stream(stream, [cut]) == packets
    assert decode_stream(stream, [1] * len(stream)) == packets


# ---------------------------------------------------------------------- corruption

def flips(data: bytes, start: int, stop: int):
    for at in range(start, stop):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[at] ^= 1 << bit
            yield at, bytes(flipped)


def test_every_single_bit_flip_in_the_crc_span_of_A_is_detected():
    good = m.decode(HEARTBEAT)
    for at, wire in flips(A75, 1, len(A75)):
        if at >= 5:   # size intact: detected by the CRC, and the stream stays in sync
            with pytest.raises(ChecksumMismatch):
                m.decode(wire)
            events = decode_stream(wire + HEARTBEAT)
            assert isinstance(events[0], m.CorruptPacket) and events[1:] == [good], at
            continue
        # A flipped size changes the framing: the packet is never accepted, and the
        # error is typed (a CRC failure, a negative or oversized size, or a cut stream).
        decoder = m.MarkerDecoder()
        try:
            events = decoder.feed(wire)
            decoder.eof()
        except ProtocolError:
            continue
        assert events and all(isinstance(e, m.CorruptPacket) for e in events), at


def test_a_flip_in_a_fixed_packet_is_corrupt_and_the_stream_goes_on():
    vote = bytes.fromhex(next(v["hex"] for v in PACKET_VECTORS if v["name"] ==
                              "RequestVoteRequest"))
    for at, wire in flips(vote, 1, len(vote)):
        events = decode_stream(HEARTBEAT + wire + vote)
        assert events[0] == m.decode(HEARTBEAT) and events[2] == m.decode(vote)
        assert events[1].offset == len(HEARTBEAT) and events[1].length == len(vote)
        assert events[1].error.offset == len(HEARTBEAT) + len(vote) - 4


def test_error_after_good_packets_is_raised_by_the_next_call():
    decoder = m.MarkerDecoder()
    assert decoder.feed(HEARTBEAT + b"Z" + HEARTBEAT) == [m.decode(HEARTBEAT)]
    with pytest.raises(UnknownMessageType) as caught:
        decoder.feed(b"")
    assert (caught.value.field, caught.value.offset) == ("marker", len(HEARTBEAT))
    assert "0x5a ('Z') is not a packet type" in str(caught.value)
    with pytest.raises(UnknownMessageType):
        decoder.eof()


def mutations(rng: random.Random, seeds: list[bytes]):
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            action = rng.randrange(4)
            at = rng.randrange(len(data) + 1)
            if action == 0 and data:
                data[at % len(data)] = rng.randrange(256)
            elif action == 1:
                data[at:at] = rng.randbytes(rng.randint(1, 8))
            elif action == 2:
                del data[at:at + rng.randint(1, 8)]
            else:
                data[at:at + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff",
                                              b"\x00\x00\x00\x00", b"\x80\x00\x00\x00"])
        yield bytes(data)


def only_protocol_errors(data: bytes, chunk: int) -> None:
    try:
        m.decode(data)
    except ProtocolError:
        pass
    decoder = m.MarkerDecoder(m.MarkerLimits(max_append_size=4096, max_chunk_size=4096))
    try:
        for at in range(0, len(data), chunk):
            for event in decoder.feed(data[at:at + chunk]):
                assert isinstance(event, (m.CorruptPacket, *m.PACKET_TYPES))
        decoder.eof()
    except ProtocolError:
        pass


def test_fuzz_mutated_vectors_raise_only_protocol_errors():
    rng = random.Random(20240611)
    seeds = [bytes.fromhex(v["hex"]) for v in PACKET_VECTORS + EDGE_CASES]
    for data in mutations(rng, seeds):
        only_protocol_errors(data, rng.randint(1, 64))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200), chunk=st.integers(1, 50),
       first=st.sampled_from([bytes((mk,)) for mk in m.Marker] + [b""]))
def test_fuzz_random_bytes_raise_only_protocol_errors(data, chunk, first):
    only_protocol_errors(first + data, chunk)


# --------------------------------------------------------- validation after a good CRC

def append_bytes(**override) -> bytes:
    """An A packet with valid framing whose header fields can be set to anything."""
    head = dict(commit=40, term=5, prev_term=4, prev_index=42, leader=1, count=1,
                entry_term=5, data_len=5)
    head.update(override)
    entry = struct.pack(">qi", head["entry_term"], head["data_len"]) + b"hello" + bytes(5)
    body = struct.pack(">qqqqii", head["commit"], head["term"], head["prev_term"],
                       head["prev_index"], head["leader"], head["count"]) + entry
    return with_crc(b"A" + struct.pack(">i", len(body)) + body)


@pytest.mark.parametrize("override,field_name,offset", [
    ({"commit": -2}, "leaderCommit", 5),
    ({"term": 0}, "term", 13),
    ({"prev_term": -1}, "prevLogTerm", 21),
    ({"prev_index": -5}, "prevLogIndex", 29),
    ({"leader": -1}, "leaderId", 37),
    ({"count": -1}, "entryCount", 41),
    ({"count": 3}, "entryCount", 41),
    ({"entry_term": 0}, "entries[0].term", 45),
    ({"data_len": -1}, "entries[0].dataLength", 53),
    ({"data_len": 30}, "entries[0].dataLength", 53),
])
def test_invalid_fields_after_a_good_crc_are_named_and_fatal(override, field_name, offset):
    wire = append_bytes(**override)
    assert m.crc32_mpeg2(wire[1:-4]) == struct.unpack(">I", wire[-4:])[0]
    with pytest.raises(InvalidField) as caught:
        m.decode(wire)
    assert (caught.value.field, caught.value.offset) == (field_name, offset)
    decoder = m.MarkerDecoder()
    with pytest.raises(InvalidField):
        decoder.feed(wire)
    with pytest.raises(InvalidField):
        decoder.feed(HEARTBEAT)   # the stream is over


@pytest.mark.parametrize("packet,field_name", [
    (m.RequestVoteRequest(-1, 1, 1, -1), "candidateId"),
    (m.RequestVoteRequest(0, 0, 1, -1), "candidateTerm"),
    (m.InstallSnapshotRequest(1, 0, -2, 1), "lastIndex"),
    (m.InstallSnapshotRequest(1, 0, 0, 2**63), "lastTerm"),
    (m.AppendEntriesResponsePacket(success=1, term=1), "success"),
    (m.InstallSnapshotChunkRequest("text"), "chunk"),
    (m.AppendEntriesRequest(0, 1, 1, 0, 0, [m.LogEntry(0, b"")]), "entries[0].term"),
    (m.AppendEntriesRequest(0, 1, 1, 0, 0, [b"raw"]), "entries[0]"),
])
def test_encode_refuses_invalid_fields_by_name(packet, field_name):
    with pytest.raises(InvalidField) as caught:
        m.encode(packet)
    assert caught.value.field == field_name


def test_a_short_size_with_a_good_crc_is_invalid():
    wire = with_crc(b"A" + struct.pack(">i", 8) + bytes(8))
    with pytest.raises(InvalidField) as caught:
        m.decode(wire)
    assert caught.value.field == "size" and "below the 40 bytes" in str(caught.value)


def test_lenient_reads_mirror_taskflux():
    # Non-zero padding and bytes left after the last entry are not inspected.
    wire = bytearray(A75[:-4])
    wire[64] = 0xEE          # a padding byte of the 7-byte entry
    wire[1:5] = struct.pack(">i", 66 + 3)   # three bytes after the last entry
    lenient = with_crc(bytes(wire) + b"xyz")
    assert m.decode(lenient) == m.decode(A75)
    assert m.encode(m.decode(lenient)) == A75


# ------------------------------------------------------------------------- limits

@pytest.mark.parametrize("prefix,limits,field_name", [
    (b"A" + struct.pack(">i", 1025), m.MarkerLimits(max_append_size=1024), "size"),
    (b"A" + struct.pack(">i", 2**31 - 1), m.MarkerLimits(), "size"),
    (b"B" + struct.pack(">i", 4097), m.MarkerLimits(max_chunk_size=4096), "chunkLength"),
])
def test_oversized_prefixes_are_refused_before_the_body_arrives(prefix, limits, field_name):
    decoder = m.MarkerDecoder(limits)
    assert decoder.feed(prefix[:3]) == []
    with pytest.raises(LimitExceeded) as caught:
        decoder.feed(prefix[3:])
    assert (caught.value.field, caught.value.offset) == (field_name, 1)
    assert "MarkerLimits.max_" in str(caught.value)


def test_negative_length_prefixes_are_fatal():
    for prefix, name in ((b"A\xff\xff\xff\xf0", "size"), (b"B\x80\x00\x00\x00", "chunkLength")):
        with pytest.raises(InvalidField) as caught:
            m.MarkerDecoder().feed(prefix)
        assert caught.value.field == name


def test_entry_limits_are_checked_before_reading_entries():
    wire = append_bytes(count=1)
    with pytest.raises(LimitExceeded) as caught:
        m.decode(wire, m.MarkerLimits(max_entry_size=4))
    assert caught.value.field == "entries[0].dataLength"
    with pytest.raises(LimitExceeded) as caught:
        m.decode(m.encode(m.AppendEntriesRequest(0, 1, 1, 0, 0, [m.LogEntry(1, b"")] * 3)),
                 m.MarkerLimits(max_entries=2))
    assert caught.value.field == "entryCount"


# --------------------------------------------------------------------- truncation

def test_truncation_names_the_field_that_was_cut():
    vote = m.encode(m.RequestVoteRequest(3, 6, 5, 42))
    cases = [(A75[:3], "size"), (A75[:20], "term"), (A75[:50], "entries"), (A75[:-1], "crc"),
             (vote[:1], "candidateId"), (vote[:27], "lastLogIndex"), (vote[:30], "crc"),
             (b"B\x00\x00\x00\x08\x01", "chunk"), (b"b", "crc"), (b"", "marker")]
    for data, field_name in cases:
        with pytest.raises(Truncated) as caught:
            m.decode(data)
        assert caught.value.field == field_name, data
        assert caught.value.offset == len(data)


def test_trailing_bytes_after_one_packet_are_refused_by_decode():
    with pytest.raises(InvalidField) as caught:
        m.decode(HEARTBEAT + b"R")
    assert caught.value.field == "packet" and caught.value.offset == len(HEARTBEAT)


# ---------------------------------------------------------------------------- JSON

@pytest.mark.parametrize("obj,field_name", [
    ({"message": "Nope"}, "message"),
    ({"message": "ConnectRequest"}, "nodeId"),
    ({"message": "ConnectRequest", "nodeId": 1, "extra": 2}, "extra"),
    ({"message": "ConnectRequest", "nodeId": "1"}, "nodeId"),
    ({"message": "ConnectRequest", "nodeId": -1}, "nodeId"),
    ({"message": "ConnectResponse", "success": 1}, "success"),
    ({"message": "InstallSnapshotChunkRequest", "chunk": "zz"}, "chunk"),
    ({"message": "AppendEntriesRequest", "leaderCommit": 0, "term": 1, "prevLogTerm": 1,
      "prevLogIndex": 0, "leaderId": 0, "entries": [{"term": 1}]}, "entries[0].data"),
    ({"message": "AppendEntriesRequest", "leaderCommit": 0, "term": 1, "prevLogTerm": 1,
      "prevLogIndex": 0, "leaderId": 0, "entries": [{"term": 0, "data": ""}]},
     "entries[0].term"),
    ([1, 2], "message"),
])
def test_from_json_names_the_bad_key(obj, field_name):
    with pytest.raises(InvalidField) as caught:
        m.from_json(obj)
    assert caught.value.field == field_name


def test_connect_request_with_a_bad_crc_keeps_its_flag_out_of_equality():
    wire = bytes.fromhex(next(c["hex"] for c in EDGE_CASES if c["name"].startswith("Connect"
                                                                                    "Request")))
    packet = m.decode(wire)
    assert packet == m.ConnectRequest(2) and not packet.checksum_ok
    assert m.from_json(m.to_json(packet)).checksum_ok is False
    assert m.encode(packet) == m.encode(replace(packet, checksum_ok=True)) != wire
