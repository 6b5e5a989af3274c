"""Helpers shared by the tests: waiting on conditions, free ports, process hygiene."""
from __future__ import annotations

import socket
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01,
               message: str = "condition") -> T:
    """Poll `condition` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {message}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def count_link_attempts(monkeypatch) -> "Counter[str]":
    """Every connection attempt of our FarmClients from now on, by endpoint (observed
    where each one starts: `links.Link`), for tests that bound a client's retries."""
    from collections import Counter

    from consensus.client import links
    attempts: Counter = Counter()
    original = links.Link.__init__

    def counting(self, endpoint, *args, **kwargs):
        attempts[endpoint] += 1
        return original(self, endpoint, *args, **kwargs)
    monkeypatch.setattr(links.Link, "__init__", counting)
    return attempts
