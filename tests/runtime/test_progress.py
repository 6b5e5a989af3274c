"""Progress bars: drawn on a terminal (a real pseudo-terminal here), nothing at all
elsewhere."""
from __future__ import annotations

import io
import os
import select
import threading
import time

from consensus.admin import progress_bars as progress


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out


def test_nothing_is_written_off_a_terminal():
    out = io.StringIO()
    assert list(progress.track(range(5), "steps", 5, out)) == [0, 1, 2, 3, 4]
    started = time.monotonic()
    progress.wait(0.3, "waiting", out, status=lambda: "status")
    assert time.monotonic() - started >= 0.3
    polled = []
    with progress.following("following", lambda: polled.append(1) or (1, 2), out):
        # nothing polls: no poller thread exists (one would be named "progress")
        assert not [t for t in threading.enumerate() if t.name == "progress"]
    assert out.getvalue() == "" and polled == []


def test_a_terminal_gets_bars():
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as terminal:
            assert list(progress.track(range(3), "three steps", 3, terminal)) == [0, 1, 2]
            with progress.following("catching up", lambda: (40, 80), terminal):
                time.sleep(progress.REFRESH * 3)
            progress.wait(0.6, "torture", terminal, status=lambda: "12 ok / 15 ops")
        shown = _drain(master).decode(errors="replace")
    finally:
        os.close(master)
        os.close(slave)
    assert "three steps" in shown
    assert "catching up" in shown
    assert "torture" in shown and "12 ok / 15 ops" in shown
