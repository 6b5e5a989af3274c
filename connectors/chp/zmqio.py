"""Multipart send and receive for the five-frame kvmsg, tuned for pyzmq.

Deliberately not `Socket.recv_multipart` / `send_multipart`: they ask libzmq for
ZMQ_RCVMORE with a getsockopt call per frame and loop in Python, which costs about twice
as much as the frames themselves on a kvmsg (benchmarks/chp.py measures both). Here a
frame is received as a `zmq.Frame`, whose `more` flag comes with it, and sent with
explicit SNDMORE flags. Framing is checked exactly, so a short or long message never
swallows its neighbour.
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

import zmq

from consensus.wire.errors import ProtocolError

from .proto import DEFAULT_LIMITS, Channel, ChpLimits, Message, decode

SNDMORE = zmq.SNDMORE
NOBLOCK = zmq.NOBLOCK
MAX_FRAMES = 8   # a longer message is read to its end but only this many frames kept
# The backend's send, skipping the Python-level wrapper of zmq.Socket.send (which only
# adds the DRAFT routing_id/group arguments): 25-50% of the cost of sending a frame.
_send = getattr(zmq.backend.Socket, "send", zmq.Socket.send)


def recv_frames(socket: zmq.Socket, flags: int = 0) -> list[bytes]:
    """One whole message. Raises `zmq.Again` with NOBLOCK when nothing is waiting.
    A message with more than MAX_FRAMES frames comes back as MAX_FRAMES + 1 frames,
    enough for any decoder to reject it, without holding the rest in memory."""
    recv = socket.recv
    frame = recv(flags, copy=False)
    frames = [frame.bytes]
    while frame.more:
        frame = recv(0, copy=False)
        if len(frames) <= MAX_FRAMES:
            frames.append(frame.bytes)
    return frames


def drain(socket: zmq.Socket, limit: int = 1 << 30) -> Iterator[list[bytes]]:
    """The messages already waiting on `socket` (at most `limit`), without blocking."""
    for _ in range(limit):
        try:
            yield recv_frames(socket, NOBLOCK)
        except zmq.Again:
            return


def drain_decoded(socket: zmq.Socket, channel: Channel,
                  on_error: Callable[[ProtocolError], None], *,
                  limits: ChpLimits = DEFAULT_LIMITS, limit: int = 1 << 30) -> Iterator[Message]:
    """`drain`, decoded; a malformed message goes to `on_error` and is skipped.
    (The loop of `drain` is repeated here, not nested: one generator less per update.)"""
    for _ in range(limit):
        try:
            frames = recv_frames(socket, NOBLOCK)
        except zmq.Again:
            return
        try:
            yield decode(frames, channel, limits)
        except ProtocolError as exc:
            on_error(exc)


def send_frames(socket: zmq.Socket, frames: Sequence[bytes], flags: int = 0) -> None:
    """One whole message (at least one frame)."""
    more = flags | SNDMORE
    last = len(frames) - 1
    for i in range(last):
        _send(socket, frames[i], more)
    _send(socket, frames[last], flags)


def send_kvmsg(socket: zmq.Socket, key: bytes, sequence: bytes, uuid: bytes,
               properties: bytes, body: bytes) -> None:
    """The five kvmsg frames, unrolled: the publisher's hot path."""
    _send(socket, key, SNDMORE)
    _send(socket, sequence, SNDMORE)
    _send(socket, uuid, SNDMORE)
    _send(socket, properties, SNDMORE)
    _send(socket, body, 0)


__all__ = ["MAX_FRAMES", "drain", "drain_decoded", "recv_frames", "send_frames", "send_kvmsg"]
