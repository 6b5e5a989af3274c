"""The subset of EDN that history lines use: one flat map per line, scalar or vector values.

Jepsen histories and our own recorder write lines like
``{:process 0, :type :ok, :f :cas, :key "k", :value ["a" "b"], :time 1234}``; the jepsen
log format prints its values (``nil``, ``3``, ``[1 4]``, ``:timed-out``) in the same
syntax. We read: nil, booleans, integers, floats, strings, keywords, vectors and lists
(as tuples, so values stay hashable), maps and sets. Not tags, symbols or chars: they
never occur in a history, and rejecting them is clearer than guessing.

Written here rather than taken from the `edn_format` package: this package depends on the
standard library only, the grammar above is one regular expression, and a history of
thousands of lines reads much faster without a general parser generator. String escapes
are EDN's, which are JSON's, so the `json` module decodes and encodes them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .errors import HistoryError


class Keyword(str):
    """An EDN keyword (``:ok``), kept apart from strings so it is written back as one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f":{str(self)}"


@dataclass(frozen=True, slots=True)
class EdnLimits:
    """Bounds checked before anything is parsed, so a hostile file cannot exhaust memory
    or the interpreter's stack."""

    max_text: int = 1 << 20   # characters in one value (one history line)
    max_depth: int = 16       # nesting of vectors / maps


DEFAULT_LIMITS = EdnLimits()

_TOKEN = re.compile(r'''
    [\s,]+ | ;[^\n]*                                   # whitespace, commas, comments
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<open>\#\{|[\[{(])
  | (?P<close>[\]})])
  | (?P<atom>[^\s,\[\]{}()";]+)
  | (?P<bad>.)                                          # anything else: an error
''', re.VERBOSE | re.DOTALL)
_INTEGER = re.compile(r"[+-]?\d+N?")
_FLOAT = re.compile(r"[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?M?")
_CLOSER = {"[": "]", "(": ")", "{": "}", "#{": "}"}
_CONSTANTS = {"nil": None, "true": True, "false": False}


def loads(text: str, *, limits: EdnLimits = DEFAULT_LIMITS, field: str = "edn") -> Any:
    """Parse exactly one EDN value from `text`; raise `HistoryError` naming `field`."""
    if len(text) > limits.max_text:
        raise HistoryError(field, f"{len(text)} characters is above the limit of "
                                  f"{limits.max_text} for one value")
    tokens = _tokenize(text, field)
    if not tokens:
        raise HistoryError(field, "empty: expected a value")
    value, end = _parse(tokens, 0, 0, limits, field)
    if end != len(tokens):
        raise HistoryError(field, f"unexpected {tokens[end][1]!r} after the value")
    return value


def dumps(value: Any, *, field: str = "value") -> str:
    """Write `value` as EDN (tuples and lists as vectors, `Keyword` as a keyword)."""
    if value is None:
        return "nil"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, Keyword):
        return f":{value}"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(dumps(v, field=field) for v in value) + "]"
    if isinstance(value, (set, frozenset)):
        return "#{" + " ".join(sorted(dumps(v, field=field) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{dumps(k, field=field)} {dumps(v, field=field)}"
                               for k, v in value.items()) + "}"
    raise HistoryError(field, f"cannot write a {type(value).__name__} as EDN; use None, "
                              "bool, int, float, str, tuple, list, set or dict")


def _tokenize(text: str, field: str) -> list[tuple[str, str]]:
    tokens = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "bad":
            at = m.start()
            raise HistoryError(field, f"cannot read {text[at:at + 20]!r} at column {at + 1} "
                                      "(unterminated string?)")
        if kind is not None:
            tokens.append((kind, m.group(kind)))
    return tokens


def _parse(tokens: list[tuple[str, str]], i: int, depth: int, limits: EdnLimits,
           field: str) -> tuple[Any, int]:
    kind, text = tokens[i]
    if kind == "atom":
        return _atom(text, field), i + 1
    if kind == "string":
        if "\\" not in text:
            return text[1:-1], i + 1
        try:
            return json.loads(text, strict=False), i + 1
        except json.JSONDecodeError as e:
            raise HistoryError(field, f"bad escape in string {text[:40]!r}: {e.msg}") from None
    if kind == "close":
        raise HistoryError(field, f"unexpected {text!r}")
    if depth >= limits.max_depth:
        raise HistoryError(field, f"nested deeper than {limits.max_depth} levels")
    closer, items, i = _CLOSER[text], [], i + 1
    while True:
        if i >= len(tokens):
            raise HistoryError(field, f"{text!r} is never closed by {closer!r}")
        if tokens[i][0] == "close":
            if tokens[i][1] != closer:
                raise HistoryError(field, f"{text!r} closed by {tokens[i][1]!r}")
            break
        item, i = _parse(tokens, i, depth + 1, limits, field)
        items.append(item)
    if text == "{":
        if len(items) % 2:
            raise HistoryError(field, "a map needs an even number of forms (key value ...)")
        try:
            return dict(zip(items[::2], items[1::2])), i + 1
        except TypeError:
            raise HistoryError(field, "a map key is not hashable") from None
    if text == "#{":
        try:
            return frozenset(items), i + 1
        except TypeError:
            raise HistoryError(field, "a set element is not hashable") from None
    return tuple(items), i + 1


def _atom(text: str, field: str) -> Any:
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if text[0] == ":" and len(text) > 1:
        return Keyword(text[1:])
    if _INTEGER.fullmatch(text):
        return int(text.rstrip("N"))
    if _FLOAT.fullmatch(text):
        return float(text.rstrip("M"))
    raise HistoryError(field, f"{text!r} is not a value this reader knows (symbols, tags "
                              "and chars are not used in histories)")
