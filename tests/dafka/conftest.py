"""Fixtures for the Dafka node tests: an in-process tower on 127.0.0.1, fast timers,
node and process bookkeeping so nothing outlives its test."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from connectors.dafka import DafkaConfig, Tower

# Short timers keep discovery fast; one test runs at the real defaults (1 s / 4 s).
FAST = dict(beacon_interval=0.05, beacon_timeout=0.6, head_interval=0.1, tower_wait=10.0,
            bind="tcp://127.0.0.1:*")


@pytest.fixture
def tower():
    with Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") as running:
        yield running


@pytest.fixture
def config(tower) -> DafkaConfig:
    return DafkaConfig(tower_sub=(tower.sub_endpoint,), tower_pub=(tower.pub_endpoint,),
                       **FAST)


@pytest.fixture
def nodes():
    """`nodes(node)` starts a node (Producer, Consumer, Store...) and stops it at the
    end of the test, whatever happens."""
    started = []

    def start(node, **kwargs):
        started.append(node)
        return node.start(**kwargs)

    yield start
    for node in reversed(started):
        node.stop()


def with_config(config: DafkaConfig, **changes) -> DafkaConfig:
    return replace(config, **changes)


class Processes:
    """`garlicfarm dafka ...` child processes, killed at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, stdin=None, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "garlicfarm", "dafka", *args],
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kwargs)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            for stream in (proc.stdout, proc.stderr, proc.stdin):
                if stream:
                    stream.close()


@pytest.fixture
def procs():
    bag = Processes()
    yield bag
    bag.kill_all()
