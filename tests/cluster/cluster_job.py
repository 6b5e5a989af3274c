"""A Spark driver run against a standalone cluster by tests/cluster: for each kind it is
given, it streams an inbox of JSON files into the garlicfarm sink while the first attempt
of the task that meets the kind's poison row SIGKILLs its own executor's JVM (the task is
then retried on another executor), and reads back what landed, for the test to compare.

    python cluster_job.py SPEC.json

SPEC: {"master", "driver_host", "result", "kill_dir", "kinds": {KIND: {...}}, and either
"farm" (the options of a farm the test runs) or "embedded_farm" ({"host", "tls"}: a
LocalFarm this driver starts beside itself, as on a cluster)}; the raft kind's spec may
say "columnar": true. The session is a stock one (`SparkSession.builder`): nothing of
garlicfarm in its conf, except, with "columnar", the JVM reader's jar in `spark.jars`,
which the raft kind then also reads back with (`format("garlicfarm-columnar")`: no Python
on the executors).
It writes RESULT: per kind the values read back, the sink's last batch and the killed
executor's marker; the test judges.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from tests.spark.helpers import values


def executor_jvm() -> int:
    """The pid of the JVM this Python worker serves (its nearest `java` ancestor)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "java":
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no java process above this Python worker")


def killing_step(marker: str, poison: str):
    """A column step that, in the first attempt of the task meeting `poison` (after the
    rows before it went to the sink's writer), records and SIGKILLs the executor's JVM."""
    @F.udf(StringType())
    def step(value):
        from pyspark import TaskContext
        if value == poison and TaskContext.get().attemptNumber() == 0 \
                and not os.path.exists(marker):
            jvm = executor_jvm()
            with open(marker + ".tmp", "w") as f:
                json.dump({"pid": jvm, "netns": os.readlink("/proc/self/ns/net"),
                           "partition": TaskContext.get().partitionId()}, f)
            os.rename(marker + ".tmp", marker)
            os.kill(jvm, signal.SIGKILL)
            os._exit(1)
        return value
    return step


def stream_into(spark, inbox: str, schema: str, column: str, step, options: dict,
                checkpoint: str):
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(inbox)
    frame = frame.select(*[step(F.col(c)).alias(c) if c == column else F.col(c)
                           for c in frame.columns])
    query = (frame.writeStream.format("garlicfarm").options(**options)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    if not query.awaitTermination(300):
        query.stop()
        raise SystemExit("the sink query did not finish in 300 s")
    if query.exception() is not None:
        raise SystemExit(f"the sink query failed: {query.exception()}")
    return query


def run_raft(spark, farm: dict, spec: dict, kill_dir: Path) -> dict:
    from pyspark_farm.connection import CONNECTION_OPTIONS, FarmClientOptions
    connection = FarmClientOptions.from_options(CONNECTION_OPTIONS.parse(farm))
    with connection.client() as client:
        start = client.last_applied() + 1
    query = stream_into(spark, spec["inbox"], "value string", "value",
                        killing_step(str(kill_dir / "raft"), spec["poison"]), farm,
                        spec["checkpoint"])
    with connection.client() as client:
        batch = client.last_committed_batch(query.id)
        end = client.last_applied() + 1
    result = {"batch": batch}
    for fmt in ("garlicfarm", "garlicfarm-columnar") if spec.get("columnar") else ("garlicfarm",):
        read = (spark.read.format(fmt).options(**farm)
                .option("startingOffsets", json.dumps({"index": start}))
                .option("endingOffsets", json.dumps({"index": end})).load())
        result["values" if fmt == "garlicfarm" else "columnar values"] = values(read)
    return result


def run_dafka(spark, farm: dict, spec: dict, kill_dir: Path) -> dict:
    options = {**spec["options"], **farm, "topic": spec["topic"]}
    stream_into(spark, spec["inbox"], "value string", "value",
                killing_step(str(kill_dir / "dafka"), spec["poison"]), options,
                spec["checkpoint"])
    rows = (spark.read.format("garlicfarm").options(**spec["options"], **farm)
            .option("subscribe", spec["topic"]).load().collect())
    return {"values": sorted(bytes(r.value).decode() for r in rows),
            "offsets": sorted([r.partition, r.offset] for r in rows)}


def run_chp(spark, farm: dict, spec: dict, kill_dir: Path) -> dict:
    from connectors.chp.client import CloneClient
    options = {"kind": "chp", "endpoint": spec["endpoint"], "serverTimeout": "1s"}
    query = stream_into(spark, spec["inbox"], "key string, value string", "key",
                        killing_step(str(kill_dir / "chp"), spec["poison"]), options,
                        spec["checkpoint"])
    with CloneClient([spec["endpoint"]]) as chp:
        chp.wait_synced(30)
        found = {k.decode(): e.body.decode() for k, e in chp.snapshot().entries.items()}
    return {"map": found, "query_id": query.id}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    host = spec["driver_host"]
    builder = SparkSession.builder
    if spec["kinds"].get("raft", {}).get("columnar"):
        from pyspark_farm.jvm import jar_path
        builder = builder.config("spark.jars", jar_path())
    spark = (builder.master(spec["master"]).appName("garlicfarm-cluster-test")
             .config("spark.driver.host", host).config("spark.driver.bindAddress", host)
             .config("spark.executor.cores", "1").config("spark.cores.max", "2")
             .config("spark.executor.memory", "512m").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
             .config("spark.pyspark.python", sys.executable)
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    kill_dir = Path(spec["kill_dir"])
    result: dict = {"driver_netns": os.readlink("/proc/self/ns/net"), "driver_pid": os.getpid()}
    farm_spec = spec.get("embedded_farm")
    farm = None
    try:
        if farm_spec is not None:
            from pyspark_farm import LocalFarm
            farm = LocalFarm(nodes=3, host=farm_spec["host"], tls=farm_spec["tls"]).start()
            options = farm.options
            result["farm"] = {"endpoints": farm.endpoints, "tls": "tls.ca" in options}
        else:
            options = spec["farm"]
        runners = {"raft": run_raft, "dafka": run_dafka, "chp": run_chp}
        for kind, kind_spec in spec["kinds"].items():
            result[kind] = runners[kind](spark, options, kind_spec, kill_dir)
    finally:
        spark.stop()
        if farm is not None:
            farm.close()
    staging = Path(spec["result"] + ".tmp")
    staging.write_text(json.dumps(result))
    staging.rename(spec["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
