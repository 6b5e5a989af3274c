"""Offsets of an ordered log: what `startingOffsets` / `endingOffsets` say and the JSON
Spark checkpoints.

A log kind's offset is one integer position: the index of the next entry to read (a Raft
log index for `raft`). Spark stores it as the JSON object ``{"index": N}``; users write
``earliest``, ``latest`` or that same JSON. Kinds with several partitions wrap this with
one position per partition.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from .errors import OptionError

Position = Literal["earliest", "latest", "index"]


@dataclass(frozen=True)
class OffsetSpec:
    """`earliest`, `latest` or an exact index, before it is resolved against the log."""
    position: Position
    index: int | None = None

    def resolve(self, first: int, end: int) -> int:
        """The index this spec means for a log holding [first, end)."""
        if self.position == "earliest":
            return first
        if self.position == "latest":
            return end
        assert self.index is not None
        return self.index

    def __str__(self) -> str:
        return self.position if self.index is None else json.dumps(offset_json(self.index))


def offset_json(index: int) -> dict:
    """The checkpointed form of a position."""
    return {"index": int(index)}


def index_of(offset: dict, what: str = "offset") -> int:
    """The position in a checkpointed offset, refusing anything else with a clear error."""
    if not isinstance(offset, dict) or set(offset) != {"index"}:
        raise ValueError(f"{what} {offset!r} is not a garlicfarm log offset "
                         '(expected {"index": N}); was the checkpoint written by another source?')
    index = offset["index"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"{what} {offset!r} has no valid index (expected an integer >= 0)")
    return index


def offset_spec_parser(option: str):
    """A parser for startingOffsets / endingOffsets: earliest | latest | {"index": N}."""
    words = ("earliest", "latest")

    def parse(value: str) -> OffsetSpec:
        stripped = value.strip()
        if stripped.lower() in words:
            return OffsetSpec(stripped.lower())  # type: ignore[arg-type]
        if stripped.startswith("{"):
            try:
                parsed = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise OptionError(option, f"invalid JSON ({exc.msg}); expected "
                                  'earliest, latest or {"index": N}') from None
            try:
                return OffsetSpec("index", index_of(parsed, option))
            except ValueError as exc:
                raise OptionError(option, str(exc)) from None
        raise OptionError(option, f'expected {", ".join(words)} or {{"index": N}}, got {value!r}')
    return parse
