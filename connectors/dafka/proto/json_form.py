"""Dafka messages as JSON objects: the inspector's and the test vectors' form."""
from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from consensus.wire.errors import InvalidField, ProtocolError, UnknownMessageType

from .messages import (ADDRESS_LENGTH, Ack, Beacon, BulkFetch, BulkGetHeads, BulkHeads, BulkRecords,
                       Command, ConsumerHello, DEFAULT_LIMITS, DirectHead, DirectRecord,
                       FETCH_BLOCK, Fetch, GetHeads, Head, DafkaLimits, MAX_SEQUENCE, MESSAGE_TYPES,
                       Message, PROTOCOL, ProtocolMessage, Record, StoreHello, Subscription,
                       TowerBeacon, VERSION, Welcome, fetch_count, frame0_prefix, is_address,
                       pack_sequence, subscription_prefix)
from .codec import (Decoder, decode, encode, is_host)
from .bulk import (bulk_heads_frame0, bulk_lengths, bulk_offsets, bulk_records_frame0, pack_bulk,
                   pack_heads)

# --------------------------------------------------------------------------- JSON
_NAMES: dict[str, type] = {cls.COMMAND.wire_name: cls for cls in MESSAGE_TYPES.values()}
_NAMES.update({"BEACON": Beacon, "TOWER-BEACON": TowerBeacon, "WELCOME": Welcome,
               "SUBSCRIPTION": Subscription})
_CLASS_NAMES = {cls: name for name, cls in _NAMES.items()}


def to_json(msg: Message) -> dict[str, Any]:
    """``{"message": NAME, field: value...}``; content as lowercase hex, command by name."""
    out: dict[str, Any] = {"message": _CLASS_NAMES[type(msg)]}
    for f in fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).hex()
        elif isinstance(value, Command):
            value = value.wire_name
        elif isinstance(value, list):
            value = list(value)
        out[f.name] = value
    return out


def from_json(obj: dict[str, Any]) -> Message:
    """Inverse of `to_json`; raises `ProtocolError` naming the bad key."""
    if not isinstance(obj, dict):
        raise InvalidField("message", "a JSON object is expected", protocol=PROTOCOL)
    cls = _NAMES.get(obj.get("message"))  # type: ignore[arg-type]
    if cls is None:
        raise UnknownMessageType("message", f"unknown message {obj.get('message')!r}; "
                                 f"one of {', '.join(_NAMES)}", protocol=PROTOCOL)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in obj:
            if f.default is not MISSING or f.default_factory is not MISSING:
                continue  # optional: the dataclass default applies
            raise InvalidField(f.name, "missing", protocol=PROTOCOL)
        kwargs[f.name] = _json_value(cls, f.name, obj[f.name])
    return cls(**kwargs)


def _json_value(cls: type, name: str, value: Any) -> Any:
    if name == "content":
        try:
            return bytes.fromhex(value)
        except (TypeError, ValueError):
            raise InvalidField(name, "must be a hex string", protocol=PROTOCOL) from None
    if name == "command":
        if value is None:
            return None
        try:
            return Command[str(value).replace("-", "_")]
        except KeyError:
            raise InvalidField(name, f"unknown command {value!r}", protocol=PROTOCOL) from None
    if name in ("subscribe", "last"):
        if not isinstance(value, bool):
            raise InvalidField(name, "must be true or false", protocol=PROTOCOL)
        return value
    if name == "heads":
        if not isinstance(value, list) or not all(
                isinstance(h, (list, tuple)) and len(h) == 3 and isinstance(h[0], str)
                and isinstance(h[1], str) and isinstance(h[2], int)
                and not isinstance(h[2], bool) and h[2] >= 0 for h in value):
            raise InvalidField(name, "must be a list of [subject, partition, head]",
                               protocol=PROTOCOL)
        return [tuple(h) for h in value]
    if name in ("sequence", "count", "port", "max_bytes", "request", "first", "total"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidField(name, "must be a non-negative integer", protocol=PROTOCOL)
        return value
    if name == "subjects":
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise InvalidField(name, "must be a list of strings", protocol=PROTOCOL)
        return list(value)
    if not isinstance(value, str):
        raise InvalidField(name, "must be a string", protocol=PROTOCOL)
    return value


__all__ = [
    "ADDRESS_LENGTH", "Ack", "Beacon", "BulkFetch", "BulkGetHeads", "BulkHeads",
    "BulkRecords", "Command", "ConsumerHello", "DEFAULT_LIMITS", "Decoder",
    "DirectHead", "DirectRecord", "FETCH_BLOCK", "Fetch", "GetHeads", "Head", "DafkaLimits",
    "MAX_SEQUENCE", "MESSAGE_TYPES", "Message", "ProtocolError", "ProtocolMessage",
    "Record", "StoreHello", "Subscription", "TowerBeacon", "VERSION", "Welcome", "decode",
    "bulk_heads_frame0", "bulk_lengths", "bulk_offsets", "bulk_records_frame0",
    "pack_heads", "encode", "fetch_count", "frame0_prefix", "from_json",
    "is_address", "is_host", "pack_bulk", "pack_sequence",
    "subscription_prefix", "to_json",
]
