"""The release check: what `make dist` builds is what a user installs, and it works.

dist/ is built as `make dist` builds it (`python -m build`: the sdist, then the wheel from
the sdist) into a folder of the test's; `twine check` reads its metadata; the wheel holds
the JVM reader's jar of every Spark line and builds again to the same bytes, straight from
the tree. Then, for the oldest PySpark (on the oldest declared Python) and the newest, a
fresh venv gets only that PySpark and the wheel, and from a directory with no checkout:
`garlicfarm --version`, `garlicfarm jar`, `garlicfarm demo` (a stream round trip of each
kind, exactly once) and a columnar read through `configure_spark` (release_job.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import garlicfarm
from pyspark_farm.compat import TESTED_PYSPARK
from tests.compat import venvs

ROOT = Path(__file__).resolve().parents[2]
JAR_DIR = ROOT / "pyspark_farm" / "jvm"
#: The PySpark of each fresh venv: the oldest and the newest line, and the Python to run it.
INSTALLS = {TESTED_PYSPARK[0]: venvs.oldest_python, TESTED_PYSPARK[-1]: lambda: sys.executable}
VERSION = garlicfarm.__version__


def run(*args, cwd: Path | None = None, env: dict | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout, check=False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def epoch() -> str:
    commit = run("git", "-C", ROOT, "log", "-1", "--format=%ct")
    return commit.stdout.strip() if commit.returncode == 0 else "315532800"


def build(*args: str, out: Path) -> None:
    env = {**os.environ, "SOURCE_DATE_EPOCH": epoch()}
    built = run(sys.executable, "-m", "build", *args, "--outdir", out, ROOT, env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """dist/ as `make dist` makes it, the jars built first when missing (`make jars`)."""
    if any(not (JAR_DIR / f"garlicfarm-spark-{line}.jar").is_file() for line in TESTED_PYSPARK):
        made = run("make", "-C", ROOT, "jars", f"PYTHON={sys.executable}", timeout=1500)
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    out = tmp_path_factory.mktemp("dist")
    build(out=out)
    return out


def wheel_of(folder: Path) -> Path:
    (wheel,) = folder.glob(f"garlicfarm-{VERSION}-py3-none-any.whl")
    return wheel


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dist_passes_twine_and_carries_every_lines_jar(dist):
    checked = run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout

    with zipfile.ZipFile(wheel_of(dist)) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"garlicfarm-{VERSION}.dist-info/METADATA").decode()
        for line in TESTED_PYSPARK:
            name = f"pyspark_farm/jvm/garlicfarm-spark-{line}.jar"
            assert wheel.read(name) == (ROOT / name).read_bytes(), name
    for package in ("consensus", "connectors", "pyspark_farm", "garlicfarm"):
        assert f"{package}/py.typed" in names
    assert {f"garlicfarm-{VERSION}.dist-info/licenses/{n}" for n in ("LICENSE", "NOTICE")} \
        <= names
    assert not any(n.startswith(("tests/", "jvm/", "build_support/")) for n in names)
    header = dict(line.split(": ", 1) for line in metadata.split("\n\n")[0].splitlines()
                  if ": " in line)
    assert header["Version"] == VERSION and header["License-Expression"] == "Apache-2.0"
    assert header["Requires-Python"] == ">=3.10"
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines()
                if line.startswith("Requires-Dist: ")]
    plain = [r for r in requires if "extra ==" not in r]
    # PySpark is the runtime's; what a runtime brings has lower bounds only
    assert plain and not any(r.lower().startswith("pyspark") for r in plain)
    for name in ("pandas", "pyarrow"):
        (line,) = [r for r in plain if r.lower().startswith(name)]
        assert "<" not in line and "==" not in line, line
    assert 'tomli>=1.1; python_version < "3.11"' in plain
    spark_extra = sorted(r.split(";")[0].strip() for r in requires if 'extra == "spark"' in r)
    assert spark_extra == ["pandas<3,>=2.0", "pyspark<5,>=4.0"]

    (sdist,) = dist.glob(f"garlicfarm-{VERSION}.tar.gz")
    with tarfile.open(sdist) as archive:
        inside = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    needed = {"pyproject.toml", "build_support/garlicfarm_build.py", "LICENSE", "NOTICE",
              "CHANGELOG.md", "Makefile", "jvm/pom.xml"}
    needed |= {f"pyspark_farm/jvm/garlicfarm-spark-{line}.jar" for line in TESTED_PYSPARK}
    needed |= {str(p.relative_to(ROOT)) for p in (ROOT / "jvm").glob("pom.xml")}
    needed |= {str(p.relative_to(ROOT)) for p in (ROOT / "jvm" / "src").rglob("*")
               if p.is_file()}
    assert needed <= inside, sorted(needed - inside)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_builds_again_to_the_same_bytes(dist, tmp_path):
    # A module left in setuptools' build/ by an earlier build of a tree that has since
    # lost it must not ship: plant one, certain, before building from the tree.
    stale = ROOT / "build" / "lib" / "connectors" / "stale_module_of_an_earlier_tree.py"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("raise ImportError('stale')\n")
    build("--wheel", out=tmp_path)    # from the tree this time, not from the sdist
    assert not stale.exists()
    assert sha256(wheel_of(tmp_path)) == sha256(wheel_of(dist))


def test_the_build_refuses_a_wheel_without_every_lines_jar(tmp_path):
    for part in ("build_support/garlicfarm_build.py", "pyspark_farm/compat.py"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, tmp_path / part)
    jars = tmp_path / "pyspark_farm" / "jvm"
    jars.mkdir()
    with zipfile.ZipFile(jars / f"garlicfarm-spark-{TESTED_PYSPARK[0]}.jar", "w") as jar:
        jar.writestr("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister",
                     "garlicfarm.spark.ColumnarRaftSource\n")
    (jars / f"garlicfarm-spark-{TESTED_PYSPARK[1]}.jar").write_bytes(b"not a jar")
    checked = run(sys.executable, "-c", "import garlicfarm_build as b; b.check_jars()",
                  cwd=tmp_path / "build_support")
    assert checked.returncode == 1
    error = checked.stderr.strip().splitlines()[-1]
    assert error.startswith("RuntimeError: ") and "Run `make jars`" in error, error
    assert f"garlicfarm-spark-{TESTED_PYSPARK[0]}.jar" not in error, error
    assert f"garlicfarm-spark-{TESTED_PYSPARK[1]}.jar is not a garlicfarm reader jar" in error
    for line in TESTED_PYSPARK[2:]:
        assert f"garlicfarm-spark-{line}.jar is missing" in error, error


@pytest.fixture(scope="module", params=sorted(INSTALLS))
def installed(request, dist, tmp_path_factory) -> tuple[str, Path]:
    """A fresh venv holding only PySpark `request.param` and the wheel (with its
    requirements)."""
    line: str = request.param
    venv = tmp_path_factory.mktemp(f"release-{line}") / "venv"
    made = run(INSTALLS[line](), "-m", "venv", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    env = venvs.clean_env(python)   # no PYTHONPATH: pip would count what it names as installed
    # a current pip builds PySpark's sdist into a cached wheel (an old one installs it by
    # setup.py each time, minutes for 4.0)
    upgraded = run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip", env=env)
    assert upgraded.returncode == 0, upgraded.stderr[-3000:]
    done = run(python, "-m", "pip", "install", "--quiet", f"pyspark=={line}.*",
               wheel_of(dist), env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return line, python


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_installed_wheel_streams_each_kind_and_reads_columnar(installed, tmp_path):
    line, python = installed
    env = venvs.clean_env(python)
    cli = python.parent / "garlicfarm"
    away = tmp_path / "elsewhere"      # no checkout here, nor on the path
    away.mkdir()
    version = run(cli, "--version", cwd=away, env=env)
    assert version.returncode == 0 and version.stdout.strip() == f"garlicfarm {VERSION}"
    jar = run(cli, "jar", cwd=away, env=env)
    assert jar.returncode == 0, jar.stderr
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                    env=env).stdout.strip())
    assert Path(jar.stdout.strip()) == site / "pyspark_farm" / "jvm" / \
        f"garlicfarm-spark-{line}.jar"

    shutil.copy(Path(__file__).with_name("release_job.py"), away / "release_job.py")
    job = run(python, "release_job.py", cwd=away, env=env, timeout=600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]
    found = json.loads(job.stdout.strip().splitlines()[-1])
    assert found["pyspark"].startswith(line + "."), found["pyspark"]   # pip kept it
    assert Path(found["package"]).is_relative_to(site), found["package"]
    assert jar.stdout.strip() in found["spark.jars"].split(","), found["spark.jars"]
    assert found["read"] == found["wanted"], found["read"][:5]   # each row once
    assert "BatchScan garlicfarm-columnar" in found["plan"], found["plan"]

    demo = run(cli, "demo", "--events", "300", "--files", "2", "--pause", "0", "--nodes", "1",
               cwd=away, env=env, timeout=900)
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-4000:]
    for kind in ("raft", "dafka", "chp"):   # the summary: kind, generated, read back, distinct
        (row,) = [r for r in demo.stdout.splitlines() if r.startswith(f"│ {kind} ")]
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells == [kind, "300", "300", "300", "exactly once"], row
