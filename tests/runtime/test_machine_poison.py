"""The farm's state machine against random and mutated committed entries (issue 13
item 3): applying never raises, two members fed the same entries hold the same snapshot
bytes, a member restored from a snapshot replays the rest to the same state, and a bad
command is refused with the same outcome everywhere."""
from __future__ import annotations

import json

import msgpack
from hypothesis import HealthCheck, example, given, settings, strategies as st

from consensus.common.errors import ErrorCode
from consensus.raft import Entry, EntryType
from consensus.runtime.machines import FarmStateMachine
from consensus.wire.envelope import HEAD, MAGIC, VERSION, CommandKind, encode_command

PROPERTIES = settings(max_examples=300, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])
U64 = (1 << 64) - 1

ints = st.one_of(st.integers(min_value=-(1 << 63), max_value=U64),
                 st.sampled_from([0, 1, -1, U64, (1 << 63) - 1, -(1 << 63)]))
scalars = st.one_of(ints, st.text(max_size=6), st.binary(max_size=6), st.none(),
                    st.booleans(), st.floats())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=4), ints), inner, max_size=4)), max_leaves=12)
queries = st.sampled_from(["q1", "q2"])
batches = st.one_of(st.integers(min_value=0, max_value=4), ints)
rids = st.binary(min_size=1, max_size=3)


def command(kind: CommandKind, *args) -> bytes:
    return encode_command(kind, b"r", *args)


commands = st.one_of(
    st.builds(lambda r, k, v: encode_command(CommandKind.KV_PUT, r, k, v), rids,
              st.sampled_from(["a", "b"]), st.text(max_size=5)),
    st.builds(lambda r, k, v: encode_command(CommandKind.KV_APPEND, r, k, v), rids,
              st.sampled_from(["a", "b"]), st.text(max_size=5)),
    st.builds(lambda r, k, e, v: encode_command(CommandKind.KV_CAS, r, k, e, v), rids,
              st.sampled_from(["a", "b"]), st.one_of(st.none(), st.text(max_size=3)),
              st.text(max_size=3)),
    st.builds(lambda r, q, b, p, a: encode_command(CommandKind.STAGE, r, q, b, p, a, "t",
                                                   b"x"), rids, queries, batches, ints, ints),
    st.builds(lambda r, q, b, s, m: encode_command(CommandKind.COMMIT, r, q, b, s, m), rids,
              queries, batches, st.lists(st.integers(min_value=1, max_value=U64), max_size=3),
              st.dictionaries(st.text(max_size=4), values, max_size=3)),
    st.builds(lambda r, q, b: encode_command(CommandKind.ABORT, r, q, b), rids, queries,
              batches),
    st.builds(lambda r, k, c, q, b: encode_command(CommandKind.ALLOCATE, r, k, c, q, b), rids,
              st.sampled_from(["s", "t"]), st.integers(min_value=1, max_value=U64), queries,
              batches),
    st.builds(lambda r, recs: encode_command(CommandKind.JOURNAL, r, recs), rids,
              st.lists(st.binary(max_size=4), max_size=3)),
    st.builds(lambda r, args: encode_command(CommandKind.KV_PUT, r, *args), rids,
              st.lists(values, max_size=4)))
statuses = st.one_of(
    st.builds(lambda i, d, v: json.dumps({"id": i, "date": d, "raft": v}).encode(),
              st.one_of(st.integers(min_value=0, max_value=5), st.integers()),
              st.one_of(st.integers(min_value=0, max_value=10 ** 13), st.integers()),
              values.filter(lambda v: not isinstance(v, bytes))
              .map(lambda v: v if not isinstance(v, dict) else {str(k): x for k, x in
                                                                v.items()})
              .filter(lambda v: _jsonable(v))),
    st.sampled_from([
        b'{"id": 1, "date": 1, "x": "\\ud800"}',                  # a lone surrogate
        b'{"id": 100000000000000000000000000000, "date": 1}',     # past 64 bits
        b'{"id": 1, "date": 1, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",   # deep
        b'{"id": 1, "date": 1, "x": ' + b"[" * 600 + b"]" * 600 + b"}",
        b'{"id": 2, "date": 1e999}', b"{", b'{"id": true, "date": 1}']))


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def mutate(data: bytes, at: int, byte: int) -> bytes:
    return data[:at] + bytes([byte]) + data[at + 1:]


entry_data = st.one_of(
    commands, statuses, st.binary(max_size=30),
    st.binary(max_size=30).map(lambda b: bytes([MAGIC, VERSION]) + bytes(8) + b),
    st.tuples(commands, st.integers(min_value=0, max_value=60),
              st.integers(min_value=0, max_value=255)).map(lambda t: mutate(*t)),
    st.tuples(commands, st.integers(min_value=HEAD.size, max_value=60)).map(
        lambda t: t[0][:t[1]]))

