"""Progress bars (rich) for long work: torture runs, `config import`, a member catching
up (possibly by a snapshot install) in `add-server`, the benchmarks.

Shown only when the stream is a terminal: in tests, CI logs and pipes they print
nothing at all, so output stays exactly what it was.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, TextIO, TypeVar

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                           TextColumn, TimeElapsedColumn, TimeRemainingColumn)

T = TypeVar("T")
REFRESH = 0.25          #: seconds between two updates of a polled bar


def progress(out: TextIO | None = None, *, counts: bool = False) -> Progress:
    """A transient rich Progress on `out` (default stderr), disabled off a terminal.
    `counts` shows "done/total" (steps) instead of a time estimate."""
    console = Console(file=out or sys.stderr)
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    MofNCompleteColumn() if counts else TimeRemainingColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[status]}"),
                    console=console, transient=True, disable=not console.is_terminal)


def track(items: Iterable[T], description: str, total: int | None = None,
          out: TextIO | None = None) -> Iterator[T]:
    """`items`, with a bar of how many were done (benchmarks' rounds and cases)."""
    with progress(out, counts=True) as bar:
        task = bar.add_task(description, total=total, status="")
        for item in items:
            yield item
            bar.advance(task)


def wait(seconds: float, description: str, out: TextIO | None = None,
         status: Callable[[], str] = lambda: "") -> None:
    """Wait `seconds`; on a terminal with a bar of the time and `status()`."""
    with progress(out) as bar:
        if bar.disable:
            threading.Event().wait(seconds)
            return
        task = bar.add_task(description, total=seconds, status=status())
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            threading.Event().wait(min(REFRESH, left))
            bar.update(task, completed=seconds - max(0.0, deadline - time.monotonic()),
                       status=status())


@contextmanager
def following(description: str, measure: Callable[[], tuple[float, float] | None],
              out: TextIO | None = None) -> Iterator[None]:
    """While the block runs (a blocking call), a bar of ``measure() -> (done, total)``
    polled every `REFRESH` seconds on a thread; off a terminal nothing is polled. A
    failing `measure` leaves the bar where it was: it only informs."""
    with progress(out) as bar:
        if bar.disable:
            yield
            return
        task = bar.add_task(description, total=None, status="")
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(REFRESH):
                try:
                    found = measure()
                except Exception as exc:     # noqa: BLE001 - shown, and polled again
                    bar.update(task, status=f"({type(exc).__name__})")
                    continue
                if found is not None:
                    bar.update(task, completed=found[0], total=found[1], status="")

        thread = threading.Thread(target=poll, daemon=True, name="progress")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


@contextmanager
def catching_up(connect: Callable[[], Any], node_id: int,
                out: TextIO | None = None) -> Iterator[None]:
    """`add-server`'s wait (the new member catches up, by a snapshot install when the
    log was compacted): its match index against the commit index, asked of the farm
    with a client of its own (`connect()`, made on the first poll)."""
    clients: list[Any] = []

    def measure() -> tuple[float, float] | None:
        if not clients:
            clients.append(connect())
        view = clients[0].get_servers()
        member = view.members.get(node_id)
        match = None if member is None else member.match_index
        return None if match is None else (match, max(view.commit_index, match))

    try:
        with following(f"n{node_id} catching up", measure, out):
            yield
    finally:
        for client in clients:
            client.close()
