"""Data-driven interaction tests, as etcd-io/raft's `testdata/*.txt`: each file is a
script of steps, each followed by `----` and the output it must produce - for the
steps that process nodes, every Ready in full (soft and hard state, entries to persist,
committed entries, messages, read states). The nodes are pure `RaftNode`s over
`MemoryStorage`, driven through the runtime's own `ReadyDriver`.

Steps (one a line; a blank line ends a step's expected output):

    new 1 2 3 [voters=1,2,3] [observers=4]    nodes with a bootstrap configuration
    add 4                                     a node with no configuration (to be added)
    tick 1 [n=20]                             ticks at node 1
    campaign 1                                node 1 times out now (TimeoutNow to itself)
    propose 1 DATA                            an APPLICATION entry at node 1
    read-index 1 CTX [lease]                  a linearizable read at node 1
    transfer 1 2                              node 1 hands leadership to node 2
    process [1 2]                             drive those nodes' Readys (all by default)
    deliver [1 2]                             step the queued messages for those nodes
    stabilize                                 process and deliver until nothing moves
    status 1                                  role, term, commit, applied, last index
    change-voters 1 voters=1,2,4              joint consensus at leader 1 (C_old,new, C_new)
    update-observers 1 [add=4] [remove=5]     one configuration entry at leader 1
    snapshot 1 INDEX                          node 1 snapshots its state at INDEX
    compact 1 INDEX                           node 1 drops its log up to INDEX
    drop [1 2]                                lose the queued messages for those nodes

Set REWRITE=1 to write the actual output into the files (then read the diff).
"""
from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import pytest

from consensus.raft import (Configuration, Entry, EntryType, MemoryStorage, Message, RaftNode,
                            RaftOptions, Ready, ReadyDriver, TimeoutNow)
from consensus.sim.local import RecordingIO

TESTDATA = Path(__file__).parent / "testdata"
OPTIONS = RaftOptions(election_timeout_min=10, election_timeout_max=20, heartbeat_interval=2,
                      pre_vote=False, check_quorum=False)
_HIDDEN = {"term", "source", "destination"}


def _entry(e: Entry) -> str:
    data = e.data.decode(errors="replace") if e.type is EntryType.APPLICATION else ""
    return f"{e.term}/{e.index} {e.type.name}{' ' + data if data else ''}"


