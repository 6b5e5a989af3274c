"""Core message <-> Garlic Farm bytes, per message, through the runtime's mapping
(`consensus/wire/jraft_mapping.py`) and the extension codec (`extensions.py`).

Each case is one message sent (core message -> bytes, as `JRaftWire.send` / `respond` do)
or received (bytes -> core message, as `JRaftWire.on_data` does). AppendEntries and its
response take the precompiled fast paths; the others take the generic path (a wire
message, the registry's codec, the mapping). Printed: microseconds of CPU time per message
(process time: on a shared machine it is disturbed less than the wall clock), the best of
`--repeats` timed runs of `--count` messages each.

    .venv/bin/python benchmarks/message_mapping.py [--count 20000] [--repeats 7]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from consensus.raft import (AppendEntries, AppendEntriesResponse, Configuration,  # noqa: E402
                            Entry, EntryType, PullEntriesResponse, PullSnapshotResponse,
                            PullStatus, ReadIndexRequest, ReadIndexResponse, RequestVote)
from consensus.wire import jraft_mapping as jm  # noqa: E402
from consensus.wire.extensions import GARLICFARM_REGISTRY  # noqa: E402
from consensus.wire.jraft import DEFAULT_LIMITS, encode  # noqa: E402

HEAD = {"term": 7, "source": 1, "destination": 2}


def entries(n: int, first: int = 42) -> list[Entry]:
    return [Entry(7, first + i, EntryType.APPLICATION, bytes(100)) for i in range(n)]


def generic_send(msg: Any) -> bytes:
    return encode(jm.to_wire(msg, True)[0], GARLICFARM_REGISTRY)


def generic_receive(frame: bytes) -> Any:
    registration = GARLICFARM_REGISTRY.lookup(frame[0])
    wire = registration.codec.decode(frame, registration.message_type, DEFAULT_LIMITS)
    return jm.from_wire(wire)


def cases() -> list[tuple[str, Callable[[], Any]]]:
    out: list[tuple[str, Callable[[], Any]]] = []
    heartbeat = AppendEntries(**HEAD, prev_log_index=41, prev_log_term=7, entries=[],
                              commit=41)
    batch = AppendEntries(**HEAD, prev_log_index=41, prev_log_term=7, entries=entries(100),
                          commit=41)
    for name, msg in (("AppendEntries heartbeat", heartbeat),
                      ("AppendEntries 100 x 100 B", batch)):
        frame = jm.append_entries_frame(msg, {})
        assert jm.append_entries_from_frame(frame, DEFAULT_LIMITS) == msg
        out.append((f"{name} send (fast path)",
                    lambda msg=msg: jm.append_entries_frame(msg, {})))
        out.append((f"{name} receive (fast path)",
                    lambda frame=frame: jm.append_entries_from_frame(frame, DEFAULT_LIMITS)))
    response = AppendEntriesResponse(**HEAD, success=True, next_index=142, log_index=42,
                                     entry_count=100)
    frame = jm.append_response_frame(response)
    echo = jm.Echo(0, log_index=42, count=100)
    assert jm.append_response_from_frame(frame, echo) == response
    out.append(("AppendEntriesResponse send (fast path)",
                lambda: jm.append_response_frame(response)))
    out.append(("AppendEntriesResponse receive (fast path)",
                lambda: jm.append_response_from_frame(frame, echo)))
    config = Configuration.of([1, 2, 3])
    for msg in (RequestVote(**HEAD, last_log_index=41, last_log_term=7),
                ReadIndexRequest(**HEAD, ctx=b"c" * 16, lease=True),
                ReadIndexResponse(**HEAD, ctx=b"c" * 16, index=41, success=True),
                PullEntriesResponse(**HEAD, status=PullStatus.SUCCESS, index=42,
                                    entries=entries(10), min_index=1, commit=60),
                PullSnapshotResponse(**HEAD, snapshot_index=40, snapshot_term=7,
                                     configuration=config, offset=0, data=bytes(4096),
                                     done=True)):
        frame = generic_send(msg)
        assert generic_receive(frame) == msg
        out.append((f"{type(msg).__name__} send", lambda msg=msg: generic_send(msg)))
        out.append((f"{type(msg).__name__} receive",
                    lambda frame=frame: generic_receive(frame)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    print("| case | us / message |\n|---|---:|")
    for name, run in cases():
        best = float("inf")
        for _ in range(args.repeats):
            start = time.process_time()
            for _ in range(args.count):
                run()
            best = min(best, time.process_time() - start)
        print(f"| {name} | {best / args.count * 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
