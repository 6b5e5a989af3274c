"""Shared steps of the Spark tests: deterministic input files, reading a log range back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

INPUT_SCHEMA = "value string"
DRIVER_SCRIPT = Path(__file__).with_name("driver_script.py")


def write_files(folder: Path, chunks: Sequence[Sequence[str | dict]], first: int = 0) -> None:
    """One JSON-lines file per chunk (a text row is ``{"value": row}``, a dict row is
    written as it is), written aside and renamed in (a file source with
    maxFilesPerTrigger=1 then makes one micro-batch per file, in name order). Spark's
    file source takes files oldest first, and files written within one clock tick tie
    (then any order: a flake of the driver-killed tests), so each file gets its own
    modification time, 10 ms apart (Spark sees milliseconds), in name order, the last
    one now."""
    import time
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time_ns()
    for number, chunk in enumerate(chunks, start=first):
        staging = folder.parent / f".{folder.name}-{number:04d}.json"
        staging.write_text("".join(json.dumps(v if isinstance(v, dict) else {"value": v})
                                   + "\n" for v in chunk))
        stamp = now - (len(chunks) - 1 - (number - first)) * 10_000_000
        os.utime(staging, ns=(stamp, stamp))
        staging.rename(folder / f"{number:04d}.json")


def file_stream(spark, folder: Path):
    return (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
            .json(str(folder)))


def log_range(spark, farm, start: int, stop: int | None = None, *, fmt: str = "garlicfarm",
              **options):
    """A batch read of the farm's log from `start` (to `stop`, else to the end), by the
    Python source or (`fmt="garlicfarm-columnar"`) the JVM reader."""
    reader = (spark.read.format(fmt).options(**farm.options)
              .option("startingOffsets", json.dumps({"index": start})))
    if stop is not None:
        reader = reader.option("endingOffsets", json.dumps({"index": stop}))
    return reader.options(**options).load()


def values(frame) -> list[str]:
    """The value column as sorted text (a multiset: duplicates stay)."""
    return sorted(bytes(r.value).decode() for r in frame.select("value").collect())


def spawn_driver(options: dict[str, str], inbox: Path, checkpoint: Path, *extra: str
                 ) -> subprocess.Popen:
    """`driver_script.py` as its own process group (a SIGKILL takes its JVM and workers
    too); its first stdout line is ``{"query_id": ...}``."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen(
        [sys.executable, str(DRIVER_SCRIPT), json.dumps(options), str(inbox), str(checkpoint),
         *extra], stdout=subprocess.PIPE, stderr=None if os.environ.get("DRIVER_STDERR") else subprocess.DEVNULL, text=True, env=env,
        start_new_session=True, cwd=str(DRIVER_SCRIPT.parents[2]))


def crash_after_commit(options: dict[str, str], inbox: Path, checkpoint: Path, batch: int,
                       *extra: str, timeout: float = 180,
                       where: str = "--crash-after-commit") -> str:
    """Runs a driver that SIGKILLs itself right after the sink's commit of `batch` (or
    `where` driver_script says); checks that it died that way, and that Spark's commit
    log missed the batch; the query id."""
    crashing = spawn_driver(options, inbox, checkpoint, where, str(batch), *extra)
    try:
        query_id = json.loads(crashing.stdout.readline())["query_id"]
        assert crashing.wait(timeout) == -9, "the driver should have SIGKILLed itself"
    finally:
        if crashing.poll() is None:
            os.killpg(crashing.pid, 9)
            crashing.wait()
        crashing.stdout.close()
    assert not (checkpoint / "commits" / str(batch)).exists()
    assert (checkpoint / "offsets" / str(batch)).exists()
    return query_id


def dafka_source_schema():
    """The dafka source's columns as the StructType Spark hands a reader, built from
    DAFKA_COLUMNS_DDL (its columns are simple types: no JVM needed to parse it)."""
    from pyspark.sql.types import (BinaryType, LongType, StringType, StructField,
                                   StructType, TimestampType)

    from pyspark_farm.dafka.source import DAFKA_COLUMNS_DDL
    types = {"string": StringType(), "long": LongType(), "binary": BinaryType(),
             "timestamp": TimestampType()}
    return StructType([StructField(name, types[kind]) for name, kind in
                       (field.split() for field in DAFKA_COLUMNS_DDL.split(","))])
