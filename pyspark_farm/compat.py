"""What differs between the PySpark versions garlicfarm supports (docs/compatibility.md).

PySpark is provided by the runtime (a Databricks cluster, a Spark distribution) or by the
`garlicfarm[spark]` extra; `require_pyspark` runs first when `pyspark_farm` is imported
and fails with one message naming the supported versions when it is missing or too old.

What each version's Python data source API has, and what the readers do without it:

* 4.2+: admission control (`pyspark.sql.streaming.datasource`: ReadLimit, latestOffset
  with the start and a limit, SupportsTriggerAvailableNow). Before 4.2 Spark calls
  `latestOffset()` with no arguments, so the stream readers remember where the next
  micro-batch starts (`StartTracker`) and apply maxOffsetsPerTrigger /
  minOffsetsPerTrigger themselves; Spark runs `trigger(availableNow=True)` as one
  micro-batch (it needs SupportsTriggerAvailableNow to run several).
* 4.1+: filter pushdown (`DataSourceReader.pushFilters` and the Filter classes) and
  `DataSourceStreamArrowWriter`. On 4.0 nothing is pushed (Spark filters the rows it
  reads), and the stream writer takes Arrow batches as a `DataSourceArrowWriter` (4.0's
  write worker hands Arrow batches to any writer that is one).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from .errors import UnsupportedPySparkError

#: The PySpark releases garlicfarm supports: MIN_PYSPARK <= version < MAX_PYSPARK_EXCLUSIVE.
MIN_PYSPARK = (4, 0)
MAX_PYSPARK_EXCLUSIVE = (5, 0)
#: The minor releases CI and docs/compatibility.md cover.
TESTED_PYSPARK = ("4.0", "4.1", "4.2", "4.3")
SUPPORTED_TEXT = f"PySpark 4.x (4.0 or later, below 5.0; tested: {', '.join(TESTED_PYSPARK)})"
INSTALL_HINT = ("`pip install 'garlicfarm[spark]'` installs one (on a laptop, in CI), or run "
                "on a runtime that provides PySpark 4.x (Databricks Runtime 17 or later, a "
                "Spark 4 distribution); see docs/compatibility.md")


def version_tuple(text: str) -> tuple[int, int]:
    """(major, minor) of a version string: '4.1.4' -> (4, 1), '4.2.0.dev1' -> (4, 2)."""
    parts = []
    for piece in text.split(".")[:2]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits or 0))
    parts += [0, 0]
    return parts[0], parts[1]


def check_version(version: str, where: str = "") -> tuple[int, int]:
    """(major, minor) of `version` when garlicfarm supports it, else the
    UnsupportedPySparkError that names the supported versions and how to install."""
    found = version_tuple(version)
    if not MIN_PYSPARK <= found < MAX_PYSPARK_EXCLUSIVE:
        raise UnsupportedPySparkError(
            f"garlicfarm's Spark data source (pyspark_farm) needs {SUPPORTED_TEXT}, but "
            f"PySpark {version} is installed{where}: {INSTALL_HINT}.")
    return found


def require_pyspark() -> tuple[int, int]:
    """The (major, minor) of the PySpark that is installed; UnsupportedPySparkError (an
    ImportError) naming the supported versions and how to install when there is none or
    it is outside them."""
    try:
        import pyspark
    except ImportError as exc:
        raise UnsupportedPySparkError(
            f"garlicfarm's Spark data source (pyspark_farm) needs {SUPPORTED_TEXT}, and "
            f"PySpark is not installed for {sys.executable} ({exc}): {INSTALL_HINT}."
        ) from None
    version = getattr(pyspark, "__version__", "unknown")
    try:
        return check_version(version, f" (at {os.path.dirname(pyspark.__file__)})")
    except UnsupportedPySparkError as exc:
        raise exc from None


PYSPARK_VERSION = require_pyspark()

# --- admission control (4.2+) ---------------------------------------------------------------
try:
    from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                                  ReadMinRows, SupportsTriggerAvailableNow)
    HAS_ADMISSION_CONTROL = True
except ImportError:   # PySpark 4.0, 4.1: Spark never passes a limit; these only type the code
    HAS_ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for PySpark 4.2's ReadLimit (never passed by Spark before 4.2)."""

    @dataclass(frozen=True)
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass(frozen=True)
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    @dataclass(frozen=True)
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        min_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: before 4.2 Spark runs availableNow as one micro-batch for Python
        sources and never calls prepareForTriggerAvailableNow."""

# --- filter pushdown (4.1+) -----------------------------------------------------------------
try:
    from pyspark.sql.datasource import (EqualNullSafe, EqualTo, Filter, GreaterThan,
                                        GreaterThanOrEqual, In, LessThan, LessThanOrEqual,
                                        StringStartsWith)
    HAS_FILTER_PUSHDOWN = True
except ImportError:   # PySpark 4.0: no pushdown API; Spark filters the rows it reads
    HAS_FILTER_PUSHDOWN = False

    class Filter:  # type: ignore[no-redef]
        """Stand-in for PySpark 4.1's Filter (never instantiated on 4.0)."""

    EqualNullSafe = EqualTo = GreaterThan = GreaterThanOrEqual = In = LessThan = \
        LessThanOrEqual = StringStartsWith = Filter  # type: ignore[misc]

