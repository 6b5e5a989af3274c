"""Raft's safety properties (Figure 3 of the paper), checked after every simulator step,
one checker per Raft group (the properties hold per group; node ids are server ids).

- Election Safety: at most one leader per term.
- Log Matching: two entries with the same index and term hold the same data and follow
  entries of the same term (by induction: identical logs up to there). Every entry any
  node appends is registered under (index, term) with its data and predecessor's term.
- Leader Completeness: a new leader's log holds every entry committed so far.
- State Machine Safety: every node applies the same entry at each index, in order.
- Monotonic commit: a node's commit index never goes back (within one incarnation; a
  restart may resume from an older saved commit index).
- Durability of acknowledged writes: an acknowledged write stays the committed entry at
  its index (checked on every commit and at the end against every member's log).
- Read freshness: a linearizable read sees at least every write acknowledged before it
  started.
- JRaft-safe commit announcements: no AppendEntries announces a commit index beyond the
  entries it vouches for, no InstallSnapshot beyond its snapshot (a JRaft follower whose
  log is empty trusts the commit index it is sent, raises its own past its log and then
  refuses every snapshot: issue 13).
- Whole batches (issue 18): every member holds, in its log, every staged entry its sink
  ledger still needs: those of open batches (checked at the members that applied the
  most), and those of committed batches whose commit is within retention (at or above the highest `applied + 1 - compact_margin` any member
  reached); each with the data committed at that index, so a batch reads the same, whole,
  at every member, after snapshots, InstallSnapshot, restarts and leader changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from consensus.raft import AppendEntries, Entry, InstallSnapshot, Message, Ready, Role

if TYPE_CHECKING:
    from .host import SimHost


@dataclass
class Violation(Exception):
    prop: str
    detail: str
    group: int | None = None        #: the Raft group it happened in (set by SimGroup.blame)

    def __str__(self) -> str:
        where = f"group {self.group}: " if self.group is not None else ""
        return f"{where}{self.prop}: {self.detail}"


class SafetyChecker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}                       # term -> leader id
        self.entries: dict[tuple[int, int], tuple[bytes, int]] = {}   # (index, term) -> (data, prev term)
        self.committed: dict[int, int] = {}                     # index -> term
        self.applied: dict[int, tuple[int, bytes]] = {}         # index -> (term, data)
        self.acked: dict[int, tuple[int, str]] = {}             # index -> (term, op)
        self._commit_seen: dict[tuple[int, int], int] = {}      # (node, incarnation) -> commit
        self._applied_last: dict[tuple[int, int], int] = {}
        self._leader_seen: set[tuple[int, int]] = set()
        self.retained_from = 0          # commits at or above it are within retention

    # -- hooks the hosts call -------------------------------------------------------------
    def on_write(self, host: "SimHost", rd: Ready) -> None:
        """Log Matching, on everything a node appends."""
        if not rd.entries:
            return
        prev_term = host.node.log.term(rd.entries[0].index - 1)
        for entry in rd.entries:
            key = (entry.index, entry.term)
            seen = self.entries.get(key)
            if seen is None:
                self.entries[key] = (entry.data, prev_term)
            elif seen != (entry.data, prev_term):
                raise Violation("Log Matching", f"node {host.id} appended entry {entry.index} "
                                f"of term {entry.term} with data {entry.data!r} after term "
                                f"{prev_term}; another node has {seen[0]!r} after term {seen[1]}")
            prev_term = entry.term

    def on_apply(self, host: "SimHost", entries: Iterable[Entry], restored_to: int | None) -> None:
        """State Machine Safety, on everything a node applies."""
        key = (host.id, host.incarnation)
        last = self._applied_last.get(key, host.node.log.applied)
        if restored_to is not None:
            last = max(last, restored_to)
        for entry in entries:
            if entry.index != last + 1:
                raise Violation("State Machine Safety", f"node {host.id} applied entry "
                                f"{entry.index} right after {last}")
            last = entry.index
            seen = self.applied.get(entry.index)
            mine = (entry.term, entry.data)
            if seen is None:
                self.applied[entry.index] = mine
            elif seen != mine:
                raise Violation("State Machine Safety", f"node {host.id} applied {mine} at "
                                f"{entry.index}, another node applied {seen}")
        self._applied_last[key] = last

    def on_ack(self, index: int, term: int, op: str) -> None:
        self.acked[index] = (term, op)

    def check_read(self, op: str, seen_index: int, must_see: int) -> None:
        if seen_index < must_see:
            raise Violation("Linearizable reads", f"{op} read the state at index {seen_index}, "
                            f"but a write at index {must_see} was acknowledged before it began")

    # -- after every step -------------------------------------------------------------------
    def after_step(self, hosts: Iterable["SimHost"]) -> None:
        for host in hosts:
            if not host.up:
                continue
            node = host.node
            key = (host.id, host.incarnation)
            commit = node.log.committed
            before = self._commit_seen.get(key)
            if before is not None and commit < before:
                raise Violation("Monotonic commit", f"node {host.id} commit went {before} -> {commit}")
            if before is None or commit > before:
                self._record_commits(host, before if before is not None else 0, commit)
                self._commit_seen[key] = commit
            if node.role is Role.LEADER:
                self._check_leader(host)

    def check_sent(self, msg: Message) -> None:
        if isinstance(msg, AppendEntries):
            vouched = msg.prev_log_index + len(msg.entries)
        elif isinstance(msg, InstallSnapshot):
            vouched = msg.snapshot_index
        else:
            return
        if msg.commit > vouched:
            raise Violation("JRaft-safe commit", f"node {msg.source} told node "
                            f"{msg.destination} commit {msg.commit} in a "
                            f"{type(msg).__name__} that vouches for entries up to {vouched}")

    def check_batches(self, hosts: Iterable["SimHost"], margin: int) -> None:
        hosts = [h for h in hosts if h.settled]
        for host in hosts:
            self.retained_from = max(self.retained_from, host.node.log.applied + 1 - margin)
        frontier = max(self.applied, default=0)     # the highest index any node applied
        for host in hosts:
            ledger = host.kv.ledger
            if host.node.log.applied == frontier:
                # Open batches as of now (a member still replaying may hold batches open
                # that a commit it has yet to apply closed long ago, out of retention).
                for staged in ledger.staged:
                    self._check_staged(host, staged, "an open batch")
            for batch, (commit, staged, _) in ledger.commits.get("sim", {}).items():
                if commit >= self.retained_from:
                    for index in staged:
                        self._check_staged(host, index, f"batch {batch} committed at {commit}")

    def _check_staged(self, host: "SimHost", index: int, needed_by: str) -> None:
        log = host.node.log
        if index < log.first_index():
            raise Violation("Whole batches", f"node {host.id} lacks staged entry {index} of "
                            f"{needed_by}: its log starts at {log.first_index()}")
        (entry,) = log.slice(index, index + 1)
        if (entry.term, entry.data) != self.applied.get(index):
            raise Violation("Whole batches", f"node {host.id} holds {entry.data!r} at staged "
                            f"entry {index} of {needed_by}; {self.applied.get(index)} was applied")

    def _record_commits(self, host: "SimHost", old: int, new: int) -> None:
        log = host.node.log
        for index in range(max(old + 1, log.first_index()), new + 1):
            term = log.term(index)
            known = self.committed.get(index)
            if known is None:
                self.committed[index] = term
            elif known != term:
                raise Violation("State Machine Safety", f"node {host.id} committed term {term} "
                                f"at {index}; term {known} was committed there before")
            acked = self.acked.get(index)
            if acked is not None and acked[0] != term:
                raise Violation("Acknowledged write lost", f"{acked[1]} was acknowledged at "
                                f"index {index} term {acked[0]}; node {host.id} committed term "
                                f"{term} there")

    def _check_leader(self, host: "SimHost") -> None:
        node = host.node
        other = self.leaders.setdefault(node.term, host.id)
        if other != host.id:
            raise Violation("Election Safety", f"nodes {other} and {host.id} both lead term {node.term}")
        seen = (host.id, node.term)
        if seen in self._leader_seen:
            return
        self._leader_seen.add(seen)
        log = node.log
        for index in range(log.first_index(), max(self.committed, default=0) + 1):
            term = self.committed.get(index)
            if term is not None and log.term(index) != term:
                raise Violation("Leader Completeness", f"node {host.id} leads term {node.term} "
                                f"without committed entry {index} (term {term}); it has term "
                                f"{log.term(index)}")
