"""benchmarks/cpu_cgroups.py on this machine's real cgroups (as root; skipped where the
machine offers no CPU cgroups, with the reason): quotas bind, usage counts, and every
group goes on exit, even one left by an exception, the process back where it was."""
from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cpu_cgroups import CpuGroups, find_cgroups  # noqa: E402

WHERE = find_cgroups()
pytestmark = pytest.mark.skipif(isinstance(WHERE, str), reason=f"no CPU cgroups: {WHERE}")
SPIN = [sys.executable, "-c", "while True: pass"]


def _cpu_cgroup(pid: int) -> str:
    """The process's cgroup path in the hierarchy that holds the cpu controller."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if ("cpu" in controllers.split(",") if WHERE.version == 1 else controllers == ""):
            return path
    raise AssertionError(f"no cpu cgroup line for {pid}")


@pytest.fixture
def spinner():
    proc = subprocess.Popen(SPIN)
    yield proc
    proc.kill()
    proc.wait()


def test_a_quota_binds_and_usage_counts(spinner):
    name = f"test-cgroups-{uuid.uuid4().hex[:8]}"
    with CpuGroups(WHERE, name, ["spin"]) as groups:
        groups.add("spin", spinner.pid)
        assert _cpu_cgroup(spinner.pid).endswith(f"/{name}/m-spin")
        groups.quota(0.1)
        start, began = groups.usage()["spin"], time.monotonic()
        deadline = began + 10
        while groups.usage()["spin"] - start < 0.1:     # it runs, and is counted
            assert time.monotonic() < deadline, "a spinning process was counted no CPU"
            time.sleep(0.05)
        spent, wall = groups.usage()["spin"] - start, time.monotonic() - began
        # 10% of a CPU: about a tenth of the wall time (unthrottled, a spinner on an idle
        # core spends all of it); slack for the periods cut at both ends and CFS's 5 ms
        # bandwidth slices
        assert spent <= 0.1 * wall + 0.03, (spent, wall)
        groups.quota(None)


def test_every_group_goes_on_exit_and_the_process_returns(spinner):
    home = _cpu_cgroup(spinner.pid)
    name = f"test-cgroups-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError, match="a failed run"):
        with CpuGroups(WHERE, name, [1, 2]) as groups:
            groups.add(2, spinner.pid)
            groups.quota(0.2)
            made = [folder for member in (None, 1, 2) for folder in groups._dirs(member)]
            assert all(folder.is_dir() for folder in made)
            raise RuntimeError("a failed run")
    assert not any(folder.exists() for folder in made)
    assert spinner.poll() is None, "closing the groups must not end their processes"
    assert _cpu_cgroup(spinner.pid) == home


def test_quotas_the_kernel_refuses_are_refused_here():
    with CpuGroups(WHERE, f"test-cgroups-{uuid.uuid4().hex[:8]}", ["a"]) as groups:
        with pytest.raises(ValueError, match="below 1%"):
            groups.quota(0.001)
