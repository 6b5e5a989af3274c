"""`make demo`'s main function, small, in the test session (it reuses the active Spark
session and leaves it running)."""
from __future__ import annotations

import pytest

from pyspark_farm import demo

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(240)
def test_demo_streams_every_event_exactly_once(spark, capsys, no_queries_left):
    assert demo.main(["--events", "400", "--files", "3", "--pause", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "400 distinct events read back for 400 generated" in out
    assert "every event exactly once" in out
    assert "farm and Spark stopped." in out
    assert not spark.sparkContext._jsc.sc().isStopped()   # the caller's session lives on
