"""LogPack: both store layouts, content comparison, byte-exact relaying, gzip bombs."""
from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
import zlib
from pathlib import Path

import pytest

from consensus.wire import jraft
from consensus.wire.errors import ChecksumMismatch, InvalidField, LimitExceeded, Truncated
from consensus.wire.jraft import (ClusterConfiguration, ClusterServer, JRaftLimits, LogEntry,
                                  LogPack, LogPackFormat, MessageType, RaftRequest, ValueType)
from consensus.wire.jraft_logpack import gzip_java

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "garlicfarm"
PACKS = {v["fields"]["store"]: v for v in map(
    json.loads, (VECTORS / "jraft_vectors.jsonl").read_text().splitlines())
    if v["name"].startswith("LogPack")}
pytestmark = pytest.mark.timeout(60)


def vector_entries(entries: list[dict]) -> tuple[LogEntry, ...]:
    return tuple(LogEntry(e["term"], ValueType.APPLICATION, e["value"].encode()) for e in entries)


def test_file_based_vector() -> None:
    vector = PACKS["FileBasedSequentialLogStore"]
    data = bytes.fromhex(vector["hex"])
    pack = LogPack.from_bytes(data)
    assert pack.format is LogPackFormat.FILE_BASED
    # packLog(3, 3) of entries 1..5: entries 3-5, whose store.data offsets start at 0x20
    assert pack.entries == vector_entries(vector["fields"]["storeEntries"][2:])
    assert pack.base_offset == 0x20
    assert pack.content().hex() == vector["fields"]["uncompressedHex"]
    assert pack.uncompressed_size == vector["fields"]["uncompressedLength"]
    assert pack.to_bytes() == data


def test_a_pack_we_build_is_byte_for_byte_what_openjdk_wrote() -> None:
    vector = PACKS["FileBasedSequentialLogStore"]
    pack = LogPack.from_bytes(bytes.fromhex(vector["hex"]))
    rebuilt = LogPack(pack.format, pack.entries, pack.base_offset)
    assert rebuilt.compressed is None
    assert rebuilt.to_bytes().hex() == vector["hex"]


def test_h2_vector() -> None:
    vector = PACKS["H2LogStore"]
    data = bytes.fromhex(vector["hex"])
    pack = LogPack.from_bytes(data)
    assert pack.format is LogPackFormat.H2
    assert pack.entries == vector_entries(vector["fields"]["entries"])
    assert pack.content().hex() == vector["fields"]["uncompressedHex"]
    assert pack.to_bytes() == data                          # relayed unchanged


def test_packs_compare_by_content_not_by_compressor() -> None:
    vector = PACKS["H2LogStore"]
    content = bytes.fromhex(vector["fields"]["uncompressedHex"])
    ours = LogPack.from_bytes(gzip.compress(content, compresslevel=1, mtime=12345))
    theirs = LogPack.from_bytes(bytes.fromhex(vector["hex"]))
    assert ours.compressed != theirs.compressed
    assert ours == theirs


def test_multi_member_gzip_is_one_pack() -> None:
    content = bytes.fromhex(PACKS["FileBasedSequentialLogStore"]["fields"]["uncompressedHex"])
    data = gzip_java(content[:30]) + gzip_java(content[30:])
    pack = LogPack.from_bytes(data)
    assert pack.content() == content and pack.to_bytes() == data


def test_empty_packs() -> None:
    assert LogPack.from_bytes(b"") == LogPack(LogPackFormat.EMPTY)   # packLog past the end
    assert LogPack(LogPackFormat.EMPTY).to_bytes() == b""
    h2_empty = LogPack.from_bytes(gzip_java(b""))
    assert h2_empty == LogPack(LogPackFormat.H2)
    file_based_empty = LogPack.from_bytes(gzip_java(bytes(8)))
    assert file_based_empty == LogPack(LogPackFormat.FILE_BASED)
    assert file_based_empty.content() == bytes(8)


def test_pack_records_keep_their_value_types() -> None:
    config = ClusterConfiguration(7, 3, (ClusterServer(1, "tcp://a:1"),))
    pack = LogPack(LogPackFormat.FILE_BASED, (LogEntry.of(2, b"x"), LogEntry.of(3, config)), 100)
    decoded = LogPack.from_bytes(pack.to_bytes())
    assert decoded == pack and decoded.entries[1].payload() == config
    request = RaftRequest(MessageType.SYNC_LOG_REQUEST, 1, 4, 5,
                          entries=(LogEntry.of(5, pack),))
    assert jraft.decode(jraft.encode(request)).entries[0].payload() == pack


# ------------------------------------------------------------------------- malformed

