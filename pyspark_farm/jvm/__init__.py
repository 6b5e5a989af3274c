"""The JVM reader of Raft logs (`format("garlicfarm-columnar")`, docs/jvm-reader.md).

Its Java side is built by ``jvm/build.sh`` against the installed PySpark's own jars, into
``garlicfarm-spark-X.Y.jar`` beside this file (X.Y: that PySpark's version, so venvs of
several Spark lines can share a checkout); a session reads with it once the jar is in
``spark.jars``. Its planning stays here, in Python (`planner`): the JVM source runs it in
a process of the driver's Python.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import EnvironmentSetupError


def jar_file() -> Path:
    """Where the reader's jar for the installed PySpark is (built or not)."""
    import pyspark
    line = ".".join(pyspark.__version__.split(".")[:2])
    return Path(__file__).with_name(f"garlicfarm-spark-{line}.jar")


def jar_path() -> str:
    """The reader's jar for the installed PySpark, for ``spark.jars``."""
    jar = jar_file()
    if not jar.is_file():
        raise EnvironmentSetupError(
            f"the garlicfarm JVM reader's jar is not built ({jar} is missing): run "
            "jvm/build.sh in garlicfarm's checkout with this Python (it needs a JDK 17 and "
            "PySpark), or read with format('garlicfarm'), which needs no jar")
    return str(jar)
