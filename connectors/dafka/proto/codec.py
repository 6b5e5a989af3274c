"""Encoding and decoding Dafka frames (sans-I/O), the discovery frames included."""
from __future__ import annotations

import re
from typing import Sequence

from consensus.wire.errors import InvalidField, LimitExceeded, Truncated, UnknownMessageType

from .messages import (ADDRESS_LENGTH, Ack, Beacon, BulkFetch, BulkGetHeads, BulkHeads, BulkRecords,
                       Command, ConsumerHello, DEFAULT_LIMITS, DirectHead, DirectRecord, Fetch,
                       GetHeads, HEAD_ENTRY_MAX, HEAD_ENTRY_MIN, Head, DafkaLimits, MAX_COUNT,
                       MAX_SEQUENCE, Message, PROTOCOL, Record, StoreHello, Subscription,
                       TowerBeacon, VERSION, Welcome, _HEX_UPPER, _LAST, _SEQUENCED,
                       _TOPIC_IS_ADDRESS, _TWO_FRAMES, _U32_PACK, _U32_UNPACK_FROM, _U64_PACK,
                       _U64_UNPACK_FROM, _WITH_CONTENT, _header, _number, _string, frame0_prefix,
                       subscription_prefix)
from .bulk import _check_bulk, bulk_heads_frame0, bulk_records_frame0, pack_heads


# --------------------------------------------------------------------------- encode
def encode(msg: Message) -> list[bytes]:
    """The frames of `msg`, byte-identical to what libdafka sends."""
    if isinstance(msg, (Record, DirectRecord, Head, DirectHead)):
        seq = _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE))
        frame0 = frame0_prefix(msg.COMMAND, msg.topic, msg.address, msg.subject) + seq
        if msg.COMMAND in _WITH_CONTENT:
            return [frame0, bytes(msg.content)]
        return [frame0]
    if isinstance(msg, Fetch):
        tail = _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE)) + _U32_PACK(
            _number(msg.count, "count", MAX_COUNT))
        return [frame0_prefix(msg.COMMAND, msg.topic, msg.address, msg.subject) + tail]
    if isinstance(msg, BulkFetch):
        return [b"".join((
            _header(msg.COMMAND, msg.topic), _string(msg.address, "address"),
            _string(msg.partition, "partition"), _string(msg.subject, "subject"),
            _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE)),
            _U32_PACK(_number(msg.count, "count", MAX_COUNT)),
            _U32_PACK(_number(msg.max_bytes, "max_bytes", MAX_COUNT))))]
    if isinstance(msg, BulkRecords):
        _check_bulk(msg.content, _number(msg.count, "count", MAX_COUNT),
                    DafkaLimits(max_bulk_records=MAX_COUNT, max_bulk_bytes=1 << 62))
        return [bulk_records_frame0(msg.topic, msg.address, msg.partition, msg.subject,
                                    msg.sequence, msg.count, msg.last), bytes(msg.content)]
    if isinstance(msg, BulkGetHeads):
        return [b"".join((_header(msg.COMMAND, msg.topic), _string(msg.address, "address"),
                          _U32_PACK(_number(msg.request, "request", MAX_COUNT)),
                          _string(msg.prefix, "prefix")))]
    if isinstance(msg, BulkHeads):
        return [bulk_heads_frame0(msg.topic, msg.address, msg.request, msg.first,
                                  len(msg.heads), msg.total), pack_heads(msg.heads)]
    if isinstance(msg, Ack):
        return [_header(msg.COMMAND, msg.topic) + _string(msg.subject, "subject")
                + _U64_PACK(_number(msg.sequence, "sequence", MAX_SEQUENCE))]
    if isinstance(msg, (GetHeads, StoreHello)):
        return [_header(msg.COMMAND, msg.topic) + _string(msg.address, "address")]
    if isinstance(msg, ConsumerHello):
        parts = [_header(msg.COMMAND, msg.topic), _string(msg.address, "address"),
                 _U32_PACK(_number(len(msg.subjects), "subjects", MAX_COUNT))]
        for subject in msg.subjects:
            data = subject.encode()
            parts += (_U32_PACK(len(data)), data)
        return [b"".join(parts)]
    if isinstance(msg, Beacon):
        return [b"B", msg.sender.encode(), msg.host.encode(),
                str(_number(msg.port, "port", 65535)).encode()]
    if isinstance(msg, TowerBeacon):
        return [b"B", msg.sender.encode(), msg.endpoint.encode()]
    if isinstance(msg, Welcome):
        return [b"W"]
    if isinstance(msg, Subscription):
        prefix = b"" if msg.command is None else subscription_prefix(msg.command, msg.topic)
        return [(b"\x01" if msg.subscribe else b"\x00") + prefix]
    raise TypeError(f"not a Dafka message: {type(msg).__name__}")


