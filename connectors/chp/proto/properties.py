"""CHP properties frames (``name=value`` lines) and the two forms of the ttl property:
relative seconds in a KVSET and the KVPUB that republishes it, absolute in stored state,
KVSYNC and expiry deletes."""
from __future__ import annotations

import math
import re
from typing import Sequence

from consensus.wire.errors import InvalidField, LimitExceeded

from .limits import DEFAULT_LIMITS, PROTOCOL, ChpLimits

TTL = b"ttl"
# An absolute ttl at or above this is epoch milliseconds (C peer), below it epoch
# seconds (Python peer): 1e11 s is the year 5138, 1e11 ms is 1973.
_MS_THRESHOLD = 10 ** 11
#: The longest ttl a KVSET may ask for, either way (about 31,700 years): its expiry,
#: counted from any clock of this era, then fits the signed 64-bit epoch milliseconds
#: we store and emit, as the C peer reads them.
MAX_TTL_SECONDS = 10 ** 12
#: The range of an absolute ttl (epoch milliseconds, a signed 64-bit integer).
MIN_EPOCH_MS, MAX_EPOCH_MS = -(1 << 63), (1 << 63) - 1
#: The earliest expiry whose stored form (integer ms) reads back as milliseconds.
MIN_EXPIRY_MS = _MS_THRESHOLD
_DECIMAL = re.compile(rb"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def parse_properties(raw: bytes, limits: ChpLimits = DEFAULT_LIMITS
                     ) -> tuple[tuple[bytes, bytes], ...]:
    """Split ``name=value`` lines at the first ``=``; an unterminated last line counts,
    empty lines are skipped (the Python peer skips them too)."""
    if not raw:
        return ()
    if len(raw) > limits.max_properties_bytes:
        raise LimitExceeded("properties", f"{len(raw)} bytes > limit "
                            f"{limits.max_properties_bytes}", protocol=PROTOCOL)
    lines = raw.count(b"\n") + (raw[-1:] != b"\n")
    if lines > limits.max_properties:
        raise LimitExceeded("properties", f"more than {limits.max_properties} lines",
                            protocol=PROTOCOL)
    pairs = []
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line:
            continue
        name, eq, value = line.partition(b"=")
        if not eq or not name:
            raise InvalidField("properties", f"line {number} {line[:32]!r} is not "
                               "name=value", protocol=PROTOCOL)
        pairs.append((name, value))
    return tuple(pairs)


def format_properties(pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    """``name=value\\n`` lines, in order. Names may not hold ``=`` or newlines, values
    may not hold newlines."""
    out = []
    for name, value in pairs:
        if not name or b"=" in name or b"\n" in name or b"\n" in value:
            raise InvalidField("properties", f"cannot encode property {name[:32]!r}",
                               protocol=PROTOCOL)
        out.append(name + b"=" + value + b"\n")
    return b"".join(out)


def replace_property(raw: bytes, name: bytes, value: bytes | None) -> bytes:
    """`raw` with property `name` set to `value` (removed when None); the other lines
    are kept verbatim and in order, every line newline-terminated."""
    pairs = [(n, v) for n, v in parse_properties(raw) if n != name]
    if value is not None:
        pairs.append((name, value))
    return format_properties(pairs)


def _decimal(value: bytes, what: str) -> float:
    if not _DECIMAL.fullmatch(value):
        raise InvalidField("properties.ttl", f"{value[:32]!r} is not a decimal {what}",
                           protocol=PROTOCOL)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidField("properties.ttl", f"{value[:32]!r} is out of range",
                           protocol=PROTOCOL)
    return number


def parse_relative_ttl(value: bytes) -> float | None:
    """A KVSET's ttl: seconds from now as decimal text; 0 means no ttl (both peers).
    A negative ttl expires at once, as it does on both peers. Beyond
    ±`MAX_TTL_SECONDS` it is refused (`InvalidField`): no expiry could be stored."""
    seconds = _decimal(value, "number of seconds")
    if not -MAX_TTL_SECONDS <= seconds <= MAX_TTL_SECONDS:
        raise InvalidField("properties.ttl", f"{value[:32]!r} seconds is out of range: at "
                           f"most {MAX_TTL_SECONDS} either way (leave the ttl out for no "
                           "expiry)", protocol=PROTOCOL)
    return None if seconds == 0 else seconds


def parse_absolute_ttl(value: bytes) -> int | None:
    """A stored ttl, in epoch milliseconds: integer epoch ms (C peer) or float epoch
    seconds (Python peer, which prints large ones as ``1e+308``). 0 means no ttl. One
    outside a signed 64-bit count of milliseconds raises `InvalidField`."""
    number = _decimal(value, "epoch time")
    if number == 0:
        return None
    if number >= _MS_THRESHOLD and value.lstrip(b"+").isdigit():
        epoch_ms = int(value)
    else:
        epoch_ms = round(number * 1000) if abs(number) < MAX_EPOCH_MS else None
    if epoch_ms is None or not MIN_EPOCH_MS <= epoch_ms <= MAX_EPOCH_MS:
        raise InvalidField("properties.ttl", f"{value[:32]!r} is out of range: an expiry "
                           "is epoch milliseconds within a signed 64-bit integer",
                           protocol=PROTOCOL)
    return epoch_ms


def format_absolute_ttl(epoch_ms: int) -> bytes:
    """The absolute ttl we emit: integer epoch milliseconds, as the C peer does."""
    return b"%d" % epoch_ms

