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

    def __init__(self, endpoint: str, socket_type: bytes | None = b"SUB",
                 timeout: float = 5.0) -> None:
        """`socket_type` None: send no handshake (the caller sends what it likes)."""
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if socket_type is not None:
            self.sock.sendall(GREETING + ready(socket_type))
            self._await_handshake()

    def _await_handshake(self) -> None:
        """Read the other side's greeting and READY: libzmq refuses a connection whose
        messages arrive before its own greeting went out (unexpected command)."""
        self._read(64)
        flags = self._read(1)[0]
        size = (struct.unpack(">Q", self._read(8))[0] if flags & 2 else self._read(1)[0])
        self._read(size)

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("the other side closed during the handshake")
            data += chunk
        return data

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


OVERSIZED = (128 << 10, 1 << 20, 16 << 20)   # 128 KiB crashed the tower; 16 MiB: the prober's


def malformed_inputs() -> list[bytes]:
    """Byte strings a hostile peer may send where ZMTP is expected (each on a fresh
    connection): garbage, a bad greeting, truncated and lying frame headers."""
    return [b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n", GREETING[:5], GREETING[:-1] + b"\xff",
            GREETING + b"\x04\xffnot a command",           # a command shorter than said
            GREETING + ready(b"SUB") + b"\x02" + b"\xff" * 8,   # a 2^64 - 1 byte frame
            GREETING + ready(b"SUB") + b"\x02\x00\x00\x00\x00\x7f\xff\xff\xff",
            GREETING + ready(b"PAIR"),                     # a socket type that may not talk
            GREETING + ready(b"SUB") + frame(b"\x01" + b"x" * 100, more=True) + frame(b"y"),
            GREETING + ready(b"SUB") + frame(b"", command=True)]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def probe(endpoint: str, *, subscriptions: int = 0, socket_type: bytes = b"SUB",
          cut_within: float = 5.0) -> list[bool]:
    """Send every oversized subscription and every malformed input to `endpoint`, each
    on its own connection, then `subscriptions` distinct prefixes on one more; for each
    oversized one and the flood, whether the victim closed the connection. (To a
    ROUTER or a SUB, as a DEALER or a PUB, the subscriptions are plain frames.)"""
    cut = []
    for size in OVERSIZED:
        with RawPeer(endpoint, socket_type) as peer:
            peer.subscribe(b"a" * size)
            cut.append(peer.closed_by_peer(cut_within))
    for data in malformed_inputs():
        with RawPeer(endpoint, None) as peer:
            peer.send_raw(data)
    if subscriptions:
        with RawPeer(endpoint, socket_type) as peer:
            for i in range(subscriptions):
                if not peer.subscribe(b"M%06d" % i + b"z" * 200):
                    break
            cut.append(peer.closed_by_peer(cut_within))
    return cut
