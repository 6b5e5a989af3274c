"""CHP encode and decode: a message to its frames and back (kvmsg, ICANHAZ?, Binary Star
state; KVBULK is in `bulk`)."""
from __future__ import annotations

from typing import Sequence

from consensus.wire.errors import InvalidField, LimitExceeded, Truncated, UnknownMessageType

from .bulk import decode_bulk, encode_bulk
from .limits import DEFAULT_LIMITS, PROTOCOL, ChpLimits
from .messages import (ICANHAZ, KVBULK, KVMSG_FRAMES, MAX_SEQUENCE, MIN_SEQUENCE, RESERVED_KEYS,
                       UUID_LENGTH, BstarState, BstarStatus, Channel, Hugz, Icanhaz, Kthxbai,
                       KvBulk, Kvpub, Kvset, Kvsync, Message, _Command, _unpack_sequence,
                       pack_sequence)
from .properties import parse_properties


# --------------------------------------------------------------------------- encode
def encode(msg: Message) -> list[bytes]:
    """The frames of `msg`; raises `InvalidField` for a value no peer could decode."""
    if isinstance(msg, Icanhaz):
        if not msg.subtree_frame:
            if msg.subtree or msg.properties:
                raise InvalidField("subtree", "a subtree or properties need the subtree "
                                   "frame", protocol=PROTOCOL)
            return [ICANHAZ]
        if msg.properties:
            parse_properties(msg.properties)
            return [ICANHAZ, msg.subtree, msg.properties]
        return [ICANHAZ, msg.subtree]
    if isinstance(msg, BstarStatus):
        return [b"%d" % BstarState(msg.state)]
    if isinstance(msg, KvBulk):
        return encode_bulk(msg.entries())
    key = msg.KEY if isinstance(msg, _Command) else msg.key
    if not MIN_SEQUENCE <= msg.sequence <= MAX_SEQUENCE:
        raise InvalidField("sequence", f"{msg.sequence} does not fit a signed 64-bit "
                           "integer", protocol=PROTOCOL)
    if len(msg.uuid) not in (0, UUID_LENGTH):
        raise InvalidField("uuid", f"must be 16 bytes or empty, not {len(msg.uuid)}",
                           protocol=PROTOCOL)
    if msg.properties:
        parse_properties(msg.properties)
    return [key, pack_sequence(msg.sequence), msg.uuid, msg.properties, msg.body]


# --------------------------------------------------------------------------- decode
# Which command keys each channel may carry; None = any channel (no hint).
_COMMANDS_ALLOWED = {Channel.COLLECTOR: (), Channel.PUBLISHER: (Hugz,),
                     Channel.SNAPSHOT_REPLY: (Kthxbai,), None: (Hugz, Kthxbai)}


def decode(frames: Sequence[bytes], channel: Channel | None = None,
           limits: ChpLimits = DEFAULT_LIMITS) -> Message:
    """The message in `frames`. `channel` says where they were read (see `Channel`);
    without it the kind is inferred from the frames themselves."""
    count = len(frames)
    if count == KVMSG_FRAMES and channel not in _NOT_KVMSG:
        return _decode_kvmsg(frames, channel, limits)
    if count == 0:
        raise Truncated("frames", "empty message", protocol=PROTOCOL)
    if channel in (None, Channel.SNAPSHOT_REQUEST) and frames[0] == ICANHAZ:
        return _decode_icanhaz(frames, limits)
    if channel in (None, Channel.BSTAR) and count == 1:
        return _decode_bstar(frames[0])
    if channel in (None, Channel.SNAPSHOT_REPLY) and frames[0] == KVBULK:
        return decode_bulk(frames, limits)
    if channel is Channel.SNAPSHOT_REQUEST:
        raise UnknownMessageType("command", f"{bytes(frames[0][:16])!r} is not ICANHAZ?",
                                 protocol=PROTOCOL)
    if channel is Channel.BSTAR:
        raise InvalidField("frames", f"got {count} frames, expected 1: the state digit",
                           protocol=PROTOCOL)
    error = Truncated if count < KVMSG_FRAMES else InvalidField
    raise error("frames", f"got {count} frames, expected 5: key, sequence, uuid, "
                "properties, body", protocol=PROTOCOL)


