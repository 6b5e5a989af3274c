"""The chp kind when the Binary Star primary is SIGKILLed mid-stream: the sink's tasks
and the capture's client fail over to the backup (voting for it), and still the map is
exactly the input and the changelog folds to it with no gap."""
from __future__ import annotations

import pytest

from connectors.chp.client import CloneClient
from pyspark_farm.chp.sink import MARKER_PREFIX, marker_batch
from tests.chp.support import ServerProcess
from tests.chp.test_pair import start_pair
from tests.spark.test_chp_stream import changelog_state, covered, write_rows
from tests.support import wait_until

pytestmark = [pytest.mark.spark]

@pytest.fixture
def pair(tmp_path):
    started: list[ServerProcess] = []

    def servers(name: str, *args: str, port: int) -> ServerProcess:
        server = ServerProcess(tmp_path, name, *args, port=port)
        started.append(server)
        return server.start()

    try:
        yield start_pair(servers)
    finally:
        for server in started:
            server.kill()


@pytest.mark.timeout(300)
def test_primary_killed_mid_stream(spark, farm, pair, tmp_path, no_queries_left):
    primary, backup = pair
    endpoint = f"{primary.address},{backup.address}"
    options = {"kind": "chp", "endpoint": endpoint, "serverTimeout": "1s"}
    output, inbox = tmp_path / "out", tmp_path / "in"
    read = (spark.readStream.format("garlicfarm").options(**options).options(**farm.options)
            .load().writeStream.format("parquet").option("path", str(output))
            .option("checkpointLocation", str(tmp_path / "chk-r"))
            .trigger(processingTime="300 milliseconds").start())
    files = [[(f"/f/{n % 25}", f"file{f}-{n}") for n in range(40)] for f in range(4)]
    try:
        wait_until(lambda: read.lastProgress is not None or read.exception() is not None, 120,
                   interval=0.2, message="the changelog query's first trigger")
        write_rows(inbox, 0, files[0])
        write = (spark.readStream.schema("key string, value string")
                 .option("maxFilesPerTrigger", 1).json(str(inbox))
                 .writeStream.format("garlicfarm").options(**options)
                 .option("checkpointLocation", str(tmp_path / "chk-w"))
                 .trigger(processingTime="200 milliseconds").start())
        marker = f"{MARKER_PREFIX}{write.id}".encode()
        with CloneClient([primary.address, backup.address], server_timeout=1.0) as client:
            wait_until(lambda: marker_batch(client.get(marker, timeout=30)) >= 0, 120,
                       interval=0.2, message="the first batch's marker")
            primary.kill()
            for number in range(1, 4):
                write_rows(inbox, number, files[number])
            wait_until(lambda: marker_batch(client.get(marker)) == 3
                       or write.exception() is not None, 180, interval=0.2,
                       message="the last batch's marker, through the backup")
            assert write.exception() is None
            assert client.server.port == backup.port and client.failovers >= 1
            expected = {}
            for rows in files:
                expected.update({k.encode(): v.encode() for k, v in rows})
            served = {k: v for k, v in client.items() if k != marker}
            sequence = client.sequence
        write.stop()
        assert served == expected            # within a file the last row of a key wins

        def caught_up():
            state, rows = changelog_state(spark, output)
            state.pop(marker, None)
            return rows if state == expected and max(r.sequence for r in rows) >= sequence \
                else None
        rows = wait_until(caught_up, 120, interval=0.5, message="the changelog after failover")
        assert read.exception() is None
        assert covered(rows) >= set(range(1, sequence + 1))    # no gap across the failover
    finally:
        for query in spark.streams.active:
            query.stop()