def test_gzip_bomb_stops_at_the_limit() -> None:
    bomb = gzip_java(bytes(16 << 20))                    # 16 MiB of zeros, ~16 KiB of gzip
    assert len(bomb) < 20_000
    limits = JRaftLimits(max_log_pack_size=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as caught:
            LogPack.from_bytes(bomb, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.field == "uncompressedSize"
    assert peak < 4 << 20


def test_the_pack_budget_is_shared_by_the_entries_of_a_message() -> None:
    pack = LogPack(LogPackFormat.H2, (LogEntry.of(1, b"x" * 1000),))
    entries = (LogEntry.of(1, pack),) * 3
    data = jraft.encode(RaftRequest(MessageType.APPEND_ENTRIES_REQUEST, entries=entries))
    size = pack.uncompressed_size
    assert len(jraft.decode(data, JRaftLimits(max_log_pack_size=3 * size)).entries) == 3
    with pytest.raises(LimitExceeded) as caught:
        jraft.decode(data, JRaftLimits(max_log_pack_size=3 * size - 1))
    assert caught.value.field == "entries[2].logPack.uncompressedSize"


def test_corrupt_crc_and_length_are_checksum_mismatches() -> None:
    data = bytearray(gzip_java(b"\x00\x00\x00\x0d" + bytes(9)))
    data[-5] ^= 0x01                                            # CRC32
    with pytest.raises(ChecksumMismatch) as caught:
        LogPack.from_bytes(bytes(data))
    assert caught.value.field == "gzip"


def test_truncated_and_garbage_gzip() -> None:
    data = gzip_java(bytes(100))
    with pytest.raises(Truncated):
        LogPack.from_bytes(data[:-3])
    with pytest.raises(InvalidField) as caught:
        LogPack.from_bytes(b"not gzip at all")
    assert caught.value.field == "gzip"
    with pytest.raises(InvalidField) as caught:
        LogPack.from_bytes(gzip_java(b"") + b"\x00\x00")
    assert caught.value.field == "gzip.member[1]"


def file_based(index: list[int], data: bytes) -> bytes:
    return struct.pack(f">ii{len(index)}q", 8 * len(index), len(data), *index) + data


@pytest.mark.parametrize("content, error, field", [
    (file_based([0, 5], bytes(20)), InvalidField, "index[1]"),           # record of 5 bytes
    (file_based([0], bytes(8)), InvalidField, "dataLength"),             # last record < 9
    (file_based([0], bytes(8) + b"\x09"), InvalidField, "records[0].valueType"),
    (struct.pack(">i", 12) + bytes(9), InvalidField, "records[0].recordSize"),   # H2
    (struct.pack(">i", 40) + bytes(9), Truncated, "records[0].recordSize"),
    (struct.pack(">i", 13) + bytes(8) + b"\x02", Truncated,
     "records[0].configuration.logIndex"),
])
def test_malformed_content_names_the_field(content: bytes, error: type, field: str) -> None:
    with pytest.raises(error) as caught:
        LogPack.from_bytes(gzip_java(content))
    assert caught.value.field == field


def test_record_count_limit() -> None:
    records = (LogEntry.of(1, b""),) * 5
    for pack_format in (LogPackFormat.FILE_BASED, LogPackFormat.H2):
        data = LogPack(pack_format, records).to_bytes()
        assert len(LogPack.from_bytes(data, JRaftLimits(max_entries=5)).entries) == 5
        with pytest.raises(LimitExceeded):
            LogPack.from_bytes(data, JRaftLimits(max_entries=4))


def test_h2_content_whose_sizes_line_up_but_does_not_parse_as_file_based_is_h2() -> None:
    """Records of 16, 13 and 13 bytes (42 in all) whose first term is 18 << 32: the
    term's high half, 18, stands where FileBased's dataLength is, 16 is a multiple of 8,
    and 8 + 16 + 18 == 42, so the sizes look FileBased; but that index does not parse,
    so the pack is read as H2, as it was written."""
    records = (LogEntry(18 << 32, ValueType.APPLICATION, b"abc"),
               LogEntry(1, ValueType.APPLICATION, b""), LogEntry(1, ValueType.APPLICATION, b""))
    pack = LogPack(LogPackFormat.H2, records)
    content = pack.content()
    index_length, data_length = struct.unpack_from(">ii", content)
    assert index_length % 8 == 0 and 8 + index_length + data_length == len(content)
    assert LogPack.from_bytes(pack.to_bytes()) == pack


def test_from_json_refuses_gzip_that_disagrees_with_the_entries() -> None:
    pack = LogPack.from_bytes(bytes.fromhex(PACKS["FileBasedSequentialLogStore"]["hex"]))
    obj = pack.to_json()
    assert LogPack.from_json(obj, "p") == pack and LogPack.from_json(obj, "p").compressed
    obj["entries"][0]["text"] = "del y"
    obj["entries"][0]["value"] = b"del y".hex()
    with pytest.raises(InvalidField) as caught:
        LogPack.from_json(obj, "p")
    assert caught.value.field == "p.gzip"
    del obj["gzip"]
    assert LogPack.from_json(obj, "p").entries[0].value == b"del y"


def test_content_refuses_what_cannot_be_laid_out() -> None:
    with pytest.raises(InvalidField) as caught:
        LogPack(LogPackFormat.H2, (), base_offset=5).content()
    assert caught.value.field == "baseOffset"
    with pytest.raises(InvalidField):
        LogPack(LogPackFormat.EMPTY, (LogEntry.of(1, b""),)).content()
    with pytest.raises(InvalidField):
        LogPack(LogPackFormat.FILE_BASED, (), base_offset=8).content()
    assert zlib.decompress(LogPack(LogPackFormat.H2, ()).to_bytes(), 31) == b""
