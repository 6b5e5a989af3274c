"""An embedded Dafka deployment on loopback: a tower in this process and store processes
(`garlicfarm dafka store`), with fast beacons, for notebooks, demos and tests.

    with LocalDafka(stores=2) as dafka:
        df.writeStream.format("garlicfarm").option("kind", "dafka") \\
            .options(**dafka.options, **farm.options).option("topic", "orders")...
        dafka.kill(0); dafka.restart(0)     # a store SIGKILLed and started again
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from connectors.dafka import DafkaConfig, StoreClient, Tower

PORT_ATTEMPTS = 20


def _tower_on_free_ports() -> Tower:
    """A tower whose publisher is at its beacon port + 1 (what `tower` options assume)."""
    for _ in range(PORT_ATTEMPTS):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port >= 65535:
            continue
        tower = Tower(f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}")
        try:
            return tower.start()
        except OSError:
            continue
    raise OSError(f"no two consecutive free ports on 127.0.0.1 after {PORT_ATTEMPTS} tries")


class LocalDafka:
    """A tower and `stores` store processes; `beacon_interval` / `beacon_timeout` in
    seconds (every node of a deployment must agree on them: `options` passes them on)."""

    def __init__(self, stores: int = 1, data_dir: str | os.PathLike | None = None, *,
                 beacon_interval: float = 0.1, beacon_timeout: float = 1.0,
                 head_interval: float = 0.1, start_timeout: float = 30.0) -> None:
        if stores < 1:
            raise ValueError("LocalDafka needs stores >= 1")
        self.store_count = stores
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="garlicfarm-dafka-"))
        self.beacon_interval = beacon_interval
        self.beacon_timeout = beacon_timeout
        self.head_interval = head_interval
        self.start_timeout = start_timeout
        self.tower: Tower | None = None
        self.processes: list[subprocess.Popen | None] = [None] * stores

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "LocalDafka":
        if self.tower is not None:
            return self
        atexit.register(self.close)
        try:
            self.tower = _tower_on_free_ports()
            for number in range(self.store_count):
                self.restart(number, wait=False)
            self.wait_for_stores(self.store_count)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every store process and the tower (idempotent)."""
        for number in range(self.store_count):
            self.kill(number, sig=signal.SIGTERM)
        if self.tower is not None:
            self.tower.stop()
            self.tower = None
        atexit.unregister(self.close)
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "LocalDafka":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- what Spark programs use -------------------------------------------------------------------
    @property
    def tower_endpoint(self) -> str:
        if self.tower is None:
            raise RuntimeError("this LocalDafka is not running: use `with LocalDafka():`")
        return self.tower.sub_endpoint

    @property
    def options(self) -> dict[str, str]:
        """Options that point the dafka kind at this deployment."""
        return {"kind": "dafka", "tower": self.tower_endpoint,
                "dafka.beacon/interval": f"{self.beacon_interval * 1000:g}",
                "dafka.beacon/timeout": f"{self.beacon_timeout * 1000:g}",
                "dafka.producer/head_interval": f"{self.head_interval * 1000:g}"}

    @property
    def config(self) -> DafkaConfig:
        return DafkaConfig(beacon_interval=self.beacon_interval,
                           beacon_timeout=self.beacon_timeout,
                           head_interval=self.head_interval).with_towers([self.tower_endpoint])

    def wait_for_stores(self, count: int | None = None) -> None:
        with StoreClient(self.config) as client:
            client.wait_for_stores(count or self.running, self.start_timeout)

    @property
    def running(self) -> int:
        return sum(p is not None and p.poll() is None for p in self.processes)

    # -- faults ------------------------------------------------------------------------------------
    def store_dir(self, number: int) -> Path:
        return self.data_dir / f"store-{number}"

    def kill(self, number: int, sig: int = signal.SIGKILL) -> None:
        """Stop store `number` (SIGKILL by default) and wait for it."""
        process, self.processes[number] = self.processes[number], None
        if process is not None:
            if process.poll() is None:
                process.send_signal(sig)
            process.wait(30)

    def restart(self, number: int, *, wait: bool = True) -> None:
        """Start store `number` on its data directory (again)."""
        self.kill(number)
        self.processes[number] = subprocess.Popen(
            [sys.executable, "-m", "garlicfarm", "dafka", "store",
             "--tower", self.tower_endpoint, "--data-dir", str(self.store_dir(number)),
             "--beacon-interval", str(self.beacon_interval),
             "--beacon-timeout", str(self.beacon_timeout),
             "--exit-with-parent", str(os.getpid())],   # no orphan if we die
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if wait:
            self.wait_for_stores()
