"""Interpreters and environment for the tests that build venvs of their own
(test_oldest_pyspark.py, test_release.py)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The oldest Python pyproject.toml declares (requires-python), run by CI with the oldest
#: PySpark (4.0; 4.3 needs 3.11, docs/compatibility.md).
OLDEST_PYTHON = "3.10"


def python_version(python: str) -> str | None:
    """The X.Y of an interpreter, None when it does not run."""
    done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def oldest_python() -> str:
    """A Python of OLDEST_PYTHON: $GARLICFARM_OLDEST_PYTHON, else pyenv's, else python3.10
    on the PATH. Without one the test fails in CI (which must run it) and uses this
    interpreter elsewhere."""
    found = [os.environ.get("GARLICFARM_OLDEST_PYTHON", "")]
    found += sorted(glob.glob(os.path.expanduser(
        f"~/.pyenv/versions/{OLDEST_PYTHON}.*/bin/python")), reverse=True)
    found += [shutil.which(f"python{OLDEST_PYTHON}") or ""]
    for python in filter(None, found):
        if python_version(python) == OLDEST_PYTHON:
            return python
    assert not os.environ.get("CI"), (
        f"CI runs the oldest PySpark on Python {OLDEST_PYTHON} and none was found: install "
        f"it (pyenv install {OLDEST_PYTHON}) or name it with GARLICFARM_OLDEST_PYTHON")
    return sys.executable


def clean_env(python: Path) -> dict[str, str]:
    """This process's environment for a run of `python` (a venv's) that must see only what
    that venv has installed: no PYTHONPATH to a checkout, no Spark or pytest of ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "PYTEST_", "SPARK_", "PYTHON"))}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(python)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    return env
