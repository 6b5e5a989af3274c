"""The raft source's calls to the farm, in both places they run.

Driver side (planning): the committed end of the log, the first index still kept, the row
counts of entries (`entry_sizes`), and which members serve reads (`reading_members`).
Executor side: `read_pieces` turns planned `Piece`s into visible entries, at the member a
task was given, falling back to any member when that one is behind or gone; the same
committed range gives the same entries at every member.
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

from ..errors import DataLossError
from ..planning import EntrySize, Piece

if TYPE_CHECKING:
    from consensus.runtime import ClusterView, FarmClient

READ_FROM = ("leader", "followers", "observers", "any")
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Visible:
    """One visible entry: a journal entry's records, or (part of) a committed batch's
    payloads with their content types."""
    index: int
    term: int
    timestamp_ms: int
    type: str
    records: list[bytes]
    content_types: tuple[str, ...] = ()


def log_end(client: "FarmClient") -> int:
    """One past the last entry applied at the leader: what a new batch may read up to."""
    return client.last_applied() + 1


def first_index(client: "FarmClient") -> int:
    return client.log_bounds()[0]


def committed_rows(metadata: dict, staged: Sequence[int]) -> tuple[int, ...]:
    """The row count of each staged payload of a commit, from the metadata the garlicfarm
    sink writes; a commit from another writer counts one row per payload."""
    rows = metadata.get("rows") if isinstance(metadata, dict) else None
    if isinstance(rows, list) and len(rows) == len(staged) and all(
            isinstance(r, int) and r >= 0 for r in rows):
        return tuple(rows)
    return (1,) * len(staged)


def _supports_headers_only(client: "FarmClient") -> bool:
    try:
        return "payloads" in inspect.signature(client.read_entries).parameters
    except (TypeError, ValueError):
        return False


def entry_sizes(client: "FarmClient", start: int, stop: int) -> Iterator[EntrySize]:
    """Row counts of the entries in [start, stop) that show rows, read lazily in chunks
    (headers only when the farm supports it: docs/runtime-requests.md S1)."""
    extra = {"payloads": False} if _supports_headers_only(client) else {}
    cursor = start
    while cursor < stop:
        records = client.read_entries(cursor, stop, max_bytes=CHUNK_BYTES, **extra)
        if not records:
            return
        for record in records:
            if record.type == "journal" and not getattr(record, "duplicate", False):
                count = getattr(record, "count", None)
                count = len(record.records or ()) if count is None else count
                yield EntrySize(record.index, count)
            elif record.type == "commit" and record.commit is not None \
                    and record.commit.effective:
                parts = committed_rows(record.commit.metadata, record.commit.staged)
                yield EntrySize(record.index, sum(parts), parts)
        cursor = records[-1].index + 1


def reading_members(client: "FarmClient", read_from: str, stop: int) -> list[str | None]:
    """The endpoints tasks read [.., stop) from, for `readFrom`; None stands for "the
    member the client picks" (the leader). Members the leader does not know to hold the
    range yet (match index below stop - 1: lagging, or down) are left out, so a task is
    not sent to wait for them."""
    if read_from == "leader":
        return [None]
    return choose_members(client.get_servers(), read_from, stop)


def choose_members(view: "ClusterView", read_from: str, stop: int) -> list[str | None]:
    """`reading_members` on the leader's view of the farm (sans-I/O)."""
    if read_from == "leader":
        return [None]

    def ready(node_id: int) -> bool:
        member = view.members.get(node_id)
        return member is None or member.match_index is None or member.match_index >= stop - 1

    followers = [e for i, e in sorted(view.voters.items())
                 if i != view.leader_id and ready(i)]
    observers = [e for i, e in sorted(view.observers.items()) if ready(i)]
    if read_from == "followers":
        chosen = followers
    elif read_from == "observers":
        chosen = observers or followers
    else:
        chosen = [None] + followers + observers
    return chosen or [None]


class PieceReader:
    """Reads planned pieces in an executor, at one member, with fallback and data-loss
    handling. `wait` bounds how long a lagging member is waited for."""

    def __init__(self, client: "FarmClient", endpoint: str | None, *,
                 fail_on_data_loss: bool, wait: float) -> None:
        self.client = client
        self.endpoint = endpoint
        self.fail_on_data_loss = fail_on_data_loss
        self.wait = wait

    def read(self, pieces: Sequence[Piece]) -> Iterator[Visible]:
        for piece in pieces:
            if piece.parts is None:
                yield from self._range(piece.start, piece.stop)
            else:
                yield from self._slice(piece.start, *piece.parts)

    # -- internals -----------------------------------------------------------------------------
    def _call(self, method: str, *args, **kwargs):
        """Call at the assigned member; if it is behind (IndexOverflow) wait for it up to
        `wait` seconds, and if it is gone or still behind, ask any member."""
        from consensus.runtime import FarmError, IndexOverflow, IndexUnderflow
        if self.endpoint is not None:
            deadline = time.monotonic() + self.wait
            delay = 0.01
            while True:
                try:
                    return getattr(self.client, method)(*args, endpoint=self.endpoint, **kwargs)
                except IndexUnderflow:
                    raise
                except IndexOverflow:
                    if time.monotonic() + delay > deadline:
                        break
                    time.sleep(delay)    # a follower catching up: poll with backoff
                    delay = min(delay * 2, 0.2)
                except FarmError:
                    break
            self.endpoint = None         # the rest of the task reads from any member
        return getattr(self.client, method)(*args, **kwargs)

    def _range(self, start: int, stop: int) -> Iterator[Visible]:
        from consensus.runtime import IndexUnderflow
        while start < stop:
            try:
                for visible in self._call("read_committed", start, stop):
                    yield _visible(visible)
                    start = visible.index + 1
                return
            except IndexUnderflow as exc:
                if self.fail_on_data_loss:
                    raise DataLossError(start, exc.first_available) from None
                start = max(start + 1, exc.first_available)

    def _slice(self, index: int, lo: int, hi: int) -> Iterator[Visible]:
        """Payloads [lo, hi) of the committed batch at `index`, one at a time."""
        from consensus.runtime import IndexUnderflow
        try:
            (entry,) = self._call("read_entries", index, index + 1)
            commit = entry.commit
            # Visible only when this entry made its batch visible (as read_committed says).
            if entry.type != "commit" or commit is None or not commit.effective:
                return
            for staged_index in commit.staged[lo:hi]:
                (staged,) = self._call("read_entries", staged_index, staged_index + 1)
                content_type = staged.staged.content_type if staged.staged else "bytes"
                yield Visible(entry.index, entry.term, entry.timestamp_ms, "commit",
                              [staged.payload], (content_type,))
        except IndexUnderflow as exc:
            if self.fail_on_data_loss:
                raise DataLossError(index, exc.first_available) from None


def _visible(records) -> Visible:
    """The runtime's VisibleRecords as this module's Visible."""
    is_batch = records.commit is not None
    return Visible(records.index, records.term, records.timestamp_ms,
                   "commit" if is_batch else "journal", list(records.records),
                   tuple(records.content_types) if is_batch else ())
