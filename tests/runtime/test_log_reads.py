"""Log reads served off the event loop (consensus/runtime/log_reads.py): readers hammering
a large log while a writer writes get exact answers, compaction during reads answers
IndexUnderflow (never wrong entries), a batch is read whole or not at all, and no loop
turn grows with a page.

The turn bound: a page of ~60,000 one-record entries (read_entries without payloads,
whose headers a member works out entry by entry) took the old loop a 930-980 ms turn on
this machine (2 cores), and 100,000 take proportionally longer; every test below reads
such pages and asserts that no turn reached `TURN_BOUND` (the node logs each turn over
100 ms: "a loop turn took N ms"), so each fails on code that builds pages on the loop.
"""
from __future__ import annotations

import re
import threading
import time

import pytest

from consensus.client import IndexUnderflow
from consensus.raft import CompactedError, Configuration, Entry, EntryType, Snapshot
from consensus.runtime.disk_storage import DiskStorage
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)

TURN_BOUND_MS = 500
BACKLOG = 100_000
_TURN = re.compile(r"a loop turn took (\d+) ms")
#: a snapshot costs the loop ~150 ms (docs/runtime.md): none where turns are measured
NO_SNAPSHOTS = ("--snapshot-interval", "10000000")


def _write_backlog(client, count: int, tag: bytes = b"b") -> dict[int, bytes]:
    """`count` one-record journal entries; index -> record."""
    written = {}
    for k in range(0, count, 5000):
        batch = [[tag + b"%08d" % i] for i in range(k, min(count, k + 5000))]
        for (index, _), records in zip(client.append_many(batch), batch):
            written[index] = records[0]
    return written


def _log_size(farm, i: int) -> int:
    with open(farm.log_path(i), "rb") as f:
        return len(f.read())