# --- the streaming Arrow writer (4.1+) ------------------------------------------------------
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter  # noqa: E402

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
    HAS_STREAM_ARROW_WRITER = True
except ImportError:   # PySpark 4.0
    HAS_STREAM_ARROW_WRITER = False

    class DataSourceStreamArrowWriter(DataSourceStreamWriter,  # type: ignore[no-redef]
                                      DataSourceArrowWriter):
        """PySpark 4.0's write worker hands Arrow batches to a writer that is a
        DataSourceArrowWriter, streaming or not; commit/abort take the batch id as a
        DataSourceStreamWriter's do."""


# --- filter pushdown in a session without spark.sql.python.filterPushdown.enabled -----------
PLAN_WORKER_FILE = "plan_data_source_read.py"


def pushdown_allowed() -> bool:
    """Whether the batch reader being built may define `pushFilters`.

    Spark plans a Python batch read in a Python worker. With
    `spark.sql.python.filterPushdown.enabled` on and filters to push, the worker
    `data_source_pushdown_filters` builds the reader and calls pushFilters. Otherwise the
    worker `plan_data_source_read` builds it, never calls pushFilters, and (4.1+) refuses a
    reader that defines it while the setting is off (DATA_SOURCE_PUSHDOWN_DISABLED). That
    worker keeps the setting in its local `enable_pushdown` only, so the reader looks up
    the call stack: built by `plan_data_source_read` with pushdown off (or a setting it
    cannot read), the reader is one without pushFilters, and Spark filters the rows."""
    if not HAS_FILTER_PUSHDOWN:
        return False
    frame: Any = sys._getframe(1)
    while frame is not None:
        if os.path.basename(frame.f_code.co_filename) == PLAN_WORKER_FILE:
            return frame.f_locals.get("enable_pushdown") is True
        frame = frame.f_back
    return True


class StartTracker:
    """Where the next micro-batch starts, for PySpark before 4.2, whose Spark calls
    `latestOffset()` without the start. Spark plans every micro-batch with
    `partitions(start, end)` after the latestOffset that chose `end`, and on a restart
    from a checkpoint calls `partitions(end, end)` with the end of the last batch in the
    offset log (setLatestSeenOffset) before asking for a new one; a new query's first
    batch starts at initialOffset (which the readers answer the same each time)."""

    _seen_end: dict | None = None

    def note_end(self, end: dict) -> None:
        self._seen_end = dict(end)

    def next_start(self) -> dict:
        if self._seen_end is not None:
            return dict(self._seen_end)
        return self.initialOffset()  # type: ignore[attr-defined]


__all__ = [
    "DataSourceStreamArrowWriter", "EqualNullSafe", "EqualTo", "Filter", "GreaterThan",
    "GreaterThanOrEqual", "HAS_ADMISSION_CONTROL", "HAS_FILTER_PUSHDOWN",
    "HAS_STREAM_ARROW_WRITER", "In", "LessThan", "LessThanOrEqual", "PYSPARK_VERSION",
    "ReadAllAvailable", "ReadLimit", "ReadMaxRows", "ReadMinRows", "StartTracker",
    "StringStartsWith", "SupportsTriggerAvailableNow", "check_version", "pushdown_allowed",
    "require_pyspark"]
