"""How garlicfarm installs, in real virtualenvs made by the test: PySpark is the runtime's
(no requirement on it, one clear error without it), and a plain editable install keeps
the `garlicfarm` format discoverable from any directory. What the wheel requires and holds:
test_release.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_farm.compat import check_version
from pyspark_farm.errors import UnsupportedPySparkError

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A fresh venv with garlicfarm installed editable (`pip install -e .`, no options)
    and nothing else: no PySpark."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    made = run(sys.executable, "-m", "venv", str(venv))
    assert made.returncode == 0, made.stderr
    installed = run(str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", "-e",
                    str(ROOT), timeout=280)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


@pytest.mark.timeout(300)
def test_plain_editable_install_is_found_by_sparks_lookup_from_any_directory(bare_venv,
                                                                            tmp_path):
    # Spark's lookup of Python data sources: pkgutil.iter_modules() over sys.path, names
    # starting with pyspark_ (pyspark/sql/worker/lookup_data_sources.py).
    found = run(str(bare_venv / "bin" / "python"), "-c",
                "import pkgutil; print(sorted(m.name for m in pkgutil.iter_modules() "
                "if m.name.startswith('pyspark_')))", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "['pyspark_farm']"


@pytest.mark.timeout(300)
def test_importing_without_pyspark_fails_with_one_message(bare_venv, tmp_path):
    done = run(str(bare_venv / "bin" / "python"), "-c", "import pyspark_farm", cwd=tmp_path)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pyspark_farm.errors.UnsupportedPySparkError: ")
    for needle in ("PySpark 4.x", "4.0, 4.1, 4.2, 4.3", "PySpark is not installed",
                   "pip install 'garlicfarm[spark]'", "docs/compatibility.md"):
        assert needle in last, needle
    # The one error, not a chain of them.
    assert "During handling" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    # The rest of the package does not need PySpark.
    farm_side = run(str(bare_venv / "bin" / "python"), "-c",
                    "import consensus.wire.jraft", cwd=tmp_path)
    assert farm_side.returncode == 0, farm_side.stderr


@pytest.mark.parametrize("version,supported", [
    ("3.5.1", False), ("4.0.0", True), ("4.1.4", True), ("4.3.0", True), ("4.9.0.dev0", True),
    ("5.0.0", False)])
def test_supported_versions(version, supported):
    if supported:
        assert check_version(version) == tuple(int(p) for p in version.split(".")[:2])
    else:
        with pytest.raises(UnsupportedPySparkError, match=rf"PySpark {version} is installed.*"
                           r"garlicfarm\[spark\]"):
            check_version(version)
