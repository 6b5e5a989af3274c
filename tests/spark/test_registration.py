"""Zero registration, the session helper, and option errors as Spark users see them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import AnalysisException

import pyspark_farm
import pyspark_farm.compat
from pyspark_farm.errors import EnvironmentSetupError
from pyspark_farm.session import PUSHDOWN_CONF, ensure_worker_python

pytestmark = pytest.mark.spark

RAFT_COLUMNS = ["cluster", "index", "term", "type", "value", "timestamp"]

# A user's first program: a plain SparkSession (no garlicfarm conf: what a notebook
# gives) in a new process (its own JVM, so no data source lookup cached by the test
# session), `register` made to fail, the format used for a write and reads in executors.
# Batch reads work without spark.sql.python.filterPushdown.enabled (Spark then filters the
# rows: the plan keeps the `index` condition); with it on, the condition is pushed into
# the source (the plan's Filter no longer has it).
FRESH_PROCESS = textwrap.dedent("""
    import contextlib, io, json, sys
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSourceRegistration

    def refuse(self, data_source):
        raise AssertionError("the data source was registered")

    def plan(frame):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            frame.explain()
        return out.getvalue()

    DataSourceRegistration.register = refuse
    options, start = json.loads(sys.argv[1]), int(sys.argv[2])
    imported_before = "pyspark_farm" in sys.modules
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        conf_before = spark.conf.get("spark.sql.python.filterPushdown.enabled", None)
        (spark.createDataFrame([("first",), ("second",)], "value string")
         .write.format("garlicfarm").options(**options).mode("append").save())
        read = lambda: (spark.read.format("garlicfarm").options(**options)
                        .option("startingOffsets", json.dumps({"index": start})).load())
        text = lambda frame: sorted(bytes(r.value).decode() for r in frame.collect())
        index = read().collect()[0]["index"]
        result = {"values": text(read()), "columns": read().columns,
                  "imported_before": imported_before, "conf_before": conf_before,
                  "filtered": text(read().where(f"index = {index}")),
                  "missed": text(read().where(f"index = {index + 1}")),
                  "plan": plan(read().where(f"index = {index}"))}
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        result["pushed_filtered"] = text(read().where(f"index = {index}"))
        result["pushed_plan"] = plan(read().where(f"index = {index}"))
        result["index"] = index
        print(json.dumps(result))
    finally:
        spark.stop()
""")


def test_format_resolves_without_register_in_a_fresh_session(spark):
    fresh = spark.newSession()
    frame = (fresh.read.format("garlicfarm").option("endpoints", "127.0.0.1:9")
             .option("valueFormat", "json").option("valueSchema", "id long, name string")
             .load())
    assert frame.columns == RAFT_COLUMNS + ["id", "name"]
    types = dict(frame.dtypes)
    assert types["index"] == "bigint" and types["timestamp"] == "timestamp"
    assert types["value"] == "binary"
    stream = fresh.readStream.format("garlicfarm").option("endpoints", "127.0.0.1:9").load()
    assert stream.isStreaming and stream.columns == RAFT_COLUMNS
    assert fresh.conf.get(PUSHDOWN_CONF) == "true"
    assert pyspark_farm.DefaultSource.name() == "garlicfarm"


@pytest.mark.timeout(300)
def test_format_resolves_without_register_in_a_new_process(farm, tmp_path):
    with farm.client() as client:
        start = client.last_applied() + 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS, json.dumps(farm.options),
                           str(start)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=280, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["values"] == ["first", "second"] and result["columns"] == RAFT_COLUMNS
    assert result["imported_before"] is False
    assert result["conf_before"] in (None, "false")   # a stock session: pushdown off
    assert result["filtered"] == ["first", "second"] and result["missed"] == []
    # Pushdown off: Spark filters the rows itself, the plan's Filter has `= index`.
    assert f"= {result['index']})" in result["plan"], result["plan"]
    assert result["pushed_filtered"] == ["first", "second"]
    # Pushdown on (PySpark 4.1+): the source took the condition, the Filter lost it.
    if pyspark_farm.compat.HAS_FILTER_PUSHDOWN:
        assert f"= {result['index']})" not in result["pushed_plan"], result["pushed_plan"]
    else:
        assert f"= {result['index']})" in result["pushed_plan"], result["pushed_plan"]


@pytest.mark.parametrize("options,needle", [
    ({}, "'endpoints'"),
    ({"endpoints": "127.0.0.1:9", "maxOffsetsPerTrigger": "many"}, "'maxOffsetsPerTrigger'"),
    ({"endpoints": "127.0.0.1:9", "kind": "kafka"}, "'kind': unknown kind 'kafka'"),
    ({"endpoints": "127.0.0.1:9", "valueFormat": "json"}, "'valueSchema'"),
])
def test_bad_options_fail_at_load_naming_the_option(spark, options, needle):
    with pytest.raises((AnalysisException, PySparkException, Exception)) as caught:
        spark.read.format("garlicfarm").options(**options).load()
    assert needle in str(caught.value)


def test_bad_offsets_for_the_query_type_fail_when_the_query_is_planned(spark):
    reader = spark.read.format("garlicfarm").option("endpoints", "127.0.0.1:9")
    with pytest.raises(Exception, match="'startingOffsets'.*latest"):
        reader.option("startingOffsets", "latest").load().collect()


def test_worker_interpreter_check_names_the_variable(monkeypatch, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(fake))
    with pytest.raises(EnvironmentSetupError) as caught:
        ensure_worker_python()
    assert "PYSPARK_PYTHON" in str(caught.value) and sys.executable in str(caught.value)
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert ensure_worker_python() == sys.executable == os.environ["PYSPARK_PYTHON"]


def test_sink_input_errors_fail_when_the_write_starts(spark):
    frame = spark.range(3).selectExpr("cast(id as string) as value", "id as key")
    with pytest.raises(Exception, match="also has key.*valueFormat"):
        frame.write.format("garlicfarm").option("endpoints", "127.0.0.1:9").mode("append").save()
    with pytest.raises(Exception, match="'value' column must be binary or string, not long"):
        (spark.range(3).selectExpr("id as value").write.format("garlicfarm")
         .option("endpoints", "127.0.0.1:9").mode("append").save())
    with pytest.raises(Exception, match="'mode'.*append-only"):
        (frame.select("value").write.format("garlicfarm").option("endpoints", "127.0.0.1:9")
         .mode("overwrite").save())
