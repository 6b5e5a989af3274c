"""The raft source as a consumer the farm can see (docs/options.md, "Consumer lag").

Each committed micro-batch tells the farm's leader where the query is (`consumerName`,
the next index it reads); the leader counts its lag in entries and rows for `garlicfarm
status` and the nodes' metrics. Spark tells a source that a batch committed twice: in
`latestOffset(start)` of the next trigger (`start` is the end of the last batch, done and
in the commit log) and in `commit(end)`, which Spark calls only once the next batch is
planned (late: a caught-up query would show its last batch as lag for ever). Both report,
once per new position; an unchanged one again every `HEARTBEAT` seconds, so an idle
query stays listed (and does not expire) while it runs. The Python Data Source API gives a source no query id, so
a query without `consumerName` gets a name of its own when its stream reader is made
(once per run of the query, in the driver's source process), as Kafka's source makes its
group id (``spark-kafka-source-<uuid>-...``): stable for the run, new after a restart.

Reporting is observability: a farm that cannot take the report (an old node, no leader
for a moment) costs a warning (one a minute at most), never the query.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from consensus.client import FarmClient

log = logging.getLogger("pyspark_farm.consumer")

MAX_NAME_CHARS = 200
WARN_EVERY = 60.0
HEARTBEAT = 30.0
#: Kafka's source metrics (ReportsSourceMetrics), here in entries
BEHIND_KEYS = ("avgOffsetsBehindLatest", "maxOffsetsBehindLatest", "minOffsetsBehindLatest")


def consumer_name(value: str) -> str:
    """The `consumerName` option's parser (the farm's rule: 1 to 200 printable
    characters)."""
    if not value or len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise ValueError(f"a consumer name is 1 to {MAX_NAME_CHARS} printable characters")
    return value


def generated_name() -> str:
    return f"garlicfarm-source-{uuid.uuid4().hex[:16]}"


class ConsumerReport:
    """One query's reports to the farm, and what the last one answered."""

    def __init__(self, name: str | None) -> None:
        self.name = name or generated_name()
        self.last: dict | None = None       #: the leader's answer: lag_entries, lag_rows
        self._warned = float("-inf")
        self._reported: tuple[int, float] | None = None     # (position, when)

    def committed(self, client: "FarmClient", end: int) -> None:
        """The query committed up to `end` (the next index it reads): tell the farm,
        unless it was told so less than HEARTBEAT seconds ago."""
        from consensus.client import FarmError
        now = time.monotonic()
        if self._reported is not None and self._reported[0] == end \
                and now - self._reported[1] < HEARTBEAT:
            return
        try:
            self.last = client.report_consumer(self.name, end)
            self._reported = (end, now)
        except FarmError as exc:
            now = time.monotonic()
            if now - self._warned >= WARN_EVERY:
                self._warned = now
                log.warning("consumer %r: the farm did not take its position %d (%s); the "
                            "query goes on, its lag is not shown until a report succeeds",
                            self.name, end, exc)


def behind_latest(consumed: int | None, latest: int | None) -> dict[str, str]:
    """Kafka's source metrics in entries: the log has one "partition", so the average,
    maximum and minimum are the same number (empty before anything was consumed)."""
    if consumed is None or latest is None:
        return {}
    behind = max(0, latest - consumed)
    return {BEHIND_KEYS[0]: str(float(behind)), BEHIND_KEYS[1]: str(behind),
            BEHIND_KEYS[2]: str(behind)}
