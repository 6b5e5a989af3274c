"""Fixtures for the CHP tests: server processes that are always cleaned up."""
from __future__ import annotations

import pytest

from tests.chp.support import ServerProcess


@pytest.fixture
def servers(tmp_path):
    """`servers(name, *args, port=None)` starts a server process (stopped at teardown)."""
    started: list[ServerProcess] = []

    def start(name: str, *args: str, port: int | None = None) -> ServerProcess:
        server = ServerProcess(tmp_path, name, *args, port=port)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()
