"""CHP servers as real processes on 127.0.0.1, on ports nothing else uses."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, TypeVar

from tests.support import free_port, wait_until

T = TypeVar("T")

READY = "chp server "   # the first log line, written once every socket is bound


class PortsTaken(AssertionError):
    """A server given fixed ports found one taken (another test bound it meanwhile)."""


def on_fresh_ports(start: Callable[[], T], attempts: int = 5) -> T:
    """Run `start` (which picks its ports and starts servers that name each other's
    ports) again while a port it picked was taken between choosing and binding."""
    for attempt in range(attempts):
        try:
            return start()
        except PortsTaken:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def free_port_span(count: int = 3, attempts: int = 100) -> int:
    """A port P such that P .. P+count-1 are all free on 127.0.0.1 right now."""
    for _ in range(attempts):
        base = free_port()
        if base + count > 65536:
            continue
        held = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


def chp_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "garlicfarm", "chp", *args]


class ServerProcess:
    """`garlicfarm chp server` in a child process; its log goes to a file."""

    def __init__(self, log_dir: Path, name: str, *args: str, port: int | None = None) -> None:
        self.log_path = log_dir / f"{name}.log"
        self.args = list(args)
        self.port = port
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def start(self, timeout: float = 15.0) -> "ServerProcess":
        """Start and wait until bound; picks new free ports if they were taken meanwhile
        (only when the port was not fixed by the caller)."""
        fixed = self.port is not None
        for _ in range(5):
            if not fixed:
                self.port = free_port_span()
            with open(self.log_path, "w") as log:
                self.proc = subprocess.Popen(
                    chp_command("server", "--port", str(self.port), *self.args),
                    stdout=log, stderr=subprocess.STDOUT, env={**os.environ,
                                                               "PYTHONUNBUFFERED": "1"})
            wait_until(lambda: READY in self.log() or self.proc.poll() is not None,
                       timeout, message=f"server {self.log_path.name} to bind")
            if self.proc.poll() is None:
                return self
            if "cannot bind" not in self.log():
                raise AssertionError(f"server exited: {self.log()}")
            if fixed:
                raise PortsTaken(f"server exited: {self.log()}")
        raise AssertionError(f"server could not bind: {self.log()}")

    def kill(self) -> None:
        """SIGKILL: no chance to flush or say goodbye."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode if self.proc else 0
