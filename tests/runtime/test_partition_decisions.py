"""A batch decided once across partitions (issue 28, item 3; docs/exactly-once.md,
"Partitions"): the ledgers of partition 0 and of a partition q > 0, applied as a node's
groups apply them, without a farm. A prepared commit in q shows nothing and holds q's
stable end until partition 0 decides; the decision alone makes it visible; the marker
records it in q; and no entry, however hostile, makes applying raise."""
from __future__ import annotations

import itertools
import subprocess
import sys

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from consensus.common.partitions import ABORTED_KEY, DECIDED_AT_KEY, MARKERS_KEY, \
    PREPARED_KEY, PREPARED_TIMEOUT_KEY, RESOLVES_KEY, WAITING_FOR_MARKERS
from consensus.common.errors import ConfigError
from consensus.raft import Entry, EntryType
from consensus.runtime.config import NodeConfig
from consensus.runtime.machines import Decider, FarmStateMachine
from consensus.runtime.prepared_aborts import PreparedAborts
from consensus.wire.envelope import CommandKind, encode_command

Q = "query-1"


class Partitions:
    """Partition 0 and partition 1 of one node: machines, and each one's next index."""

    def __init__(self) -> None:
        self.zero = FarmStateMachine()
        self.one = FarmStateMachine(decider=Decider(1, lambda: self.zero.ledger))
        self.next = {0: 1, 1: 1}
        self.entries: dict[tuple[int, int], Entry] = {}
        self.ids = itertools.count()        # request ids: the same on every replica

    def machine(self, partition: int) -> FarmStateMachine:
        return self.zero if partition == 0 else self.one

    def apply(self, partition: int, kind: CommandKind, *args) -> tuple[int, object]:
        index = self.next[partition]
        self.next[partition] += 1
        data = encode_command(kind, b"r%d" % next(self.ids), *args)
        entry = Entry(1, index, EntryType.APPLICATION, data)
        self.entries[partition, index] = entry
        outcome = self.machine(partition).apply(entry)
        return index, (outcome.error if outcome.error else outcome.result)

    def stage(self, partition: int, batch: int) -> int:
        return self.apply(partition, CommandKind.STAGE, Q, batch, 0, 0, "arrow", b"x")[0]

    def commit(self, partition: int, batch: int, staged: list[int], meta: dict):
        return self.apply(partition, CommandKind.COMMIT, Q, batch, staged, meta)

    def verdict(self, partition: int, index: int):
        return self.machine(partition).verdict(self.entries[partition, index])


def prepared_batch(parts: Partitions, batch: int = 0) -> tuple[int, int]:
    """Partition 1 stages and prepares `batch`: (its staged index, its prepared index)."""
    staged = parts.stage(1, batch)
    parts.stage(1, batch)                   # a losing attempt's entry: garbage
    index, result = parts.commit(1, batch, [staged], {"rows": [3], PREPARED_KEY: 0})
    assert result == [True, index, False]
    return staged, index


def test_a_prepared_commit_shows_nothing_and_holds_the_stable_end_until_partition_0_decides():
    parts = Partitions()
    staged, prepared = prepared_batch(parts)
    after, _ = parts.apply(1, CommandKind.KV_PUT, "k", "v")     # written after it
    assert parts.one.applied == after
    assert parts.one.stable_applied() == prepared - 1
    assert parts.verdict(1, prepared) is None
    decision, result = parts.commit(0, 0, [], {MARKERS_KEY: {"1": prepared}})
    assert result == [True, decision, False]
    assert parts.verdict(1, prepared) is True       # the decision alone: no marker yet
    assert parts.one.stable_applied() == after
    assert parts.one.ledger.referenced_floor(after) <= staged


def test_the_marker_records_the_decision_once_and_frees_the_prepared_commit():
    parts = Partitions()
    _, prepared = prepared_batch(parts)
    parts.commit(0, 0, [], {MARKERS_KEY: {"1": prepared}})
    assert msgpack.unpackb(parts.one.query(msgpack.packb(["prepared"]))) == \
        [parts.one.applied, [[prepared, Q, 0]], []]
    marker, result = parts.commit(1, 0, [], {RESOLVES_KEY: prepared, DECIDED_AT_KEY: 7})
    assert result == [True, prepared, False]
    assert parts.one.ledger.prepared == {}
    assert msgpack.unpackb(parts.one.query(msgpack.packb(["prepared"]))) == \
        [marker, [], [[prepared, 7]]]          # what readers cut partitions by
    assert msgpack.unpackb(parts.one.query(msgpack.packb(["prepared", 8]))) == \
        [marker, [], []]                       # decided before partition 0's index 8
    assert parts.verdict(1, prepared) is True
    assert parts.verdict(1, marker) is False        # the marker shows no rows itself
    assert parts.one.ledger.batch_status(Q, 0)[0] == prepared
    again, result = parts.commit(1, 0, [], {RESOLVES_KEY: prepared})
    assert result == [False, prepared, True]
    assert parts.one.stable_applied() == again


