"""One flush for every file of a filesystem: syncfs(2), for a node of many Raft groups.

A node of hundreds of groups that all appended, or all voted, in one loop turn would
fsync each group's log and each hard state on its own (a hard state is two fsyncs: the
temp file, then the directory after the rename): thousands of flushes a turn. syncfs
writes back every dirty file of one filesystem and flushes the disk's cache once (Linux:
`sync_filesystem`, a journal commit on ext4 and xfs), so a round costs one flush per
disk whatever the number of groups. Its price is that it also writes back other dirty
files of that filesystem (another program's), which is why the runtime takes it only
for rounds of many groups (`--shared-fsync-groups`) and keeps plain fsyncs otherwise.

Python's `os` has no syncfs, and no library wraps it, hence ctypes (deliberately: a
C extension for one call would cost a build). Since Linux 5.8 syncfs reports a
writeback error of the filesystem once per open descriptor, as fsync does per file;
an error here poisons every log of the round (consensus/runtime/sync_rounds.py).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True) \
    if sys.platform.startswith("linux") else None


def filesystem_flush_available() -> bool:
    """Whether this platform has syncfs (Linux)."""
    return _LIBC is not None and hasattr(_LIBC, "syncfs")


class FilesystemFlush:
    """syncfs on the filesystem holding `directory`, through a descriptor kept open
    (syncfs reports errors seen since that descriptor was opened)."""

    def __init__(self, directory: str) -> None:
        if not filesystem_flush_available():
            raise OSError(f"syncfs is not available on {sys.platform}")
        self.directory = directory
        self.device = os.stat(directory).st_dev
        self._fd: int | None = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)

    def __call__(self) -> None:
        """Return once every file of the filesystem written so far is durable."""
        if self._fd is None:
            raise OSError(f"the flush of {self.directory} is closed")
        if _LIBC.syncfs(self._fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs of the filesystem of {self.directory}: "
                                 f"{os.strerror(errno)}")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
