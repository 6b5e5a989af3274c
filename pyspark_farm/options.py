"""Typed validation of the data source's options, shared by every kind.

Spark hands a data source its options as a case-insensitive map of strings. Each kind
declares the options it understands as `Option`s (a documented name, a parser, a
default); `OptionSet.parse` turns the raw map into typed values, fails on a bad value with
an `OptionError` naming the option, and warns once about options nobody understands,
listing the valid ones (a misspelt `startingOffset` must not silently read from 'latest').
"""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .errors import OptionError

# Keys Spark itself adds to the options of a data source; never reported as unknown.
SPARK_INTERNAL_KEYS = frozenset({"path", "paths", "checkpointlocation", "queryname",
                                 "__partition_columns"})

Parser = Callable[[str], Any]


class UnknownOptionWarning(UserWarning):
    """An option was given that the data source does not use in this mode."""


@dataclass(frozen=True)
class Option:
    """One documented option: its name as users write it, how to parse it, its default."""
    name: str
    parse: Parser
    default: Any = None
    required: bool = False
    doc: str = ""


@dataclass(frozen=True)
class OptionSet:
    """The options one kind understands in one mode (reading or writing)."""
    what: str                      # e.g. "the raft source": used in messages
    options: tuple[Option, ...]
    by_key: dict[str, Option] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_key", {o.name.lower(): o for o in self.options})

    def __add__(self, other: "OptionSet") -> "OptionSet":
        return OptionSet(self.what, self.options + other.options)

    def named(self, what: str) -> "OptionSet":
        return OptionSet(what, self.options)

    @property
    def names(self) -> list[str]:
        return sorted(o.name for o in self.options)

    def parse(self, raw: Mapping[str, str], *, ignore: Iterable[str] = ()) -> dict[str, Any]:
        """Typed values for every declared option (defaults filled in), keyed by name.

        Keys in `ignore` (lower case) belong to someone else (e.g. `kind`) and are not
        reported as unknown."""
        values: dict[str, Any] = {}
        given = {str(k).lower(): v for k, v in raw.items()}
        for key, option in self.by_key.items():
            if key in given and given[key] is not None:
                try:
                    values[option.name] = option.parse(str(given[key]))
                except OptionError:
                    raise
                except (ValueError, TypeError) as exc:
                    raise OptionError(option.name, f"{exc} (got {given[key]!r})") from None
            elif option.required:
                raise OptionError(option.name, f"{self.what} needs it; {option.doc}")
            else:
                values[option.name] = option.default
        skip = SPARK_INTERNAL_KEYS | {k.lower() for k in ignore}
        unknown = sorted(k for k in given if k not in self.by_key and k not in skip)
        if unknown:
            warnings.warn(
                f"garlicfarm: {self.what} ignores the unknown option(s) {', '.join(unknown)}; "
                f"valid options: {', '.join(self.names)}", UnknownOptionWarning, stacklevel=2)
        return values


# --- parsers: each returns the typed value or raises ValueError with the reason --------------

def text(value: str) -> str:
    return value


def non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a non-empty value")
    return value.strip()


def integer(minimum: int | None = None, maximum: int | None = None) -> Parser:
    def parse(value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError("expected an integer") from None
        if minimum is not None and number < minimum:
            raise ValueError(f"expected an integer >= {minimum}")
        if maximum is not None and number > maximum:
            raise ValueError(f"expected an integer <= {maximum}")
        return number
    return parse


def positive_float(value: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise ValueError("expected a number") from None
    if not number > 0:
        raise ValueError("expected a number > 0")
    return number


def boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def choice(*allowed: str) -> Parser:
    def parse(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return lowered
    return parse


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def duration(value: str) -> float:
    """A duration in seconds from '500ms', '30s', '15m', '1h'; a bare number is milliseconds
    (as in the Kafka source's maxTriggerDelay)."""
    match = _DURATION.match(value)
    if not match:
        raise ValueError("expected a duration such as 500ms, 30s, 15m or 1h")
    unit = (match.group(2) or "ms").lower()
    return float(match.group(1)) * _UNIT_SECONDS[unit]


def json_object(value: str) -> dict:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"expected a JSON object: {exc.msg} at column {exc.colno}") from None
    if not isinstance(parsed, dict):
        raise ValueError("expected a JSON object")
    return parsed