# --------------------------------------------------------------------------- decode
def _text(data: bytes, name: str, offset: int) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InvalidField(name, "is not valid UTF-8", protocol=PROTOCOL,
                           offset=offset) from None


def _check_address(data: bytes, name: str, offset: int, limits: DafkaLimits) -> str:
    if limits.strict_addresses and (len(data) != ADDRESS_LENGTH
                                    or data.translate(None, _HEX_UPPER)):
        raise InvalidField(name, "must be 32 uppercase hex characters",
                           protocol=PROTOCOL, offset=offset)
    return _text(data, name, offset)


class Decoder:
    """Decodes frames under one set of `DafkaLimits`, fast on the RECORD path.

    M/D/H/E frames of one partition differ only in their last 8 bytes (the sequence),
    so the decoder remembers each header (frame 0 minus the sequence) it has fully
    validated and decodes the next message of that partition with one dict lookup.
    The memory is bounded (`cache_size` headers) and holds only validated headers, so
    the result is exactly that of the full decode.
    """

    __slots__ = ("limits", "_headers", "_cache_size")

    def __init__(self, limits: DafkaLimits = DEFAULT_LIMITS, cache_size: int = 4096) -> None:
        self.limits = limits
        self._headers: dict[bytes, tuple] = {}
        self._cache_size = cache_size

    def decode(self, frames: Sequence[bytes]) -> Message:
        """See the module-level `decode`."""
        frame0 = frames[0] if frames else None
        if type(frame0) is bytes:
            head = self._headers.get(frame0[:-8])
            if head is not None and head[4] == len(frames):
                sequence = _U64_UNPACK_FROM(frame0, len(frame0) - 8)[0]
                if head[4] == 1:
                    return head[0](head[1], head[2], head[3], sequence)
                content = frames[1]
                if type(content) is bytes and len(content) <= self.limits.max_content_bytes:
                    return head[0](head[1], head[2], head[3], sequence, content)
        msg = _decode(frames, self.limits)
        if type(msg) in _SEQUENCED:
            if len(self._headers) >= self._cache_size:
                self._headers.clear()
            self._headers[frames[0][:-8]] = (type(msg), msg.topic, msg.address,
                                             msg.subject, len(frames))
        return msg


_DEFAULT_DECODER = Decoder()


def decode(frames: Sequence[bytes], limits: DafkaLimits = DEFAULT_LIMITS) -> Message:
    """Decode one ZeroMQ message (its frames) into a message object.

    Raises a `ProtocolError` subclass naming the field for anything malformed: too few
    or too many frames, a frame shorter than its fields, a declared size over `limits`,
    a version other than 1, bad UTF-8, a malformed address, trailing bytes. Nodes keep
    a `Decoder` of their own; this function uses a shared one for the default limits.
    """
    if limits is DEFAULT_LIMITS:
        return _DEFAULT_DECODER.decode(frames)
    return _decode(frames, limits)


