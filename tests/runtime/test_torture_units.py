"""The torture test's parts that need no farm: the workload, outcome recording, the
append audit, the fault planner, the verdict, the report and the options."""
from __future__ import annotations

import io
import json
import random
import threading
from collections import Counter

import pytest

from consensus.linearizability import (History, KVModel, Outcome, Verdict, check,
                                       read_history)
from consensus.torture.nemesis import (Fault, FaultRecord, NemesisLog, connectivity,
                                       majority_sides, plan)
from consensus.torture.run import (EXIT_SETUP, TortureOutcome, TortureResult,
                                   TortureSetupError, judge, main, parse_faults,
                                   parse_options, render, result_document)
from consensus.torture.workload import (APPEND, REGISTER, Audit, ClientPool,
                                        ClientStats, SharedSink, Workload,
                                        audit_appends, execute, final_reads)

pytestmark = pytest.mark.timeout(60)


class FarmDown(Exception):
    """Stands for FarmError: the farm refused or did not answer."""


class DictKV:
    """A linearizable in-process kv (one lock): the reference the workload must pass on.
    `fail_every` makes every n-th write raise FarmDown *after* applying it (the worst
    case of an unknown outcome); `lose` drops the writes of the given values silently."""

    def __init__(self, fail_every: int = 0, lose: frozenset[str] = frozenset()) -> None:
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()
        self.calls = 0
        self.fail_every = fail_every
        self.lose = lose

    def _write(self, key: str, update) -> None:
        with self.lock:
            self.calls += 1
            update()
            if self.fail_every and self.calls % self.fail_every == 0:
                raise FarmDown("timed out")

    def kv_get(self, key):
        with self.lock:
            return self.data.get(key)

    def kv_put(self, key, value):
        self._write(key, lambda: self.data.__setitem__(key, value))

    def kv_append(self, key, value):
        if value in self.lose:
            return
        self._write(key, lambda: self.data.__setitem__(key, self.data.get(key, "") + value))

    def kv_cas(self, key, expected, new):
        with self.lock:
            if self.data.get(key, "") != expected:
                return False
            self.data[key] = new
            return True

    def close(self):
        pass


def run_pool(kv: DictKV, ops: int, clients: int = 4, seed: int = 1):
    """Drive a ClientPool until `ops` operations were invoked; return history, workload,
    stats."""
    history = History()
    workload = Workload(random.Random(seed), keys=2, ops_per_key=40)
    pool = ClientPool(lambda index: kv, history, workload, clients, FarmDown)
    pool.start()
    from tests.support import wait_until
    wait_until(lambda: len(history.events) >= 2 * ops, timeout=30, message=f"{ops} ops")
    assert pool.stop(timeout=10)
    return history, workload, pool.stats


def test_workload_values_are_unique_and_families_separate():
    w = Workload(random.Random(3), keys=2, ops_per_key=25)
    ops = [w.next() for _ in range(2000)]
    written = [op.value if op.f != "cas" else op.value[1] for op in ops if op.f != "get"]
    assert len(written) == len(set(written))
    for op in ops:
        family = op.key[0]
        assert family in (APPEND, REGISTER)
        allowed = {"get", "append"} if family == APPEND else {"get", "put", "cas"}
        assert op.f in allowed, op
    # Keys rotate: no key is used more than ops_per_key times, and many keys appear.
    uses = Counter(op.key for op in ops)
    assert max(uses.values()) <= 25
    assert len(uses) >= 2000 // 25
    assert set(uses) <= set(w.keys)
    # A cas always expects a value that was written to its key before.
    seen: dict[str, set[str]] = {}
    for op in ops:
        if op.f == "put":
            seen.setdefault(op.key, set()).add(op.value)
        if op.f == "cas":
            assert op.value[0] in seen.get(op.key, set())
            seen.setdefault(op.key, set()).add(op.value[1])