def _slow_turns(farm, offsets: dict[int, int]) -> dict[int, list[int]]:
    """Each node's logged turns (ms) of at least TURN_BOUND_MS since `offsets`."""
    slow = {}
    for i, offset in offsets.items():
        with open(farm.log_path(i), "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        slow[i] = [int(ms) for ms in _TURN.findall(text) if int(ms) >= TURN_BOUND_MS]
    return slow


class _Writer(threading.Thread):
    """Appends one-record entries until stopped; index -> record of each acknowledged."""

    def __init__(self, farm) -> None:
        super().__init__(daemon=True)
        self.farm, self.written, self.stop, self.error = farm, {}, threading.Event(), None

    def run(self) -> None:
        try:
            with self.farm.client(timeout=20) as client:
                k = 0
                while not self.stop.is_set():
                    batch = [[b"w%08d" % i] for i in range(k, k + 200)]
                    for (index, _), records in zip(client.append_many(batch), batch):
                        self.written[index] = records[0]
                    k += 200
        except Exception as exc:      # noqa: BLE001 - reported by the test
            self.error = exc


def _check_records(seen: dict[int, bytes], written: dict[int, bytes]) -> None:
    wrong = [(i, r, written.get(i)) for i, r in seen.items() if written.get(i) != r]
    assert not wrong, f"{len(wrong)} entries read wrong, e.g. {wrong[:3]}"


def _reader(farm, endpoint: str, seen: dict, errors: list, stop: threading.Event,
            underflows: list, kinds: tuple[str, ...]) -> None:
    """Reads the whole log again and again, page by page, by each of `kinds`; checks each
    page's shape and collects the journal records (index -> record)."""
    try:
        with farm.client(endpoints=endpoint, timeout=60) as client:
            rounds = 0
            while not stop.is_set() or rounds < 1:
                first, applied, _ = client.log_bounds(endpoint=endpoint)
                for kind in kinds:
                    start = first
                    while start <= applied:
                        try:
                            if kind == "journal":
                                page = client.read_journal(start, applied + 1,
                                                           endpoint=endpoint)
                                for index, records in page.entries():
                                    seen[index] = records[0]
                                start = page.stop
                                continue
                            records = client.read_entries(start, applied + 1,
                                                          endpoint=endpoint,
                                                          payloads=kind == "entries")
                        except IndexUnderflow as exc:
                            assert exc.first_available > start, (start, exc.first_available)
                            underflows.append((start, exc.first_available))
                            start = exc.first_available
                            continue
                        assert [r.index for r in records] == \
                            list(range(start, start + len(records))), "a page with gaps"
                        for record in records:
                            if record.type == "journal":
                                assert not record.duplicate and record.count == 1
                                if kind == "entries":
                                    seen[record.index] = record.records[0]
                        start += len(records)
                rounds += 1
    except Exception as exc:      # noqa: BLE001 - reported by the test
        errors.append(exc)


def _hammer(farm, endpoints: list[str], kinds_by_reader: list[tuple[str, ...]],
            seconds: float, until=None) -> tuple[_Writer, list[dict], list, list]:
    """Writer and readers for `seconds`, or (`until(underflows)`) until the condition the
    test needs has happened, with a deadline."""
    writer = _Writer(farm)
    stop = threading.Event()
    seen = [dict() for _ in kinds_by_reader]
    errors, underflows = [], []
    readers = [threading.Thread(target=_reader, daemon=True, args=(
        farm, endpoints[n % len(endpoints)], seen[n], errors, stop, underflows, kinds))
        for n, kinds in enumerate(kinds_by_reader)]
    writer.start()
    for reader in readers:
        reader.start()
    try:
        if until is None:
            time.sleep(seconds)      # the load's duration, not a wait for a condition
        else:
            wait_until(lambda: until(underflows), 90, interval=0.2,
                       message="the condition the readers must meet")
    finally:
        stop.set()
    for reader in readers:
        reader.join(60)
    writer.stop.set()
    writer.join(30)
    assert not any(r.is_alive() for r in readers) and not writer.is_alive()
    assert writer.error is None, writer.error
    assert not errors, errors
    return writer, seen, errors, underflows


def test_readers_hammering_a_large_log_get_exact_answers_and_the_loop_keeps_its_turns():
    with LocalCluster(3, fsync="never", status_interval=5.0, extra_args=NO_SNAPSHOTS) as farm:
        leader = farm.wait_for_leader(30)
        with farm.client(timeout=30) as client:
            written = _write_backlog(client, BACKLOG)
        follower = next(i for i in farm.node_ids if i != leader)
        offsets = {i: _log_size(farm, i) for i in farm.node_ids}
        writer, seen, _, _ = _hammer(
            farm, [farm.endpoint_of(leader), farm.endpoint_of(follower)],
            [("headers", "journal"), ("entries", "journal")], 3.0)
        written.update(writer.written)
        assert len(writer.written) > 0
        for collected in seen:
            assert len(collected) >= BACKLOG      # every reader went through the backlog
            _check_records(collected, written)
        assert _slow_turns(farm, offsets) == {i: [] for i in farm.node_ids}


@pytest.mark.parametrize("readers", ["threads", "process"])
def test_compaction_during_reads_answers_underflow_never_wrong_entries(readers):
    # a snapshot every 20,000 entries, 10,000 kept below it, 1 MiB segments: the writer
    # makes the node compact several times while the readers page from its first index
    # (with the reader process too: its records are pinned by a reader thread)
    with LocalCluster(1, fsync="never", status_interval=5.0, extra_args=(
            "--snapshot-interval", "20000", "--retain-entries", "10000",
            "--segment-bytes", str(1 << 20), "--log-readers", readers)) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=30) as client:
            written = _write_backlog(client, 60_000)
            first_before = client.log_bounds()[0]
        offsets = {1: _log_size(farm, 1)}
        with farm.client(timeout=30) as watcher:
            # until the node compacted and a reader met a compacted range (certain, not
            # hoped for within a fixed time)
            writer, seen, _, underflows = _hammer(
                farm, [farm.endpoint_of(1)], [("headers",), ("entries",), ("journal",)], 4.0,
                until=lambda met: bool(met) and watcher.log_bounds()[0] > first_before)
            first_after = watcher.log_bounds()[0]
        written.update(writer.written)
        assert first_after > first_before, "no compaction happened during the reads"
        assert underflows, "no read met a compacted range"
        for collected in seen:
            _check_records(collected, written)
        assert _slow_turns(farm, offsets) == {1: []}


