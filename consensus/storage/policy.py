"""When the log fsyncs: the durability/throughput trade-off, chosen per log."""
from __future__ import annotations

import enum


class FsyncPolicy(enum.Enum):
    """ALWAYS: every append is durable when it returns (concurrent appenders still share
    fsyncs). BATCH: appends return at once; `sync()` makes them durable, one fsync for all
    the callers queued behind it (group commit). NEVER: no fsync at all; `sync()` only
    hands the data to the OS, so it survives a process crash but not a power loss."""

    ALWAYS = "always"
    BATCH = "batch"
    NEVER = "never"

    @classmethod
    def parse(cls, value: "FsyncPolicy | str") -> "FsyncPolicy":
        """The policy named by `value` (an enum member or its name, any case)."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            choices = ", ".join(repr(p.value) for p in cls)
            raise ValueError(f"fsync={value!r} is not a fsync policy; use one of {choices}") \
                from None

    @property
    def fsyncs(self) -> bool:
        return self is not FsyncPolicy.NEVER
