"""Field-level primitives shared by the JRaft codec modules: typed errors with field
paths, a bounds-checked big-endian reader, integer packing that names the field that does
not fit, and strict JSON accessors for `from_json` (an unknown key or a wrong type is an
error naming the key, never a silent default)."""
from __future__ import annotations

import struct
from contextlib import contextmanager
from typing import Any, Iterator

from consensus.wire.errors import InvalidField, LimitExceeded, ProtocolError, Truncated

PROTOCOL = "jraft"
I32 = (-(1 << 31), (1 << 31) - 1)
I64 = (-(1 << 63), (1 << 63) - 1)

# ---------------------------------------------------------------------------------------
# Errors with field paths, and a bounds-checked reader.

def error(cls: type[ProtocolError], field: str, reason: str,
          offset: int | None = None) -> ProtocolError:
    return cls(field, reason, protocol=PROTOCOL, offset=offset)


@contextmanager
def field_scope(prefix: str) -> Iterator[None]:
    """Prefix the field of any ProtocolError raised inside with ``prefix.``."""
    try:
        yield
    except ProtocolError as exc:
        raise type(exc)(f"{prefix}.{exc.field}", exc.reason, protocol=exc.protocol,
                        offset=exc.offset) from None


class Reader:
    """Big-endian reads over ``data[pos:end]`` that name the field when bytes run out.

    ``base`` is added to positions in error offsets, so a value parsed in place of a
    message reports offsets within the message.
    """
    __slots__ = ("data", "pos", "end", "base")
    _I32 = struct.Struct(">i")
    _I64 = struct.Struct(">q")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None, base: int = 0):
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.base = base

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, field: str) -> int:
        if self.end - self.pos < n:
            raise error(Truncated, field, f"needs {n} bytes, {self.end - self.pos} left",
                        self.base + self.pos)
        start = self.pos
        self.pos += n
        return start

    def i32(self, field: str) -> int:
        return self._I32.unpack_from(self.data, self._need(4, field))[0]

    def i64(self, field: str) -> int:
        return self._I64.unpack_from(self.data, self._need(8, field))[0]

    def u8(self, field: str) -> int:
        return self.data[self._need(1, field)]

    def take(self, n: int, field: str) -> bytes:
        start = self._need(n, field)
        return bytes(self.data[start:start + n])

    def size(self, field: str, limit: int) -> int:
        """An i32 length: not negative, within ``limit``, and within the bytes left."""
        at = self.base + self.pos
        n = self.i32(field)
        if n < 0:
            raise error(InvalidField, field, f"negative length {n}", at)
        if n > limit:
            raise error(LimitExceeded, field, f"{n} bytes is above the limit of {limit}", at)
        if n > self.remaining:
            raise error(Truncated, field, f"declares {n} bytes, {self.remaining} left", at)
        return n

    def finish(self, what: str) -> None:
        if self.pos != self.end:
            raise error(InvalidField, what, f"{self.end - self.pos} bytes after the last field",
                        self.base + self.pos)


_WIRE_TYPES = {"B": "a u8", "i": "an i32", "q": "an i64"}


def pack_ints(fmt: str, names: tuple[str, ...], *values: int) -> bytes:
    """struct.pack that names the field that does not fit (encoders take caller input)."""
    try:
        return struct.pack(fmt, *values)
    except struct.error:
        for name, code, value in zip(names, fmt.lstrip(">"), values):
            if not isinstance(value, int):
                raise error(InvalidField, name, f"{value!r} is not an integer") from None
            try:
                struct.pack(">" + code, value)
            except struct.error:
                raise error(InvalidField, name, f"{value} does not fit "
                            f"{_WIRE_TYPES.get(code, code)}") from None
        raise


# ---------------------------------------------------------------------------------------
# JSON helpers: strict, so a typo in a hand-written message is an error, not a default.

def json_object(obj: Any, path: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(obj, dict):
        raise error(InvalidField, path or "message",
                    f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise error(InvalidField, join(path, unknown[0]),
                    f"unknown key; allowed: {', '.join(allowed)}")
    return obj


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def json_int(obj: dict, key: str, path: str, bounds: tuple[int, int] = I64,
             default: int | None = 0) -> int:
    value = obj.get(key, default)
    where = join(path, key)
    if value is None:
        raise error(InvalidField, where, "missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(InvalidField, where, f"expected an integer, got {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise error(InvalidField, where, f"{value} is out of range {bounds[0]}..{bounds[1]}")
    return value


def json_bool(obj: dict, key: str, path: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise error(InvalidField, join(path, key), f"expected true or false, got {value!r}")
    return value


def json_str(obj: dict, key: str, path: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise error(InvalidField, join(path, key), f"expected a string, got {value!r}")
    return value


def json_hex(obj: dict, key: str, path: str) -> bytes:
    text = json_str(obj, key, path)
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise error(InvalidField, join(path, key), "expected hex digits") from None


def json_list(obj: dict, key: str, path: str) -> list:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise error(InvalidField, join(path, key), f"expected a list, got {value!r}")
    return value
