"""The reader process (`--log-readers process`, consensus/runtime/reader_process.py):
its pages are the reader threads' bytes for the same log and verdicts (journal
retries, staged and committed batches, forgotten request ids, a restored machine,
compaction under a pinned page); killed mid-read it is restarted, its death logged,
and the client's read completes; the option is checked.

Each test fails on code without a reader process (the module does not exist there).
"""
from __future__ import annotations

import os
import re
import signal
import threading
import urllib.request

import pytest

from consensus.client import IndexOverflow
from consensus.raft import CompactedError, Configuration, Entry, EntryType, Snapshot
from consensus.runtime.config import ConfigError, NodeConfig
from consensus.runtime.disk_storage import DiskStorage
from consensus.runtime.log_pages import entries_page, journal_page
from consensus.runtime.machines import FarmStateMachine
from consensus.runtime.reader_process import ReaderProcess
from consensus.runtime.service import reply_frame
from consensus.torture import LocalCluster
from consensus.wire import envelope
from consensus.wire.envelope import CommandKind
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

HEAD, CALL = (1, 0, 5), 7


def _command(index: int, kind: CommandKind, *args, rid: bytes) -> Entry:
    data = envelope.stamp(envelope.encode_command(kind, rid, *args), 1000 + index)
    return Entry(1, index, EntryType.APPLICATION, data)


def _log(count: int, first: int) -> list[Entry]:
    """Entries from `first` of every kind a page judges: journal writes and their
    retries (hidden), batches staged and committed (a duplicate commit hidden), an
    aborted batch, status JSON, another application's bytes, a configuration."""
    entries, i = [], first
    while len(entries) < count:
        n = i
        kinds = [
            _command(n, CommandKind.JOURNAL, [b"j%d" % n, b"k%d" % n], rid=b"w%d" % n),
            _command(n + 1, CommandKind.JOURNAL, [b"j%d" % n], rid=b"w%d" % n),   # a retry
            _command(n + 2, CommandKind.STAGE, "q", n, 0, 0, "arrow", b"s" * 50,
                     rid=b"s%d" % n),
            _command(n + 3, CommandKind.COMMIT, "q", n, [n + 2], {"m": n}, rid=b"c%d" % n),
            _command(n + 4, CommandKind.COMMIT, "q", n, [n + 2], {"m": n}, rid=b"d%d" % n),
            _command(n + 5, CommandKind.STAGE, "q2", n, 0, 0, "arrow", b"t", rid=b"t%d" % n),
            _command(n + 6, CommandKind.ABORT, "q2", n, rid=b"a%d" % n),
            Entry(1, n + 7, EntryType.APPLICATION, b'{"node": 1, "raft": {}}'),
            Entry(1, n + 8, EntryType.APPLICATION, b"another application" * (n % 7)),
            Entry(1, n + 9, EntryType.CONFIGURATION, Configuration.of({1}).encode()),
        ]
        entries += kinds
        i += len(kinds)
    return entries


def _compare(storage, machine, reader, feed, start: int, stop: int) -> int:
    """The process's frame against the threads' for every kind of page over [start,
    stop) at a few sizes; how many pages were compared."""
    compared = 0
    for max_bytes in (0, 300, 5000, 8 << 20):
        for kind, payloads in (("journal", True), ("entries", True), ("entries", False)):
            if kind == "journal":
                value = journal_page(storage.read_applied, machine.verdicts, start, stop,
                                     max_bytes)
            else:
                value = entries_page(storage.read_applied, machine.verdicts, start, stop,
                                     max_bytes, payloads)
            ticket = reader.capture(feed, machine)
            job = {"kind": kind, "max_bytes": max_bytes, "payloads": payloads, "g": feed.key,
                   "call": CALL, "head": HEAD, "start": start, "stop": stop}
            pins = storage.pin_applied(start, stop, max_bytes) if start < stop else []
            got = bytes(reader.build(job, ticket, pins))
            assert got == reply_frame(HEAD, CALL, value), (kind, payloads, start, stop,
                                                            max_bytes)
            compared += 1
    return compared