logs = st.lists(st.tuples(entry_data, st.sampled_from([EntryType.APPLICATION,
                                                       EntryType.APPLICATION,
                                                       EntryType.NOOP])), max_size=25)


def apply_all(machine: FarmStateMachine, log, start: int = 1) -> list:
    outcomes = []
    for index, (data, kind) in enumerate(log, 1):
        if index >= start:
            outcome = machine.apply(Entry(1, index, kind, data))
            outcomes.append(None if outcome is None else
                            (outcome.request_id, outcome.index, outcome.result,
                             outcome.error, outcome.duplicate))
            machine.verdict(Entry(1, index, kind, data))
    return outcomes


@PROPERTIES
@given(logs)
@example([(command(CommandKind.ALLOCATE, "s", U64, "q", 0), EntryType.APPLICATION),
          (encode_command(CommandKind.ALLOCATE, b"x", "s", U64, "q", 1),
           EntryType.APPLICATION)])                        # a counter past 64 bits
@example([(b'{"id": 100000000000000000000000000000, "date": 1}', EntryType.APPLICATION)])
@example([(b'{"id": 1, "date": 1, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
           EntryType.APPLICATION)])                        # RecursionError
@example([(b'{"id": 1, "date": 1, "x": "\\ud800"}', EntryType.APPLICATION)])
def test_any_committed_entries_apply_and_members_agree(log):
    first, second = FarmStateMachine(), FarmStateMachine()
    assert apply_all(first, log) == apply_all(second, log)
    snapshot = first.snapshot()
    assert snapshot == second.snapshot()
    for query in (["kv_keys"], ["statuses"], ["publisher"], ["last_batch", "q1"],
                  ["batch_status", "q1", 0], ["applied"]):
        first.query(msgpack.packb(query))
    middle = len(log) // 2
    partial = FarmStateMachine()
    apply_all(partial, log[:middle])
    restarted = FarmStateMachine()
    restarted.restore(partial.snapshot())
    apply_all(restarted, log, start=middle + 1)
    assert restarted.snapshot() == snapshot


def test_a_counter_that_would_pass_64_bits_is_refused_everywhere():
    machine = FarmStateMachine()
    big = (1 << 63) - 1
    ok = machine.apply(Entry(1, 1, EntryType.APPLICATION,
                             encode_command(CommandKind.ALLOCATE, b"a", "s", big, "q", 0)))
    assert ok.result == 0 and ok.error is None
    refused = machine.apply(Entry(1, 2, EntryType.APPLICATION,
                                  encode_command(CommandKind.ALLOCATE, b"b", "s", 1, "q", 1)))
    assert refused.error[0] == int(ErrorCode.FAILED) and "count" in refused.error[1]
    machine.snapshot()


class _Fussy:
    """An application machine that raises on some entries (a bug of the application's)."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def apply(self, entry) -> None:
        if entry.data.startswith(b"boom"):
            raise ValueError("the application cannot take this entry")
        self.seen.append(entry.data)

    def snapshot(self) -> bytes:
        return b"\n".join(self.seen)

    def restore(self, data: bytes) -> None:
        self.seen = data.split(b"\n") if data else []

    def query(self, query: bytes) -> bytes:
        return b""


def test_an_application_machine_that_raises_does_not_stop_the_replica(caplog):
    machine = FarmStateMachine(_Fussy())
    for index, data in enumerate([b"one", b"boom!", b"two"], start=1):
        machine.apply(Entry(1, index, EntryType.APPLICATION, data))
    assert machine.app.seen == [b"one", b"two"] and machine.applied == 3
    assert "raised applying entry 2" in caplog.text


def test_a_snapshot_that_is_not_ours_starts_the_built_ins_empty_at_its_index(caplog):
    """A JRaft leader's snapshot (dmprinter's bytes) in a mixed cluster: the node goes on,
    the application machine gets the bytes; one of ours of an unknown version is refused."""
    machine = FarmStateMachine(_Fussy())
    machine.apply(Entry(1, 1, EntryType.APPLICATION, b"one"))
    machine.kv["k"] = "v"
    machine.restore(b'{"jraft": "dmprinter state"} and more', 4800)
    assert (machine.applied, machine.kv, machine.app.seen) == \
        (4800, {}, [b'{"jraft": "dmprinter state"} and more'])
    assert "is not a garlicfarm snapshot" in caplog.text
    ours = FarmStateMachine()
    ours.apply(Entry(1, 1, EntryType.APPLICATION, b"x"))
    future = msgpack.unpackb(ours.snapshot(), raw=False, strict_map_key=False)
    future["v"] = 99
    try:
        FarmStateMachine().restore(msgpack.packb(future, use_bin_type=True), 1)
    except ValueError as exc:
        assert "version 99" in str(exc)
    else:
        raise AssertionError("a snapshot of an unknown version of ours was taken")