_NOT_KVMSG = (Channel.SNAPSHOT_REQUEST, Channel.BSTAR)




def _decode_kvmsg(frames: Sequence[bytes], channel: Channel | None,
                  limits: ChpLimits) -> Message:
    key, seq, uuid, properties, body = frames
    if not (type(key) is bytes and type(uuid) is bytes and type(properties) is bytes
            and type(body) is bytes):   # bytearray, memoryview, zmq.Frame...
        key, seq, uuid, properties, body = (bytes(f) for f in frames)
    if len(key) > limits.max_key_bytes:
        raise LimitExceeded("key", f"{len(key)} bytes > limit {limits.max_key_bytes}",
                            protocol=PROTOCOL)
    if len(seq) != 8:
        error = Truncated if len(seq) < 8 else InvalidField
        raise error("sequence", f"must be 8 bytes, got {len(seq)}", protocol=PROTOCOL)
    if len(uuid) != UUID_LENGTH and uuid:
        raise InvalidField("uuid", f"must be 16 bytes or empty, got {len(uuid)}",
                           protocol=PROTOCOL)
    if len(body) > limits.max_body_bytes:
        raise LimitExceeded("body", f"{len(body)} bytes > limit {limits.max_body_bytes}",
                            protocol=PROTOCOL)
    if properties:
        parse_properties(properties, limits)
    (sequence,) = _unpack_sequence(seq)
    if key in RESERVED_KEYS:
        for cls in _COMMANDS_ALLOWED[channel]:
            if key == cls.KEY:
                return cls(sequence, uuid, properties, body)
        if channel is not Channel.COLLECTOR:
            raise UnknownMessageType("key", f"{key!r} is not sent on the "
                                     f"{channel.value if channel else 'this'} channel",
                                     protocol=PROTOCOL)
    # Identity tests, not a dict keyed by Channel: Enum.__hash__ is Python code.
    if channel is Channel.PUBLISHER:
        cls = Kvpub
    elif channel is Channel.COLLECTOR:
        cls = Kvset
    elif channel is Channel.SNAPSHOT_REPLY:
        cls = Kvsync
    else:
        cls = Kvset if sequence == 0 else Kvpub
    return cls(key, sequence, uuid, properties, body)


def _decode_icanhaz(frames: Sequence[bytes], limits: ChpLimits) -> Icanhaz:
    if len(frames) == 1:
        return Icanhaz(b"", subtree_frame=False)
    if len(frames) > 3:
        raise InvalidField("frames", f"ICANHAZ? has 2 frames (3 with resume properties), "
                           f"got {len(frames)}", protocol=PROTOCOL)
    subtree = frames[1]
    if len(subtree) > limits.max_key_bytes:
        raise LimitExceeded("subtree", f"{len(subtree)} bytes > limit "
                            f"{limits.max_key_bytes}", protocol=PROTOCOL)
    if len(frames) == 3:
        properties = bytes(frames[2])
        if not properties:
            raise InvalidField("properties", "ICANHAZ?'s third frame is empty: send two "
                               "frames, or name=value lines", protocol=PROTOCOL)
        parse_properties(properties, limits)
        return Icanhaz(bytes(subtree), properties=properties)
    return Icanhaz(bytes(subtree))


def _decode_bstar(frame: bytes) -> BstarStatus:
    if len(frame) != 1 or frame[0] - 0x30 not in _STATE_VALUES:
        raise InvalidField("state", f"{bytes(frame[:8])!r} is not a Binary Star state "
                           "1..4", protocol=PROTOCOL)
    return BstarStatus(BstarState(frame[0] - 0x30))


_STATE_VALUES = frozenset(int(s) for s in BstarState)

