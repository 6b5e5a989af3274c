"""Which prepared commits have waited too long for partition 0's decision (sans I/O).

A batch the raft sink prepared in partitions 1 and up holds their readers until
partition 0 decides it (docs/exactly-once.md, "Partitions"). A driver that never decides
(its query abandoned between prepare and decision) would hold them for ever; Kafka's
coordinator ends such a transaction after `transaction.timeout.ms`, and the farm aborts
such prepared commits after `--prepared-timeout`. Every node hosts every partition, so
each node ages the prepared commits its own replicas hold, from when it first saw each
(a node that restarts or takes over starts their clocks then: an abort never comes
early); the leader of partition 0 proposes the aborts there, where the state machine
takes one only while the batch is undecided (`Ledger._abort_prepared`), so a decision
that races it wins or loses whole, the same on every replica.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from consensus.common.partitions import ABORTED_KEY, PREPARED_TIMEOUT_KEY
from consensus.runtime.machines import Ledger

FIRST_RETRY = 1.0       #: seconds before an abort not seen applied is proposed again
LAST_RETRY = 60.0       #: the backoff's cap


@dataclass(frozen=True)
class AbortOrder:
    """One abort for partition 0: `named` prepared commits of `query`'s `batch`."""
    query: str
    batch: int
    named: dict[str, list[int]]         #: {"q": [prepared index, ...]}

    def metadata(self, timeout: float) -> dict:
        return {ABORTED_KEY: self.named, PREPARED_TIMEOUT_KEY: timeout}


class PreparedAborts:
    """Ages prepared commits by the local clock (`check`, every `interval` seconds)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.interval = min(1.0, timeout / 4)
        self._seen: dict[tuple[int, int], float] = {}       # (partition, index) -> since
        self._retry: dict[tuple[int, int], tuple[float, float]] = {}  # -> (at, backoff)

    def check(self, now: float, zero: Ledger, ledgers: Iterable[tuple[int, Ledger]],
              leader: bool) -> list[AbortOrder]:
        """The aborts to propose now (none unless `leader` of partition 0): prepared
        commits in `ledgers` (partition, its ledger) undecided by `zero` (partition 0's
        ledger here) for `timeout` seconds, and not proposed within their backoff."""
        seen: dict[tuple[int, int], float] = {}
        orders: dict[tuple[str, int], dict[str, list[int]]] = {}
        for partition, ledger in ledgers:
            for index, (query, batch, _, _) in list(ledger.prepared.items()):
                key = (partition, index)
                since = seen[key] = self._seen.get(key, now)
                if not leader or now - since < self.timeout \
                        or zero.decision(query, batch, partition, index) is not None:
                    continue
                at, backoff = self._retry.get(key, (now, FIRST_RETRY / 2))
                if now < at:
                    continue
                self._retry[key] = (now + backoff * 2, min(backoff * 2, LAST_RETRY))
                orders.setdefault((query, batch), {}).setdefault(str(partition), []) \
                    .append(index)
        self._seen = seen                   # decided and rolled forward: forgotten
        self._retry = {k: v for k, v in self._retry.items() if k in seen}
        return [AbortOrder(q, b, named) for (q, b), named in orders.items()]
