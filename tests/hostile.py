"""Honest and impatient clients of a node's listener, on real sockets (tests/runtime's
admission tests and benchmarks/hostile_clients.py), beside the torture's `Flood`
(consensus/torture/flood.py), whose bad logins and slowloris those use too:

* `honest_login` - one fresh login (no cached challenge: request 1, then request 2),
  one attempt, True when the node let it in;
* `HonestLogins` - such logins, one after another, while a block runs;
* `ImpatientFlood` - wrong logins that hang up without waiting for their refusal.
"""
from __future__ import annotations

import socket
import threading
import time

from consensus.common.errors import FarmError
from consensus.net.dial import dial
from consensus.net.security import Security, split_endpoint

def honest_login(endpoint: str, password: str, username: str = "farm",
                 timeout: float = 3.0) -> bool:
    """A fresh login, one attempt (a new Security: nothing cached)."""
    try:
        dialed = dial(endpoint, Security(username=username, password=password),
                      timeout=timeout)
    except (FarmError, OSError):
        return False
    dialed.sock.close()
    return True


class _Threads:
    """`threads` threads running `_run` from the block's start to its end."""

    def __init__(self, threads: int, name: str) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True, name=f"{name}-{i}")
                         for i in range(threads)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def _run(self) -> None:
        raise NotImplementedError


class HonestLogins:
    """Fresh single-attempt logins every `pause` seconds until the block ends;
    `results` holds one bool per login and `seconds` how long each took."""

    def __init__(self, endpoint: str, password: str, pause: float = 0.1,
                 timeout: float = 3.0) -> None:
        self.endpoint, self.password, self.pause, self.timeout = \
            endpoint, password, pause, timeout
        self.results: list[bool] = []
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="honest")

    def __enter__(self) -> "HonestLogins":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.results.append(honest_login(self.endpoint, self.password,
                                             timeout=self.timeout))
            self.seconds.append(time.monotonic() - started)
            self._stop.wait(self.pause)


class ImpatientFlood(_Threads):
    """`threads` threads sending a wrong request 2 and hanging up without waiting for
    the answer (the tarpit cannot slow them: only the gate's CPU pacing bounds them)."""

    AUTH = ('Digest username="farm", realm="GarlicFarm@farm", nonce="00", '
            'uri="/GarlicFarm/farm/1/websocket", algorithm=SHA-256, response="00", '
            'opaque="00", qop=auth, nc=00000001, cnonce="00"')
    REQUEST = ("GET /GarlicFarm/farm/1/websocket HTTP/1.1\r\nHost: farm\r\n"
               "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
               f"Authorization: {AUTH}\r\n\r\n").encode()

    def __init__(self, endpoint: str, threads: int = 50) -> None:
        super().__init__(threads, "impatient")
        self.address = split_endpoint(endpoint)
        self.sent = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with socket.create_connection(self.address, timeout=2) as sock:
                    sock.sendall(self.REQUEST)
                self.sent += 1
            except OSError:
                self._stop.wait(0.01)
