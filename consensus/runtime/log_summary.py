"""Rate-limited log lines for what outsiders can repeat at will (bad packets, corrupt
streams): the first occurrence per key is logged at once, the rest are counted and
summarised in one line per key per interval, so a flood costs the log a line per
source every few seconds instead of a line per packet.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

#: keys followed at once; past it, new sources share one key (the log stays bounded
#: however many addresses an attacker uses)
MAX_KEYS = 256
OTHERS = "other sources"


@dataclass(slots=True)
class _Window:
    ends: float
    count: int = 0
    last: str = ""


class LogSummary:
    """One kind of event (``what``, e.g. "corrupt packets"), summarised per key."""

    def __init__(self, logger: logging.Logger, level: int, what: str, *,
                 interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.level, self.what = logger, level, what
        self.interval, self.clock = interval, clock
        self._windows: dict[str, _Window] = {}
        self._due = float("inf")            # when the first open window ends

    def note(self, key: str, detail: str) -> None:
        """One event from `key`; `detail` says what it was."""
        now = self.clock()
        if now >= self._due:
            self.flush(now)
        window = self._windows.get(key)
        if window is None and len(self._windows) >= MAX_KEYS:
            key, detail = OTHERS, f"{key}: {detail}"
            window = self._windows.get(key)
        if window is None:
            self._windows[key] = _Window(now + self.interval)
            self._due = min(self._due, now + self.interval)
            self.logger.log(self.level, "%s: %s (more are counted and logged every %.0f s)",
                            key, detail, self.interval)
            return
        window.count += 1
        window.last = detail

    def flush(self, now: float | None = None) -> None:
        """Log the summaries of the windows that ended; a key quiet for a whole window
        is forgotten (its next event is logged at once again)."""
        now = self.clock() if now is None else now
        if now < self._due:
            return
        due = float("inf")
        for key, window in list(self._windows.items()):
            if window.ends <= now:
                if not window.count:
                    del self._windows[key]
                    continue
                self.logger.log(self.level, "%s: %d more %s in the last %.0f s (last: %s)",
                                key, window.count, self.what, self.interval, window.last)
                window.ends, window.count = now + self.interval, 0
            due = min(due, window.ends)
        self._due = due