def test_a_batch_decided_with_a_later_run_leaves_the_first_runs_prepared_commit_invisible():
    parts = Partitions()
    _, first = prepared_batch(parts)                # the driver died before deciding
    assert parts.one.stable_applied() == first - 1
    _, second = prepared_batch(parts)               # the restart's run of the batch
    parts.commit(0, 0, [], {MARKERS_KEY: {"1": second}})
    assert (parts.verdict(1, first), parts.verdict(1, second)) == (False, True)
    assert parts.one.stable_applied() == parts.one.applied
    parts.commit(1, 0, [], {RESOLVES_KEY: second})
    assert parts.one.ledger.prepared == {}
    assert (parts.verdict(1, first), parts.verdict(1, second)) == (False, True)


def test_a_decision_that_names_no_share_here_passes_the_prepared_commit():
    parts = Partitions()
    _, prepared = prepared_batch(parts)
    parts.commit(0, 0, [parts.stage(0, 0)], {MARKERS_KEY: {}})
    assert parts.verdict(1, prepared) is False
    assert parts.one.stable_applied() == parts.one.applied
    staged = parts.stage(1, 1)
    _, error = parts.commit(1, 1, [staged], {PREPARED_KEY: 0})   # the next batch waits ...
    assert error[1].startswith(WAITING_FOR_MARKERS) and "batch 0" in error[1]
    assert parts.one.ledger.staged[staged]                       # ... and loses nothing
    _, result = parts.commit(1, 0, [], {RESOLVES_KEY: None})     # a void marker
    assert result == [False, 0, False] and parts.one.ledger.prepared == {}
    assert parts.verdict(1, prepared) is False
    index, result = parts.commit(1, 1, [staged], {PREPARED_KEY: 0})
    assert result == [True, index, False]


def test_prepared_commits_survive_a_snapshot_and_a_restart():
    parts = Partitions()
    _, prepared = prepared_batch(parts)
    restarted = FarmStateMachine(decider=Decider(1, lambda: parts.zero.ledger))
    restarted.restore(parts.one.snapshot())
    assert restarted.stable_applied() == prepared - 1
    parts.commit(0, 0, [], {MARKERS_KEY: {"1": prepared}})
    assert restarted.verdict(parts.entries[1, prepared]) is True
    assert restarted.snapshot() == parts.one.snapshot()


def test_prepared_commits_and_markers_are_refused_where_nothing_decides():
    """Partition 0 and a farm of one partition have no decider: the entries are refused
    as failed commands (the same everywhere), never raised, and hold nothing back."""
    parts = Partitions()
    staged = parts.stage(0, 0)
    index, error = parts.commit(0, 0, [staged], {PREPARED_KEY: 0})
    assert error[1].startswith("a prepared commit or its marker is for partitions 1")
    assert parts.zero.stable_applied() == index
    _, error = parts.commit(1, 0, [], {RESOLVES_KEY: 12345})
    assert "is not a prepared commit" in error[1]
    _, error = parts.commit(1, 0, [], {RESOLVES_KEY: [1, 2]})
    assert "is not a prepared commit" in error[1]
    staged = parts.stage(1, 0)
    _, error = parts.commit(1, 0, [staged], {RESOLVES_KEY: staged})
    assert error[1].startswith("a marker names no staged entries")


def abort(parts: Partitions, batch: int, *prepared: int, timeout: float = 60.0):
    """Partition 0's abort of partition 1's `prepared` commits of `batch`."""
    return parts.commit(0, batch, [], {ABORTED_KEY: {"1": list(prepared)},
                                       PREPARED_TIMEOUT_KEY: timeout})


