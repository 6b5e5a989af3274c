"""Fixtures of the Spark tests: one `local[2]` session for the whole run, farms on loopback.

The session is built by `pyspark_farm.spark_session` (the helper users call) and never
registers the data source: `DataSourceRegistration.register` is made to fail for the
whole run, so every `format("garlicfarm")` in these tests relies on Spark finding
`pyspark_farm.DefaultSource` on its own. `local[2,3]`: two cores and up to three attempts
per task (plain `local[2]` never retries a task).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from pyspark_farm import LocalFarm


@pytest.fixture(scope="session")
def spark(tmp_path_factory, reader_jar):
    # reader_jar: built first, so spark_session adds it (format("garlicfarm-columnar"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql.datasource import DataSourceRegistration

    def refuse(self, data_source):   # the zero-registration guarantee, for every test
        raise AssertionError("tests must not register the garlicfarm data source")

    original = DataSourceRegistration.register
    DataSourceRegistration.register = refuse
    from pyspark_farm import spark_session
    session = spark_session("garlicfarm-tests", "local[2,3]", conf={
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.driver.memory": "1g",
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    })
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
        DataSourceRegistration.register = original


@pytest.fixture
def no_queries_left(spark) -> Iterator[None]:
    """Fails a test that leaves a streaming query running (and stops it)."""
    yield
    left = list(spark.streams.active)
    for query in left:
        query.stop()
    assert not left, f"queries left running: {[q.name for q in left]}"


@pytest.fixture(scope="module")
def farm() -> Iterator["LocalFarm"]:
    from pyspark_farm import LocalFarm
    with LocalFarm(nodes=3) as running:
        yield running


@pytest.fixture
def chp_server(tmp_path):
    """A standalone CHP server process (fast HUGZ), killed after the test."""
    from tests.chp.support import ServerProcess
    server = ServerProcess(tmp_path, "chp", "--hugz-interval", "0.2").start()
    try:
        yield server
    finally:
        server.kill()
