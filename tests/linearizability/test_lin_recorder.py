"""The History recorder the simulator and the torture test drive."""
from __future__ import annotations

import io
import itertools
import threading

import pytest

from consensus.linearizability import (EventType, History, HistoryError, KVModel, Outcome,
                                       Verdict, check, read_events, read_history)


def fake_clock(start: int = 1000, step: int = 10):
    counter = itertools.count(start, step)
    return lambda: next(counter)


def test_records_times_from_the_injected_clock() -> None:
    h = History(clock=fake_clock())
    a = h.invoke(0, "put", "k", "v")
    b = h.invoke(1, "get", "k")
    h.complete(a, "ok")
    h.complete(b, ":ok", "v")
    assert [(e.process, e.type, e.time) for e in h.events] == [
        (0, EventType.INVOKE, 1000), (1, EventType.INVOKE, 1010),
        (0, EventType.OK, 1020), (1, EventType.OK, 1030)]
    put, get = h.operations()
    assert (put.id, put.call, put.ret, put.input) == (a, 1000, 1020, "v")
    assert (get.output, get.outcome) == ("v", Outcome.OK)
    assert check(h, KVModel()).verdict is Verdict.LINEARIZABLE


def test_pending_and_info_operations_are_unknown() -> None:
    h = History(clock=fake_clock())
    a = h.invoke(0, "append", "k", "x")
    b = h.invoke(1, "append", "k", "y")
    h.complete(b, "info")
    assert h.pending() == [a]
    assert [op.outcome for op in h.operations()] == [Outcome.UNKNOWN, Outcome.UNKNOWN]
    c = h.invoke(1, "get", "k")      # after info the process may go on
    h.complete(c, "ok", "yx")
    assert check(h, KVModel()).verdict is Verdict.LINEARIZABLE


@pytest.mark.parametrize("misuse, field", [
    (lambda h, op: h.complete(op + 1, "ok"), "op_id"),
    (lambda h, op: (h.complete(op, "ok"), h.complete(op, "ok")), "op_id"),
    (lambda h, op: h.complete(op, "done"), "type"),
    (lambda h, op: h.complete(op, "invoke"), "type"),
    (lambda h, op: h.invoke(0, "get", "k"), "process"),
])
def test_misuse_is_refused(misuse, field) -> None:
    h = History(clock=fake_clock())
    op = h.invoke(0, "put", "k", "v")
    with pytest.raises(HistoryError) as error:
        misuse(h, op)
    assert error.value.field == field


def test_sink_gets_each_event_at_once_and_save_round_trips(tmp_path) -> None:
    sink = io.StringIO()
    h = History(clock=fake_clock(), sink=sink)
    op = h.invoke("c1", "cas", "k", ("", "z"))
    assert sink.getvalue().count("\n") == 1
    h.complete(op, "fail")
    h.invoke("c2", "get", "k")
    path = tmp_path / "history.edn"
    h.save(path)
    assert path.read_text() == sink.getvalue()
    assert read_events(path)[0] == h.events
    assert read_history(path) == h.operations()


def test_threads_see_event_order_and_time_order_agree() -> None:
    """Clients in threads against a real linearizable object (a dict under a lock)."""
    h = History()                    # the real monotonic clock
    store: dict[str, str] = {}
    lock = threading.Lock()

    def client(process: int) -> None:
        for i in range(50):
            key = "k%d" % (i % 3)
            if i % 2:
                op = h.invoke(process, "append", key, f"<{process}.{i}>")
                with lock:
                    store[key] = store.get(key, "") + f"<{process}.{i}>"
                h.complete(op, "ok")
            else:
                op = h.invoke(process, "get", key)
                with lock:
                    value = store.get(key, "")
                h.complete(op, "ok", value)

    threads = [threading.Thread(target=client, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    times = [e.time for e in h.events]
    assert len(times) == 400 and times == sorted(times)
    assert check(h, KVModel(), timeout=30).verdict is Verdict.LINEARIZABLE
