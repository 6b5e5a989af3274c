"""startingOffsets / endingOffsets / index filters / row limits / failOnDataLoss, on
journal entries appended with the farm's client (each entry a batch of records)."""
from __future__ import annotations

import json
import time

import pytest

from pyspark_farm import LocalFarm
from pyspark_farm.raft.timestamps import index_at_time
from tests.spark.helpers import log_range
from tests.support import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _append(client, entries: int, tag: str, records: int = 3, pad: int = 0
            ) -> dict[int, list[bytes]]:
    appended = {}
    for e in range(entries):
        batch = [f"{tag}-{e}-{r}-".encode() + b"p" * pad for r in range(records)]
        index, _term = client.append(batch)
        appended[index] = batch
    return appended


def _rows(frame) -> list[tuple[int, bytes]]:
    return sorted((r["index"], bytes(r["value"])) for r in frame.select("index", "value").collect())


def _expected(appended: dict[int, list[bytes]], keep=lambda index: True):
    return sorted((i, v) for i, batch in appended.items() if keep(i) for v in batch)


@pytest.mark.timeout(180)
def test_batch_offsets_and_index_pushdown(spark, farm):
    with farm.client() as client:
        appended = _append(client, 5, "b")
    i = sorted(appended)
    frame = log_range(spark, farm, i[1], i[3])
    assert _rows(frame) == _expected(appended, lambda x: i[1] <= x < i[3])
    assert {r.type for r in frame.select("type").collect()} == {"journal"}
    everything = log_range(spark, farm, i[0])
    narrowed = everything.where(f"index >= {i[1]} and index < {i[3]}")
    assert _rows(narrowed) == _expected(appended, lambda x: i[1] <= x < i[3])
    points = everything.where(f"index in ({i[0]}, {i[4]})")
    assert _rows(points) == _expected(appended, lambda x: x in (i[0], i[4]))
    assert everything.where(f"index = {i[2]}").count() == 3
    # endingOffsets beyond the log end reads to the end; an empty range reads nothing.
    assert log_range(spark, farm, i[4], i[4] + 10_000).count() >= 3
    assert log_range(spark, farm, i[2], i[2]).count() == 0


@pytest.mark.timeout(180)
def test_stream_offsets_and_row_limits(spark, farm, tmp_path, no_queries_left):
    with farm.client() as client:
        old = _append(client, 2, "old")

        def run(**options):
            query = (spark.readStream.format("garlicfarm").options(**farm.options)
                     .option("startingOffsets", "latest").options(**options).load()
                     .select("index", "value", "type")
                     .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                     .option("checkpointLocation", str(tmp_path / "chk"))
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
            assert query.exception() is None
            return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

        assert run() == []                                  # latest: nothing before the start
        new = _append(client, 5, "new")
        # 3 records per entry, at most 7 rows per trigger: whole entries, 6 rows at a time.
        assert run(maxOffsetsPerTrigger="7") == [6, 6, 3]
        # Fewer rows than minOffsetsPerTrigger: Trigger.AvailableNow still reads them (it
        # must finish); a processing-time trigger would wait up to maxTriggerDelay.
        new.update(_append(client, 1, "last"))
        assert run(minOffsetsPerTrigger="1000") == [3]
    read = spark.read.parquet(str(tmp_path / "out"))
    assert _rows(read) == _expected(new)
    assert not set(_rows(read)) & set(_expected(old))


def _after_now() -> int:
    """A time (ms) later than every entry appended so far, once the clock has passed it."""
    mark = int(time.time() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > mark, 5, message="the clock passing a mark")
    return mark


@pytest.mark.timeout(180)
def test_starting_and_ending_timestamps(spark, farm, tmp_path, no_queries_left):
    """startingTimestamp starts at the first entry appended at or after it (status and
    no-op entries in between have no stamp of their own); endingTimestamp stops before
    the first at or after it; both read as Kafka's source reads them."""
    with farm.client() as client:
        t0 = _after_now()           # the farm is the module's: earlier tests wrote too
        before = _append(client, 4, "before")
        t1 = _after_now()
        during = _append(client, 5, "during")
        t2 = _after_now()
        after = _append(client, 3, "after")
        # the driver's search alone: the first index of each group
        first, end = client.log_bounds()[0], client.last_applied() + 1
        assert index_at_time(client, t1, first, end) == min(during)
        assert index_at_time(client, t2, first, end) == min(after)
        assert index_at_time(client, 0, first, end) == first
        assert index_at_time(client, _after_now(), first, end) == end

    def read(**options):
        return (spark.read.format("garlicfarm").options(**farm.options).options(**options)
                .load().where("type = 'journal'"))
    assert _rows(read(startingTimestamp=str(t1), endingTimestamp=str(t2))) == \
        _expected(during)
    assert _rows(read(startingTimestamp=str(t2))) == _expected(after)
    assert _rows(read(startingTimestamp=str(t0), endingTimestamp=str(t1))) == \
        _expected(before)
    assert set(_rows(read(endingTimestamp=str(t1)))) >= set(_expected(before))
    # the rows' own timestamps agree with the bounds
    stamps = [r["timestamp"].timestamp() * 1000 for r in
              read(startingTimestamp=str(t1), endingTimestamp=str(t2)).collect()]
    assert stamps and all(t1 <= s < t2 for s in stamps), (t1, t2, stamps)

    query = (spark.readStream.format("garlicfarm").options(**farm.options)
             .option("startingTimestamp", str(t2)).load().select("index", "value")
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    got = _rows(spark.read.parquet(str(tmp_path / "out")))
    assert [r for r in got if r[0] in after] == _expected(after)
    assert not [r for r in got if r[0] in before or r[0] in during]

    for options, bad in (({"startingTimestamp": "-1"}, "startingTimestamp"),
                         ({"startingTimestamp": "5", "startingOffsets": "earliest"},
                          "startingTimestamp"),
                         ({"startingTimestamp": "9", "endingTimestamp": "5"},
                          "endingTimestamp")):
        with pytest.raises(Exception, match=bad):
            read(**options).collect()


@pytest.mark.timeout(240)
def test_fail_on_data_loss(spark, tmp_path, no_queries_left):
    """Entries compacted into a snapshot: the default fails naming failOnDataLoss, false
    continues at the first index still in the log of some member."""
    with LocalFarm(nodes=3, extra_args=("--snapshot-interval", "10", "--retain-entries", "1",
                               "--segment-bytes", "4096"),
                   status_interval=30.0) as farm, farm.client() as client:
        appended = _append(client, 30, "c", pad=500)   # bytes enough to fill segments
        # Each member compacts its own log, and a read goes to any member that holds it.
        first = wait_until(lambda: (low := min(client.log_bounds(farm.endpoint_of(n))[0]
                                               for n in farm.node_ids)) > 5 and low,
                           60, message="a snapshot compacting every member's log")
        with pytest.raises(Exception, match="failOnDataLoss"):
            log_range(spark, farm, 1).collect()
        frame = log_range(spark, farm, 1, failOnDataLoss="false")
        rows = _rows(frame)
        lowest = min(i for i, _ in rows)
        assert lowest >= first
        assert rows == _expected(appended, lambda x: x >= lowest)
        assert lowest <= max(appended)

        query = (spark.readStream.format("garlicfarm").options(**farm.options)
                 .option("startingOffsets", json.dumps({"index": 1})).load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
                 .trigger(availableNow=True).start())
        try:
            with pytest.raises(Exception, match="failOnDataLoss"):
                query.awaitTermination(120)
        finally:
            query.stop()