def test_execute_maps_results_to_history_outcomes():
    kv = DictKV()
    w = Workload(random.Random(0))
    from consensus.torture.workload import Op
    assert execute(kv, Op("get", "r1")) == ("ok", "")
    assert execute(kv, Op("put", "r1", "w1")) == ("ok", "w1")
    assert execute(kv, Op("cas", "r1", ["w1", "c2"])) == ("ok", ["w1", "c2"])
    assert execute(kv, Op("cas", "r1", ["w1", "c3"])) == ("fail", ["w1", "c3"])
    assert execute(kv, Op("append", "a1", "x4 ")) == ("ok", "x4 ")
    assert execute(kv, Op("get", "a1")) == ("ok", "x4 ")
    with pytest.raises(ValueError, match="unknown operation"):
        execute(kv, Op("delete", "a1"))
    assert w.next() is not None


def test_pool_on_a_linearizable_store_passes_the_checker():
    kv = DictKV()
    history, workload, stats = run_pool(kv, 600)
    finals = final_reads(lambda: kv, history, workload.keys, deadline=1e18, expected=FarmDown)
    ops = history.operations()
    assert check(ops, KVModel(), timeout=30).verdict is Verdict.LINEARIZABLE
    audit = audit_appends(ops, finals)
    assert audit.ok and audit.checked > 0
    assert stats.outcomes["append", "ok"] > 0 and stats.outcomes["get", "ok"] > 0
    assert not stats.bugs


def test_unknown_outcomes_are_info_and_change_the_process():
    kv = DictKV(fail_every=7)
    history, workload, stats = run_pool(kv, 400, clients=3)
    ops = history.operations()
    infos = [op for op in ops if op.outcome is Outcome.UNKNOWN]
    assert infos and stats.outcomes.total() >= 400
    assert stats.errors["FarmDown"] == len(infos)
    # After an :info the client goes on under a new process id (jepsen's rule): no
    # process has an operation after one of unknown outcome.
    last_call = {}
    for op in sorted(ops, key=lambda o: o.call):
        assert last_call.get(op.process) != "info", op
        last_call[op.process] = "info" if op.outcome is Outcome.UNKNOWN else "done"
    # The writes that raised did take effect: the history is still linearizable, and
    # the audit counts only acknowledged appends.
    finals = final_reads(lambda: kv, history, workload.keys, deadline=1e18, expected=FarmDown)
    assert check(ops, KVModel(), timeout=30).verdict is Verdict.LINEARIZABLE
    assert audit_appends(ops, finals).ok


class RefusingKV(DictKV):
    """Every `refuse_every`-th write is refused before it runs, definitely (the client's
    `maybe_applied` False), as a farm with no leader answers."""

    def __init__(self, refuse_every: int) -> None:
        super().__init__()
        self.refuse_every = refuse_every
        self.refused: Counter = Counter()

    def _refuse(self, f: str) -> None:
        with self.lock:
            self.calls += 1
            if self.calls % self.refuse_every:
                return
            self.refused[f] += 1
        error = FarmDown("no leader")
        error.maybe_applied = False
        raise error

    def kv_put(self, key, value):
        self._refuse("put")
        super().kv_put(key, value)

    def kv_append(self, key, value):
        self._refuse("append")
        super().kv_append(key, value)

    def kv_cas(self, key, expected, new):
        self._refuse("cas")
        return super().kv_cas(key, expected, new)


