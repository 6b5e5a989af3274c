"""A Spark standalone cluster of separate processes: one master and N workers started with
pyspark's own `spark-class`, each worker launching executors in JVMs of their own. Any
process can run inside a network namespace (`ip netns exec NS ...`).

The master's port is read from its log ("Starting Spark master at spark://HOST:PORT") and
the workers count as up once the master logged their registration: the test process may sit
in another namespace than the master and cannot ask its web UI.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import pyspark

from tests.support import wait_until

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
REGISTERED = re.compile(r"Registering worker (\S+) with")


class StandaloneCluster:
    """`workers` workers of `cores` cores each; `master_netns` / `worker_netns`: network
    namespaces to run the master and the workers in (None: this process's)."""

    def __init__(self, folder: Path, *, workers: int = 2, cores: int = 1,
                 memory: str = "1g", master_host: str = "127.0.0.1",
                 worker_host: str = "127.0.0.1", master_netns: str | None = None,
                 worker_netns: str | None = None) -> None:
        self.folder = folder
        self.workers, self.cores, self.memory = workers, cores, memory
        self.master_host, self.worker_host = master_host, worker_host
        self.master_netns, self.worker_netns = master_netns, worker_netns
        self.url: str | None = None
        self._procs: list[subprocess.Popen] = []
        self._logs: list[Path] = []

    def __enter__(self) -> "StandaloneCluster":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, timeout: float = 120) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        master_log = self._spawn("master", self.master_netns, self.master_host,
                                 "org.apache.spark.deploy.master.Master",
                                 "--host", self.master_host, "--port", "0",
                                 "--webui-port", "0")
        self.url = wait_until(lambda: self._find(master_log, MASTER_URL), timeout,
                              interval=0.2, message=f"the Spark master's URL in {master_log}")
        for number in range(self.workers):
            work = self.folder / f"worker-{number}"
            work.mkdir(exist_ok=True)
            self._spawn(f"worker-{number}", self.worker_netns, self.worker_host,
                        "org.apache.spark.deploy.worker.Worker", "--host", self.worker_host,
                        "--port", "0", "--webui-port", "0", "--cores", str(self.cores),
                        "--memory", self.memory, "--work-dir", str(work), self.url)
        wait_until(lambda: len(REGISTERED.findall(self._text(master_log))) >= self.workers,
                   timeout, interval=0.2,
                   message=f"{self.workers} workers registered with the master "
                           f"({master_log})")
        registered = REGISTERED.findall(self._text(master_log))
        assert len(registered) == self.workers, registered

    def executor_logs(self) -> list[Path]:
        """Every executor's stderr so far (work/app-*/N/stderr of each worker)."""
        return sorted(self.folder.glob("worker-*/app-*/*/stderr"))

    def describe(self) -> str:
        """The end of each process's log, for a failing test's message."""
        parts = []
        for log in self._logs + self.executor_logs():
            lines = self._text(log).splitlines()[-15:]
            parts.append(f"--- {log}:\n" + "\n".join(lines))
        return "\n".join(parts)

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self._procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._procs.clear()

    # -- processes ------------------------------------------------------------------------------
    def _spawn(self, name: str, netns: str | None, host: str, *args: str) -> Path:
        log = self.folder / f"{name}.log"
        prefix: Sequence[str] = ("ip", "netns", "exec", netns) if netns else ()
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP=host,
                   PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
                   SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                   SPARK_NO_DAEMONIZE="1")
        with open(log, "wb") as out:
            self._procs.append(subprocess.Popen(
                [*prefix, str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=str(self.folder), start_new_session=True))
        self._logs.append(log)
        return log

    @staticmethod
    def _text(log: Path) -> str:
        try:
            return log.read_text(errors="replace")
        except OSError:
            return ""

    def _find(self, log: Path, pattern: re.Pattern) -> str | None:
        match = pattern.search(self._text(log))
        return match.group(1) if match else None
