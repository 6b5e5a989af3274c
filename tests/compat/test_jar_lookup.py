"""The user's surface for the JVM reader's jar, without starting Spark: `configure_spark`,
`garlicfarm jar`, `garlicfarm --version`, and the errors that name the fix."""
from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import garlicfarm
from garlicfarm.cli import main
from pyspark_farm import EnvironmentSetupError, configure_spark
from pyspark_farm.compat import TESTED_PYSPARK
from pyspark_farm.jvm import installed_line, jar_file, jar_path, missing_jar_message

pytestmark = pytest.mark.timeout(60)


def test_configure_spark_appends_the_installed_lines_jar(reader_jar):
    builder = SparkSession.Builder().config("spark.jars", "/opt/other.jar")
    assert configure_spark(builder) is builder
    assert builder._options["spark.jars"] == f"/opt/other.jar,{reader_jar}"
    assert Path(reader_jar).name == f"garlicfarm-spark-{installed_line()}.jar"
    configure_spark(builder)     # twice: still once
    assert builder._options["spark.jars"] == f"/opt/other.jar,{reader_jar}"


def test_configure_spark_refuses_another_lines_jar(reader_jar):
    other = next(line for line in TESTED_PYSPARK if line != installed_line())
    builder = SparkSession.Builder().config("spark.jars", f"/x/garlicfarm-spark-{other}.jar")
    with pytest.raises(EnvironmentSetupError, match=rf"garlicfarm-spark-{other}\.jar.*"
                       rf"PySpark {installed_line()} is installed: remove it"):
        configure_spark(builder)


def test_a_line_without_a_jar_names_the_lines_and_the_python_source():
    message = missing_jar_message("4.99")
    assert message is not None and "no jar for Spark 4.99" in message
    assert f"built for Spark {', '.join(TESTED_PYSPARK)}" in message
    assert "format('garlicfarm'), which needs no jar" in message
    with pytest.raises(EnvironmentSetupError, match="no jar for Spark 4.99"):
        jar_path("4.99")


def test_a_checkout_without_the_jar_says_make_jars(tmp_path, monkeypatch):
    import pyspark_farm.jvm as jvm
    monkeypatch.setattr(jvm, "JAR_DIR", tmp_path)      # a checkout where nothing was built
    message = missing_jar_message(TESTED_PYSPARK[0])
    assert message is not None and "run `make jars` in the checkout" in message
    assert str(tmp_path / f"garlicfarm-spark-{TESTED_PYSPARK[0]}.jar") in message


def test_garlicfarm_jar_and_version(reader_jar, capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"garlicfarm {garlicfarm.__version__}\n"
    assert main(["jar"]) == 0
    assert capsys.readouterr().out == f"{reader_jar}\n"
    assert main(["jar", "--spark", "4.99"]) == 1
    assert "garlicfarm jar: garlicfarm's JVM reader has no jar for Spark 4.99" in \
        capsys.readouterr().err
    assert str(jar_file()) == reader_jar
