"""Linearizability checking for the histories of our clients (Wing & Gong, Lowe, Porcupine).

Record a history, then check it::

    from consensus.linearizability import History, KVModel, Verdict, check
    history = History(clock=sim.now_ns)            # time.monotonic_ns by default
    op = history.invoke(process=3, f="put", key="k", value="v")
    history.complete(op, "ok")                     # or "fail", or "info" (unknown)
    result = check(history, KVModel(), timeout=10.0)
    if result.verdict is not Verdict.LINEARIZABLE:
        print(result.explain(KVModel()))

Or from files (jepsen logs, EDN lines): ``python -m consensus.linearizability FILE``.

Modules: `history` (events, operations, pairing), `recorder` (`History`), `formats`
(file reading and writing), `edn` (the EDN subset), `models` (`RegisterModel`,
`KVModel`, the `Model` interface), `checker` (`check`), `errors` (`HistoryError`).
README.md beside this file says what a history means and how the search is pruned.
"""
from .checker import CheckResult, PartitionResult, Verdict, Violation, check
from .edn import Keyword
from .errors import HistoryError
from .formats import (format_edn, parse_edn_lines, parse_jepsen_log, read_events,
                      read_history, write_edn)
from .history import Event, EventType, Operation, Outcome, pair_events
from .models import MODELS, KVModel, Model, RegisterModel
from .recorder import History

__all__ = [
    "CheckResult", "Event", "EventType", "History", "HistoryError", "KVModel", "Keyword",
    "MODELS", "Model", "Operation", "Outcome", "PartitionResult", "RegisterModel",
    "Verdict", "Violation", "check", "format_edn", "pair_events", "parse_edn_lines",
    "parse_jepsen_log", "read_events", "read_history", "write_edn",
]
