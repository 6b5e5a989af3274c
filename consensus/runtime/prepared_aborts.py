"""Which prepared commits have waited too long for partition 0's decision (sans I/O).

A batch the raft sink prepared in partitions 1 and up holds their readers until
partition 0 decides it (docs/exactly-once.md, "Partitions"). A driver that never decides
(its query abandoned between prepare and decision) would hold them for ever; Kafka's
coordinator ends such a transaction after `transaction.timeout.ms`, and the farm aborts
such prepared commits after `--prepared-timeout`. Each node ages the prepared commits
its own replicas hold, from when it first saw each (a node that restarts or takes over
starts their clocks then: an abort never comes early); the leader of partition 0
proposes the aborts there (or, when it does not host q under `--replicas`, the leader
of q relays them to it: abort_relay.py), where the state machine
takes one only while the batch is undecided (`Ledger.abort_prepared`), so a decision
that races it wins or loses whole, the same on every replica. Once a node's replica of
partition 0 has an abort (final: a decision naming those commits fails for ever), the
leader of each partition q concerned rolls it forward there, as a driver's marker does
a decision: q forgets those prepared commits, and its log behind them may be compacted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from consensus.common.partitions import ABORTED_KEY, PREPARED_TIMEOUT_KEY
from consensus.runtime.machines import Ledger

FIRST_RETRY = 1.0       #: seconds before an abort not seen applied is proposed again
LAST_RETRY = 60.0       #: the backoff's cap


@dataclass(frozen=True)
class AbortOrder:
    """A command to propose in `partition`: in 0, the abort of the `named` prepared
    commits of `query`'s `batch`; in q > 0, its roll-forward (q forgets the ones named
    for it, which partition 0 aborted: the log behind them may then be compacted)."""
    partition: int
    query: str
    batch: int
    named: dict[str, list[int]]         #: {"q": [prepared index, ...]}

    def metadata(self, timeout: float) -> dict:
        if self.partition:
            return {ABORTED_KEY: self.named}
        return {ABORTED_KEY: self.named, PREPARED_TIMEOUT_KEY: timeout}


class PreparedAborts:
    """Ages prepared commits by the local clock (`check`, every `interval` seconds)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.interval = min(1.0, timeout / 4)
        self._seen: dict[tuple[int, int], float] = {}       # (partition, index) -> since
        self._retry: dict[tuple[int, int, int], tuple[float, float]] = {}  # -> (at, backoff)

    def check(self, now: float, zero: Ledger, ledgers: Iterable[tuple[int, Ledger]],
              proposes: Callable[[int, int], bool]) -> list[AbortOrder]:
        """The commands to propose now, each where `proposes(target, q)` says this node
        proposes for prepared commits of partition q: aborts (target 0) of prepared
        commits in `ledgers` (partition q > 0, its ledger here) undecided by `zero`
        (partition 0's ledger here) for `timeout` seconds, and the roll-forward (target
        q) of those aborted; none within its retry backoff."""
        seen: dict[tuple[int, int], float] = {}
        orders: dict[tuple[int, str, int], dict[str, list[int]]] = {}
        for partition, ledger in ledgers:
            for index, (query, batch, _, _) in list(ledger.prepared.items()):
                since = seen[partition, index] = self._seen.get((partition, index), now)
                decided = zero.decision(query, batch, partition, index)
                if decided is None and now - since >= self.timeout:
                    target = 0
                elif decided is False and index in zero.aborted.get(
                        (query, batch), (0, {}))[1].get(str(partition), ()):
                    target = partition
                else:
                    continue
                if not proposes(target, partition) \
                        or not self._due((target, partition, index), now):
                    continue
                orders.setdefault((target, query, batch), {}) \
                    .setdefault(str(partition), []).append(index)
        self._seen = seen                   # rolled forward: forgotten
        self._retry = {k: v for k, v in self._retry.items() if k[1:] in seen}
        return [AbortOrder(t, q, b, named) for (t, q, b), named in orders.items()]

    def _due(self, key: tuple[int, int, int], now: float) -> bool:
        """Propose now? (then not again for 1 s, 2 s, 4 s ... up to LAST_RETRY)"""
        at, backoff = self._retry.get(key, (now, FIRST_RETRY / 2))
        if now < at:
            return False
        self._retry[key] = (now + backoff * 2, min(backoff * 2, LAST_RETRY))
        return True
