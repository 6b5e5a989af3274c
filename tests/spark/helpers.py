"""Shared steps of the Spark tests: deterministic input files, reading a log range back."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

INPUT_SCHEMA = "value string"


def write_files(folder: Path, chunks: Sequence[Sequence[str]], first: int = 0) -> None:
    """One JSON-lines file per chunk, written aside and renamed in (a file source with
    maxFilesPerTrigger=1 then makes one micro-batch per file, in name order)."""
    folder.mkdir(parents=True, exist_ok=True)
    for number, chunk in enumerate(chunks, start=first):
        staging = folder.parent / f".{folder.name}-{number:04d}.json"
        staging.write_text("".join(json.dumps({"value": v}) + "\n" for v in chunk))
        staging.rename(folder / f"{number:04d}.json")


def file_stream(spark, folder: Path):
    return (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
            .json(str(folder)))


def log_range(spark, farm, start: int, stop: int | None = None, **options):
    """A batch read of the farm's log from `start` (to `stop`, else to the end)."""
    reader = (spark.read.format("garlicfarm").options(**farm.options)
              .option("startingOffsets", json.dumps({"index": start})))
    if stop is not None:
        reader = reader.option("endingOffsets", json.dumps({"index": stop}))
    return reader.options(**options).load()


def values(frame) -> list[str]:
    """The value column as sorted text (a multiset: duplicates stay)."""
    return sorted(bytes(r.value).decode() for r in frame.select("value").collect())
