"""garlicfarm's build backend: setuptools' own, with two rules of the release added.

* A wheel or sdist without the JVM reader's jar for every tested Spark line is refused
  (a user of that line would otherwise find out at their first `format("garlicfarm-columnar")`).
  The lines are `pyspark_farm.compat.TESTED_PYSPARK`, read without importing it (it needs
  PySpark); `make jars` builds the jars. Editable installs need no jar.
* Both archives are reproducible: the same sources give the same bytes. Every entry gets the
  time SOURCE_DATE_EPOCH (else the sdist's own, else the last commit's), one mode per kind
  (0644, 0755 for executables) and no owner; entries are sorted.
"""
from __future__ import annotations

import ast
import gzip
import io
import os
import shutil
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the hooks not overridden here)

ROOT = Path(__file__).resolve().parents[1]
JAR_DIR = ROOT / "pyspark_farm" / "jvm"
#: What Spark needs in a jar to find `format("garlicfarm-columnar")`.
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
ZIP_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can carry


def spark_lines() -> tuple[str, ...]:
    """TESTED_PYSPARK from pyspark_farm/compat.py, the Spark lines a jar is built for."""
    tree = ast.parse((ROOT / "pyspark_farm" / "compat.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "TESTED_PYSPARK" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("pyspark_farm/compat.py defines no TESTED_PYSPARK")


def check_jars() -> None:
    """Fail naming every missing or unusable jar, and the command that builds them."""
    problems = []
    for line in spark_lines():
        jar = JAR_DIR / f"garlicfarm-spark-{line}.jar"
        if not jar.is_file():
            problems.append(f"{jar.relative_to(ROOT)} is missing")
        elif not zipfile.is_zipfile(jar) or SERVICE not in zipfile.ZipFile(jar).namelist():
            problems.append(f"{jar.relative_to(ROOT)} is not a garlicfarm reader jar "
                            f"(no {SERVICE})")
    if problems:
        raise RuntimeError(
            "garlicfarm's wheel and sdist carry the JVM reader's jar for every Spark line "
            f"({', '.join(spark_lines())}): " + "; ".join(problems) +
            ". Run `make jars` (or `make dist`) in the checkout first.")


def source_date_epoch() -> int:
    """The time every archive entry carries (SOURCE_DATE_EPOCH's convention)."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").strip():
        return max(int(os.environ["SOURCE_DATE_EPOCH"]), ZIP_EPOCH)
    pkg_info = ROOT / "PKG-INFO"   # building from our sdist: its entries carry the epoch
    if pkg_info.exists():
        return max(int(pkg_info.stat().st_mtime), ZIP_EPOCH)
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
                            capture_output=True, text=True, check=False)
    if commit.returncode == 0 and commit.stdout.strip():
        return max(int(commit.stdout.strip()), ZIP_EPOCH)
    return ZIP_EPOCH


def _mode(mode: int) -> int:
    return 0o755 if mode & 0o111 else 0o644


def normalize_wheel(path: Path, epoch: int) -> None:
    stamp = time.gmtime(epoch)[:6]
    with zipfile.ZipFile(path) as old:
        entries = [(info, old.read(info)) for info in old.infolist()]
    # RECORD last, as the wheel spec recommends; the rest sorted
    entries.sort(key=lambda e: (e[0].filename.endswith(".dist-info/RECORD"), e[0].filename))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new:
        for info, data in entries:
            fresh = zipfile.ZipInfo(info.filename, date_time=stamp)
            fresh.compress_type = zipfile.ZIP_DEFLATED
            fresh.external_attr = (0o100000 | _mode(info.external_attr >> 16)) << 16
            new.writestr(fresh, data)


def normalize_sdist(path: Path, epoch: int) -> None:
    with tarfile.open(path, "r:gz") as old:
        members = [(m, old.extractfile(m).read() if m.isfile() else None)
                   for m in old.getmembers()]
    members.sort(key=lambda m: m[0].name)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as new:
        for member, data in members:
            member.mtime, member.uid, member.gid = epoch, 0, 0
            member.uname = member.gname = ""
            member.mode = 0o755 if member.isdir() else _mode(member.mode)
            member.pax_headers = {}
            new.addfile(member, io.BytesIO(data) if data is not None else None)
    with open(path, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out,
                                                 mtime=epoch, compresslevel=9) as packed:
        packed.write(raw.getvalue())


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    check_jars()
    # setuptools copies the sources into build/ and never removes what they no longer
    # have: a module since deleted (or turned into a package) would ship beside its
    # successor, and the wheel would differ from one built from the sdist.
    shutil.rmtree(Path.cwd() / "build", ignore_errors=True)
    epoch = source_date_epoch()
    os.environ["SOURCE_DATE_EPOCH"] = str(epoch)
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    normalize_wheel(Path(wheel_directory) / name, epoch)
    return name


def build_sdist(sdist_directory, config_settings=None):
    check_jars()
    epoch = source_date_epoch()
    name = _setuptools.build_sdist(sdist_directory, config_settings)
    normalize_sdist(Path(sdist_directory) / name, epoch)
    return name
