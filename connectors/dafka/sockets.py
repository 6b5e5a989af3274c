"""Reading a Dafka socket: drain what is waiting, decoded, garbage counted."""
from __future__ import annotations

from collections import Counter
from typing import Iterator

import zmq

from connectors.dafka import proto
from consensus.wire.errors import LimitExceeded, ProtocolError, UnknownMessageType

DRAIN_BATCH = 100_000   # messages handled per socket per wake-up, as the C store writer


_CONTENT_COMMANDS = (b"M", b"D", b"Y")   # RECORD, DIRECT-RECORD, BULK-RECORDS


def iter_messages(sock: zmq.Socket, decoder: proto.Decoder, stats: Counter,
                  limit: int = DRAIN_BATCH) -> Iterator[proto.Message]:
    """Drain up to `limit` messages from `sock` without blocking, decoded; frames that
    do not decode are dropped and counted in `stats` by kind (garbage never stops a
    node).

    Speed: recv_multipart asks getsockopt(RCVMORE) after every frame, which costs
    ~4 us in pyzmq 27 (it builds a SocketOption enum per call); a Frame's `more` is
    cheaper, and plain bytes cheaper still. So frame 0 comes as a Frame (to learn
    whether more follows) and, for RECORD / DIRECT-RECORD, the content frame as bytes:
    exactly as libdafka's dafka_proto_recv, which reads one content frame and leaves
    anything after it to be read as the next message (BULK-RECORDS, our extension,
    has the same shape). Measured 2.6 us against 4.4 us
    for two Frames per RECORD.
    """
    recv = sock.recv
    decode = decoder.decode
    for _ in range(limit):
        try:
            frame = recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return
        frames = [frame.bytes]
        if frame.more:
            if frames[0][:1] in _CONTENT_COMMANDS:
                frames.append(recv(zmq.NOBLOCK))
            else:
                while frame.more:
                    frame = recv(zmq.NOBLOCK, copy=False)
                    frames.append(frame.bytes)
        try:
            msg = decode(frames)
        except UnknownMessageType:
            stats["dropped_unknown"] += 1
        except LimitExceeded:
            stats["dropped_oversize"] += 1
        except ProtocolError:
            stats["dropped_malformed"] += 1
        else:
            yield msg


__all__ = ["DRAIN_BATCH", "iter_messages"]
