"""What a new user of the wheel runs: a columnar read through `configure_spark`.

tests/compat/test_release.py copies this file into an empty directory and runs it with the
Python of a fresh venv holding only PySpark and the wheel (no checkout on the path). It
writes rows into an embedded farm with the Python sink, reads them back with
`format("garlicfarm-columnar")` in a session whose builder went through
`configure_spark`, and prints what the test checks as one JSON line.
"""
from __future__ import annotations

import json
import sys

import pyspark
from pyspark.sql import SparkSession

import garlicfarm
import pyspark_farm
from pyspark_farm import LocalFarm, configure_spark

ROWS = 100


def main() -> int:
    builder = (SparkSession.builder.master("local[2]").appName("garlicfarm-release-check")
               .config("spark.ui.enabled", "false").config("spark.log.level", "ERROR"))
    spark = configure_spark(builder).getOrCreate()
    try:
        with LocalFarm(nodes=1) as farm:
            wanted = [f"release-{i:03d}" for i in range(ROWS)]
            (spark.createDataFrame([(v,) for v in wanted], "value string").write
             .format("garlicfarm").options(**farm.options).mode("append").save())
            frame = (spark.read.format("garlicfarm-columnar").options(**farm.options)
                     .option("startingOffsets", "earliest").load())
            got = [bytes(r.value).decode() for r in frame.select("value").collect()
                   if r.value is not None and bytes(r.value).startswith(b"release-")]
            plan = frame._jdf.queryExecution().executedPlan().toString()
        print(json.dumps({
            "garlicfarm": garlicfarm.__version__, "pyspark": pyspark.__version__,
            "python": "%d.%d" % sys.version_info[:2], "package": pyspark_farm.__file__,
            "spark.jars": spark.sparkContext.getConf().get("spark.jars"),
            "read": sorted(got), "wanted": wanted, "plan": plan}))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
