"""A hand-driven in-memory cluster of pure RaftNodes, for the tests and the benchmark:
perfect storage (MemoryStorage) and a message queue that the caller delivers, so that a
test can drop, cut, reorder or inspect any message. Each node's Readys go through the
runtime's Ready driver (consensus.raft.driver). The fault simulator (cluster.py) is the
randomised, crash-prone counterpart; the runtime's `LocalCluster` runs real processes."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable

from consensus.raft import (Configuration, Entry, EntryType, Message, MemoryStorage, RaftNode,
                            RaftOptions, ReadState, Ready, ReadyDriver, Role, Snapshot)

# Deterministic defaults: plain Raft (no pre-vote, no CheckQuorum) unless asked for.
OPTIONS = RaftOptions(election_timeout_min=10, election_timeout_max=20, heartbeat_interval=2,
                      pre_vote=False, check_quorum=False)


class RecordingIO:
    """A node's network, application and clock for the driver: collects what it sends,
    applies and reads (into the lists given, or its own); ticks come from the test
    (`due` is always 0)."""

    def __init__(self, applied: list[Entry] | None = None,
                 read_states: list[ReadState] | None = None,
                 sent: list[Message] | None = None) -> None:
        self.sent: list[Message] = sent if sent is not None else []
        self.applied = applied if applied is not None else []
        self.read_states = read_states if read_states is not None else []

    def send_now(self, msgs: list[Message]) -> None:
        self.sent.extend(msgs)

    send_persisted = send_now

    def flush(self) -> None:
        pass

    def on_ready(self, rd: Ready) -> None:
        pass

    def restore(self, snapshot: Snapshot) -> None:
        pass

    def on_truncated(self, index: int) -> None:
        pass

    def apply(self, entries: list[Entry]) -> None:
        self.applied.extend(e for e in entries if e.type == EntryType.APPLICATION)

    def on_read_states(self, states: list[ReadState]) -> None:
        self.read_states.extend(states)

    def after_advance(self) -> None:
        pass

    def due(self) -> int:
        return 0

    def drain(self) -> list[Message]:
        out, self.sent = self.sent, []
        return out


def _drive(node: RaftNode, storage: MemoryStorage, outbox: RecordingIO) -> list[Message]:
    ReadyDriver(node, storage, outbox, outbox, outbox).run()
    return outbox.drain()


class InMemoryCluster:
    def __init__(self, ids: Iterable[int], options: RaftOptions = OPTIONS, *,
                 voters: Iterable[int] | None = None,
                 storages: dict[int, MemoryStorage] | None = None) -> None:
        ids = list(ids)
        self.options = options
        self.config = Configuration.of(voters if voters is not None else ids)
        self.storages = storages or {i: MemoryStorage() for i in ids}
        self.nodes: dict[int, RaftNode] = {}
        self._drivers: dict[int, tuple[ReadyDriver, RecordingIO]] = {}
        self.applied: dict[int, list[Entry]] = {i: [] for i in ids}
        self.read_states: dict[int, list[ReadState]] = {i: [] for i in ids}
        self.queue: list[Message] = []
        self.cut: set[tuple[int, int]] = set()
        self.drop: Callable[[Message], bool] = lambda m: False
        for i in ids:
            self.start(i)

    def start(self, node_id: int, **options) -> RaftNode:
        opts = replace(self.options, seed=node_id, **options)
        storage = self.storages[node_id]
        snapshot = storage.snapshot()
        node = RaftNode(node_id, storage, opts, configuration=self.config,
                        applied=snapshot.index if snapshot else 0)
        self.nodes[node_id] = node
        outbox = RecordingIO(self.applied[node_id], self.read_states[node_id])
        self._drivers[node_id] = (ReadyDriver(node, storage, outbox, outbox, outbox), outbox)
        return node

    # -- driving --------------------------------------------------------------------------
    def process(self, node_id: int) -> list[Message]:
        """Persist, apply and advance one node; its outgoing messages join the queue."""
        driver, io = self._drivers[node_id]
        driver.run()
        out, io.sent = (io.sent, []) if io.sent else ([], io.sent)    # drain, cheaply
        for msg in out:
            if (msg.source, msg.destination) not in self.cut and not self.drop(msg) \
                    and msg.destination in self.nodes:
                self.queue.append(msg)
        return out

    def process_all(self) -> None:
        for node_id in self.nodes:
            self.process(node_id)

    def deliver(self, rounds: int = 200) -> None:
        """Deliver until quiet (bounded)."""
        for _ in range(rounds):
            self.process_all()
            if not self.queue:
                return
            batch, self.queue = self.queue, []
            for msg in batch:
                if msg.destination in self.nodes:
                    self.nodes[msg.destination].step(msg)
        raise AssertionError("the cluster did not go quiet")

    def tick(self, times: int = 1, ids: Iterable[int] | None = None) -> None:
        ids = list(self.nodes if ids is None else ids)
        for _ in range(times):
            for node_id in ids:
                self.nodes[node_id].tick()
            self.deliver()

    def elect(self, node_id: int) -> RaftNode:
        """Make `node_id` time out first and win (needs a connected majority). The other
        nodes skip their post-boot vote refusal (a test of its own covers it)."""
        node = self.nodes[node_id]
        for other in self.nodes.values():
            other.end_boot_lease()
        for _ in range(self.options.election_timeout_max * 2):
            node.tick()
            self.deliver()
            if node.role is Role.LEADER:
                return node
        raise AssertionError(f"node {node_id} did not become leader: {node.status()}")

    def isolate(self, node_id: int) -> None:
        for other in self.nodes:
            if other != node_id:
                self.cut |= {(node_id, other), (other, node_id)}

    def heal(self) -> None:
        self.cut.clear()

    def leader(self) -> RaftNode:
        leaders = [n for n in self.nodes.values() if n.role is Role.LEADER]
        assert len(leaders) == 1, [n.status() for n in self.nodes.values()]
        return leaders[0]

    def log_terms(self, node_id: int) -> list[int]:
        node = self.nodes[node_id]
        return [node.log.term(i) for i in range(node.log.first_index(), node.last_index + 1)]


def take(node: RaftNode) -> list[Message]:
    """A lone node's outgoing messages (persisting into its own MemoryStorage)."""
    return _drive(node, node.log.storage, RecordingIO())