def test_the_process_builds_the_threads_pages_byte_for_byte(tmp_path):
    storage = DiskStorage(str(tmp_path), fsync="never", segment_bytes=8 << 10,
                          cache_entries=16)
    machine = FarmStateMachine()
    machine.requests.capacity = 40          # request ids forgotten as the log grows
    reader = ReaderProcess(node_id=1)
    feed = reader.feed()
    try:
        last, compared = 0, 0
        for _ in range(6):
            batch = _log(60, last + 1)
            storage.append(batch)
            for entry in batch:
                machine.apply(entry)
            machine.applied = last = batch[-1].index
            for start, stop in ((1, last + 1), (last - 59, last + 1), (5, 37), (last, last)):
                compared += _compare(storage, machine, reader, feed, max(start, 1), stop)
        assert machine.requests.forgotten_through > 0
        hidden = machine.verdicts().of(storage.read_applied(1, last + 1))
        assert hidden.count(False) > 30 and None in hidden and True in hidden   # all three

        # a restore replaces the machine's objects: the mirror starts over from them
        machine.restore(machine.snapshot(), last)
        compared += _compare(storage, machine, reader, feed, 1, last + 1)

        # records pinned, then compacted away: still read whole (as a reader thread's)
        pins = storage.pin_applied(1, 40, None)
        ticket = reader.capture(feed, machine)
        storage.save_snapshot(Snapshot(last - 31, 1, Configuration.of({1}), b""))
        storage.compact(last - 30)
        assert storage.first_index() > 40
        job = {"kind": "entries", "max_bytes": 8 << 20, "payloads": True, "g": feed.key,
               "call": CALL, "head": HEAD, "start": 1, "stop": 40}
        frame = bytes(reader.build(job, ticket, pins))
        assert all(b"j%d" % n in frame for n in (1, 11, 21, 31))
        # and a page asked once they are gone fails as the threads' read does
        with pytest.raises(CompactedError):
            storage.pin_applied(1, 40, None)
        with pytest.raises(CompactedError):
            storage.read_applied(1, 40)
        first = storage.first_index()
        compared += _compare(storage, machine, reader, feed, first, last + 1)
        assert compared > 250
    finally:
        reader.close()
        storage.close()
    assert reader.process.poll() is not None    # stopped with its owner


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def _reader_pids(farm, i: int) -> list[int]:
    with open(farm.log_path(i)) as f:
        return [int(p) for p in re.findall(r"reader process started \(pid (\d+)\)", f.read())]


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_reader_process_killed_mid_read_is_restarted_and_the_read_completes():
    with LocalCluster(1, fsync="never", extra_args=(
            "--log-readers", "process", "--metrics", "127.0.0.1:0",
            "--snapshot-interval", "10000000")) as farm:
        with farm.client(timeout=30) as client:
            written = {}
            for k in range(0, 20_000, 5000):
                batch = [[b"r%08d" % i] for i in range(k, k + 5000)]
                for (index, _), records in zip(client.append_many(batch), batch):
                    written[index] = records[0]
            with open(farm.log_path(1)) as f:
                url = re.search(r"metrics on (http://\S+/metrics)", f.read()).group(1)
            node_pid = farm.pid(1)
            first, applied, _ = client.log_bounds()
            before = _reader_pids(farm, 1)
            assert len(before) == 1
            threads = _threads(node_pid)
            # a page certainly in the process: stopped, it cannot answer
            os.kill(before[0], signal.SIGSTOP)
            seen, errors = {}, []

            def read() -> None:
                try:
                    start = first
                    while start <= applied:
                        page = client.read_journal(start, applied + 1)
                        for index, records in page.entries():
                            seen[index] = records[0]
                        start = page.stop
                except Exception as exc:      # noqa: BLE001 - reported below
                    errors.append(exc)
            reading = threading.Thread(target=read, daemon=True)
            reading.start()
            wait_until(lambda: _metric(url, "garlicfarm_log_reads_in_flight") >= 1, 10,
                       message="a page waiting for the stopped process")
            os.kill(before[0], signal.SIGKILL)
            reading.join(30)
            assert not reading.is_alive() and not errors, errors
            assert seen and all(written[i] == r for i, r in seen.items())
            assert set(written) <= set(seen), "records missing from the read"
            wait_until(lambda: len(_reader_pids(farm, 1)) == 2, 10,
                       message="a new reader process")
            with open(farm.log_path(1)) as f:
                log = f.read()
            assert re.search(rf"the reader process \(pid {before[0]}\) died \(exit code -9\)",
                             log), log[-3000:]
            # past what is applied, and a second death: the same answers as before
            with pytest.raises(IndexOverflow):
                client.read_journal(applied + 100, applied + 200)
            os.kill(_reader_pids(farm, 1)[-1], signal.SIGKILL)
            wait_until(lambda: len(_reader_pids(farm, 1)) == 3, 10,
                       message="a third reader process")
            page = client.read_journal(first, first + 100)
            assert [r for _, (r, *_) in page.entries()] == \
                [written[i] for i in range(first, first + 100) if i in written]
            assert _threads(node_pid) == threads    # no thread left per restart
            assert _metric(url, "garlicfarm_log_reader_process_restarts_total") == 2


