"""The one error family every decoder in garlicfarm raises.

A decoder never lets anything but a `ProtocolError` escape: a truncated, oversized or
corrupt input becomes a typed error that names the field at fault, so a node can drop
the frame (or the connection) and go on, and the inspector can print one clear line.
"""
from __future__ import annotations


class ProtocolError(ValueError):
    """Malformed input for a wire protocol.

    `field` names the part of the message at fault (e.g. ``"logDataSize"``), `offset`
    the byte offset in the message or stream where it was found, when known.
    """

    def __init__(self, field: str, reason: str, *, protocol: str | None = None,
                 offset: int | None = None) -> None:
        self.field = field
        self.reason = reason
        self.protocol = protocol
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        prefix = f"{protocol}: " if protocol else ""
        super().__init__(f"{prefix}{field}: {reason}{where}")


class Truncated(ProtocolError):
    """The input ends before the message does."""


class LimitExceeded(ProtocolError):
    """A declared size or count is above the configured limit (nothing was allocated)."""


class ChecksumMismatch(ProtocolError):
    """A checksum does not match the bytes it covers."""


class UnknownMessageType(ProtocolError):
    """A type byte, marker or command id that the protocol does not define."""


class InvalidField(ProtocolError):
    """A field holds a value the protocol forbids (negative id, bad enum, bad text...)."""


class HandshakeError(ProtocolError):
    """The HTTP handshake in front of a Garlic Farm connection went wrong."""