def _decode(frames: Sequence[bytes], limits: DafkaLimits) -> Message:
    if not frames:
        raise Truncated("frames", "no frame at all", protocol=PROTOCOL)
    frame0 = frames[0]
    if not isinstance(frame0, bytes):
        frames = [bytes(f) for f in frames]
        frame0 = frames[0]
    if not frame0:
        raise Truncated("command", "frame 0 is empty", protocol=PROTOCOL, offset=0)
    if len(frame0) > limits.max_frame_bytes:
        raise LimitExceeded("frame0", f"{len(frame0)} bytes, limit "
                            f"{limits.max_frame_bytes}", protocol=PROTOCOL)
    first = frame0[0]
    if first <= 1 and len(frames) == 1:
        return _decode_subscription(frame0, limits)
    if first == 0x42:  # 'B'
        return _decode_beacon(frames, limits)
    if first == 0x57 and len(frame0) == 1 and len(frames) == 1:  # 'W' alone
        return Welcome()
    if first not in _DECODERS:
        raise UnknownMessageType("command", f"unknown command id 0x{first:02x}",
                                 protocol=PROTOCOL, offset=0)
    expected = 2 if first in _TWO_FRAMES else 1
    if len(frames) != expected:
        raise InvalidField("frames", f"{Command(first).wire_name} has {expected} "
                           f"frame(s), got {len(frames)}", protocol=PROTOCOL)
    nul = frame0.find(0, 1)
    if nul < 0:
        raise Truncated("topic", "no NUL terminator", protocol=PROTOCOL, offset=1)
    if nul - 1 > limits.max_topic_bytes:
        raise LimitExceeded("topic", f"{nul - 1} bytes, limit {limits.max_topic_bytes}",
                            protocol=PROTOCOL, offset=1)
    if nul + 1 >= len(frame0):
        raise Truncated("version", "frame 0 ends after the topic", protocol=PROTOCOL,
                        offset=nul + 1)
    if frame0[nul + 1] != VERSION:
        raise InvalidField("version", f"{frame0[nul + 1]}, only 1 is spoken",
                           protocol=PROTOCOL, offset=nul + 1)
    topic_bytes = frame0[1:nul]
    if first in _TOPIC_IS_ADDRESS:
        topic = _check_address(topic_bytes, "topic", 1, limits)
    else:
        topic = _text(topic_bytes, "topic", 1)
    return _DECODERS[first](frames, frame0, topic, nul + 2, limits)


def _take_string(frame0: bytes, pos: int, name: str) -> tuple[bytes, int]:
    if pos >= len(frame0):
        raise Truncated(name, "missing length byte", protocol=PROTOCOL, offset=pos)
    end = pos + 1 + frame0[pos]
    if end > len(frame0):
        raise Truncated(name, f"declares {frame0[pos]} bytes, "
                        f"{len(frame0) - pos - 1} left", protocol=PROTOCOL, offset=pos)
    return frame0[pos + 1:end], end


def _take_number(frame0: bytes, pos: int, size: int, name: str) -> int:
    if pos + size > len(frame0):
        raise Truncated(name, f"needs {size} bytes, {len(frame0) - pos} left",
                        protocol=PROTOCOL, offset=pos)
    return (_U64_UNPACK_FROM if size == 8 else _U32_UNPACK_FROM)(frame0, pos)[0]


def _end(frame0: bytes, pos: int) -> None:
    if pos != len(frame0):
        raise InvalidField("frame0", f"{len(frame0) - pos} trailing bytes",
                           protocol=PROTOCOL, offset=pos)


def _address_subject(frame0: bytes, pos: int, limits: DafkaLimits) -> tuple[str, str, int]:
    raw, end = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    raw, end2 = _take_string(frame0, end, "subject")
    return address, _text(raw, "subject", end), end2


def _content(frames: Sequence[bytes], limits: DafkaLimits) -> bytes:
    content = frames[1]
    if len(content) > limits.max_content_bytes:
        raise LimitExceeded("content", f"{len(content)} bytes, limit "
                            f"{limits.max_content_bytes}", protocol=PROTOCOL)
    return content if isinstance(content, bytes) else bytes(content)


