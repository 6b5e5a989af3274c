"""Spark Connect: `SparkSession.builder.remote("local[2]")` (a local Connect server, its
own JVM and Python workers, in a new process) with no garlicfarm conf and no `register`
(only the JVM reader's jar in `spark.jars`, for its one read): the server finds the
format, a batch write and reads (with a filter), a stream round trip through the sink and
the source, an option error as a Connect client sees it, `spark.dataSource.register` of
the class (and of a subclass under a new name) through Connect, and a read with the JVM
reader (`format("garlicfarm-columnar")`, planned by the server's Python)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("grpc", reason="Spark Connect needs pyspark's connect extra: "
                    "pip install 'garlicfarm[spark,connect]' (the Makefile's venv has it)")

pytestmark = [pytest.mark.spark]

CLIENT = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    options, start, inbox, work, jar = (json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                        sys.argv[4], sys.argv[5])
    spark = SparkSession.builder.remote("local[2]").config("spark.jars", jar).getOrCreate()
    result = {"session": type(spark).__module__}
    try:
        (spark.createDataFrame([("first",), ("second",)], "value string")
         .write.format("garlicfarm").options(**options).mode("append").save())
        read = lambda: (spark.read.format("garlicfarm").options(**options)
                        .option("startingOffsets", json.dumps({"index": start})).load())
        rows = read().collect()
        result["batch"] = sorted(bytes(r.value).decode() for r in rows)
        result["filtered"] = sorted(bytes(r.value).decode() for r in
                                    read().where(f"index = {rows[0]['index']}").collect())
        sink = (spark.readStream.schema("value string").json(inbox).writeStream
                .format("garlicfarm").options(**options)
                .option("checkpointLocation", os.path.join(work, "chk-w"))
                .trigger(availableNow=True).start())
        sink.awaitTermination(120)
        result["sink_error"] = str(sink.exception() or "")
        source = (spark.readStream.format("garlicfarm").options(**options)
                  .option("startingOffsets", json.dumps({"index": start}))
                  .option("maxOffsetsPerTrigger", "5").load().select("value")
                  .writeStream.format("parquet").option("path", os.path.join(work, "out"))
                  .option("checkpointLocation", os.path.join(work, "chk-r"))
                  .trigger(availableNow=True).start())
        source.awaitTermination(120)
        result["source_error"] = str(source.exception() or "")
        result["streamed"] = sorted(bytes(r.value).decode() for r in
                                    spark.read.parquet(os.path.join(work, "out")).collect())
        try:
            (spark.read.format("garlicfarm").options(**options)
             .option("maxOffsetsPerTrigger", "many").load().collect())
            result["option_error"] = ""
        except Exception as exc:
            result["option_error"] = str(exc)
        # Registering by hand, as on a runtime whose workers cannot list the installed
        # modules: the class itself, and a subclass under a name no lookup could find.
        from pyspark_farm import GarlicFarmDataSource
        spark.dataSource.register(GarlicFarmDataSource)

        class Registered(GarlicFarmDataSource):
            @classmethod
            def name(cls):
                return "garlicfarm_registered_by_hand"
        spark.dataSource.register(Registered)
        (spark.createDataFrame([("by hand",)], "value string").write
         .format("garlicfarm_registered_by_hand").options(**options).mode("append").save())
        result["registered"] = sorted(
            bytes(r.value).decode() for r in spark.read.format("garlicfarm_registered_by_hand")
            .options(**options).option("startingOffsets", json.dumps({"index": start}))
            .load().collect())
        result["columnar"] = sorted(
            bytes(r.value).decode() for r in spark.read.format("garlicfarm-columnar")
            .options(**options).option("startingOffsets", json.dumps({"index": start}))
            .load().select("value").collect())
        print(json.dumps(result))
    finally:
        spark.stop()
""")


@pytest.mark.timeout(300)
def test_round_trips_through_spark_connect(farm, tmp_path, reader_jar):
    with farm.client() as client:
        start = client.last_applied() + 1
    inbox = tmp_path / "in"
    inbox.mkdir()
    streamed = [f"stream-{i:02d}" for i in range(12)]
    (inbox / "0.json").write_text("".join(json.dumps({"value": v}) + "\n" for v in streamed))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY",
                                                                     "SPARK_CONNECT"))}
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(farm.options), str(start),
                           str(inbox), str(tmp_path), reader_jar], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=280, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["session"] == "pyspark.sql.connect.session"
    assert result["batch"] == ["first", "second"] == result["filtered"]
    assert result["sink_error"] == "" and result["source_error"] == ""
    assert result["streamed"] == sorted(["first", "second"] + streamed)
    assert "'maxOffsetsPerTrigger'" in result["option_error"]
    assert result["registered"] == sorted(["first", "second", "by hand"] + streamed)
    assert result["columnar"] == result["registered"]
