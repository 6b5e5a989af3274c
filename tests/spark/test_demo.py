"""`make demo`'s main function, small, in the test session (it reuses the active Spark
session and leaves it running)."""
from __future__ import annotations

from collections import Counter

import pytest

from pyspark_farm import demo

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(240)
def test_demo_streams_every_event_exactly_once(spark, capsys, no_queries_left):
    events = 400
    assert demo.main(["--events", str(events), "--files", "3", "--pause", "0.1"]) == 0
    # the reader query's totals, as Spark left them in its memory sink, against the
    # events generated (a lost or repeated event changes a count or an amount)
    generated = [demo.event(i) for i in range(events)]
    counts = Counter(e["kind"] for e in generated)
    amounts = {kind: sum(e["amount"] for e in generated if e["kind"] == kind)
               for kind in counts}
    rows = {r["kind"]: r for r in spark.sql("select kind, events, amount from demo_totals")
            .collect()}
    assert {kind: r["events"] for kind, r in rows.items()} == dict(counts)
    assert {kind: r["amount"] for kind, r in rows.items()} == pytest.approx(amounts)
    assert "farm and Spark stopped." in capsys.readouterr().out
    assert not spark.sparkContext._jsc.sc().isStopped()   # the caller's session lives on
