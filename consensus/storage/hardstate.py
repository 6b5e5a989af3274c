"""Raft's hard state (term, vote, commit), replaced atomically on every change.

The file is 36 bytes: magic ``GFHS``, version u8, has-vote u8, 2 reserved bytes, term
u64, vote u64, commit u64 (big-endian), then a CRC-32 of the 32 bytes before. A save is a
temp file, fsync, rename, directory fsync (`files.replace_atomically`): a crash leaves the
old state or the new one, and a leftover ``.tmp`` is never read.
"""
from __future__ import annotations

import os
import struct
import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from consensus.storage.errors import CorruptLogError
from consensus.storage.files import publish_temp, replace_atomically, write_temp

MAGIC = b"GFHS"
VERSION = 1
_BODY = struct.Struct(">4sBBxxQQQ")
_CRC = struct.Struct(">I")
FILE_SIZE = _BODY.size + _CRC.size
_U64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class HardState:
    """What a Raft node must remember across restarts before it answers anyone (Raft
    Figure 2's persistent state, plus the commit index to restart applying from). The
    core (consensus.raft) hands it out in `Ready.hard_state`; this file keeps it."""
    term: int = 0
    vote: int | None = None
    commit: int = 0

    def __post_init__(self) -> None:
        for name in ("term", "vote", "commit"):
            value = getattr(self, name)
            if value is None and name == "vote":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _U64:
                raise ValueError(f"HardState.{name}={value!r}: must be an integer in "
                                 f"0..2**64-1" + (" or None" if name == "vote" else ""))


class HardStateFile:
    """The hard state kept in one file at `path` (its directory is created if needed)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()  # one temp file per path: saves take turns

    def load(self) -> HardState:
        """The saved state; HardState() = (0, None, 0) when nothing was ever saved."""
        try:
            with open(self.path, "rb") as file:
                data = file.read(FILE_SIZE + 1)
        except FileNotFoundError:
            return HardState(0, None, 0)
        if len(data) != FILE_SIZE:
            found = "more" if len(data) > FILE_SIZE else str(len(data))
            raise CorruptLogError(self.path, min(len(data), FILE_SIZE),
                                  f"a hard state file has {FILE_SIZE} bytes, found {found}")
        magic, version, has_vote, term, vote, commit = _BODY.unpack_from(data)
        if magic != MAGIC:
            raise CorruptLogError(self.path, 0, f"bad magic {magic!r} (expected {MAGIC!r})")
        if _CRC.unpack_from(data, _BODY.size)[0] != zlib.crc32(data[:_BODY.size]):
            raise CorruptLogError(self.path, _BODY.size, "hard state CRC mismatch")
        if version != VERSION:
            raise CorruptLogError(self.path, 4, f"hard state format version {version} is "
                                                f"not supported (this code reads {VERSION})")
        return HardState(term, vote if has_vote else None, commit)

    def save(self, state: HardState) -> None:
        """Replace the saved state atomically and durably."""
        with self._lock:
            replace_atomically(self.path, self._encode(state))

    @contextmanager
    def save_by_flush(self, state: HardState) -> Iterator[Callable[[], None]]:
        """`save` for a caller that makes files durable with one filesystem flush for
        many (consensus/runtime/sync_rounds.py): the temp file is written, not fsynced;
        the caller flushes, calls the yielded `publish` (the rename), flushes again,
        then leaves. Other saves of this file wait meanwhile."""
        with self._lock:
            write_temp(self.path, self._encode(state), sync=False)
            yield lambda: publish_temp(self.path, sync=False)

    def _encode(self, state: HardState) -> list[bytes]:
        if not isinstance(state, HardState):
            raise TypeError(f"save() takes a HardState, not {type(state).__name__}")
        body = _BODY.pack(MAGIC, VERSION, state.vote is not None, state.term,
                          state.vote or 0, state.commit)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        return [body, _CRC.pack(zlib.crc32(body))]
