"""The JVM reader of Raft logs (`format("garlicfarm-columnar")`, docs/jvm-reader.md).

Its Java side is packaged as one jar per Spark line, ``garlicfarm-spark-X.Y.jar`` beside
this file: the wheel carries the jar of every line in `compat.TESTED_PYSPARK` (the build
refuses to make one without them); a checkout builds them with ``make jars`` (Maven,
jvm/pom.xml: one jar, built against the oldest line, under every line's name). A session reads with it once the installed PySpark's jar is in
``spark.jars``: `configure_spark(builder)` puts it there, as delta-spark's
``configure_spark_with_delta_pip`` does for its own. Its planning stays here, in Python
(`planner`): the JVM source runs it in a process of the driver's Python.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..compat import PYSPARK_VERSION, TESTED_PYSPARK
from ..errors import EnvironmentSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAR_DIR = Path(__file__).resolve().parent
#: The name of a reader jar, X.Y the Spark line it is built for.
JAR_NAME = re.compile(r"garlicfarm-spark-(\d+\.\d+)\.jar")
#: The format the jar registers.
COLUMNAR_FORMAT = "garlicfarm-columnar"
_CHECKOUT = JAR_DIR.parents[1] / "jvm" / "pom.xml"   # present in a checkout, not a wheel
_NO_JAR = "or read with format('garlicfarm'), which needs no jar"


def installed_line() -> str:
    """The installed PySpark's Spark line, "X.Y"."""
    return "%d.%d" % PYSPARK_VERSION


def jar_file(line: str | None = None) -> Path:
    """Where the reader's jar for a Spark line is (the installed PySpark's by default),
    present or not."""
    return JAR_DIR / f"garlicfarm-spark-{line or installed_line()}.jar"


def packaged_lines() -> list[str]:
    """The Spark lines whose jar this installation holds."""
    found = (JAR_NAME.fullmatch(p.name) for p in JAR_DIR.glob("garlicfarm-spark-*.jar"))
    return sorted((m.group(1) for m in found if m), key=lambda v: tuple(map(int, v.split("."))))


def missing_jar_message(line: str | None = None) -> str | None:
    """Why the reader cannot run on a Spark line here and what to do, or None when its jar
    is in place."""
    line = line or installed_line()
    jar = jar_file(line)
    if jar.is_file():
        return None
    held = ", ".join(packaged_lines()) or "none"
    if line not in TESTED_PYSPARK:
        whose = " (the PySpark installed here)" if line == installed_line() else ""
        return (f"garlicfarm's JVM reader has no jar for Spark {line}{whose}: this "
                f"garlicfarm is built for Spark {', '.join(TESTED_PYSPARK)} "
                f"(jars here: {held}). Install a garlicfarm release that supports {line}, "
                f"run PySpark {TESTED_PYSPARK[-1]}, {_NO_JAR}")
    if _CHECKOUT.is_file():
        return (f"garlicfarm's JVM reader's jar for Spark {line} is not built ({jar} is "
                f"missing; jars here: {held}): run `make jars` in the checkout "
                f"{_CHECKOUT.parents[1]} (Maven and a JDK 17), {_NO_JAR}")
    return (f"garlicfarm's JVM reader's jar for Spark {line} is missing from this installation "
            f"({jar}; jars here: {held}), which every garlicfarm wheel carries: reinstall "
            f"garlicfarm from its wheel (`pip install --force-reinstall --no-deps garlicfarm`), "
            f"{_NO_JAR}")


def jar_path(line: str | None = None) -> str:
    """The reader's jar for a Spark line (the installed PySpark's by default), for
    ``spark.jars`` / ``spark-submit --jars``; EnvironmentSetupError naming the fix when this
    installation has none."""
    problem = missing_jar_message(line)
    if problem:
        raise EnvironmentSetupError(problem)
    return str(jar_file(line))


def with_reader_jar(jars: str, jar: str) -> str:
    """`jars` (a spark.jars value) with `jar` added; EnvironmentSetupError when it already
    holds a garlicfarm reader jar of another Spark line (Spark would load either)."""
    listed = [j.strip() for j in jars.split(",") if j.strip()]
    wanted = JAR_NAME.fullmatch(Path(jar).name)
    for other in listed:
        found = JAR_NAME.fullmatch(Path(other).name)
        if found and wanted and found.group(1) != wanted.group(1):
            raise EnvironmentSetupError(
                f"spark.jars holds {other}, garlicfarm's JVM reader for Spark {found.group(1)}, "
                f"but PySpark {installed_line()} is installed: remove it from spark.jars "
                f"(configure_spark adds {jar}, the jar for this Spark line)")
    return ",".join(listed if jar in listed else listed + [jar])


def configure_spark(builder: "SparkSession.Builder") -> "SparkSession.Builder":
    """`builder` with the JVM reader's jar for the installed PySpark added to ``spark.jars``
    (after any jars it already names), so that `format("garlicfarm-columnar")` is found:
    ``configure_spark(SparkSession.builder.appName("x")).getOrCreate()``.

    Fails (EnvironmentSetupError, naming the fix) when this installation has no jar for the
    installed PySpark, when spark.jars already names the jar of another line, or when a
    SparkContext is already running without the jar (Spark reads spark.jars only when it
    starts, so getOrCreate would return that session, without the reader)."""
    jar = jar_path()
    options = getattr(builder, "_options", {})   # what .config() has set on this builder
    jars = with_reader_jar(str(options.get("spark.jars", "")), jar)
    from pyspark import SparkContext
    running = SparkContext._active_spark_context
    if running is not None and jar not in running.getConf().get("spark.jars", "").split(","):
        raise EnvironmentSetupError(
            "a SparkContext is already running without garlicfarm's JVM reader's jar, and "
            "Spark reads spark.jars only when it starts: stop it (spark.stop()) before "
            "configure_spark(builder).getOrCreate(), or call configure_spark before the "
            "first session is made")
    return builder.config("spark.jars", jars)


def session_problem(session: "SparkSession") -> str | None:
    """Why `format("garlicfarm-columnar")` cannot run in a started session, or None."""
    problem = missing_jar_message()
    if problem is None and str(jar_file()) not in session.sparkContext.getConf().get(
            "spark.jars", "").split(","):
        problem = ("this SparkSession was started without garlicfarm's JVM reader's jar in "
                   "spark.jars, and Spark reads spark.jars only when it starts: stop it "
                   "(spark.stop()) and start one with "
                   "configure_spark(SparkSession.builder).getOrCreate() or spark_session(), "
                   f"{_NO_JAR}")
    return problem


def guard_missing_jar(session: "SparkSession") -> None:
    """Registers, on a session that cannot run the JVM reader, a Python source under the
    reader's name whose every use fails naming the fix (`session_problem`), where Spark
    would say only DATA_SOURCE_NOT_FOUND."""
    problem = session_problem(session)
    if problem is None:
        return
    from pyspark.sql.datasource import DataSource

    class MissingColumnarReader(DataSource):
        """Stands for `garlicfarm-columnar` in a session without its jar."""

        @classmethod
        def name(cls) -> str:
            return COLUMNAR_FORMAT

        def schema(self):
            raise EnvironmentSetupError(problem)

    session.dataSource.register(MissingColumnarReader)