def test_the_log_readers_options_are_checked():
    with pytest.raises(ConfigError, match="--log-readers.*'proc' is not one of threads, "
                                          "process"):
        NodeConfig(id=1, listen="127.0.0.1:0", data_dir="/tmp/x", log_readers="proc")
    for nice in (-1, 20, "5", True):
        with pytest.raises(ConfigError, match="--log-reader-nice.*from 0 to 19"):
            NodeConfig(id=1, listen="127.0.0.1:0", data_dir="/tmp/x", log_readers="process",
                       log_reader_nice=nice)


def test_a_page_over_more_segments_than_one_message_carries_ends_early(tmp_path):
    """A segment a record (tiny --segment-bytes): the page ends after MAX_PIECES of them,
    holding what the threads' page holds up to there."""
    from consensus.runtime.reader_process import MAX_PIECES
    storage = DiskStorage(str(tmp_path), fsync="never", segment_bytes=64, cache_entries=1)
    machine = FarmStateMachine()
    reader = ReaderProcess(node_id=1)
    feed = reader.feed()
    try:
        batch = _log(100, 1)
        storage.append(batch)
        for entry in batch:
            machine.apply(entry)
        machine.applied = batch[-1].index
        pins = storage.pin_applied(1, 101, None)
        assert len(pins) > MAX_PIECES
        job = {"kind": "entries", "max_bytes": 8 << 20, "payloads": True, "g": feed.key,
               "call": CALL, "head": HEAD, "start": 1, "stop": 101}
        got = bytes(reader.build(job, reader.capture(feed, machine), pins))
        expected = entries_page(storage.read_applied, machine.verdicts, 1, 101, 8 << 20, True)
        stop = sum(len(p.starts) for p in pins[:MAX_PIECES]) + 1
        expected = {"entries": expected["entries"][:stop - 1],
                    "verdicts": {i: v for i, v in expected["verdicts"].items() if i < stop}}
        assert 1 < stop < 101 and got == reply_frame(HEAD, CALL, expected)
    finally:
        reader.close()
        storage.close()


def test_the_process_pauses_while_a_loop_turn_runs(tmp_path):
    """The loop goes first: a page waits at its pauses while the node's turn runs (the
    turn never ends here: each pause gives up after TURN_WAIT), and not between turns."""
    import time
    from consensus.runtime.reader_process import TURN_WAIT
    storage = DiskStorage(str(tmp_path), fsync="never")
    machine = FarmStateMachine()
    reader = ReaderProcess(node_id=1)
    feed = reader.feed()
    try:
        batch = _log(300, 1)
        storage.append(batch)
        for entry in batch:
            machine.apply(entry)
        machine.applied = batch[-1].index

        def page() -> float:
            job = {"kind": "journal", "max_bytes": 8 << 20, "payloads": True, "g": feed.key,
                   "call": CALL, "head": HEAD, "start": 1, "stop": 301}
            began = time.monotonic()
            reader.build(job, reader.capture(feed, machine), storage.pin_applied(1, 301))
            return time.monotonic() - began
        page()                                  # the process has started
        reader.turn(True)
        during = page()
        reader.turn(False)
        between = page()
        assert during >= 2 * TURN_WAIT > between, (during, between)
    finally:
        reader.close()
        storage.close()