def test_definite_refusals_are_fail_but_a_refused_cas_is_info():
    """A put or append refused before it ran is `fail` (it did not happen); a refused cas
    is `info`: its `fail` would tell the checker the compare failed, which a history
    where the register still held the expected value contradicts (a CI torture run)."""
    kv = RefusingKV(refuse_every=5)
    history, workload, stats = run_pool(kv, 600, clients=3)
    assert kv.refused["cas"] and kv.refused["put"] + kv.refused["append"]
    ops = history.operations()
    errors = [op for op in ops if op.f != "get" and op.output is None]
    refused_cas = [op for op in errors if op.f == "cas"]
    assert len(refused_cas) == kv.refused["cas"]
    assert all(op.outcome is Outcome.UNKNOWN for op in refused_cas)
    refused_writes = [op for op in errors if op.f in ("put", "append")]
    assert len(refused_writes) == kv.refused["put"] + kv.refused["append"]
    assert all(op.outcome is Outcome.FAIL for op in refused_writes)
    finals = final_reads(lambda: kv, history, workload.keys, deadline=1e18, expected=FarmDown)
    assert check(ops, KVModel(), timeout=30).verdict is Verdict.LINEARIZABLE
    assert audit_appends(ops, finals).ok


def test_a_lost_acknowledged_append_is_caught_twice():
    kv = DictKV(lose=frozenset({"x5 ", "x9 "}))
    history, workload, _ = run_pool(kv, 300, clients=1, seed=2)
    finals = final_reads(lambda: kv, history, workload.keys, deadline=1e18, expected=FarmDown)
    ops = history.operations()
    acked = {op.input for op in ops if op.f == "append" and op.outcome is Outcome.OK}
    audit = audit_appends(ops, finals)
    lost_tokens = {t for _, t in audit.lost}
    assert lost_tokens == {v.strip() for v in {"x5 ", "x9 "} & acked}
    assert lost_tokens                       # seed 2 appends x5 or x9 with one client
    assert check(ops, KVModel(), timeout=30).verdict is Verdict.NOT_LINEARIZABLE


def test_audit_duplicates_and_unreadable():
    history = History()
    for i, token in enumerate(["x1 ", "x2 "]):
        op = history.invoke(i, "append", "a1", token)
        history.complete(op, "ok", token)
    op = history.invoke(3, "append", "a2", "x3 ")
    history.complete(op, "info")
    audit = audit_appends(history.operations(), {"a1": "x1 x2 x1 "})
    assert audit.duplicated == (("a1", "x1"),)
    assert audit.unreadable == ("a2",)
    assert audit.lost == () and audit.checked == 2 and not audit.ok


def test_final_reads_retry_until_the_farm_answers():
    kv = DictKV()
    kv.data["a1"] = "x1 "
    attempts = []

    class Flaky(DictKV):
        def kv_get(self, key):
            attempts.append(key)
            if len(attempts) < 3:
                raise FarmDown("no leader")
            return kv.data.get(key)

    history = History()
    values = final_reads(Flaky, history, ["a1", "a2"], deadline=1e18, expected=FarmDown)
    assert values == {"a1": "x1 ", "a2": ""}
    kinds = [e.type.value for e in history.events if e.type.value != "invoke"]
    assert kinds == ["fail", "fail", "ok", "ok"]


def test_history_file_has_nemesis_lines_that_checkers_skip(tmp_path):
    path = tmp_path / "run.edn"
    with open(path, "w", encoding="utf-8") as f:
        sink = SharedSink(f)
        history = History(sink=sink)
        op = history.invoke(0, "put", "r1", "w1")
        sink.note("kill", "kill -9 n2 (leader) for 1.0s")
        history.complete(op, "ok", "w1")
        op = history.invoke(1, "get", "r1")
        history.complete(op, "ok", "w1")
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and ":process :nemesis" in lines[1]
    ops = read_history(str(path))
    assert [o.f for o in ops] == ["put", "get"]
    assert check(ops, KVModel()).verdict is Verdict.LINEARIZABLE


