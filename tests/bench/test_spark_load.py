"""benchmarks/spark_load.py's counting (the Spark run itself is the benchmark's): rows of
a window from the query's progress reports, each batch pro rata of its run; the sink's
connection options from a FarmClient's."""
from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from spark_load import rows_in, sink_options  # noqa: E402

T0 = datetime(2026, 11, 28, 17, 0, 0, tzinfo=timezone.utc)


def _report(start: float, seconds: float, rows: int) -> dict:
    stamp = datetime.fromtimestamp(T0.timestamp() + start, timezone.utc)
    return {"timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "batchDuration": int(seconds * 1000), "numInputRows": rows}


def test_a_window_counts_each_batch_by_the_share_of_its_run_inside():
    progress = [_report(0, 2, 1000),      # wholly before the window
                _report(2, 2, 1000),      # half inside
                _report(4, 1, 500),       # wholly inside
                _report(5, 4, 4000)]      # a quarter inside
    base = T0.timestamp()
    assert rows_in(progress, base + 3, base + 6) == 500 + 500 + 1000


def test_batches_outside_the_window_and_empty_runs_count_nothing():
    base = T0.timestamp()
    assert rows_in([_report(0, 1, 100), _report(10, 0, 100)], base + 2, base + 9) == 0


def test_the_sink_gets_string_options_without_the_partition():
    options = sink_options({"endpoints": ["127.0.0.1:1", "127.0.0.1:2"], "cluster": "c",
                            "username": "u", "password": "p", "partition": 2})
    assert options == {"endpoints": "127.0.0.1:1,127.0.0.1:2", "cluster": "c",
                       "username": "u", "password": "p"}
