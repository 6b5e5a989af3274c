"""`python -m consensus.linearizability`, run as a real process: verdicts and exit codes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import VECTORS

HISTORIES = VECTORS / "linearizability"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "consensus.linearizability", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(120)
def test_verdicts_and_exit_codes(tmp_path) -> None:
    ok = run(HISTORIES / "kv/c10-ok.txt")
    assert ok.returncode == 0 and "LINEARIZABLE: 337 operations, 10 keys, kv model" in ok.stdout

    bad = run(HISTORIES / "jepsen/etcd_000.log", "--model", "register")
    assert bad.returncode == 1 and "NOT LINEARIZABLE" in bad.stdout
    assert "longest linearizable prefix" in bad.stdout

    unknown = run(HISTORIES / "kv/c50-ok.txt", "--timeout", "1e-9", "--json")
    assert unknown.returncode == 2
    summary = json.loads(unknown.stdout)
    assert summary["verdict"] == "unknown" and summary["model"] == "kv"

    garbage = tmp_path / "garbage.txt"
    garbage.write_text("hello\n")
    broken = run(garbage)
    assert broken.returncode == 3 and "garbage.txt:1: format" in broken.stderr

    wrong_model = run(HISTORIES / "kv/c01-ok.txt", "--model", "register")
    assert wrong_model.returncode == 3 and "no function 'append'" in wrong_model.stderr

    assert run(HISTORIES / "kv/c01-ok.txt", "--timeout", "-1").returncode == 3
    assert run(tmp_path / "missing.edn").returncode == 3
