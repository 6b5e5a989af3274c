"""A node's ``--metrics`` endpoint against hostile HTTP clients (issue 26, item 8): N idle
connections, then M clients that hang up mid-request; the node's threads, file
descriptors and RSS, the scrape latency while the idle connections are held, and the
tracebacks in its log.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/http_flood.py --idle 1000 --hangups 1000

Run it with PYTHONPATH pointing at another checkout to measure that checkout's server.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import struct
import time
import urllib.request
from pathlib import Path

from consensus.torture.local import LocalCluster


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def _resources(pid: int) -> str:
    return (f"threads {_status(pid, 'Threads')}, fds {len(os.listdir(f'/proc/{pid}/fd'))}, "
            f"RSS {_status(pid, 'VmRSS') / 1024:.0f} MB")


def _scrape_ms(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as answer:
        answer.read()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--hangups", type=int, default=1000)
    p.add_argument("--budget", type=float, default=60.0, help="seconds to open the idle ones")
    args = p.parse_args()
    with LocalCluster(1, extra_args=["--metrics", "127.0.0.1:0"]) as farm:
        log_path = Path(farm.log_path(1))
        deadline = time.monotonic() + 15
        while not (found := re.search(r"metrics on (http://\S+)/metrics",
                                      log_path.read_text(errors="replace"))):
            if time.monotonic() > deadline:
                raise SystemExit("the node logged no metrics address")
            time.sleep(0.05)
        url = found.group(1) + "/metrics"
        host, port = url.split("//")[1].split("/")[0].split(":")
        pid = farm.pid(1)
        print(f"before: {_resources(pid)}; scrape {_scrape_ms(url):.1f} ms")

        idle, start = [], time.monotonic()
        while len(idle) < args.idle and time.monotonic() - start < args.budget:
            try:
                idle.append(socket.create_connection((host, int(port)), timeout=5))
            except OSError:
                pass
        opened = time.monotonic() - start
        scrapes = [_scrape_ms(url) for _ in range(20)]
        print(f"{len(idle)} idle connections opened in {opened:.1f} s; held: "
              f"{_resources(pid)}; 20 scrapes: median {statistics.median(scrapes):.1f} ms, "
              f"max {max(scrapes):.1f} ms")
        for sock in idle:
            sock.close()

        start = time.monotonic()
        for i in range(args.hangups):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" +
                         (b"\r\n" if i % 2 == 0 else b""))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        _scrape_ms(url)
        time.sleep(1.0)     # let a thread-per-connection server finish its tracebacks
        text = log_path.read_text(errors="replace")
        print(f"{args.hangups} hang-ups (half mid-head, half before the answer; reset) in "
              f"{time.monotonic() - start:.1f} s: {text.count('Traceback')} tracebacks, "
              f"log {len(text.encode()) / 1024:.0f} KiB; after: {_resources(pid)}")
        for line in text.splitlines():
            if "garlicfarm.http" in line and "in the last" in line:
                print("  log:", line.split(" ", 2)[2])


if __name__ == "__main__":
    main()
