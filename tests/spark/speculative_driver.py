"""A Spark driver with spark.speculation=true, run as its own process by
test_dafka_sink_guards.py (speculation is fixed when a session starts; the tests' shared
session runs without it).

    python speculative_driver.py OPTIONS_JSON INBOX CHECKPOINT

Writes three rows into the garlicfarm sink that OPTIONS_JSON describes with `df.write`,
then streams the JSON files of INBOX (`value string`) into it with
Trigger.AvailableNow, and prints one JSON line: {"batch": ERROR, "stream": ERROR}, each
the text of the error the write raised, or null.
"""
from __future__ import annotations

import json
import sys

from pyspark_farm import spark_session


def main() -> int:
    options, inbox, checkpoint = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    spark = spark_session("garlicfarm-speculative", "local[2]", conf={
        "spark.speculation": "true", "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("OFF")
    outcome: dict[str, str | None] = {}
    try:
        (spark.createDataFrame([("a",), ("b",), ("c",)], "value string")
         .write.format("garlicfarm").options(**options).mode("append").save())
        outcome["batch"] = None
    except Exception as exc:   # noqa: BLE001 - reported to the test
        outcome["batch"] = str(exc)
    query = (spark.readStream.schema("value string").json(inbox)
             .writeStream.format("garlicfarm").options(**options)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
        outcome["stream"] = None if query.exception() is None else str(query.exception())
    except Exception as exc:   # noqa: BLE001 - reported to the test
        outcome["stream"] = str(exc)
    finally:
        query.stop()
    print(json.dumps(outcome), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
