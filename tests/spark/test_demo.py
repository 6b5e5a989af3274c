"""`make demo`'s main function, small, in the test session (it reuses the active Spark
session and leaves it running): all three kinds, each judged from its output."""
from __future__ import annotations

import re

import pytest

from pyspark_farm import demo

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_demo_streams_every_event_exactly_once_through_every_kind(spark, capsys,
                                                                   no_queries_left):
    assert demo.main(["--events", "400", "--files", "3", "--pause", "0.1"]) == 0
    out = " ".join(capsys.readouterr().out.split())     # rich wraps long lines
    assert re.search(r"status page: http://127\.0\.0\.1:\d+/farm/farm", out)
    for kind in ("raft", "dafka", "chp"):
        assert f"{kind}: 400 distinct events read back (400 rows) for 400 generated: " \
            "every event exactly once" in out, kind
    assert "MISMATCH" not in out
    assert "farm and Spark stopped." in out
    assert not spark.sparkContext._jsc.sc().isStopped()   # the caller's session lives on


def test_demo_refuses_unknown_kinds(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--kinds", "raft,kafka"])
    assert "choose from raft, dafka, chp" in capsys.readouterr().err
