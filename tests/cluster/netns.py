"""Two network namespaces made for one test, linked by a veth pair: a "driver machine" and
a "worker machine" whose addresses (10.231.0.1 and .2) exist only inside them. Nothing
in the host's own namespace changes; deleting the namespaces deletes the pair."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess

DRIVER_ADDRESS, WORKER_ADDRESS = "10.231.0.1", "10.231.0.2"


class NamespacesUnavailable(Exception):
    """Why namespaces cannot be made here (not root, no `ip`, no permission)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NamespacesUnavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


class NamespacePair:
    """`driver` and `worker`: the namespaces' names; `exec(ns)`: the command prefix that
    runs a program inside one."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.driver, self.worker = f"gfd{tag}", f"gfw{tag}"
        self._veth = (f"gfd{tag}"[:15], f"gfw{tag}"[:15])
        self._made: list[str] = []

    def __enter__(self) -> "NamespacePair":
        if os.geteuid() != 0:
            raise NamespacesUnavailable("making network namespaces needs root")
        if shutil.which("ip") is None:
            raise NamespacesUnavailable("the `ip` command (iproute2) is not installed")
        try:
            for name in (self.driver, self.worker):
                _ip("netns", "add", name)
                self._made.append(name)
                _ip("-n", name, "link", "set", "lo", "up")
            driver_end, worker_end = self._veth
            _ip("link", "add", driver_end, "type", "veth", "peer", "name", worker_end)
            _ip("link", "set", driver_end, "netns", self.driver)
            _ip("link", "set", worker_end, "netns", self.worker)
            for name, end, address in ((self.driver, driver_end, DRIVER_ADDRESS),
                                       (self.worker, worker_end, WORKER_ADDRESS)):
                _ip("-n", name, "addr", "add", f"{address}/24", "dev", end)
                _ip("-n", name, "link", "set", end, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self._made.clear()

    @staticmethod
    def exec(name: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", name)
