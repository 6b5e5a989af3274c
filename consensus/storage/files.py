"""Durable file primitives shared by the log, the hard state and the snapshots.

POSIX makes a rename durable only once the directory itself is fsynced, and a new file's
contents only once the file is fsynced before the rename; these helpers do both, in that
order, so each caller cannot forget one.
"""
from __future__ import annotations

import fcntl
import os
from typing import Sequence

from consensus.storage.errors import LogInUseError

_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


def fsync_directory(directory: str) -> None:
    """Make the creations, renames and deletions in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, parts: Sequence[bytes], offset: int) -> None:
    """Write `parts` back to back at `offset` with pwritev (no joined copy of big
    payloads); a short write, which regular files rarely do, is finished from a copy."""
    for first in range(0, len(parts), _IOV_MAX):
        batch = parts[first:first + _IOV_MAX]
        wanted = sum(map(len, batch))
        done = os.pwritev(fd, batch, offset)
        offset += done
        if done < wanted:
            rest = memoryview(b"".join(batch))[done:]
            while rest:
                written = os.pwrite(fd, rest, offset)
                rest = rest[written:]
                offset += written


def read_exactly(fd: int, size: int, offset: int) -> bytes | None:
    """pread `size` bytes at `offset`; None when the file ends first."""
    data = os.pread(fd, size, offset)
    if len(data) == size:
        return data
    chunks = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            return None
        chunks.append(more)
        got += len(more)
    return b"".join(chunks)


def replace_atomically(path: str, parts: Sequence[bytes]) -> None:
    """Write `parts` to `path` so that a crash leaves either the old file or the new one.

    The bytes go to `path + ".tmp"`, which is fsynced, renamed over `path`, and the
    directory is fsynced. A `.tmp` left by a crash is never read and is overwritten by
    the next call."""
    write_temp(path, parts, sync=True)
    publish_temp(path, sync=True)


def write_temp(path: str, parts: Sequence[bytes], *, sync: bool) -> None:
    """The first half of `replace_atomically`: `path + ".tmp"` holds `parts`, fsynced
    unless the caller makes it durable another way (`sync` False: one syncfs for many
    files, consensus/runtime/sync_rounds.py) before `publish_temp`."""
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, parts, 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def publish_temp(path: str, *, sync: bool) -> None:
    """The second half of `replace_atomically`: rename the durable `.tmp` over `path`;
    the rename is durable once the directory is fsynced (`sync`) or the filesystem is."""
    os.replace(path + ".tmp", path)
    if sync:
        fsync_directory(os.path.dirname(os.path.abspath(path)))


def remove_durably(path: str) -> None:
    """Delete `path` and make the deletion durable before returning.

    Deleting several files one by one with this keeps their order on disk: a crash can
    never bring back a file deleted before one that stays deleted."""
    os.unlink(path)
    fsync_directory(os.path.dirname(os.path.abspath(path)))


class DirectoryLock:
    """An exclusive flock on `directory/LOCK`, so two writers never share a log."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "LOCK")
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise LogInUseError(
                f"{directory} is already open by another SegmentedLog (this process or "
                f"another); close that one first, or give each log its own directory"
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