def test_an_abort_releases_the_readers_and_a_decision_naming_an_aborted_commit_fails():
    parts = Partitions()
    _, prepared = prepared_batch(parts)
    after, _ = parts.apply(1, CommandKind.KV_PUT, "k", "v")
    assert parts.one.stable_applied() == prepared - 1
    at, result = abort(parts, 0, prepared, timeout=1.5)
    assert result == [True, at, False]
    assert parts.verdict(1, prepared) is False              # never shown
    assert parts.one.stable_applied() == after              # readers go on past it
    assert parts.verdict(0, at) is False                    # the abort shows no rows
    status = parts.zero.ledger.batch_status(Q, 0)
    assert status == [at, [], {ABORTED_KEY: {"1": [prepared]}, PREPARED_TIMEOUT_KEY: 1.5}]
    _, error = parts.commit(0, 0, [], {MARKERS_KEY: {"1": prepared}})   # the late driver
    assert error[1] == (f"batch 0 of query '{Q}' was aborted after --prepared-timeout 1.5 s "
                        f"undecided; the query must restart and re-run it")
    assert parts.verdict(1, prepared) is False and parts.zero.ledger.commits[Q] == {}


def test_a_decision_taken_before_the_abort_wins_and_the_abort_is_a_no_op():
    parts = Partitions()
    _, prepared = prepared_batch(parts)
    decision, _ = parts.commit(0, 0, [], {MARKERS_KEY: {"1": prepared}})
    _, result = abort(parts, 0, prepared)
    assert result == [False, decision, True]
    assert parts.verdict(1, prepared) is True
    assert parts.zero.ledger.batch_status(Q, 0)[0] == decision and not parts.zero.ledger.aborted


def test_a_rerun_of_an_aborted_batch_decides_it_anew_with_its_own_prepared_commits():
    parts = Partitions()
    _, first = prepared_batch(parts)
    abort(parts, 0, first)
    _, second = prepared_batch(parts)                   # the restart's run
    assert parts.verdict(1, second) is None             # undecided: not aborted with it
    assert parts.one.stable_applied() == second - 1
    at, _ = abort(parts, 0, first)                      # a retried abort merges
    assert parts.zero.ledger.aborted[Q, 0][1] == {"1": [first]}
    decision, result = parts.commit(0, 0, [], {MARKERS_KEY: {"1": second}})
    assert result == [True, decision, False] and not parts.zero.ledger.aborted
    assert (parts.verdict(1, first), parts.verdict(1, second)) == (False, True)
    parts.commit(1, 0, [], {RESOLVES_KEY: second, DECIDED_AT_KEY: decision})
    assert parts.one.ledger.prepared == {}
    assert (parts.verdict(1, first), parts.verdict(1, second)) == (False, True)
    _, result = parts.commit(0, 0, [], {MARKERS_KEY: {"1": first}})     # the zombie
    assert result == [False, decision, True]            # the batch shows once: duplicate


def test_an_abort_survives_a_snapshot_and_its_roll_forward_forgets_only_what_it_names():
    parts = Partitions()
    _, first = prepared_batch(parts)
    abort(parts, 0, first)
    restarted = FarmStateMachine()
    restarted.restore(parts.zero.snapshot())
    assert restarted.ledger.decision(Q, 0, 1, first) is False
    assert restarted.snapshot() == parts.zero.snapshot()
    _, second = prepared_batch(parts)                   # the re-run's, undecided
    _, result = parts.commit(1, 1, [], {ABORTED_KEY: {"1": [first]}})  # another batch's
    assert result == [False, 0, False] and list(parts.one.ledger.prepared) == [first, second]
    _, result = parts.commit(1, 0, [], {ABORTED_KEY: {"1": [first], "2": [second]}})
    assert result == [False, 0, False]                  # the roll-forward: q's share only
    assert list(parts.one.ledger.prepared) == [second]
    assert (parts.verdict(1, first), parts.verdict(1, second)) == (False, None)
    assert parts.one.stable_applied() == second - 1
    for bad in ([1], {"1": 5}, {1: [5]}, {"1": ["x"]}):
        for partition in (0, 1):
            _, error = parts.commit(partition, 3, [], {ABORTED_KEY: bad})
            assert "maps partitions to prepared indexes" in error[1]
    assert (Q, 3) not in parts.zero.ledger.aborted


