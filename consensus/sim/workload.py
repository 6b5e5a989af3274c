"""Simulated clients: writes (puts) at the leader, and reads in every flavour the core
offers - ReadIndex, lease reads, reads forwarded by a follower, two-step reads
(ReadIndex at the leader, querySnapshot at another node). Each operation is recorded as
a jepsen-style history (invoke, then ok / fail / info) for the linearizability checker.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from consensus.linearizability import History
from consensus.raft import Entry, NotLeader, ProposalDropped, PullStatus, ReadState, ReadStatus, Role

from .checker import SafetyChecker
from .kv import encode_abort, encode_commit, encode_put, encode_stage

if TYPE_CHECKING:
    from .host import SimHost

KEYS = ("a", "b", "c")
READ_MODES = ("read_index", "lease", "follower", "two_step")
OP_TIMEOUT = 120         # steps before a client gives up (a write's outcome is then unknown)
QUERY_ATTEMPTS = 30      # querySnapshot retries after INDEX_OVERFLOW


@dataclass
class ClientOp:
    id: int
    client: int
    f: str
    key: str
    value: str | None
    invoked: int                # step
    history_id: int = 0
    host: int = 0
    incarnation: int = 0
    term: int = 0
    index: int = 0              # write: its log index; read: the read index
    mode: str = ""
    must_see: int = 0           # reads: highest write index acknowledged before invoke
    query_host: int = 0
    attempts: int = 0
    confirmed: bool = False     # reads: the leader confirmed the read index


@dataclass
class Workload:
    rng: random.Random
    checker: SafetyChecker
    clients: int = 4
    history: History = field(init=False)
    writes: dict[tuple[int, int, int], ClientOp] = field(default_factory=dict)  # (host, inc, index)
    reads: dict[tuple[int, bytes], ClientOp] = field(default_factory=dict)      # (host, ctx)
    waiting: list[ClientOp] = field(default_factory=list)  # reads confirmed, awaiting apply
    busy: set[int] = field(default_factory=set)
    leader_hint: dict[int, int] = field(default_factory=dict)
    acked_index: int = 0
    batch: int = 1                  # the sink writer's open batch and what it staged
    staged: list[int] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "fail": 0, "info": 0})
    _next_id: int = 0
    _clock: int = 0

    def __post_init__(self) -> None:
        self.history = History(clock=self._now)

    def _now(self) -> int:
        """Event order is real-time order: every event gets the next instant."""
        self._clock += 1
        return self._clock

    def _event(self, op: ClientOp, kind: str, value: str | None) -> None:
        """Complete `op`: ok (with the value read or written), fail or info."""
        if op.f == "get" and kind == "ok" and value is None:
            value = ""                  # the kv model reads a missing key as ""
        self.history.complete(op.history_id, kind, value)
        self.busy.discard(op.client)
        self.counts[kind] += 1

    def _new_op(self, f: str, step: int) -> ClientOp | None:
        free = [c for c in range(1, self.clients + 1) if c not in self.busy]
        if not free:
            return None
        client = self.rng.choice(free)
        self._next_id += 1
        key = self.rng.choice(KEYS)
        value = f"v{self._next_id}" if f == "put" else None
        op = ClientOp(self._next_id, client, f, key, value, step)
        op.history_id = self.history.invoke(client, f, key, value)
        self.busy.add(client)
        return op

    def _pick_host(self, client: int, hosts: dict[int, "SimHost"]) -> "SimHost | None":
        hint = self.leader_hint.get(client)
        if hint in hosts and hosts[hint].up and self.rng.random() < 0.9:
            return hosts[hint]
        live = [h for h in hosts.values() if h.up]
        return self.rng.choice(live) if live else None

    # -- issuing ----------------------------------------------------------------------------
    def write(self, step: int, hosts: dict[int, "SimHost"]) -> None:
        op = self._new_op("put", step)
        if op is None:
            return
        host = self._pick_host(op.client, hosts)
        if host is None:
            self._event(op, "fail", None)
            return
        try:
            index = host.awake().propose(encode_put(op.key, op.value))
        except NotLeader as exc:
            if exc.leader_id is not None:
                self.leader_hint[op.client] = exc.leader_id
            self._event(op, "fail", None)
            return
        except ProposalDropped:
            self._event(op, "fail", None)
            return
        op.host, op.incarnation, op.term, op.index = host.id, host.incarnation, host.node.term, index
        self.writes[(host.id, host.incarnation, index)] = op

    def write_batch(self, hosts: dict[int, "SimHost"]) -> None:
        """The sink's writer, one move: stage an entry of the open batch, or commit it
        (naming every index it staged, some perhaps lost to a leader change: the ledger
        then refuses the commit on every member), or abort it. Outcomes are not
        recorded: the checker compares what every member holds (SafetyChecker.check_batches)."""
        leaders = [h for h in hosts.values() if h.up and h.node.role is Role.LEADER]
        if not leaders:
            return
        node = self.rng.choice(leaders).awake()
        roll = self.rng.random()
        if roll < 0.7 or not self.staged:
            data = encode_stage(self.batch, len(self.staged))
        elif roll < 0.93:
            data = encode_commit(self.batch, self.staged)
        else:
            data = encode_abort(self.batch)
        try:
            index = node.propose(data)
        except (NotLeader, ProposalDropped):
            return
        if data.startswith(b"stage/"):
            self.staged.append(index)
        else:
            self.batch, self.staged = self.batch + 1, []

    def read(self, step: int, hosts: dict[int, "SimHost"]) -> None:
        op = self._new_op("get", step)
        if op is None:
            return
        op.mode = self.rng.choice(READ_MODES)
        op.must_see = self.acked_index
        if op.mode == "follower":
            live = [h for h in hosts.values() if h.up and h.node.role is Role.FOLLOWER]
            host = self.rng.choice(live) if live else None
        else:
            host = self._pick_host(op.client, hosts)
        if host is None:
            self._event(op, "fail", None)
            return
        ctx = str(op.id).encode()
        try:
            host.awake().read_index(ctx, lease=op.mode == "lease")
        except NotLeader as exc:
            if exc.leader_id is not None:
                self.leader_hint[op.client] = exc.leader_id
            self._event(op, "fail", None)
            return
        op.host, op.incarnation = host.id, host.incarnation
        self.reads[(host.id, ctx)] = op

    # -- completions --------------------------------------------------------------------------
    def on_apply(self, host: "SimHost", entries: list[Entry]) -> None:
        writes = self.writes
        if not writes:
            return
        for entry in entries:
            op = writes.pop((host.id, host.incarnation, entry.index), None)
            if op is None:
                continue
            if entry.term == op.term:
                self.leader_hint[op.client] = op.host
                self.checker.on_ack(entry.index, entry.term, f"put {op.key}={op.value} (op {op.id})")
                self.acked_index = max(self.acked_index, entry.index)
                self._event(op, "ok", op.value)
            else:       # another leader's entry took the index: ours never committed
                self._event(op, "fail", None)

    def on_read_states(self, host: "SimHost", states: list[ReadState]) -> None:
        for state in states:
            op = self.reads.pop((host.id, state.ctx), None)
            if op is None:
                continue
            if state.status is not ReadStatus.OK:
                self._event(op, "fail", None)
                continue
            op.index, op.confirmed = state.index, True
            self.waiting.append(op)

    def progress(self, step: int, hosts: dict[int, "SimHost"]) -> None:
        """Complete the reads that can be answered now; time out the stuck ones."""
        still: list[ClientOp] = []
        for op in self.waiting:
            if step - op.invoked > OP_TIMEOUT:
                self._event(op, "fail", None)
                continue
            done = self._query(op, hosts) if op.mode == "two_step" else self._read_local(op, hosts)
            if not done:
                still.append(op)
        self.waiting = still
        for key, op in list(self.reads.items()):
            if step - op.invoked > OP_TIMEOUT or self._lost(op, hosts):
                del self.reads[key]
                self._event(op, "fail", None)
        for key, op in list(self.writes.items()):
            if step - op.invoked > OP_TIMEOUT or self._lost(op, hosts):
                del self.writes[key]
                self._event(op, "info", None)   # it may still commit: unknown

    @staticmethod
    def _lost(op: ClientOp, hosts: dict[int, "SimHost"]) -> bool:
        """The node the client talks to crashed (the connection is gone)."""
        host = hosts[op.host]
        return not host.up or host.incarnation != op.incarnation

    def _read_local(self, op: ClientOp, hosts: dict[int, "SimHost"]) -> bool:
        host = hosts[op.host]
        if not host.up or host.incarnation != op.incarnation:
            self._event(op, "fail", None)
            return True
        applied = host.node.log.applied
        if applied < op.index:
            return False
        self.checker.check_read(f"{op.mode} read (op {op.id}) at node {host.id}", applied, op.must_see)
        self._event(op, "ok", host.kv.query(op.key))
        return True

    def _query(self, op: ClientOp, hosts: dict[int, "SimHost"]) -> bool:
        if not op.query_host or not hosts[op.query_host].up:
            live = [h.id for h in hosts.values() if h.up]
            if not live:
                self._event(op, "fail", None)
                return True
            op.query_host = self.rng.choice(live)
        host = hosts[op.query_host]
        result = host.query_snapshot(op.index, op.key)
        if result.status is PullStatus.SUCCESS:
            self.checker.check_read(f"two-step read (op {op.id}) at node {host.id}", op.index,
                                    op.must_see)
            self._event(op, "ok", result.result)
            return True
        op.attempts += 1
        if result.status is PullStatus.INDEX_UNDERFLOW or op.attempts >= QUERY_ATTEMPTS:
            self._event(op, "fail", None)
            return True
        if op.attempts % 5 == 0:
            op.query_host = 0           # this node lags: try another
        return False

    def finish(self) -> None:
        """The run is over: whatever is still open has an unknown outcome."""
        for op in list(self.writes.values()):
            self._event(op, "info", None)
        for op in list(self.reads.values()) + self.waiting:
            self._event(op, "fail", None)       # reads change nothing: as if never run
        self.writes.clear()
        self.reads.clear()
        self.waiting = []
