"""The Spark smoke suite (tests/spark/test_smoke.py) and the JVM reader's tests
(tests/spark/test_columnar_source.py, with its jar built for that PySpark) on the oldest
supported PySpark with the oldest declared Python (3.10, `venvs.oldest_python`), in a venv
of its own: `pip install 'pyspark==4.0.*' -e '.[spark,tls]'`
plus pytest (tls: a test reads a TLS farm), made by this test when missing (about 450 MB
downloaded once; then reused while it still holds PySpark 4.0 and this checkout).
`GARLICFARM_OLDEST_VENV` names another place for it.

`GARLICFARM_SMOKE_PYSPARK=4.1,4.2` runs it on those versions too (each in a
`.venv-pysparkX.Y` of its own): how the 4.1 and 4.2 rows of docs/compatibility.md were
checked; CI runs the oldest only (the whole suite runs on the newest)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat import venvs

ROOT = Path(__file__).resolve().parents[2]
OLDEST = "4.0"
VERSIONS = [OLDEST] + [v.strip() for v in os.environ.get("GARLICFARM_SMOKE_PYSPARK", "")
                       .split(",") if v.strip() and v.strip() != OLDEST]
PROBE = ("import sys, pyspark, pyspark_farm, pytest, pytest_timeout, cryptography; "
         "print(pyspark.__version__); print(pyspark_farm.__file__); "
         "print('%d.%d' % sys.version_info[:2])")


def _probe(python: Path) -> list[str] | None:
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True,
                          cwd="/", timeout=120, check=False)
    return done.stdout.split() if done.returncode == 0 else None


def _ready(python: Path, version: str, interpreter: str) -> bool:
    found = _probe(python)
    return bool(found) and found[0].startswith(version + ".") and \
        Path(found[1]).resolve().is_relative_to(ROOT) and found[2] == interpreter


def _venv(version: str) -> Path:
    if version == OLDEST and "GARLICFARM_OLDEST_VENV" in os.environ:
        return Path(os.environ["GARLICFARM_OLDEST_VENV"])
    return ROOT / f".venv-pyspark{version}"


@pytest.fixture(scope="module", params=VERSIONS)
def oldest_python(request) -> Path:
    version: str = request.param
    venv = _venv(version)
    python = venv / "bin" / "python"
    # the oldest PySpark on the oldest Python; the others on this one (4.3 needs 3.11)
    base = venvs.oldest_python() if version == OLDEST else sys.executable
    interpreter = venvs.python_version(base)
    if not _ready(python, version, interpreter):
        if not python.exists() or venvs.python_version(str(python)) != interpreter:
            made = subprocess.run([base, "-m", "venv", "--clear", str(venv)],
                                  capture_output=True, text=True, timeout=120, check=False)
            assert made.returncode == 0, made.stderr
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"pyspark=={version}.*", "-e",
             f"{ROOT}[spark,tls]", "pytest>=8", "pytest-timeout>=2.3"],
            capture_output=True, text=True, timeout=900, check=False)
        assert installed.returncode == 0, installed.stderr[-3000:]
    found = _probe(python)
    assert found and found[0].startswith(version + ".") and found[2] == interpreter, found
    return python


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_smoke_suite_passes_on_the_oldest_pyspark(oldest_python):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_GATEWAY", "PYTEST_", "SPARK_"))}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = str(oldest_python)
    done = subprocess.run(
        [str(oldest_python), "-m", "pytest", "tests/spark/test_smoke.py",
         "tests/spark/test_columnar_source.py", "-q",
         "-p", "no:cacheprovider", "-W", "error::FutureWarning:pyspark.*"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=1200, check=False)
    report = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    columnar = len(re.findall(r"^def test_", (ROOT / "tests/spark/test_columnar_source.py")
                              .read_text(), re.MULTILINE))
    assert f"{3 + columnar} passed" in done.stdout, report
