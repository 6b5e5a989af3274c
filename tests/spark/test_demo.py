"""`make demo`'s main function, small, in the test session (it reuses the active Spark
session and leaves it running): all three kinds, each judged from its output."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from pyspark_farm import demo

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_demo_streams_every_event_exactly_once_through_every_kind(spark, capsys,
                                                                   no_queries_left):
    events = 400
    assert demo.main(["--events", str(events), "--files", "3", "--pause", "0.1"]) == 0
    out = " ".join(capsys.readouterr().out.split())     # rich wraps long lines
    assert re.search(r"status page: http://127\.0\.0\.1:\d+/farm/farm", out)
    assert "farm and Spark stopped." in out
    # Judged from what the readers' queries left in Spark's memory sinks, against the
    # events generated, not from the demo's own verdicts.
    generated = [demo.event(i) for i in range(events)]
    counts = Counter(e["kind"] for e in generated)
    amounts = {kind: sum(e["amount"] for e in generated if e["kind"] == kind)
               for kind in counts}
    raft = {r["kind"]: r for r in spark.sql("select kind, events, amount from demo_raft")
            .collect()}
    assert {kind: r["events"] for kind, r in raft.items()} == dict(counts)
    assert {kind: r["amount"] for kind, r in raft.items()} == pytest.approx(amounts)
    dafka = spark.sql("select id, partition, offset from demo_dafka").collect()
    assert sorted(r["id"] for r in dafka) == list(range(events))
    for partition in {r["partition"] for r in dafka}:
        offsets = sorted(r["offset"] for r in dafka if r["partition"] == partition)
        assert offsets == list(range(len(offsets))), partition
    chp = spark.sql("select key, sequence, deleted from demo_chp").collect()
    live = sorted(int(r["key"][len("/demo/"):]) for r in chp
                  if r["key"].startswith("/demo/") and not r["deleted"])
    assert live == list(range(events))
    assert len({r["sequence"] for r in chp}) == len(chp), "a changelog sequence repeated"
    assert not spark.sparkContext._jsc.sc().isStopped()   # the caller's session lives on


def test_demo_refuses_unknown_kinds(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--kinds", "raft,kafka"])
    assert "choose from raft, dafka, chp" in capsys.readouterr().err