def test_a_read_across_commits_being_applied_sees_whole_batches():
    with LocalCluster(1, fsync="never", status_interval=5.0, extra_args=NO_SNAPSHOTS) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=30) as client:
            _write_backlog(client, 80_000)
            start = client.log_bounds()[1] + 1
        offsets = {1: _log_size(farm, 1)}
        stop = threading.Event()
        errors, checked = [], []

        def read_batches() -> None:
            """Read from the backlog's start to the applied index, again and again:
            every COMMIT in an answer is effective and names staged entries of the
            answer (the whole batch), and no batch is seen partially."""
            try:
                with farm.client(timeout=30) as reader:
                    while not stop.is_set():
                        applied = reader.log_bounds()[1]
                        at, records = 1, []
                        while at <= applied:
                            page = reader.read_entries(at, applied + 1, payloads=False)
                            records += page
                            at += len(page)
                        staged = {r.index: r for r in records if r.type == "staged"}
                        flags: dict[int, list[bool]] = {}
                        for r in records:
                            if r.type == "commit":
                                flags.setdefault(r.commit.batch_id, []).append(
                                    r.commit.effective)
                                if r.commit.effective:
                                    assert all(s in staged for s in r.commit.staged), r
                        # each batch: its first commit effective, the duplicate not
                        assert all(f[0] and not any(f[1:]) for f in flags.values()), flags
                        checked.extend(flags)
            except Exception as exc:      # noqa: BLE001 - reported below
                errors.append(exc)

        reader = threading.Thread(target=read_batches, daemon=True)
        reader.start()
        with farm.client(timeout=30) as client:
            for batch in range(12):
                staged = [client.stage("q", batch, p, 0, b"payload %d/%d" % (batch, p))
                          for p in range(8)]
                assert client.commit_batch("q", batch, staged).committed
                # a duplicate commit of the batch: not effective, and must never read so
                client.commit_batch("q", batch, staged)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not checked or max(checked) < 11):
            time.sleep(0.05)
        stop.set()
        reader.join(60)
        assert not errors, errors
        assert checked and max(checked) == 11
        with farm.client(timeout=30) as client:
            records = [r for r in client.read_entries(start, client.log_bounds()[1] + 1)
                       if r.type == "commit"]
        assert [r.commit.effective for r in records] == [True, False] * 12
        assert _slow_turns(farm, offsets) == {1: []}


def test_read_applied_races_compaction_with_exact_entries_or_compacted_error(tmp_path):
    """DiskStorage.read_applied on a reader thread while the owner appends and compacts:
    each read is exact or CompactedError (a segment deleted under it is still read
    whole: its descriptor was duplicated)."""
    storage = DiskStorage(str(tmp_path), fsync="never", segment_bytes=16 << 10,
                          cache_entries=64)
    try:
        def entry(i: int) -> Entry:
            return Entry(1, i, EntryType.APPLICATION, b"e%07d" % i + bytes(100))

        storage.append([entry(i) for i in range(1, 2001)])
        stop = threading.Event()
        outcomes = {"exact": 0, "compacted": 0}
        errors = []

        def read() -> None:
            try:
                while not stop.is_set():
                    lo = storage.first_index()
                    try:
                        got = storage.read_applied(lo, lo + 500)
                    except CompactedError as exc:   # says where the log starts now
                        assert max(getattr(exc, "first_index", 0), storage.first_index()) > lo
                        outcomes["compacted"] += 1
                        continue
                    assert [e.data for e in got] == [entry(i).data for i in range(lo, lo + 500)]
                    outcomes["exact"] += 1
            except Exception as exc:      # noqa: BLE001 - reported below
                errors.append(exc)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        last = 2000
        config = Configuration.of({1})
        for step in range(300):
            storage.append([entry(i) for i in range(last + 1, last + 21)])
            last += 20
            if step % 10 == 9:
                storage.save_snapshot(Snapshot(last - 1000, 1, config, b""))
                storage.compact(last - 1000)
        stop.set()
        thread.join(30)
        assert not errors, errors
        assert outcomes["exact"] > 0 and storage.first_index() > 2000, outcomes
    finally:
        storage.close()


