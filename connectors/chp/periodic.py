"""A periodic deadline (HUGZ, Binary Star heartbeats), pure: time comes in as an argument."""
from __future__ import annotations


class Periodic:
    """Due every `interval` seconds from `start`. After a stall it is due once, then
    keeps the interval from then: no burst of catch-up ticks."""

    def __init__(self, interval: float, start: float) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self.interval = interval
        self.deadline = start

    def due(self, now: float) -> bool:
        """Whether a tick is due at `now`; if so the next one is scheduled."""
        if now < self.deadline:
            return False
        self.deadline += self.interval
        if self.deadline <= now:
            self.deadline = now + self.interval
        return True


__all__ = ["Periodic"]
