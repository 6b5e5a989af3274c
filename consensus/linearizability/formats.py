"""Reading and writing histories as files: jepsen log lines and EDN lines.

- Jepsen logs (the etcd vectors): ``INFO  jepsen.util - PROC <TAB> :TYPE <TAB> :F <TAB>
  VALUE``, fields separated by tabs or spaces; other log lines are skipped, as are the
  nemesis' events.
- EDN lines (the kv vectors, jepsen's history.edn, our recorder): one map per line with
  ``:process``, ``:type``, ``:f``, optional ``:key`` and ``:value``, and optional
  ``:time`` (integer nanoseconds). Other keys (``:index``, ``:error``...) are ignored.
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Iterator, TextIO

from .edn import DEFAULT_LIMITS, EdnLimits, Keyword, dumps, loads
from .errors import HistoryError
from .history import Event, EventType, Operation, pair_events

_JEPSEN_LINE = re.compile(
    r"^INFO\s+jepsen\.util\s+-\s+(?P<process>\S+)\s+(?P<type>:\S+)\s+(?P<f>:\S+)"
    r"(?:\s+(?P<value>.*?))?\s*$")
_NEMESIS = "nemesis"


def parse_jepsen_log(lines: Iterable[str], *, source: str | None = None,
                     limits: EdnLimits = DEFAULT_LIMITS) -> tuple[list[Event], list[int]]:
    """Events of a jepsen log and the line number of each."""
    events, numbers = [], []
    for number, line in _numbered(lines, source, limits):
        if "jepsen.util" not in line:
            continue
        m = _JEPSEN_LINE.match(line)
        if m is None:
            raise HistoryError("line", "not `INFO jepsen.util - PROCESS :TYPE :F VALUE`",
                               line=number, source=source)
        try:
            process = loads(m["process"], limits=limits, field="process")
            if process == _NEMESIS:
                continue
            kind = EventType.parse(m["type"])
            value = loads(m["value"], limits=limits, field="value") if m["value"] else None
        except HistoryError as e:
            raise HistoryError(e.field, e.reason, line=number, source=source) from None
        events.append(Event(process, kind, m["f"][1:], None, value))
        numbers.append(number)
    return events, numbers


def parse_edn_lines(lines: Iterable[str], *, source: str | None = None,
                    limits: EdnLimits = DEFAULT_LIMITS) -> tuple[list[Event], list[int]]:
    """Events of an EDN-lines history and the line number of each."""
    events, numbers = [], []
    for number, line in _numbered(lines, source, limits):
        try:
            event = _edn_event(loads(line, limits=limits, field="line"))
        except HistoryError as e:
            raise HistoryError(e.field, e.reason, line=number, source=source) from None
        if event is not None:
            events.append(event)
            numbers.append(number)
    return events, numbers


def read_events(path: "str | os.PathLike[str]", *,
                limits: EdnLimits = DEFAULT_LIMITS) -> tuple[list[Event], list[int]]:
    """Events of a history file in either format (told apart by its first line)."""
    source = os.fspath(path)
    with open(path, encoding="utf-8", errors="strict", newline=None) as f:
        try:
            lines = list(_bounded_lines(f, source, limits))
        except UnicodeDecodeError as e:
            raise HistoryError("encoding", f"not UTF-8 text ({e.reason} at byte {e.start})",
                               source=source) from None
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("{"):
        return parse_edn_lines(lines, source=source, limits=limits)
    if "jepsen.util" in first:
        return parse_jepsen_log(lines, source=source, limits=limits)
    if not first:
        return [], []
    raise HistoryError("format", "neither EDN lines ({:process ...}) nor a jepsen log "
                                 "(INFO  jepsen.util - ...)", line=1 + lines.index(first),
                       source=source)


def read_history(path: "str | os.PathLike[str]", *,
                 limits: EdnLimits = DEFAULT_LIMITS) -> list[Operation]:
    """The operations of a history file in either format."""
    events, numbers = read_events(path, limits=limits)
    return pair_events(events, lines=numbers, source=os.fspath(path))


def format_edn(event: Event) -> str:
    """One EDN line (no newline) for `event`; `:key` and `:time` only when set."""
    parts = [f":process {dumps(event.process, field='process')}",
             f":type :{event.type.value}",
             f":f {dumps(Keyword(event.f))}"]
    if event.key is not None:
        parts.append(f":key {dumps(event.key, field='key')}")
    parts.append(f":value {dumps(event.value, field='value')}")
    if event.time is not None:
        parts.append(f":time {int(event.time)}")
    return "{" + ", ".join(parts) + "}"


def write_edn(events: Iterable[Event], out: TextIO) -> None:
    for event in events:
        out.write(format_edn(event) + "\n")


def _edn_event(obj: Any) -> Event | None:
    if not isinstance(obj, dict):
        raise HistoryError("line", "expected a map {:process P, :type T, :f F, ...}")
    for name in ("process", "type", "f"):
        if name not in obj:
            raise HistoryError(f":{name}", "missing")
    process = obj["process"]
    if process == _NEMESIS and isinstance(process, Keyword):
        return None
    if isinstance(process, (bool, float)) or not isinstance(process, (int, str)):
        raise HistoryError(":process", f"{process!r} is not an integer or a string")
    kind = EventType.parse(obj["type"], field=":type")
    f = obj["f"]
    if not isinstance(f, str) or not f:
        raise HistoryError(":f", f"{f!r} is not a keyword or string naming the function")
    stamp = obj.get(Keyword("time"))
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int)):
        raise HistoryError(":time", f"{stamp!r} is not an integer (nanoseconds)")
    return Event(process, kind, str(f), obj.get(Keyword("key")), obj.get(Keyword("value")),
                 stamp)


def _numbered(lines: Iterable[str], source: str | None,
              limits: EdnLimits) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(lines, 1):
        if len(line) > limits.max_text:
            raise HistoryError("line", f"{len(line)} characters is above the limit of "
                                       f"{limits.max_text}", line=number, source=source)
        if line.strip():
            yield number, line.strip()


def _bounded_lines(f: TextIO, source: str, limits: EdnLimits) -> Iterator[str]:
    """Lines of `f`, never reading more than the limit into one line."""
    number = 0
    while True:
        line = f.readline(limits.max_text + 1)
        if not line:
            return
        number += 1
        if len(line) > limits.max_text and not line.endswith("\n"):
            raise HistoryError("line", f"longer than the limit of {limits.max_text} "
                                       "characters", line=number, source=source)
        yield line
