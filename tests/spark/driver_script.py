"""A streaming driver run as its own process by the driver-crash tests (so it can be
SIGKILLed).

    python driver_script.py OPTIONS_JSON INBOX CHECKPOINT [--schema DDL]
        [--crash-after-commit BATCH | --crash-after-decision BATCH]

Streams the JSON files of INBOX (one per micro-batch, columns `--schema`, default
`value string`) into the garlicfarm sink of the kind OPTIONS_JSON names, with
Trigger.AvailableNow, from CHECKPOINT. With --crash-after-commit, the sink's driver commit
SIGKILLs this whole process group (driver, JVM, workers) right after the kind's commit of
BATCH returned: the moment between the sink's commit and Spark's own commit log, where a
restart re-runs a batch the sink has already made visible. With --crash-after-decision
(raft kind, a farm of several partitions), the kill comes inside the commit of BATCH,
after partition 0 decided it and before the other partitions' markers.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from pyspark_farm import spark_session
from pyspark_farm.datasource import GarlicFarmDataSource


class CrashAfterCommit:
    """Mixed in front of the kind's own stream writer class: its commit, then the kill."""

    def commit(self, messages, batchId):
        super().commit(messages, batchId)
        if batchId == int(os.environ["CRASH_AFTER_COMMIT"]):
            os.killpg(int(os.environ["DRIVER_PGID"]), signal.SIGKILL)


class CrashAfterDecision:
    """Mixed in front of the raft kind's stream writer: its commit of the batch dies where
    the decision would be rolled forward."""

    def commit(self, messages, batchId):
        if batchId == int(os.environ["CRASH_AFTER_DECISION"]):
            from pyspark_farm.raft.routed_sink import RoutedSinkBackend

            def die(*args, **kwargs):
                os.killpg(int(os.environ["DRIVER_PGID"]), signal.SIGKILL)
            RoutedSinkBackend.roll_forward = die
        super().commit(messages, batchId)


class CrashingSource(GarlicFarmDataSource):
    @classmethod
    def name(cls):
        return "garlicfarm_crashing"

    def streamWriter(self, schema, overwrite):
        plain = super().streamWriter(schema, overwrite)
        mixin = CrashAfterDecision if "CRASH_AFTER_DECISION" in os.environ else \
            CrashAfterCommit
        crashing_class = type(f"Crashing{type(plain).__name__}", (mixin, type(plain)), {})
        crashing = crashing_class.__new__(crashing_class)
        crashing.__dict__.update(plain.__dict__)
        return crashing


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("options")
    parser.add_argument("inbox")
    parser.add_argument("checkpoint")
    parser.add_argument("--schema", default="value string")
    crash = parser.add_mutually_exclusive_group()
    crash.add_argument("--crash-after-commit", type=int)
    crash.add_argument("--crash-after-decision", type=int)
    args = parser.parse_args()
    os.environ["DRIVER_PGID"] = str(os.getpgid(0))
    crashing = args.crash_after_commit is not None or args.crash_after_decision is not None
    if args.crash_after_commit is not None:
        os.environ["CRASH_AFTER_COMMIT"] = str(args.crash_after_commit)
    if args.crash_after_decision is not None:
        os.environ["CRASH_AFTER_DECISION"] = str(args.crash_after_decision)
    spark = spark_session("garlicfarm-driver", "local[2]", conf={
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    fmt = "garlicfarm"
    if crashing:
        spark.dataSource.register(CrashingSource)   # a test double; the plain run registers nothing
        fmt = "garlicfarm_crashing"
    query = (spark.readStream.schema(args.schema).option("maxFilesPerTrigger", 1)
             .json(args.inbox)
             .writeStream.format(fmt).options(**json.loads(args.options))
             .option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start())
    print(json.dumps({"query_id": query.id}), flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