@pytest.mark.parametrize("nodes", [[1, 2, 3], [1, 2, 3, 4, 5]])
def test_partition_plans_leave_the_intended_sides(nodes):
    rng = random.Random(11)
    seen = set()
    for _ in range(300):
        leader = rng.choice(nodes + [None])
        action = plan(rng, [Fault.PARTITION], nodes, leader, (1.0, 2.0))
        assert action.fault is Fault.PARTITION and 1.0 <= action.hold <= 2.0
        assert action.drops and all(a in nodes and b in nodes and a != b
                                    for a, b in action.drops)
        scheme = action.description.split()[1]
        seen.add(scheme)
        sides = majority_sides(nodes, action.drops)
        if scheme in ("isolate", "split", "leader"):
            # Two-way partitions: exactly one majority side, and the cut is symmetric.
            assert len(sides) == 1
            assert all((b, a) in action.drops for a, b in action.drops)
            if scheme == "leader":
                assert leader not in sides[0]
        if scheme == "bridge":
            reach = connectivity(nodes, action.drops)
            bridge = int(action.description.split()[2][1:])
            assert reach[bridge] == set(nodes) - {bridge}
        if scheme == "one-way:":
            assert any((b, a) not in action.drops for a, b in action.drops)
    expected = {"isolate", "split", "leader", "one-way:"} | ({"bridge"} if len(nodes) >= 5
                                                             else set())
    assert seen == expected


def test_plans_of_every_kind_target_known_nodes():
    rng = random.Random(5)
    nodes = [1, 2, 3]
    kinds = Counter()
    leader_hits = 0
    schemes = ("add-voter", "observer", "joint-kill")
    seen_schemes = []
    for turn in range(400):
        action = plan(rng, list(Fault), nodes, 2, (0.5, 1.0), schemes=schemes,
                      turn=len(seen_schemes))
        kinds[action.fault] += 1
        assert set(action.nodes) <= set(nodes)
        if action.fault is Fault.MEMBERSHIP:
            seen_schemes.append(action.scheme)
            assert action.description.startswith(f"membership {action.scheme}")
            assert 0 <= action.kill_after <= 0.3
        if action.fault in (Fault.KILL, Fault.RESTART, Fault.PAUSE):
            assert len(action.nodes) == 1
            leader_hits += action.nodes == (2,)
        if action.fault is Fault.FLOOD:
            assert len(action.nodes) == 1 and 0.5 <= action.hold <= 1.0
        if action.fault is Fault.DELAY:
            assert 0 < action.delay <= 0.1 and action.nodes
        if action.fault is Fault.RESTART:
            assert action.hold == 0
    assert set(kinds) == set(Fault)
    # Membership faults take the schemes in turn; without schemes there are none.
    assert seen_schemes[:6] == list(schemes) * 2
    assert all(plan(rng, list(Fault), nodes, 2, (0.5, 1.0)).fault is not Fault.MEMBERSHIP
               for _ in range(100))
    # Half the node faults aim at the leader, the rest at random (1/3 of them too).
    node_faults = kinds[Fault.KILL] + kinds[Fault.RESTART] + kinds[Fault.PAUSE]
    assert 0.5 < leader_hits / node_faults < 0.85


def _result(**changes) -> TortureResult:
    from consensus.torture.nemesis import Action
    stats = ClientStats()
    stats.outcomes.update({("append", "ok"): 10, ("get", "ok"): 5, ("put", "info"): 2})
    log = NemesisLog([FaultRecord(Action(Fault.KILL, (2,), description="kill -9 n2"), 1.0, 2.0)])
    result = TortureResult(TortureOutcome.PASS, [], 42, 3.5,
                           check([], KVModel()), Audit(checked=10), stats, log, "h.edn")
    for k, v in changes.items():
        setattr(result, k, v)
    return judge(result)


