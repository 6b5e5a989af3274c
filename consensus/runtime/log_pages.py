"""What a log page (read_entries, read_journal) holds, built by one code for both kinds
of readers: the node's reader threads (log_calls.py) and its reader process
(page_builder.py), so that the two answer the same bytes for the same log."""
from __future__ import annotations

from typing import Callable

from consensus.raft import Entry
from consensus.runtime.machines import Verdicts
from consensus.wire.envelope import described, header_of
from consensus.wire.journal_pages import member_answer

#: entries a reader handles between two pauses (~20 us each of Python work)
PAUSE_EVERY = 256

#: applied entries [lo, hi) within max_bytes (DiskStorage.read_applied, or a pinned window)
ReadApplied = Callable[[int, int, "int | None"], list[Entry]]


def _no_pause() -> None:
    return None


def read_log(read_applied: ReadApplied, start: int, stop: int, max_bytes: int | None,
             pause: Callable[[], None] = _no_pause) -> list[Entry]:
    """Applied entries [start, stop) within `max_bytes` (the first one whatever its
    size), read in steps of PAUSE_EVERY with a `pause()` before each."""
    entries: list[Entry] = []
    used = 0                            # limit_size's measure of `entries`
    while start < stop:
        pause()
        end = min(stop, start + PAUSE_EVERY)
        left = None if max_bytes is None else max(0, max_bytes - used)
        step = read_applied(start, end, left)
        if entries and step and left is not None and len(step[0].data) + 24 > left:
            break                       # only a page's first entry may exceed it
        entries += step
        if not step or step[-1].index + 1 < end:
            break                       # the page is full
        start = end
        used += sum(len(e.data) + 24 for e in step)
    return entries


def entries_page(read_applied: ReadApplied, verdicts: Callable[[], Verdicts], start: int,
                 stop: int, max_bytes: int, payloads: bool,
                 pause: Callable[[], None] = _no_pause) -> dict:
    """The answer to read_entries(start, stop): `verdicts()` is taken once the entries
    are read (they applied before it)."""
    if start == stop:
        return {"entries": [], "verdicts": {}}
    entries = read_log(read_applied, start, stop, max_bytes, pause)
    found = {e.index: v for e, v in zip(entries, verdicts().of(entries)) if v is not True}
    if not payloads:
        return {"headers": [header_of(described(e, found.get(e.index, True)))
                            for e in entries]}
    return {"entries": [[e.index, e.term, int(e.type), e.data] for e in entries],
            "verdicts": found}


def journal_page(read_applied: ReadApplied, verdicts: Callable[[], Verdicts], start: int,
                 stop: int, max_bytes: int, pause: Callable[[], None] = _no_pause) -> dict:
    """The answer to read_journal(start, stop): the visible journal records as columns."""
    entries = read_log(read_applied, start, stop, max_bytes, pause)
    found = dict(zip((e.index for e in entries), verdicts().of(entries)))
    pause()
    return member_answer(entries, lambda e: found[e.index], start, pause=pause,
                         every=PAUSE_EVERY)
