"""Ingest JSON-lines order files into a garlicfarm farm, exactly once, with spark-submit.

An incremental job to run on a schedule (cron, Airflow): each run streams the files that
appeared in --input since the last run into the farm's Raft log with the exactly-once
sink (Trigger.AvailableNow: everything new, then stop) and reports what it wrote
(`--totals`: and the orders per item in the whole log). A run that fails or is killed can simply be
run again: Spark's checkpoint and the farm's ledger make every file land exactly once.

    export GARLICFARM_PASSWORD=...          # never on the command line
    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/spark-submit --master 'local[2]' \\
        examples/orders_to_farm.py --input /data/orders --checkpoint /data/chk/orders \\
        --endpoints 10.0.0.1:9001,10.0.0.2:9001,10.0.0.3:9001 --cluster orders --username spark

Each line of an input file is an order: {"id": 1, "customer": "ana", "item": "book",
"amount": 12.5}. Options: --help; the data source's options: docs/options.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ORDER_SCHEMA = "id long, customer string, item string, amount double"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="orders_to_farm.py", description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True, help="folder of JSON-lines order files")
    p.add_argument("--checkpoint", required=True,
                   help="Spark checkpoint folder of this job (keep it between runs; on "
                        "shared storage when the driver may run elsewhere)")
    p.add_argument("--endpoints", default=os.environ.get("GARLICFARM_ENDPOINTS"),
                   help="farm members, HOST:PORT,... (default: $GARLICFARM_ENDPOINTS)")
    p.add_argument("--cluster", default="farm", help="the farm's cluster name (farm)")
    p.add_argument("--username", help="farm user; the password comes from "
                                      "$GARLICFARM_PASSWORD")
    p.add_argument("--tls-ca", help="CA file to verify the farm's members (TLS farms)")
    p.add_argument("--max-files", type=int, default=10,
                   help="files per micro-batch, at most (10)")
    p.add_argument("--totals", action="store_true",
                   help="then read the whole log back and print the orders per item (reads "
                        "every entry of the log: for checks and small farms)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if not args.endpoints:
        p.error("--endpoints: no farm to write to; give --endpoints HOST:PORT,... or set "
                "$GARLICFARM_ENDPOINTS")
    if not Path(args.input).is_dir():
        p.error(f"--input: {args.input} is not a folder")
    if args.username and not os.environ.get("GARLICFARM_PASSWORD"):
        p.error(f"--username {args.username}: set $GARLICFARM_PASSWORD to its password")
    if args.max_files < 1:
        p.error("--max-files: must be at least 1")
    return args


def farm_options(args: argparse.Namespace) -> dict[str, str]:
    """The garlicfarm data source's connection options (docs/options.md)."""
    options = {"endpoints": args.endpoints, "cluster": args.cluster}
    if args.username:
        options.update(username=args.username, password=os.environ["GARLICFARM_PASSWORD"])
    if args.tls_ca:
        options["tls.ca"] = args.tls_ca
    return options


def log_totals(spark, options: dict[str, str]) -> dict[str, dict]:
    """Orders per item in the whole log (records of other writers, not orders, skipped)."""
    from pyspark.sql import functions as F
    orders = (spark.read.format("garlicfarm").options(**options)
              .option("startingOffsets", "earliest")
              .option("valueFormat", "json").option("valueSchema", ORDER_SCHEMA)
              .load()
              .where(F.col("id").isNotNull() & F.col("item").isNotNull()))
    rows = (orders.groupBy("item")
            .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
            .orderBy("item").collect())
    return {r["item"]: {"orders": r["orders"], "amount": r["amount"]} for r in rows}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from pyspark.sql import SparkSession

    # spark-submit decides the master and resources; nothing to register: Spark finds the
    # garlicfarm format in the installed package. Reads work in any session; with this
    # setting, batch reads of the log push `index` filters into the source
    # (docs/compatibility.md).
    spark = (SparkSession.builder.appName("orders-to-farm")
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    options = farm_options(args)
    try:
        query = (spark.readStream.schema(ORDER_SCHEMA)
                 .option("maxFilesPerTrigger", args.max_files).json(args.input)
                 .writeStream.format("garlicfarm").options(**options)
                 .option("valueFormat", "json")
                 .option("checkpointLocation", args.checkpoint)
                 .queryName("orders_to_farm")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        written = sum(p["numInputRows"] for p in batches)

        report = {"query_id": query.id, "batches": [p["batchId"] for p in batches],
                  "rows_written": written}
        if args.totals:
            report["log_totals"] = log_totals(spark, options)
    finally:
        spark.stop()
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"wrote {written} orders in {len(batches)} "
              f"micro-batch{'' if len(batches) == 1 else 'es'} to farm "
              f"{args.cluster!r} (query {report['query_id']})")
        if args.totals:
            print(f"{'item':<12}{'orders':>8}{'amount':>12}")
            for item, row in report["log_totals"].items():
                print(f"{item:<12}{row['orders']:>8}{row['amount']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
