"""The members' row index (docs/runtime-requests.md S7): what each entry shows readers, as
planning sees it, matches what its header says; the window answers from memory, works
out only what it lacks, and forgets what compaction dropped."""
from __future__ import annotations

import numpy as np
import pytest

from consensus.client import FarmError
from consensus.common.errors import IndexOverflow
from consensus.raft import Entry, EntryType
from consensus.runtime.row_index import COMPUTED_PER_ANSWER, RowIndex, entry_shows
from consensus.torture import LocalCluster
from consensus.wire import envelope
from consensus.wire.envelope import CommandKind, encode_command
from tests.support import wait_until


def app(index: int, kind: CommandKind, *args, rid: bytes = b"r1") -> Entry:
    return Entry(1, index, EntryType.APPLICATION, encode_command(kind, rid, *args))


def as_header(entry: Entry, verdict: bool | None) -> tuple[int, list | None]:
    """What the entry's header (read_entries without payloads) says it shows."""
    record = envelope.described(entry, verdict)
    if record.type == "journal" and not record.duplicate:
        return record.count, None
    if record.type == "commit" and record.commit.effective:
        return 0, envelope.header_of(record)
    return 0, None


@pytest.mark.parametrize("verdict", [True, False, None])
@pytest.mark.parametrize("entry", [
    app(1, CommandKind.JOURNAL, [b"a", b"b", b"c"]),
    app(2, CommandKind.JOURNAL, []),
    app(3, CommandKind.COMMIT, "q", 4, [1, 2], {"rows": [5, 6]}),
    app(4, CommandKind.STAGE, "q", 4, 0, 0, "arrow", b"payload"),
    app(5, CommandKind.KV_PUT, "k", "v"),
    Entry(1, 6, EntryType.APPLICATION, b'{"cluster":"farm","date":9,"id":1}'),
    Entry(1, 7, EntryType.NOOP),
    # a journal whose records are not all bytes: the fast path leaves it to the record
    Entry(1, 8, EntryType.APPLICATION, envelope.HEAD.pack(envelope.MAGIC, envelope.VERSION, 0)
          + __import__("msgpack").packb([int(CommandKind.JOURNAL), b"r1", [b"x", 3]])),
], ids=["journal", "empty-journal", "commit", "staged", "kv", "status", "noop", "bad-journal"])
def test_an_entry_shows_what_its_header_says(entry, verdict):
    assert entry_shows(entry, lambda e: verdict) == as_header(entry, verdict)
    if entry.index == 1:
        assert entry_shows(entry, lambda e: verdict)[0] == (0 if verdict is False else 3)


def test_the_window_works_out_each_entry_once_and_forgets_compacted_ones():
    asked = []

    def compute(start, stop):
        asked.append((start, stop))
        for i in range(start, stop):
            yield i, i % 3, (["commit", i] if i % 10 == 0 else None)
    index = RowIndex(compute, max_entries=4 * COMPUTED_PER_ANSWER, seconds=600)
    end, rows, commits = index.rows_of(5, 40)
    assert end == 40 and asked == [(5, 40)]
    assert np.frombuffer(rows, "<u4").tolist() == [i % 3 for i in range(5, 40)]
    assert commits == [["commit", 10], ["commit", 20], ["commit", 30]]
    assert index.rows_of(12, 31)[2] == [["commit", 20], ["commit", 30]] and len(asked) == 1
    assert index.rows_of(35, 50)[0] == 50 and asked[-1] == (40, 50)     # only what it lacked
    # no more than COMPUTED_PER_ANSWER new entries per answer; the caller asks on
    end, rows, _ = index.rows_of(50, 50 + 3 * COMPUTED_PER_ANSWER)
    assert end == 50 + COMPUTED_PER_ANSWER and len(rows) == 4 * COMPUTED_PER_ANSWER
    index.forget_before(21)
    assert (index.low, index.rows_of(21, 31)[2]) == (21, [["commit", 30]])
    calls = len(asked)
    index.rows_of(3, 8)                 # before the window: a new one
    assert asked[calls:] == [(3, 8)] and (index.low, index.high) == (3, 8)
    with pytest.raises(ValueError, match="computed"):
        RowIndex(lambda a, b: iter([(a, 1, None)])).rows_of(1, 5)


def test_entry_rows_at_a_member_match_the_headers():
    with LocalCluster(3, fsync="never") as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=15) as client:
            first = client.append([b"a", b"b"])[0]
            client.append_many([[b"c"]] * 50 + [[b"d", b"e", b"f"]])
            staged = [client.stage("q", 1, p, 0, b"rows") for p in range(3)]
            committed = client.commit_batch("q", 1, staged, metadata={"rows": [4, 5, 6]})
            client.commit_batch("q", 1, staged[:1])         # a duplicate: shows nothing
            client.append([b"g"])
            end = client.last_applied() + 1
            headers = client.read_entries(first, end, payloads=False)
            expected = [h.count if h.type == "journal" and not h.duplicate else 0
                        for h in headers]
            for endpoint in [None] + [farm.endpoint_of(i) for i in (1, 2, 3)]:
                # a follower applies the last entry a little after the leader answered
                wait_until(lambda: client.log_bounds(endpoint)[1] >= end - 1, 15,
                           message=f"{endpoint or 'the leader'} applied entry {end - 1}")
                counts = client.entry_rows(first, end, endpoint=endpoint)
                assert (counts.start, counts.stop) == (first, end)
                assert np.frombuffer(counts.rows, "<u4").tolist() == expected
                assert [c.index for c in counts.commits] == [committed.index]
                assert counts.commits[0].commit.metadata == {"rows": [4, 5, 6]}
            with pytest.raises(IndexOverflow):
                client.entry_rows(end, end + 10)
            with pytest.raises(FarmError, match=r"entry_rows\(0, 3\): need 1 <= start"):
                client.entry_rows(0, 3)


def test_an_answer_works_out_entries_for_a_bounded_time():
    """On a loaded machine 32k entries take longer than a client waits for an answer: an
    answer stops working out after `seconds` (in steps of 256 entries) and the caller
    asks on from where it ends."""
    import time

    def compute(start, stop):
        for i in range(start, stop):
            time.sleep(0.0005)                  # a slow entry: 256 take > 0.1 s
            yield i, 1, None
    index = RowIndex(compute, seconds=0.01)
    end, rows, _ = index.rows_of(1, 10_000)
    assert end == 257 and len(rows) == 4 * 256
    end, rows, _ = index.rows_of(end, 10_000)
    assert end == 513 and (index.low, index.high) == (1, 513)
