"""Garlic Farm stream decoding, LogPack and handshake costs against in-run baselines.

Cases (each baseline does the same work with no validation, limits or message objects,
and is checked against the codec's result in the run):

* a stream of 20,000 small messages (AppendEntries heartbeats and responses, alternating)
  fed to `JRaftDecoder` at once -- baseline: a `struct.unpack_from` loop;
* one AppendEntries of 1,000 x 100 B entries fed in 4 KiB chunks -- baseline: the same
  decoder fed the message in one piece (the ratio is the cost of chunking);
* a FileBased LogPack of 1,000 records decoded -- baseline: `zlib.decompress` plus a
  `struct` walk of the same index;
* a handshake with the credential cache warm (request 2 -> 101) and cold (request 1 ->
  401 -> request 2 -> 101), both sides in memory -- baseline: h11 alone parsing and
  writing the same requests and responses.

    .venv/bin/python benchmarks/jraft_stream.py [--repeats 9] [--update-results]
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import struct
import sys
import time
import timeit
import zlib
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import h11  # noqa: E402

from consensus.wire import handshake as hs  # noqa: E402
from consensus.wire import jraft  # noqa: E402

HEADING = "## jraft stream, LogPack and handshake (`benchmarks/jraft_stream.py`)"
Case = tuple[str, int, Callable[[], Any], Callable[[], Any]]   # name, ops, codec, baseline


def small_messages(count: int) -> Case:
    heartbeat = jraft.RaftRequest(jraft.MessageType.APPEND_ENTRIES_REQUEST, 1, 2, 5, 4, 42, 40)
    reply = jraft.RaftResponse(jraft.MessageType.APPEND_ENTRIES_RESPONSE, 2, 1, 5, 43, True)
    stream = (jraft.encode(heartbeat) + jraft.encode(reply)) * (count // 2)
    request, response = struct.Struct(">Biiqqqqi"), struct.Struct(">BiiqqB")

    def baseline() -> list[tuple]:
        out, at = [], 0
        while at < len(stream):
            shape = request if stream[at] == 3 else response
            out.append(shape.unpack_from(stream, at))
            at += shape.size
        return out

    def codec() -> list:
        return jraft.JRaftDecoder().feed(stream)

    assert len(codec()) == len(baseline()) == count
    return f"{count:,} heartbeats + responses, one feed", count, codec, baseline


def chunked_append_entries(chunk: int) -> Case:
    entries = tuple(jraft.LogEntry.of(7, (i.to_bytes(4, "big") * 25)) for i in range(1000))
    wire = jraft.encode(jraft.RaftRequest(jraft.MessageType.APPEND_ENTRIES_REQUEST, 1, 2, 7,
                                          7, 41, 41, entries))
    pieces = [wire[i:i + chunk] for i in range(0, len(wire), chunk)]

    def codec() -> list:
        decoder = jraft.JRaftDecoder()
        return [m for piece in pieces for m in decoder.feed(piece)]

    def baseline() -> list:
        return jraft.JRaftDecoder().feed(wire)

    assert codec() == baseline()
    return f"AppendEntries 1,000 x 100 B in {chunk // 1024} KiB chunks (vs one piece)", 1, \
        codec, baseline


def log_pack(records: int) -> Case:
    pack = jraft.LogPack(jraft.LogPackFormat.FILE_BASED,
                         tuple(jraft.LogEntry.of(3, b"set key%06d=value" % i)
                               for i in range(records)), base_offset=4096)
    data = pack.to_bytes()
    head = struct.Struct(">qB")

    def baseline() -> list[tuple]:
        content = zlib.decompress(data, 31)
        index_length, data_length = struct.unpack_from(">ii", content)
        index = struct.unpack_from(f">{index_length // 8}q", content, 8)
        start = 8 + index_length
        ends = [o - index[0] for o in index[1:]] + [data_length]
        out, at = [], 0
        for end in ends:
            term, value_type = head.unpack_from(content, start + at)
            out.append((term, value_type, content[start + at + 9:start + end]))
            at = end
        return out

    def codec() -> jraft.LogPack:
        return jraft.LogPack.from_bytes(data)

    assert [(e.term, e.value_type, e.value) for e in codec().entries] == baseline()
    return f"FileBased LogPack of {records:,} records, decode", 1, codec, baseline


def handshakes(count: int, warm: bool) -> Case:
    counter = itertools.count()
    random = lambda n: next(counter).to_bytes(n, "big")     # noqa: E731 (deterministic)
    nonces = hs.NonceStore(random, capacity=1 << 20)
    users = {"spark": "s3cret"}.get
    exchanges: list[tuple[bytes, bytes]] = []

    def one(cache: hs.CredentialCache, now: float) -> None:
        initiator = hs.HandshakeInitiator(host="127.0.0.1:9001", username="spark",
                                          password="s3cret", cache=cache, random=random)
        request = initiator.start(now)
        while True:
            receiver = hs.HandshakeReceiver(credentials=users, nonces=nonces)
            receiver.receive_data(request)
            answer = receiver.next_event(now)
            exchanges.append((request, answer.data))
            initiator.receive_data(answer.data)
            event = initiator.next_event()
            if isinstance(event, hs.Established):
                return
            request = event.request

    warm_cache = hs.CredentialCache()
    one(warm_cache, 0.0)
    exchanges.clear()
    one(warm_cache, 1.0) if warm else one(hs.CredentialCache(), 1.0)
    recorded = list(exchanges)

    def codec() -> None:
        for i in range(count):
            one(warm_cache if warm else hs.CredentialCache(), 2.0 + i)

    def baseline() -> None:
        """h11 writes each recorded request, parses it, and parses the recorded answer."""
        for _ in range(count):
            for request, response in recorded:
                server = h11.Connection(h11.SERVER)
                server.receive_data(request)
                parsed = server.next_event()
                client = h11.Connection(h11.CLIENT)
                client.send(h11.Request(method=parsed.method, target=parsed.target,
                                        headers=parsed.headers))
                client.send(h11.EndOfMessage())
                client.receive_data(response)
                client.next_event()

    name = "handshake, cache warm (request 2 -> 101)" if warm else \
        "handshake, cache cold (request 1 -> 401 -> request 2 -> 101)"
    return name, count, codec, baseline


def measure(cases: list[Case], repeats: int) -> list[str]:
    rows = ["| case | codec ops/s | baseline ops/s | codec time / baseline time |",
            "|---|---:|---:|---:|"]
    for name, ops, codec, baseline in cases:
        codec_s = base_s = float("inf")
        for _ in range(repeats):    # interleaved, so a burst of load hits both sides
            codec_s = min(codec_s, timeit.timeit(codec, number=1))
            base_s = min(base_s, timeit.timeit(baseline, number=1))
        rows.append(f"| {name} | {ops / codec_s:,.0f} | {ops / base_s:,.0f} | "
                    f"{codec_s / base_s:.2f} |")
        print(rows[-1], flush=True)
    return rows


def update_results(rows: list[str], command: str) -> None:
    path = ROOT / "benchmarks" / "RESULTS.md"
    text = path.read_text()
    machine = (f"{platform.python_implementation()} {platform.python_version()}, "
               f"{os.cpu_count()} CPUs ({platform.machine()}), shared with other jobs")
    section = "\n".join([
        HEADING, f"Command: `{command}` ({time.strftime('%Y-%m-%d')}; {machine}).", "",
        "Best of the repeats; each baseline does the same work with plain struct / zlib / "
        "h11 code and no validation (see the script's docstring). Last column: the "
        "codec's cost over its baseline (lower is better).", "", *rows, "", ""])
    if HEADING in text:
        start = text.index(HEADING)
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--update-results", action="store_true")
    args = parser.parse_args(argv)
    rows = measure([small_messages(20_000), chunked_append_entries(4096), log_pack(1000),
                    handshakes(200, warm=True), handshakes(200, warm=False)], args.repeats)
    if args.update_results:
        shown = " ".join(a for a in sys.argv[1:] if a != "--update-results")
        update_results(rows, f".venv/bin/python benchmarks/jraft_stream.py {shown}".strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
