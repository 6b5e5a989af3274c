"""Offsets of the dafka source, in the Kafka source's JSON: ``{"topic": {"<partition>":
next offset}}`` where a partition is its producer's address (32 hex) and an offset is a
Dafka sequence. `startingOffsets` / `endingOffsets` take `earliest`, `latest` or that
JSON, where -2 means earliest and -1 latest for one partition (as in Kafka). What the
source subscribes to: `subscribe`, `subscribePattern` or `assign` (exactly one).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal, Mapping

from connectors.dafka import proto

from ..errors import OptionError

PartitionKey = tuple[str, str]           # (topic, partition address)
Offsets = dict[PartitionKey, int]
EARLIEST, LATEST = -2, -1


def offsets_json(offsets: Mapping[PartitionKey, int]) -> dict:
    """The checkpointed form, topics and partitions in sorted order."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[partition] = int(offset)
    return out


def _partition_map(raw: object, what: str, *, specials: bool) -> Offsets:
    if not isinstance(raw, dict):
        raise ValueError(f'{what}: expected {{"topic": {{"<partition>": offset}}}}, got {raw!r}')
    found: Offsets = {}
    for topic, partitions in raw.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"{what}: topic {topic!r} maps to {partitions!r}, expected an "
                             'object {"<partition>": offset}')
        for partition, offset in partitions.items():
            if not proto.is_address(partition):
                raise ValueError(f"{what}: partition {partition!r} of topic {topic!r} is "
                                 "not a Dafka partition address (32 uppercase hex)")
            valid = isinstance(offset, int) and not isinstance(offset, bool) and (
                offset >= 0 or specials and offset in (EARLIEST, LATEST))
            if not valid:
                allowed = "an offset >= 0, -2 (earliest) or -1 (latest)" if specials \
                    else "an offset >= 0"
                raise ValueError(f"{what}: {topic}/{partition} has {offset!r}, expected "
                                 f"{allowed}")
            found[(topic, partition)] = offset
    return found


def parse_offsets(raw: object, what: str = "offset") -> Offsets:
    """A checkpointed offset, refusing anything else with a clear error."""
    try:
        return _partition_map(raw, what, specials=False)
    except ValueError as exc:
        raise ValueError(f"{exc}; was the checkpoint written by another source?") from None


@dataclass(frozen=True)
class OffsetsSpec:
    """`earliest`, `latest` or per-partition JSON, before it meets the stores' heads.
    Partitions the JSON does not name start at earliest (they appeared later)."""
    position: Literal["earliest", "latest", "json"]
    offsets: Offsets = field(default_factory=dict)

    def resolve(self, key: PartitionKey, latest: int) -> int:
        """The offset this spec means for a partition whose latest offset is `latest`."""
        value = self.offsets.get(key, EARLIEST) if self.position == "json" else \
            (EARLIEST if self.position == "earliest" else LATEST)
        return 0 if value == EARLIEST else latest if value == LATEST else value


def offsets_spec_parser(option: str):
    def parse(value: str) -> OffsetsSpec:
        stripped = value.strip()
        if stripped.lower() in ("earliest", "latest"):
            return OffsetsSpec(stripped.lower())  # type: ignore[arg-type]
        try:
            raw = json.loads(stripped)
        except json.JSONDecodeError:
            raise OptionError(option, 'expected earliest, latest or {"topic": '
                              f'{{"<partition>": offset}}}}, got {value!r}') from None
        try:
            return OffsetsSpec("json", _partition_map(raw, option, specials=True))
        except ValueError as exc:
            raise OptionError(option, str(exc)) from None
    return parse


@dataclass(frozen=True)
class Subscription:
    """Which partitions the source reads: named topics, topics matching a regex, or
    assigned partitions."""
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: frozenset[PartitionKey] | None = None

    @classmethod
    def from_options(cls, subscribe: str | None, pattern: str | None, assign: str | None
                     ) -> "Subscription":
        given = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern),
                                ("assign", assign)) if v is not None]
        if len(given) != 1:
            raise OptionError("subscribe", "give exactly one of subscribe (comma-separated "
                              "topics), subscribePattern (a regex) or assign (JSON "
                              f'{{"topic": ["<partition>", ...]}}); got {given or "none"}')
        if subscribe is not None:
            topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
            if not topics:
                raise OptionError("subscribe", "expected one or more topics, comma-separated")
            return cls(topics=topics)
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError("subscribePattern", f"not a regular expression: {exc}") \
                    from None
            return cls(pattern=pattern)
        return cls(assigned=_assignment(assign))

    @property
    def topic_queries(self) -> tuple[str, ...]:
        """The GET-HEADS topics to ask the stores about ("" lists every topic)."""
        if self.pattern is not None:
            return ("",)
        if self.assigned is not None:
            return tuple(sorted({t for t, _ in self.assigned}))
        return self.topics

    def wants(self, key: PartitionKey) -> bool:
        topic, _ = key
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assigned is not None:
            return key in self.assigned
        return topic in self.topics


def _assignment(value: str) -> frozenset[PartitionKey]:
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError("assign", f"invalid JSON ({exc.msg}); expected "
                          '{"topic": ["<partition>", ...]}') from None
    if not isinstance(raw, dict) or not raw:
        raise OptionError("assign", 'expected {"topic": ["<partition>", ...]}')
    found = set()
    for topic, partitions in raw.items():
        if not isinstance(partitions, list) or not all(
                isinstance(p, str) and proto.is_address(p) for p in partitions):
            raise OptionError("assign", f"topic {topic!r}: expected a list of partition "
                              "addresses (32 uppercase hex)")
        found.update((topic, p) for p in partitions)
    return frozenset(found)