def _decode_sequenced(cls: type, with_content: bool):
    """Decoder of the address/subject/sequence layout (M, D, H, E)."""
    def decode_sequenced(frames, frame0, topic, pos, limits):
        address, subject, pos = _address_subject(frame0, pos, limits)
        sequence = _take_number(frame0, pos, 8, "sequence")
        _end(frame0, pos + 8)
        if with_content:
            return cls(topic, address, subject, sequence, _content(frames, limits))
        return cls(topic, address, subject, sequence)
    return decode_sequenced


def _decode_fetch(frames, frame0, topic, pos, limits):
    address, subject, pos = _address_subject(frame0, pos, limits)
    sequence = _take_number(frame0, pos, 8, "sequence")
    count = _take_number(frame0, pos + 8, 4, "count")
    _end(frame0, pos + 12)
    return Fetch(topic, address, subject, sequence, count)


def _decode_ack(frames, frame0, topic, pos, limits):
    raw, pos2 = _take_string(frame0, pos, "subject")
    subject = _text(raw, "subject", pos)
    sequence = _take_number(frame0, pos2, 8, "sequence")
    _end(frame0, pos2 + 8)
    return Ack(topic, subject, sequence)


def _decode_address_only(cls):
    def decode_address_only(frames, frame0, topic, pos, limits):
        raw, end = _take_string(frame0, pos, "address")
        address = _check_address(raw, "address", pos, limits)
        _end(frame0, end)
        return cls(topic, address)
    return decode_address_only


def _decode_consumer_hello(frames, frame0, topic, pos, limits):
    raw, pos = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos - len(raw) - 1, limits)
    count = _take_number(frame0, pos, 4, "subjects")
    pos += 4
    if count > limits.max_subjects:
        raise LimitExceeded("subjects", f"count {count}, limit {limits.max_subjects}",
                            protocol=PROTOCOL, offset=pos - 4)
    if count * 4 > len(frame0) - pos:
        raise Truncated("subjects", f"count {count} cannot fit in "
                        f"{len(frame0) - pos} bytes", protocol=PROTOCOL, offset=pos - 4)
    subjects = []
    for _ in range(count):
        size = _take_number(frame0, pos, 4, "subjects")
        if size > limits.max_topic_bytes:
            raise LimitExceeded("subjects", f"item of {size} bytes, limit "
                                f"{limits.max_topic_bytes}", protocol=PROTOCOL, offset=pos)
        if pos + 4 + size > len(frame0):
            raise Truncated("subjects", f"item declares {size} bytes, "
                            f"{len(frame0) - pos - 4} left", protocol=PROTOCOL, offset=pos)
        subjects.append(_text(frame0[pos + 4:pos + 4 + size], "subjects", pos + 4))
        pos += 4 + size
    _end(frame0, pos)
    return ConsumerHello(topic, address, subjects)


def _decode_bulk_fetch(frames, frame0, topic, pos, limits):
    address, partition, subject, pos = _bulk_names(frame0, pos, limits)
    sequence = _take_number(frame0, pos, 8, "sequence")
    count = _take_number(frame0, pos + 8, 4, "count")
    max_bytes = _take_number(frame0, pos + 12, 4, "max_bytes")
    _end(frame0, pos + 16)
    return BulkFetch(topic, address, partition, subject, sequence, count, max_bytes)


def _decode_bulk_records(frames, frame0, topic, pos, limits):
    address, partition, subject, pos = _bulk_names(frame0, pos, limits)
    sequence = _take_number(frame0, pos, 8, "sequence")
    count = _take_number(frame0, pos + 8, 4, "count")
    if pos + 12 >= len(frame0):
        raise Truncated("flags", "missing", protocol=PROTOCOL, offset=pos + 12)
    flags = frame0[pos + 12]
    if flags & ~_LAST:
        raise InvalidField("flags", f"0x{flags:02x}: only bit 0 (last) is defined",
                           protocol=PROTOCOL, offset=pos + 12)
    _end(frame0, pos + 13)
    content = frames[1]
    _check_bulk(content, count, limits)
    return BulkRecords(topic, address, partition, subject, sequence, count,
                       bool(flags & _LAST),
                       content if isinstance(content, bytes) else bytes(content))


