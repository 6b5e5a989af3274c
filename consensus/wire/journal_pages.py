"""Journal entries a page at a time, as flat arrays (`read_journal`).

`read_entries` ships each entry as it is stored, and the reader decodes each one into a
record: about 8 us an entry between the two sides, which is what reading a backlog of
one-record entries costs (docs/runtime-requests.md S8). A member that decodes them
itself can answer with columns: the visible journal entries' index, term, stamp and
record count, each record's size, and the records joined in one buffer, which a reader
turns into Arrow arrays without a Python object per record. What is visible is
read-committed's rule (`envelope.described`): a journal entry's records, unless it was a
retry the machine ignored; other entries show nothing here.
"""
from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from consensus.common.errors import ProtocolMismatch
from consensus.common.results import LogRecord
from consensus.raft import Entry
from consensus.wire.envelope import described

#: the columns of an answer: name, array typecode (little-endian on the wire)
COLUMNS = (("index", "q"), ("term", "q"), ("timestamp", "q"), ("count", "I"), ("sizes", "I"))
_DTYPES = {"q": "<i8", "I": "<u4"}


@dataclass(frozen=True)
class JournalPage:
    """The visible journal entries of [start, stop), as `read_journal` answers: entry k
    is `index[k]`, with `count[k]` records; record j has `sizes[j]` bytes, and the
    records lie end to end in `data`."""
    start: int
    stop: int
    index: np.ndarray
    term: np.ndarray
    timestamp: np.ndarray           #: ms, the leader's clock at append
    count: np.ndarray
    sizes: np.ndarray
    data: bytes

    def __len__(self) -> int:
        return len(self.index)

    def entries(self) -> Iterator[tuple[int, list[bytes]]]:
        """(index, records) of each entry, as bytes objects (a Python object per record:
        for checks and small reads, not for the bulk of a backlog)."""
        offsets = self.offsets().tolist()
        first = 0
        for index, count in zip(self.index.tolist(), self.count.tolist()):
            yield index, [self.data[offsets[k]:offsets[k + 1]]
                          for k in range(first, first + count)]
            first += count

    def offsets(self) -> np.ndarray:
        """Where each record starts in `data`, and the end: int32 (Arrow's binary)."""
        ends = np.cumsum(self.sizes, dtype=np.int64)
        return np.concatenate([np.zeros(1, np.int64), ends]).astype(np.int32)


def page_answer(records: Iterable[LogRecord], stop: int) -> dict:
    """The answer for a page ending at `stop` from its entries' records
    (`envelope.described`): a member's, and a reader's own from read_entries where a
    member is older than the call."""
    columns = {name: array(code) for name, code in COLUMNS}
    joined: list[bytes] = []
    for record in records:
        if record.type != "journal" or record.duplicate or not record.records:
            continue
        columns["index"].append(record.index)
        columns["term"].append(record.term)
        columns["timestamp"].append(record.timestamp_ms)
        columns["count"].append(len(record.records))
        columns["sizes"].extend(map(len, record.records))
        joined += record.records
    if sys.byteorder != "little":
        for column in columns.values():
            column.byteswap()
    answer: dict = {name: column.tobytes() for name, column in columns.items()}
    answer["stop"] = stop
    answer["data"] = b"".join(joined)
    return answer


def member_answer(entries: Sequence[Entry], verdict: Callable[[Entry], "bool | None"],
                  start: int, *, pause: Callable[[], None] | None = None,
                  every: int = 256) -> dict:
    """A member's answer for `entries`, the applied entries from `start` (one page);
    `pause()` is called every `every` entries (a reader thread lets the loop go first)."""
    def records() -> Iterable[LogRecord]:
        for n, entry in enumerate(entries):
            if pause is not None and n % every == every - 1:
                pause()
            yield described(entry, verdict(entry))
    return page_answer(records(), entries[-1].index + 1 if entries else start)


def page_from_answer(start: int, stop: int, answer: dict) -> JournalPage:
    """A reader's JournalPage of a member's answer to read_journal(start, stop), checked
    (ProtocolMismatch naming what does not add up)."""
    def bad(what: str) -> ProtocolMismatch:
        return ProtocolMismatch(f"read_journal({start}, {stop}): the member's answer {what}")
    end, data = answer.get("stop"), answer.get("data")
    if not isinstance(end, int) or not start <= end <= stop or (start < stop and end == start):
        raise bad(f"ends at {end!r}, outside ({start}, {stop}]")
    if not isinstance(data, bytes):
        raise bad("has no records buffer")
    columns = {}
    for name, code in COLUMNS:
        raw = answer.get(name)
        width = np.dtype(_DTYPES[code]).itemsize
        if not isinstance(raw, bytes) or len(raw) % width:
            raise bad(f"has a malformed {name!r} column")
        columns[name] = np.frombuffer(raw, dtype=_DTYPES[code])
    index, count, sizes = columns["index"], columns["count"], columns["sizes"]
    if not len(index) == len(columns["term"]) == len(columns["timestamp"]) == len(count):
        raise bad("has columns of different lengths")
    if len(index) and (index[0] < start or index[-1] >= end or np.any(np.diff(index) <= 0)):
        raise bad("lists entries outside the range or out of order")
    if int(count.sum(dtype=np.int64)) != len(sizes) or \
            int(sizes.sum(dtype=np.int64)) != len(data):
        raise bad(f"counts {int(count.sum(dtype=np.int64))} records of "
                  f"{int(sizes.sum(dtype=np.int64))} bytes, and sends {len(sizes)} of "
                  f"{len(data)}")
    return JournalPage(start, end, index, columns["term"], columns["timestamp"], count,
                       sizes, data)