def test_reads_wait_in_bounded_queues_and_a_connection_waits_for_its_bytes_to_leave():
    """LogReads' bounds on real connections (a socket pair each): one page in the making
    per connection, `waiting_per_connection` and `waiting` calls waiting, then
    Unavailable; a connection whose answer is unwritten gets no next page meanwhile."""
    import socket

    from consensus.client import Unavailable
    from consensus.runtime.connection import Connection
    from consensus.runtime.log_reads import LOW_WATER, LogReads

    pairs = [socket.socketpair() for _ in range(3)]
    conns = [Connection(a, "garlicfarm", None, outgoing=False, peer_id=None, label=f"c{k}")
             for k, (a, _) in enumerate(pairs)]
    woken, release, started = threading.Event(), {}, []
    reads = LogReads(wake=woken.set, threads=1, waiting=3, waiting_per_connection=2)

    def work(name: str):
        release[name] = threading.Event()

        def build() -> bytes:
            started.append(name)
            assert release[name].wait(20)
            return name.encode() * (LOW_WATER + 1)      # an answer above the low water
        return build

    def failure(exc):
        return b"failed"

    def pump_until(condition) -> None:
        deadline = time.monotonic() + 20
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            woken.wait(0.05)
            woken.clear()
            reads.pump(lambda conn, frame: conn.out.extend(frame))

    try:
        reads.submit(conns[0], work("a"), failure)
        pump_until(lambda: started == ["a"])
        reads.submit(conns[0], work("b"), failure)      # waits: c0 has a page in making
        reads.submit(conns[0], work("c"), failure)
        with pytest.raises(Unavailable):
            reads.submit(conns[0], work("x"), failure)  # a third waiting for c0
        reads.submit(conns[1], work("d"), failure)      # waits: the one thread is busy
        with pytest.raises(Unavailable):
            reads.submit(conns[2], work("y"), failure)  # a fourth waiting on the node
        assert reads.in_flight == 4 and reads.refused == 2
        release["a"].set()
        pump_until(lambda: len(conns[0].out) > LOW_WATER and started == ["a", "d"])
        release["d"].set()
        pump_until(lambda: len(conns[1].out) > LOW_WATER)
        time.sleep(0.2)                  # c0's answer is unwritten: its next page waits
        reads.pump(lambda conn, frame: conn.out.extend(frame))
        assert started == ["a", "d"]
        conns[0].out.clear()             # written
        pump_until(lambda: started == ["a", "d", "b"])
        release["b"].set()
        release["c"].set()
        pump_until(lambda: reads.served == 3)
        assert conns[0].out.startswith(b"b")
    finally:
        for name in release:
            release[name].set()
        reads.close()
        for a, b in pairs:
            a.close()
            b.close()


def test_a_reader_waits_at_its_pauses_while_a_loop_turn_runs():
    """The loop goes first: between `turn_begins` and `turn_ends` a reader that reaches a
    `pause()` waits there (without the GIL), and goes on once that turn ends, even if
    the next turn begins at once (a busy loop); the loop's own thread never waits."""
    import socket

    from consensus.runtime.connection import Connection
    from consensus.runtime.log_reads import LogReads

    a, b = socket.socketpair()
    conn = Connection(a, "garlicfarm", None, outgoing=False, peer_id=None, label="c")
    woken, steps, at_pause = threading.Event(), [], threading.Event()
    reads = LogReads(wake=woken.set, threads=1)

    def build() -> bytes:
        steps.append("before")
        at_pause.set()
        reads.pause()
        steps.append("after")
        return b"page"

    frames, in_turn = [], True
    reads.turn_begins()                     # this thread plays the loop, in a turn
    try:
        reads.pause()                       # the loop's own pause: nothing to wait for
        reads.submit(conn, build, lambda exc: b"failed")
        assert at_pause.wait(10), "the reader never started"
        time.sleep(0.3)                     # the turn goes on: the reader must wait
        assert steps == ["before"]
        in_turn = False
        reads.turn_ends()
        reads.turn_begins()                 # the next turn at once: the reader goes on
        in_turn = True
        deadline = time.monotonic() + 10
        while not frames:
            assert time.monotonic() < deadline, "the reader never finished"
            woken.wait(0.05)
            woken.clear()
            reads.pump(lambda c, frame: frames.append(frame))
        assert steps == ["before", "after"] and frames == [b"page"]
    finally:
        if in_turn:
            reads.turn_ends()
        reads.close()
        a.close()
        b.close()