def _decode_bulk_get_heads(frames, frame0, topic, pos, limits):
    raw, pos2 = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    request = _take_number(frame0, pos2, 4, "request")
    raw, end = _take_string(frame0, pos2 + 4, "prefix")
    if len(raw) > limits.max_topic_bytes:
        raise LimitExceeded("prefix", f"{len(raw)} bytes, limit {limits.max_topic_bytes}",
                            protocol=PROTOCOL, offset=pos2 + 4)
    _end(frame0, end)
    return BulkGetHeads(topic, address, request, _text(raw, "prefix", pos2 + 5))


def _decode_bulk_heads(frames, frame0, topic, pos, limits):
    raw, pos2 = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    request = _take_number(frame0, pos2, 4, "request")
    first = _take_number(frame0, pos2 + 4, 4, "first")
    count = _take_number(frame0, pos2 + 8, 4, "count")
    total = _take_number(frame0, pos2 + 12, 4, "total")
    _end(frame0, pos2 + 16)
    # Sizes before anything is sliced: the count, then frame 1 against what `count`
    # entries can occupy at least and at most.
    if count > limits.max_bulk_heads:
        raise LimitExceeded("count", f"{count} heads, limit {limits.max_bulk_heads}",
                            protocol=PROTOCOL, offset=pos2 + 8)
    if first + count > total:
        raise InvalidField("total", f"{total} < first {first} + count {count}",
                           protocol=PROTOCOL, offset=pos2 + 12)
    data = frames[1]
    if not isinstance(data, bytes):
        data = bytes(data)
    if len(data) > count * HEAD_ENTRY_MAX:
        raise LimitExceeded("heads", f"{len(data)} bytes for {count} heads, at most "
                            f"{count * HEAD_ENTRY_MAX}", protocol=PROTOCOL)
    if len(data) < count * HEAD_ENTRY_MIN:
        raise Truncated("heads", f"{len(data)} bytes for {count} heads, at least "
                        f"{count * HEAD_ENTRY_MIN}", protocol=PROTOCOL)
    heads: list[tuple[str, str, int]] = []
    at = 0
    for _ in range(count):
        raw, at2 = _take_string(data, at, "heads")
        if len(raw) > limits.max_topic_bytes:
            raise LimitExceeded("heads", f"subject of {len(raw)} bytes, limit "
                                f"{limits.max_topic_bytes}", protocol=PROTOCOL, offset=at)
        subject = _text(raw, "heads", at)
        raw, at3 = _take_string(data, at2, "heads")
        partition = _check_address(raw, "heads", at2, limits)
        heads.append((subject, partition, _take_number(data, at3, 8, "heads")))
        at = at3 + 8
    if at != len(data):
        raise InvalidField("heads", f"{len(data) - at} trailing bytes", protocol=PROTOCOL,
                           offset=at)
    return BulkHeads(topic, address, request, first, total, heads)


def _bulk_names(frame0: bytes, pos: int, limits: DafkaLimits) -> tuple[str, str, str, int]:
    """address, partition (both node addresses) and subject of X / Y frames."""
    raw, end = _take_string(frame0, pos, "address")
    address = _check_address(raw, "address", pos, limits)
    raw, end2 = _take_string(frame0, end, "partition")
    partition = _check_address(raw, "partition", end, limits)
    raw, end3 = _take_string(frame0, end2, "subject")
    return address, partition, _text(raw, "subject", end2), end3


