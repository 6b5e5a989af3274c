"""The history recorder the simulator and the torture test drive."""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Hashable, TextIO

from .errors import HistoryError
from .formats import format_edn, write_edn
from .history import Event, EventType, Operation, pair_events


class History:
    """Records a history as it happens: the simulator's and the torture test's clients call
    `invoke` before sending a request and `complete` when its answer (or its timeout)
    comes back.

    `clock` returns integer nanoseconds (a simulator passes its virtual clock); it is read
    under a lock together with the append, so event order and time order agree even when
    clients run in threads. With `sink`, each event is also written as an EDN line at
    once and flushed, so a crash of the driver loses no recorded event; `save` writes a
    whole history and fsyncs it.
    """

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns,
                 sink: TextIO | None = None) -> None:
        self._clock = clock
        self._sink = sink
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._pending: dict[int, Event] = {}    # op id -> its invoke
        self._busy: dict[Hashable, int] = {}    # process -> its pending op id
        self._next_id = 0

    def invoke(self, process: Hashable, f: str, key: Hashable = None,
               value: Any = None) -> int:
        """Record the start of an operation; return its id for `complete`."""
        with self._lock:
            if process in self._busy:
                raise HistoryError("process", f"process {process!r} already has operation "
                                              f"{self._busy[process]} pending; complete it "
                                              "first or use another process id")
            event = Event(process, EventType.INVOKE, f, key, value, int(self._clock()))
            op_id = self._next_id
            self._next_id += 1
            self._pending[op_id] = event
            self._busy[process] = op_id
            self._append(event)
            return op_id

    def complete(self, op_id: int, type: "str | EventType", value: Any = None) -> None:
        """Record the end of operation `op_id`: ``"ok"``, ``"fail"`` or ``"info"``.

        `value` is the result: the value read, or whatever a write returned (the
        models look only at a read's result and at the invoke's value of a write).
        """
        kind = EventType.parse(type)
        if kind is EventType.INVOKE:
            raise HistoryError("type", "complete() takes ok, fail or info; use invoke() to start")
        with self._lock:
            invoke = self._pending.pop(op_id, None)
            if invoke is None:
                raise HistoryError("op_id", f"operation {op_id!r} is not pending (never "
                                            "invoked, or completed already)")
            del self._busy[invoke.process]
            self._append(Event(invoke.process, kind, invoke.f, invoke.key, value,
                               int(self._clock())))

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def pending(self) -> list[int]:
        """Ids of the operations invoked and not completed (they count as unknown)."""
        with self._lock:
            return sorted(self._pending)

    def operations(self) -> list[Operation]:
        return pair_events(self.events)

    def save(self, path: "str | os.PathLike[str]") -> None:
        """Write the history as EDN lines and fsync the file."""
        events = self.events
        with open(path, "w", encoding="utf-8") as out:
            write_edn(events, out)
            out.flush()
            os.fsync(out.fileno())

    def _append(self, event: Event) -> None:
        self._events.append(event)
        if self._sink is not None:
            self._sink.write(format_edn(event) + "\n")
            self._sink.flush()

