"""read_journal (docs/runtime-requests.md S8): the visible journal entries of a page as
columns; the same records read_entries gives, and a malformed answer is refused."""
from __future__ import annotations

import pytest

from consensus.client import LogRecord, ProtocolMismatch
from consensus.torture import LocalCluster
from consensus.wire.journal_pages import page_answer, page_from_answer
from tests.support import wait_until


def record(index, records, *, duplicate=False, type_="journal"):
    return LogRecord(index, 1, type_, records, b"", 1000 + index, duplicate=duplicate,
                     count=len(records or ()))


def test_a_page_holds_the_visible_journal_records_in_order():
    records = [record(3, [b"a", b"bc"]), record(4, [b"x"], duplicate=True),
               record(5, None, type_="status"), record(6, []), record(7, [b"", b"def"])]
    page = page_from_answer(3, 9, page_answer(records, 8))
    assert (page.start, page.stop, len(page)) == (3, 8, 2)
    assert page.index.tolist() == [3, 7] and page.timestamp.tolist() == [1003, 1007]
    assert page.count.tolist() == [2, 2] and page.sizes.tolist() == [1, 2, 0, 3]
    assert page.data == b"abcdef" and page.offsets().tolist() == [0, 1, 3, 3, 6]
    assert list(page.entries()) == [(3, [b"a", b"bc"]), (7, [b"", b"def"])]


@pytest.mark.parametrize("change, needle", [
    (lambda a: a.update(stop=99), "ends at 99"),
    (lambda a: a.update(stop=3), "ends at 3"),
    (lambda a: a.update(data=b"abc"), "counts 2 records of 6 bytes, and sends 2 of 3"),
    (lambda a: a.update(sizes=a["sizes"][:-1]), "malformed 'sizes'"),
    (lambda a: a.update(term=b""), "different lengths"),
    (lambda a: a.update(index=(9).to_bytes(8, "little") * 2), "outside the range"),
    (lambda a: a.pop("data"), "no records buffer"),
])
def test_a_malformed_answer_is_refused_naming_what_is_wrong(change, needle):
    answer = page_answer([record(3, [b"abc"]), record(4, [b"def"])], 5)
    change(answer)
    with pytest.raises(ProtocolMismatch, match=needle):
        page_from_answer(3, 9, answer)


def test_read_journal_at_each_member_matches_read_entries():
    with LocalCluster(3, fsync="never") as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=15) as client:
            first = client.append([b"a", b"bb"])[0]
            client.append_many([[b"r%d" % i] * (i % 3) for i in range(40)])
            client.stage("q", 1, 0, 0, b"staged, not journal")
            end = client.append([b"last"])[0] + 1
            expected = [(r.index, r.records) for r in client.read_entries(first, end)
                        if r.type == "journal" and not r.duplicate and r.records]
            for endpoint in [None] + [farm.endpoint_of(i) for i in (1, 2, 3)]:
                # a follower applies the last entry a little after the leader answered
                wait_until(lambda: client.log_bounds(endpoint)[1] >= end - 1, 15,
                           message=f"{endpoint or 'the leader'} applied entry {end - 1}")
                got, start = [], first
                while start < end:      # small pages: the answer ends early, at an entry
                    page = client.read_journal(start, end, max_bytes=64, endpoint=endpoint)
                    assert start < page.stop <= end
                    got += page.entries()
                    start = page.stop
                assert got == expected
