"""Hostile subscriptions at the ZeroMQ doors (issue 26 items 6-7): RSS of a Dafka tower,
a Dafka store and a CHP server before, at the peak of, and after a subscriber sends one
oversized prefix of each size and leaves; and whether each process survived.

    PYTHONPATH=$PWD python benchmarks/zmq_doors.py [SIZE_KIB ...]   (default 128 1024 4096 16384)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from tests.zmtp import RawPeer, rss_mb


def start(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "garlicfarm", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return proc, proc.stdout.readline().decode()


def attack(name: str, proc: subprocess.Popen, endpoint: str, size: int) -> str:
    before = rss_mb(proc.pid)
    peak = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() and proc.poll() is None:
            peak[0] = max(peak[0], rss_mb(proc.pid))
            time.sleep(0.05)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with RawPeer(endpoint) as peer:
            peer.subscribe(b"a" * size)
            peer.closed_by_peer(2.0)
    except OSError:
        pass
    time.sleep(2.0)
    done.set()
    watcher.join()
    after = rss_mb(proc.pid) if proc.poll() is None else float("nan")
    state = "alive" if proc.poll() is None else f"DIED ({proc.returncode})"
    return (f"| {name} | {size >> 10} KiB | {before:.0f} | {peak[0]:.0f} | {after:.0f} "
            f"| {state} |")


def main() -> None:
    sizes = [int(a) << 10 for a in sys.argv[1:]] or [128 << 10, 1 << 20, 4 << 20, 16 << 20]
    print("| process | subscription | RSS before MB | peak MB | after leaving MB | |")
    print("|---|---|---|---|---|---|")
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            tower, line = start("dafka", "tower", "--sub", "tcp://127.0.0.1:*",
                                "--pub", "tcp://127.0.0.1:*")
            sub, pub = re.findall(r"tcp://[\d.]+:\d+", line)
            store, line = start("dafka", "store", "--sub", sub, "--pub", pub,
                                "--data-dir", os.path.join(tmp, "db"))
            reader = re.findall(r"tcp://[\d.]+:\d+", line)[1]
            chp = subprocess.Popen([sys.executable, "-m", "garlicfarm", "chp", "server",
                                    "--port", "47310"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(1.5)
            try:
                print(attack("dafka store reader", store, reader, size))
                print(attack("chp server publisher", chp, "tcp://127.0.0.1:47311", size))
                print(attack("dafka tower XPUB", tower, pub, size), flush=True)
            finally:
                for proc in (tower, store, chp):
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    main()
