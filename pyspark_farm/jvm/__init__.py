"""The JVM reader of Raft logs (`format("garlicfarm-columnar")`, docs/jvm-reader.md).

Its Java side is built by ``jvm/build.sh`` into ``garlicfarm-spark.jar`` beside this file;
a session reads with it once the jar is in ``spark.jars``. Its planning stays here, in
Python (`planner`): the JVM source runs it in a process of the driver's Python.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import EnvironmentSetupError

JAR = Path(__file__).with_name("garlicfarm-spark.jar")


def jar_path() -> str:
    """The reader's jar, for ``spark.jars``."""
    if not JAR.is_file():
        raise EnvironmentSetupError(
            f"the garlicfarm JVM reader's jar is not built ({JAR} is missing): run "
            "jvm/build.sh in garlicfarm's checkout (it needs a JDK 17 and PySpark), or read "
            "with format('garlicfarm'), which needs no jar")
    return str(JAR)