def _value(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Entry):
        return _entry(value)
    if isinstance(value, Configuration):
        return str(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace") or '""'
    if hasattr(value, "name") and hasattr(value, "value"):
        return value.name
    return str(value)


def render_message(m: Message) -> str:
    rest = " ".join(f"{f.name}={_value(getattr(m, f.name))}" for f in fields(m)
                    if f.name not in _HIDDEN)
    return f"{m.source}->{m.destination} {type(m).__name__} term={m.term} {rest}".rstrip()


class _Node(RecordingIO):
    """One node's network, application and clock for the driver; it renders each
    Ready into the script's output and queues what it sends."""

    def __init__(self, node_id: int, script: "Script") -> None:
        super().__init__(sent=script.queue)
        self.id, self.script = node_id, script

    def on_ready(self, rd: Ready) -> None:
        lines = [f"> {self.id} handling Ready"]
        if rd.soft_state is not None:
            s = rd.soft_state
            lines.append(f"  soft: {s.role.name} term={s.term} leader={s.leader_id}"
                         f"{' REMOVED' if s.removed else ''} config {s.configuration}")
        if rd.hard_state is not None:
            h = rd.hard_state
            lines.append(f"  hard: term={h.term} vote={h.vote} commit={h.commit}")
        if rd.snapshot is not None:
            lines.append(f"  snapshot: {rd.snapshot.index}/{rd.snapshot.term}")
        if rd.entries:
            lines.append("  entries: " + ", ".join(_entry(e) for e in rd.entries))
        if rd.committed_entries:
            lines.append("  committed: " + ", ".join(_entry(e) for e in rd.committed_entries))
        for m in rd.send_now:
            lines.append("  now:   " + render_message(m))
        for m in rd.send_after_persist:
            lines.append("  after: " + render_message(m))
        for s in rd.read_states:
            lines.append(f"  read: {_value(s.ctx)} index={s.index} {s.status.name}")
        self.script.out.extend(lines)


class Script:
    def __init__(self) -> None:
        self.nodes: dict[int, RaftNode] = {}
        self.drivers: dict[int, ReadyDriver] = {}
        self.queue: list[Message] = []
        self.out: list[str] = []        # the current step's output

    def run(self, command: str) -> str:
        words = command.split()
        self.out = out = []
        getattr(self, "do_" + words[0].replace("-", "_"))(words[1:], out)
        return "\n".join(out) if out else "ok"

    def _ids(self, args: list[str]) -> list[int]:
        ids = [int(a) for a in args if a.isdigit()]
        return ids or sorted(self.nodes)

    @staticmethod
    def _opt(args: list[str], key: str) -> str | None:
        for arg in args:
            if arg.startswith(key + "="):
                return arg.split("=", 1)[1]
        return None

    def do_new(self, args: list[str], out: list[str]) -> None:
        ids = self._ids(args)
        voters = self._opt(args, "voters")
        observers = self._opt(args, "observers")
        config = Configuration.of([int(v) for v in voters.split(",")] if voters else ids,
                                  [int(o) for o in observers.split(",")] if observers else ())
        for node_id in ids:
            self._start(RaftNode(node_id, MemoryStorage(), OPTIONS, configuration=config))

    def do_add(self, args: list[str], out: list[str]) -> None:
        for node_id in self._ids(args):
            self._start(RaftNode(node_id, MemoryStorage(), OPTIONS))

    def _start(self, node: RaftNode) -> None:
        node.end_boot_lease()
        io = _Node(node.id, self)
        self.nodes[node.id] = node
        self.drivers[node.id] = ReadyDriver(node, node.log.storage, io, io, io)

    def do_change_voters(self, args: list[str], out: list[str]) -> None:
        voters = [int(v) for v in (self._opt(args, "voters") or "").split(",") if v]
        out.append(f"index {self.nodes[int(args[0])].change_voters(voters)}")

    def do_update_observers(self, args: list[str], out: list[str]) -> None:
        add = [int(v) for v in (self._opt(args, "add") or "").split(",") if v]
        remove = [int(v) for v in (self._opt(args, "remove") or "").split(",") if v]
        out.append(f"index {self.nodes[int(args[0])].update_observers(add, remove)}")

    def do_snapshot(self, args: list[str], out: list[str]) -> None:
        node = self.nodes[int(args[0])]
        snapshot = node.snapshot_at(int(args[1]), f"state@{args[1]}".encode())
        node.log.storage.create_snapshot(snapshot)
        out.append(f"snapshot {snapshot.index}/{snapshot.term} {snapshot.configuration}")

    def do_compact(self, args: list[str], out: list[str]) -> None:
        node = self.nodes[int(args[0])]
        node.log.storage.compact(int(args[1]))
        out.append(f"first index {node.log.first_index()}")

    def do_drop(self, args: list[str], out: list[str]) -> None:
        ids = set(self._ids(args))
        for m in [m for m in self.queue if m.destination in ids]:
            out.append(f"> dropped {render_message(m)}")
        self.queue[:] = [m for m in self.queue if m.destination not in ids]

    def do_tick(self, args: list[str], out: list[str]) -> None:
        n = int(self._opt(args, "n") or 1)
        for node_id in self._ids(args):
            for _ in range(n):
                self.nodes[node_id].tick()

    def do_campaign(self, args: list[str], out: list[str]) -> None:
        node_id = int(args[0])
        node = self.nodes[node_id]
        node.step(TimeoutNow(term=node.term, source=node_id, destination=node_id))

    def do_propose(self, args: list[str], out: list[str]) -> None:
        out.append(f"index {self.nodes[int(args[0])].propose(args[1].encode())}")

    def do_read_index(self, args: list[str], out: list[str]) -> None:
        self.nodes[int(args[0])].read_index(args[1].encode(), lease="lease" in args)

    def do_transfer(self, args: list[str], out: list[str]) -> None:
        self.nodes[int(args[0])].transfer_leader(int(args[1]))

    def do_process(self, args: list[str], out: list[str]) -> None:
        for node_id in self._ids(args):
            self.drivers[node_id].run()

    def do_deliver(self, args: list[str], out: list[str]) -> None:
        ids = set(self._ids(args))
        mine = [m for m in self.queue if m.destination in ids]
        self.queue[:] = [m for m in self.queue if m.destination not in ids]
        for m in mine:
            out.append(f"> {m.destination} receiving {render_message(m)}")
            self.nodes[m.destination].step(m)

    def do_stabilize(self, args: list[str], out: list[str]) -> None:
        for _ in range(100):
            before = len(out)
            self.do_process([], out)
            self.do_deliver([], out)
            if len(out) == before:
                return
        raise AssertionError("did not stabilize in 100 rounds")

    def do_status(self, args: list[str], out: list[str]) -> None:
        for node_id in self._ids(args):
            n = self.nodes[node_id]
            out.append(f"{node_id}: {n.role.name} term={n.term} leader={n.leader_id} "
                       f"commit={n.commit_index} applied={n.applied_index} last={n.last_index}")


def _cases(text: str) -> list[tuple[list[str], str, str]]:
    """(comment lines before it, command, expected output) for each step."""
    cases, lines, i = [], text.splitlines(), 0
    comments: list[str] = []
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if line.startswith("#"):
            comments.append(line)
            continue
        if not line:
            continue
        assert i < len(lines) and lines[i].strip() == "----", \
            f"line {i + 1}: expected ---- after {line!r}"
        i += 1
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        cases.append((comments, line, "\n".join(expected)))
        comments = []
    return cases


def check_script(path: Path, run) -> None:
    """Run each step of a data-driven file through `run(command) -> output` and compare
    with the file (REWRITE=1: write the actual output into it instead)."""
    rewrite = bool(os.environ.get("REWRITE"))
    written = []
    for comments, command, expected in _cases(path.read_text()):
        actual = run(command)
        written.append("\n".join([*comments, command, "----", actual]) + "\n")
        if not rewrite:
            assert actual == expected, f"{path.name}: {command}\n--- expected\n{expected}\n" \
                                       f"--- actual\n{actual}"
    if rewrite:
        path.write_text("\n".join(written))


@pytest.mark.parametrize("path", sorted(TESTDATA.glob("*.txt")), ids=lambda p: p.stem)
def test_interaction(path: Path):
    check_script(path, Script().run)