def test_judge_and_report():
    ok = _result()
    assert ok.outcome is TortureOutcome.PASS and ok.exit_code == 0
    out = io.StringIO()
    render(ok, out)
    text = out.getvalue()
    assert "PASS: linearizable, nothing acknowledged lost (seed 42" in text
    assert "append" in text and "kill" in text and "h.edn" in text
    doc = result_document(ok)
    json.dumps(doc)
    assert doc["operations"]["append:ok"] == 10 and doc["faults"][0]["fault"] == "kill"

    lost = _result(audit=Audit(lost=(("a1", "x7"),), checked=10))
    assert lost.outcome is TortureOutcome.FAIL and lost.exit_code == 1
    assert "1 acknowledged append(s) lost: a1:x7" in lost.reasons[0]

    nothing = ClientStats()
    nothing.outcomes.update({("get", "ok"): 3, ("put", "info"): 4})
    vacuous = _result(clients=nothing)
    assert vacuous.outcome is TortureOutcome.UNKNOWN and vacuous.exit_code == 2

    bug = ClientStats()
    bug.outcomes.update({("put", "ok"): 3})
    bug.bugs.append("Traceback...\nTypeError: bad\n")
    assert "TypeError: bad" in _result(clients=bug).reasons[0]


def test_options_and_errors_name_the_option():
    options = parse_options(["--nodes", "3", "--faults", "kill,restart,kill", "--duration",
                             "5", "--hold", "0.5:1", "--quiet", "2"])
    assert options.nodes == 3 and options.faults == (Fault.KILL, Fault.RESTART)
    assert options.hold == (0.5, 1.0) and options.quiet == (2.0, 2.0)
    with pytest.raises(TortureSetupError, match="--faults: explode is not a fault"):
        parse_faults("kill,explode")
    with pytest.raises(TortureSetupError, match="--hold"):
        parse_options(["--hold", "3:1"])
    with pytest.raises(TortureSetupError, match="--clients: must be at least 1"):
        parse_options(["--clients", "0"])
    err = io.StringIO()
    assert main(["--faults", "meteor"], err=err) == EXIT_SETUP
    assert "--faults: meteor is not a fault" in err.getvalue()


def test_refuses_a_used_data_dir(tmp_path):
    (tmp_path / "node-1").mkdir()
    with pytest.raises(TortureSetupError, match="--data-dir: .* is not empty"):
        parse_options(["--data-dir", str(tmp_path)])
    assert parse_options(["--data-dir", str(tmp_path / "new")]).data_dir == tmp_path / "new"


class BrokenRestarts:
    """A farm whose restarts fail (a real one cannot be made to fail on demand): the
    nemesis must record the failure, go on healing, and never raise."""

    network = None
    node_ids = [1, 2, 3]

    def __init__(self) -> None:
        self.calls: list[str] = []

    def kill(self, n):
        self.calls.append(f"kill {n}")

    def stop(self, n):
        self.calls.append(f"stop {n}")

    def restart(self, n):
        self.calls.append(f"restart {n}")
        raise OSError("port in use")

    def pause(self, n):
        self.calls.append(f"pause {n}")

    def resume(self, n):
        self.calls.append(f"resume {n}")

    def leader(self):
        return 1

    def wait_ready(self, n, timeout):
        return True


def test_nemesis_records_failures_and_heals_the_rest():
    from consensus.torture.nemesis import Nemesis

    farm = BrokenRestarts()
    nemesis = Nemesis(farm, [Fault.KILL, Fault.PAUSE], random.Random(4), quiet=(0, 0),
                      hold=(0.05, 0.05))
    nemesis.start()
    from tests.support import wait_until
    wait_until(lambda: len(nemesis.log.records) >= 6, message="six faults")
    nemesis.stop()
    kills = [r for r in nemesis.log.records if r.action.fault is Fault.KILL]
    assert kills and all("OSError: port in use" in r.error for r in kills if r.ended)
    assert all(r.ended is not None for r in nemesis.log.records)
    # Every pause was resumed; the killed nodes were restarted (and failed, recorded).
    assert farm.calls.count("pause 1") + farm.calls.count("pause 2") + \
        farm.calls.count("pause 3") == sum(c.startswith("resume") for c in farm.calls)
    assert len(nemesis.log.errors()) >= len(kills)
    with pytest.raises(ValueError, match="fault proxy"):
        Nemesis(farm, [Fault.PARTITION], random.Random(1))
