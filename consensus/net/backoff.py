"""`Backoff`: the pauses between retries that made no progress.

Each pause doubles the last, from `first` up to `cap`; with `jitter` it is drawn from
[half, whole] of that, so that clients that failed together do not come back together.
Progress calls `reset`. Used by the client's rounds over the members, its write
pipelines and a node's dials to its peers.
"""
from __future__ import annotations

import random


class Backoff:
    """See the module docstring."""

    def __init__(self, first: float, cap: float, *, jitter: bool = True) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"a backoff needs 0 < first <= cap, got {first} and {cap}")
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self._next = first

    @property
    def fresh(self) -> bool:
        """No pause taken since the last reset (the first failure of a series)."""
        return self._next == self.first

    def peek(self) -> float:
        """The longest the next pause may be (without taking it)."""
        return self._next

    def pause(self) -> float:
        """The next pause, in seconds; the one after it is twice as long (up to `cap`)."""
        pause = self._next * random.uniform(0.5, 1.0) if self.jitter else self._next
        self._next = min(self.cap, self._next * 2)
        return pause

    def reset(self) -> None:
        self._next = self.first
