"""The chp kind over bulk snapshots: the map read and the changelog stream's first
snapshot give the same rows, with Spark's exact Arrow schema, from a server that answers
in KVBULK and from one that does not (--no-bulk, as a zguide server); and a
Trigger.AvailableNow changelog query reads the whole map (its first batch once planned
on a second, empty capture)."""
from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.types import (BinaryType, BooleanType, LongType, MapType, StringType,
                               StructField, StructType)

from connectors.chp.client import CloneClient, Update
from pyspark_farm import LocalFarm
from pyspark_farm.chp.changelog import RESYNC_PROPERTY
from pyspark_farm.chp.kind import batch_reader
from pyspark_farm.chp.rows import CHP_SCHEMA
from tests.chp.support import ServerProcess

pytestmark = [pytest.mark.spark]

KEYS = 3000
SPARK_SCHEMA = StructType([   # CHP_COLUMNS_DDL, built without a session
    StructField("key", StringType()), StructField("sequence", LongType()),
    StructField("uuid", BinaryType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("value", BinaryType()), StructField("deleted", BooleanType())])


@pytest.fixture(scope="module")
def small_farm():
    with LocalFarm(nodes=1) as running:
        yield running


@pytest.fixture(params=["bulk", "no-bulk"])
def chp_server(request, tmp_path):
    extra = ("--no-bulk",) if request.param == "no-bulk" else ()
    server = ServerProcess(tmp_path, "chp", "--hugz-interval", "0.2", *extra).start()
    try:
        with CloneClient([server.address]) as chp:
            chp.wait_synced(30)
            chp.set_many([Update(f"/k/{n:05d}", f"v{n}", ttl=3600 if n % 9 == 0 else None)
                          for n in range(KEYS)], timeout=60)
            chp.set_many([Update("/other/x", "outside the subtree")], timeout=30)
        yield server
    finally:
        server.kill()


def expected() -> dict[str, bytes]:
    return {f"/k/{n:05d}": f"v{n}".encode() for n in range(KEYS)}


def test_map_read_batches_have_sparks_schema_and_every_key(chp_server):
    reader = batch_reader({"kind": "chp", "endpoint": chp_server.address, "subtree": "/k/"},
                          SPARK_SCHEMA)
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    assert batches and all(b.schema == CHP_SCHEMA for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["key"] for r in rows] == sorted(expected())          # sorted by key
    assert {r["key"]: r["value"] for r in rows} == expected()
    assert not any(r["deleted"] for r in rows)
    ttls = [r for r in rows if r["properties"]]
    assert len(ttls) == len(range(0, KEYS, 9)) and all(
        dict(r["properties"]).keys() == {"ttl"} for r in ttls)


@pytest.mark.timeout(180)
def test_map_read_through_spark_with_pushed_key_filters(spark, chp_server):
    frame = (spark.read.format("garlicfarm").option("kind", "chp")
             .option("endpoint", chp_server.address).load())
    assert frame.count() == KEYS + 1
    some = frame.where("key in ('/k/00007', '/k/02999', '/nope')").collect()
    assert sorted((r.key, bytes(r.value)) for r in some) == [
        ("/k/00007", b"v7"), ("/k/02999", b"v2999")]


@pytest.mark.timeout(240)
def test_available_now_changelog_reads_the_whole_map_once(spark, small_farm, chp_server,
                                                          tmp_path: Path, no_queries_left):
    batches: list[list] = []
    query = (spark.readStream.format("garlicfarm").option("kind", "chp")
             .options(**small_farm.options).option("endpoint", chp_server.address)
             .option("subtree", "/k/").option("startingOffsets", "snapshot").load()
             .writeStream.trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "chk"))
             .foreachBatch(lambda df, _: batches.append(df.collect())).start())
    assert query.awaitTermination(180)
    assert query.exception() is None
    rows = [r for batch in batches for r in batch]
    assert {r.key: bytes(r.value) for r in rows} == expected() and len(rows) == KEYS
    spans = {dict(r.properties)[RESYNC_PROPERTY] for r in rows}
    assert len(spans) == 1 and spans.pop().startswith("0:")
    assert sorted(r.sequence for r in rows) == [r.sequence for r in
                                                sorted(rows, key=lambda r: r.sequence)]
