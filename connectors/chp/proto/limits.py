"""CHP's limits: the bounds every decoder checks before it splits or allocates."""
from __future__ import annotations

from dataclasses import dataclass, fields

PROTOCOL = "chp"


@dataclass(frozen=True)
class ChpLimits:
    """Bounds checked before a frame is parsed. The C peer keys its map by the first
    255 bytes of a key only; we keep whole keys up to `max_key_bytes`."""
    max_key_bytes: int = 64 << 10
    max_properties_bytes: int = 64 << 10
    max_properties: int = 1024        # property lines
    max_body_bytes: int = 16 << 20
    max_bulk_entries: int = 65536     # entries in one KVBULK
    max_bulk_bytes: int = 16 << 20    # one KVBULK column frame (keys, values...); < 2 GiB
    max_subtree_bytes: int = 4096     # a subscription (subtree prefix) on a publisher
    max_subscriptions: int = 64       # prefixes one connection holds (a client: 2)

    def __post_init__(self) -> None:
        """Checked here, not where a socket option or an Arrow offset overflows later."""
        for f in fields(self):
            value = getattr(self, f.name)
            if type(value) is not int or not 1 <= value < 1 << 31:
                raise ValueError(f"ChpLimits.{f.name}: {value!r} is not an integer in "
                                 f"1..{(1 << 31) - 1}")

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame any message may hold (for ZMQ_MAXMSGSIZE on sockets)."""
        return max(self.max_key_bytes, self.max_properties_bytes, self.max_body_bytes)

    @property
    def max_snapshot_frame_bytes(self) -> int:
        """The largest frame of a snapshot answer, KVBULK included (a client DEALER's
        ZMQ_MAXMSGSIZE)."""
        return max(self.max_frame_bytes, self.max_bulk_bytes)


DEFAULT_LIMITS = ChpLimits()