def test_the_watch_aborts_what_waited_its_timeout_then_rolls_it_forward_with_backoff():
    parts = Partitions()
    _, prepared = prepared_batch(parts)
    watch, ledgers = PreparedAborts(2.0), [(1, parts.one.ledger)]

    def check(now: float, leads=lambda p: True):
        return [(o.partition, o.query, o.batch, o.named)
                for o in watch.check(now, parts.zero.ledger, ledgers,
                                     lambda target, q: leads(target))]
    assert check(100.0) == [] and check(101.9) == []
    assert check(102.0, leads=lambda p: p != 0) == []           # only partition 0's leader
    assert check(102.0) == [(0, Q, 0, {"1": [prepared]})]
    assert check(102.5) == []                                   # backoff: 1 s
    assert len(check(103.0)) == 1 and check(104.0) == []        # then 2 s
    abort(parts, 0, prepared)                                   # applied here
    assert check(104.5, leads=lambda p: p != 1) == []           # only partition 1's leader
    assert check(104.5) == [(1, Q, 0, {"1": [prepared]})]
    parts.commit(1, 0, [], {ABORTED_KEY: {"1": [prepared]}})
    assert check(200.0) == [] and parts.one.stable_applied() == parts.one.applied


def test_bad_prepared_timeouts_are_refused_naming_the_option(tmp_path):
    node = dict(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path), username="u",
                password="p")
    assert NodeConfig(**node).prepared_timeout == 60.0              # Kafka's default
    assert NodeConfig(**node, prepared_timeout=1).prepared_timeout == 1.0
    for bad in (0, 0.4, -5, float("nan"), float("inf"), 604801, "60", True, None):
        with pytest.raises(ConfigError, match=r"--prepared-timeout: must be seconds from "
                                              r"0.5 to 604800 .*got"):
            NodeConfig(**node, prepared_timeout=bad)
    for value, message in (("nan", "--prepared-timeout: must be seconds from 0.5"),
                           ("soon", "argument --prepared-timeout: invalid float value")):
        run = subprocess.run(
            [sys.executable, "-m", "garlicfarm", "node", "--id", "1", "--listen",
             "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--user", "u", "--password",
             "p", "--partitions", "2", "--prepared-timeout", value],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and message in run.stderr
    assert not (tmp_path / "d").exists()                            # nothing started


ints = st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)    # what msgpack carries
metas = st.one_of(
    st.builds(lambda: {PREPARED_KEY: 0}),
    st.builds(lambda i: {RESOLVES_KEY: i}, st.one_of(st.integers(0, 30), st.text(max_size=2),
                                                     st.none(),
                                                     st.lists(ints, max_size=2))),
    st.builds(lambda m: {MARKERS_KEY: m}, st.one_of(
        st.dictionaries(st.sampled_from(["0", "1", "2"]), st.integers(0, 30), max_size=2),
        ints, st.none())),
    st.builds(lambda m: {ABORTED_KEY: m, PREPARED_TIMEOUT_KEY: 1}, st.one_of(
        st.dictionaries(st.sampled_from(["1", "2"]), st.lists(st.integers(0, 30), max_size=2),
                        max_size=2), ints, st.none())),
    st.dictionaries(st.text(max_size=3), ints, max_size=2))
steps = st.lists(st.tuples(
    st.sampled_from([0, 1]),
    st.one_of(st.tuples(st.just(CommandKind.STAGE), st.integers(0, 3)),
              st.tuples(st.just(CommandKind.COMMIT), st.integers(0, 3),
                        st.lists(st.integers(1, 30), max_size=2), metas),
              st.tuples(st.just(CommandKind.ABORT), st.integers(0, 3)))), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_any_prepared_commits_and_markers_apply_and_replicas_agree(log):
    """Two nodes' partitions fed the same entries hold the same state; the stable end
    stops only at an undecided prepared commit; a verdict, once given, stays."""
    first, second = Partitions(), Partitions()
    for parts in (first, second):
        given_: dict[int, bool] = {}
        for partition, (kind, *args) in log:
            if kind == CommandKind.STAGE:
                parts.stage(partition, args[0])
            elif kind == CommandKind.COMMIT:
                parts.commit(partition, *args)
            else:
                parts.apply(partition, kind, Q, args[0])
            one = parts.one
            if one.stable_applied() < one.applied:
                assert parts.verdict(1, one.stable_applied() + 1) is None
            for (p, index) in parts.entries:
                verdict = parts.verdict(p, index) if p == 1 else None
                if verdict is not None:
                    assert given_.setdefault(index, verdict) == verdict
    for p in (0, 1):
        assert first.machine(p).snapshot() == second.machine(p).snapshot()
        assert msgpack.unpackb(first.machine(p).query(msgpack.packb(["batch_status", Q, 0]))) \
            == msgpack.unpackb(second.machine(p).query(msgpack.packb(["batch_status", Q, 0])))