_DECODERS = {
    Command.RECORD: _decode_sequenced(Record, True),
    Command.DIRECT_RECORD: _decode_sequenced(DirectRecord, True),
    Command.FETCH: _decode_fetch,
    Command.ACK: _decode_ack,
    Command.HEAD: _decode_sequenced(Head, False),
    Command.DIRECT_HEAD: _decode_sequenced(DirectHead, False),
    Command.GET_HEADS: _decode_address_only(GetHeads),
    Command.CONSUMER_HELLO: _decode_consumer_hello,
    Command.STORE_HELLO: _decode_address_only(StoreHello),
    Command.BULK_FETCH: _decode_bulk_fetch,
    Command.BULK_RECORDS: _decode_bulk_records,
    Command.BULK_GET_HEADS: _decode_bulk_get_heads,
    Command.BULK_HEADS: _decode_bulk_heads,
}


def _decode_subscription(frame0: bytes, limits: DafkaLimits) -> Subscription:
    subscribe = frame0[0] == 1
    if len(frame0) == 1:
        return Subscription(subscribe, None)
    try:
        command = Command(frame0[1])
    except ValueError:
        raise UnknownMessageType("command", f"subscription to unknown command id "
                                 f"0x{frame0[1]:02x}", protocol=PROTOCOL, offset=1) from None
    if len(frame0) - 2 > limits.max_topic_bytes:
        raise LimitExceeded("topic", f"{len(frame0) - 2} bytes, limit "
                            f"{limits.max_topic_bytes}", protocol=PROTOCOL, offset=2)
    return Subscription(subscribe, command, _text(frame0[2:], "topic", 2))


def _decode_beacon(frames: Sequence[bytes], limits: DafkaLimits) -> Beacon | TowerBeacon:
    if frames[0] != b"B":
        raise InvalidField("beacon", "frame 0 must be exactly 'B'", protocol=PROTOCOL)
    if len(frames) not in (3, 4):
        raise InvalidField("frames", f"a beacon has 3 (tower) or 4 (node) frames, got "
                           f"{len(frames)}", protocol=PROTOCOL)
    sender = _check_address(frames[1], "sender", 0, limits)
    if len(frames) == 3:
        if len(frames[2]) > limits.max_endpoint_bytes:
            raise LimitExceeded("endpoint", f"{len(frames[2])} bytes, limit "
                                f"{limits.max_endpoint_bytes}", protocol=PROTOCOL)
        endpoint = _text(frames[2], "endpoint", 0)
        found = _TOWER_ENDPOINT.fullmatch(endpoint)
        if found is None or not 0 < int(found.group(2)) <= 65535:
            # every node connects to it: one a SUB refuses must not reach them
            raise InvalidField("endpoint", f"{endpoint[:64]!r} is not tcp://HOST:PORT with a "
                               "host name or address and a port 1..65535", protocol=PROTOCOL)
        return TowerBeacon(sender, endpoint)
    if len(frames[2]) > 255:
        raise LimitExceeded("host", f"{len(frames[2])} bytes, limit 255", protocol=PROTOCOL)
    host = _text(frames[2], "host", 0)
    if host and not is_host(host):
        raise InvalidField("host", f"{host[:64]!r} is not a host name or address (the tower "
                           "announces tcp://HOST:PORT)", protocol=PROTOCOL)
    port = frames[3]
    if not port.isdigit() or len(port) > 5 or not 0 < int(port) <= 65535:
        raise InvalidField("port", f"{port[:16]!r} is not a decimal port 1..65535",
                           protocol=PROTOCOL)
    return Beacon(sender, host, int(port))


# A host as ZeroMQ connects to it: a name or IPv4 address (first character a letter or
# digit, as libzmq requires), or an IPv6 address in brackets with an optional zone.
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9._-]+)?\]")
_TOWER_ENDPOINT = re.compile(rf"tcp://({_HOST.pattern}):([0-9]{{1,5}})")


def is_host(text: str) -> bool:
    """Whether a tower may announce ``tcp://text:PORT`` (and every node connect to it)."""
    return len(text) <= 255 and _HOST.fullmatch(text) is not None
