"""A hand-rolled ZMTP 3.0 peer over a plain TCP socket, for probing our ZeroMQ doors.

Why not pyzmq: a pyzmq SUB that subscribes to a 1 MiB prefix builds libzmq's trie in
the *test* process, whose recursive destructor then overflows a stack there (the very
bug under test); and pyzmq cannot send malformed frames. This peer sends exactly the
bytes it is told to, and nothing stays behind when it closes.
"""
from __future__ import annotations

import socket
import struct
import time

GREETING = (b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00")
            + b"\x00" + b"\x00" * 31)


def frame(body: bytes, *, more: bool = False, command: bool = False) -> bytes:
    """One ZMTP 3.0 frame (short or long form)."""
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def ready(socket_type: bytes) -> bytes:
    """The READY command of a NULL-mechanism peer of `socket_type` (b"SUB", ...)."""
    name = b"Socket-Type"
    body = (b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(socket_type))
            + socket_type)
    return frame(body, command=True)


class RawPeer:
    """A connected ZMTP peer: `send_raw` bytes as they are, `subscribe` a prefix."""

    def __init__(self, endpoint: str, socket_type: bytes = b"SUB",
                 timeout: float = 5.0) -> None:
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.sendall(GREETING + ready(socket_type))

    def send_raw(self, data: bytes) -> bool:
        """Send `data`; False when the other side has closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def subscribe(self, prefix: bytes) -> bool:
        return self.send_raw(frame(b"\x01" + prefix))

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """Whether the other side closes the connection within `timeout` (what it
        sends meanwhile is read and discarded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except OSError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawPeer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
