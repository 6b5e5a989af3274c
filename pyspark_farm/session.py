"""A Spark session set up for garlicfarm, and the checks for what newcomers trip on.

* Spark's Python workers run `PYSPARK_PYTHON` (else `python3` on the PATH). If that
  interpreter lacks garlicfarm or pyarrow, every task dies with "Python worker failed to
  connect back". `ensure_worker_python` points it at this interpreter when unset, and
  fails with the variable to set when it names an interpreter that cannot import us.
* PySpark needs Java 17: `ensure_java` says so before Spark prints a JVM stack trace.
* Batch reads push `index` / `key` filters into the source where Spark allows it, with
  `spark.sql.python.filterPushdown.enabled` (off by default): `spark_session` turns it
  on. Without it reads work the same, Spark filtering the rows (docs/compatibility.md).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import EnvironmentSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_checked_interpreters: set[str] = set()


def ensure_worker_python() -> str:
    """The interpreter Spark's workers will run, after making sure it can import
    garlicfarm (sets PYSPARK_PYTHON to this interpreter when it is unset)."""
    worker = os.environ.get("PYSPARK_PYTHON")
    if not worker:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        return sys.executable
    if worker in _checked_interpreters or os.path.realpath(worker) == os.path.realpath(
            sys.executable):
        return worker
    probe = subprocess.run([worker, "-c", "import pyspark_farm, pyarrow"],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        raise EnvironmentSetupError(
            f"PYSPARK_PYTHON={worker} cannot import garlicfarm and pyarrow, so Spark's Python "
            f"workers would fail ('Python worker failed to connect back'). Set "
            f"PYSPARK_PYTHON={sys.executable}, or install garlicfarm into that interpreter. "
            f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else 'no output'})")
    _checked_interpreters.add(worker)
    return worker


def ensure_java() -> str:
    """The java binary PySpark will start."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.exists():
            return str(java)
        raise EnvironmentSetupError(f"JAVA_HOME={home} has no bin/java: point JAVA_HOME at a "
                                    "Java 17 installation, or unset it to use java on the PATH")
    java = shutil.which("java")
    if java is None:
        raise EnvironmentSetupError("PySpark needs Java 17 and none is on the PATH: install it "
                                    "(e.g. apt-get install openjdk-17-jre-headless) or set "
                                    "JAVA_HOME")
    return java


def spark_session(app_name: str = "garlicfarm", master: str = "local[2]", *,
                  conf: dict[str, Any] | None = None) -> "SparkSession":
    """A SparkSession (the active one if there is one) ready for the garlicfarm source, and
    for its JVM reader (`format("garlicfarm-columnar")`): the installed PySpark's jar is
    added to `spark.jars` (after any given) as `configure_spark` adds it. Where this
    installation has no such jar, `format("garlicfarm-columnar")` fails naming the fix."""
    ensure_java()
    ensure_worker_python()
    from pyspark.sql import SparkSession

    from .jvm import guard_missing_jar, jar_file, missing_jar_message, with_reader_jar
    settings: dict[str, Any] = {PUSHDOWN_CONF: "true", "spark.ui.showConsoleProgress": "false"}
    if master.startswith("local"):
        settings["spark.sql.shuffle.partitions"] = "4"
    settings.update(conf or {})
    if missing_jar_message() is None:   # the jar configure_spark adds, by the same checks
        settings["spark.jars"] = with_reader_jar(str(settings.get("spark.jars", "")),
                                                 str(jar_file()))
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    session = builder.getOrCreate()
    session.conf.set(PUSHDOWN_CONF, str(settings[PUSHDOWN_CONF]).lower())
    guard_missing_jar(session)   # garlicfarm-columnar without its jar: an error naming the fix
    return session
