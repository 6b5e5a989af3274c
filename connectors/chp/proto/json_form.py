"""CHP messages as JSON for the inspector: ``{"message": NAME, field: value...}``."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from consensus.wire.errors import InvalidField, UnknownMessageType

from .bulk import decode_bulk, encode_bulk
from .codec import encode
from .limits import PROTOCOL
from .messages import MESSAGE_TYPES, BstarState, BstarStatus, KvBulk, Kvsync, Message, _KvMsg

# --------------------------------------------------------------------------- JSON
_NAMES: dict[str, type] = {cls.NAME: cls for cls in MESSAGE_TYPES}


def to_json(msg: Message) -> dict[str, Any]:
    """``{"message": NAME, field: value...}``: bytes as lowercase hex, the Binary Star
    state by name."""
    if isinstance(msg, KvBulk):   # numpy columns: as the KVSYNCs it holds
        return {"message": msg.NAME, "entries": [to_json(e) for e in msg.entries()]}
    out: dict[str, Any] = {"message": msg.NAME}
    for f in fields(msg):
        value = getattr(msg, f.name)
        if isinstance(value, bytes):
            value = value.hex()
        elif isinstance(value, BstarState):
            value = value.name
        out[f.name] = value
    return out


def from_json(obj: dict[str, Any]) -> Message:
    """Inverse of `to_json`; raises `ProtocolError` naming the bad key."""
    if not isinstance(obj, dict):
        raise InvalidField("message", "a JSON object is expected", protocol=PROTOCOL)
    if obj.get("message") == KvBulk.NAME:
        return _bulk_from_json(obj)
    cls = _NAMES.get(obj.get("message"))  # type: ignore[arg-type]
    if cls is None:
        raise UnknownMessageType("message", f"unknown message {obj.get('message')!r}; "
                                 f"one of {', '.join(_NAMES)}", protocol=PROTOCOL)
    known = {f.name: f for f in fields(cls)}
    extra = set(obj) - set(known) - {"message"}
    if extra:
        raise InvalidField(sorted(extra)[0], f"not a field of {cls.NAME}", protocol=PROTOCOL)
    kwargs = {name: _json_value(name, obj[name]) for name in known if name in obj}
    if cls is BstarStatus and "state" not in kwargs:
        raise InvalidField("state", "missing", protocol=PROTOCOL)
    if issubclass(cls, _KvMsg) and "key" not in kwargs:
        raise InvalidField("key", "missing", protocol=PROTOCOL)
    msg = cls(**kwargs)
    encode(msg)  # the same checks as on the wire
    return msg


def _bulk_from_json(obj: dict[str, Any]) -> KvBulk:
    if set(obj) != {"message", "entries"} or not isinstance(obj["entries"], list):
        raise InvalidField("entries", "a KVBULK is {\"message\": \"KVBULK\", "
                           "\"entries\": [KVSYNC...]}", protocol=PROTOCOL)
    entries = [from_json(e) for e in obj["entries"]]
    if not all(type(e) is Kvsync for e in entries):
        raise InvalidField("entries", "every entry must be a KVSYNC", protocol=PROTOCOL)
    return decode_bulk(encode_bulk(entries))


def _json_value(name: str, value: Any) -> Any:
    if name == "state":
        try:
            return BstarState[value] if isinstance(value, str) else BstarState(value)
        except (KeyError, ValueError):
            raise InvalidField(name, f"{value!r} is not PRIMARY, BACKUP, ACTIVE or "
                               "PASSIVE", protocol=PROTOCOL) from None
    if name == "sequence":
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidField(name, "must be an integer", protocol=PROTOCOL)
        return value
    if name == "subtree_frame":
        if not isinstance(value, bool):
            raise InvalidField(name, "must be true or false", protocol=PROTOCOL)
        return value
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise InvalidField(name, "must be a hex string", protocol=PROTOCOL) from None
