"""`garlicfarm torture` end to end on real node processes: a short run with every fault
kind must pass, and a run whose reads are deliberately not linearizable (sequential reads
at each client's home member) must fail: the pipeline from history recording to the
checker sees real stale reads."""
from __future__ import annotations

import io
import json
import os
import threading

import pytest

from consensus.linearizability import KVModel, Verdict, check, read_history
from consensus.torture.run import EXIT_FAIL, EXIT_PASS, EXIT_SETUP, main

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def child_processes() -> list[int]:
    """Live (not zombie) children of this process."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry))
    return found


def threads_left(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `before` that are still alive (the run's own: other tests'
    leftovers that end meanwhile do not count, as they would in a bare count)."""
    return [t for t in threading.enumerate() if t not in before]


def torture(argv: list[str]) -> tuple[int, dict]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv + ["--json"], out=out, err=err)
    assert out.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())


def test_short_run_with_every_fault_kind_passes(tmp_path):
    threads, children = set(threading.enumerate()), child_processes()
    history = tmp_path / "run.edn"
    code, doc = torture(["--nodes", "3", "--duration", "25", "--clients", "6",
                         "--faults", "kill,restart,partition,pause,delay", "--seed", "7",
                         "--quiet", "0.3:1", "--history", str(history)])
    assert code == EXIT_PASS, doc["reasons"]
    assert doc["outcome"] == "PASS" and doc["reasons"] == []
    ops = doc["operations"]
    for f in ("append", "put", "get", "cas"):
        assert ops.get(f"{f}:ok", 0) > 50, ops            # the farm did serve
    kinds = {f["fault"] for f in doc["faults"]}
    assert len(doc["faults"]) >= 4 and len(kinds) >= 2, doc["faults"]
    assert all(f["error"] is None for f in doc["faults"])
    appends = doc["appends"]
    assert appends["checked"] == ops["append:ok"] and not appends["lost"]
    assert doc["linearizability"]["verdict"] == "linearizable"

    # The history file is the checker's input format and gives the same verdict; the
    # nemesis lines in it are skipped.
    text = history.read_text()
    assert text.count(":process :nemesis") == 2 * len(doc["faults"])
    operations = read_history(str(history))
    assert len(operations) == doc["linearizability"]["operations"]
    assert check(operations, KVModel(), timeout=60).verdict is Verdict.LINEARIZABLE
    # Final reads of every key are in the history, after the run.
    finals = [op for op in operations if op.process == "final"]
    assert finals and all(op.f == "get" for op in finals)

    # Nothing outlives the run: node processes, proxy and client threads.
    assert child_processes() == children
    assert threads_left(threads) == []


def test_marker_wire_run_passes():
    """The same on the marker wire (TaskFlux's protocol between the nodes), shorter."""
    code, doc = torture(["--nodes", "3", "--duration", "12", "--clients", "4",
                         "--wire", "marker", "--faults", "kill,partition,pause",
                         "--quiet", "0.3:1", "--seed", "11"])
    assert code == EXIT_PASS, doc["reasons"]
    assert doc["operations"].get("append:ok", 0) > 50 and doc["faults"]


def test_a_farm_of_many_partitions_is_tortured_in_every_partition(tmp_path):
    """Keys spread over 12 partitions (so the nodes' sync rounds share flushes and idle
    partitions quiesce) under kills, restarts, cuts and pauses: linearizable per key,
    nothing acknowledged lost, and the writes did land in most partitions' logs."""
    code, doc = torture(["--nodes", "3", "--partitions", "12", "--duration", "15",
                         "--clients", "6", "--faults", "kill,restart,partition,pause",
                         "--quiet", "0.3:1", "--seed", "5", "--data-dir", str(tmp_path)])
    assert code == EXIT_PASS, doc["reasons"]
    assert doc["operations"].get("append:ok", 0) > 50 and doc["faults"]
    assert not doc["appends"]["lost"] and not doc["appends"]["duplicated"]
    written = 0
    for group in range(1, 12):
        log_dir = tmp_path / "node-1" / "groups" / str(group) / "log"
        written += sum(f.stat().st_size for f in log_dir.iterdir()) > 8192
    assert written >= 6, f"only {written} of partitions 1-11 got writes on node 1"


@pytest.mark.parametrize("argv, error", [
    (["--partitions", "0"], "--partitions: must be 1 to"),
    (["--partitions", "4", "--wire", "marker"], "only --wire garlicfarm"),
    (["--partitions", "4", "--faults", "membership"], "--faults membership"),
])
def test_bad_partition_options_name_the_option(argv, error):
    err = io.StringIO()
    assert main(argv, out=io.StringIO(), err=err) == EXIT_SETUP
    assert error in err.getvalue()


def test_stale_reads_are_caught():
    """With sequential reads, a member cut off by a partition keeps answering its home
    clients from a state that acknowledged writes elsewhere have replaced: the run must
    fail as not linearizable."""
    code, doc = torture(["--nodes", "3", "--duration", "8", "--clients", "6",
                         "--faults", "partition", "--quiet", "0.3:0.6", "--hold", "2:3",
                         "--reads", "sequential", "--seed", "3"])
    assert code == EXIT_FAIL
    assert doc["outcome"] == "FAIL"
    assert doc["linearizability"]["verdict"] == "not linearizable"
    assert doc["reasons"][0].startswith("not linearizable (keys ")
    assert "must take effect next" in doc["linearizability"]["explain"]


def test_membership_faults_while_clients_run(tmp_path):
    """Issue 19.6: voters added and removed (AddServer / RemoveServer), an observer
    promoted and demoted, a joint-consensus change with its leader SIGKILLed, all while
    the clients run, with kills and partitions in between: linearizable, nothing
    acknowledged lost, and the farm back to its voters at the end."""
    threads, children = set(threading.enumerate()), child_processes()
    code, doc = torture(["--nodes", "3", "--duration", "30", "--clients", "4",
                         "--faults", "membership,kill,partition", "--seed", "19",
                         "--quiet", "0.2:0.5", "--hold", "0.5:1.5",
                         "--history", str(tmp_path / "run.edn")])
    assert code == EXIT_PASS, (doc["reasons"], doc["faults"])
    changes = [f for f in doc["faults"] if f["fault"] == "membership"]
    schemes = [f["what"].split(":")[0].split()[1] for f in changes]
    assert {"add-voter", "observer", "joint-kill"} <= set(schemes), doc["faults"]
    assert all(f["error"] is None for f in doc["faults"]), doc["faults"]
    joint = [f for f in changes if f["what"].startswith("membership joint-kill")]
    assert any(", leader n" in f["detail"] and "killed" in f["detail"] for f in joint), joint
    assert all("removed by joint consensus and stopped" in f["detail"] for f in joint)
    observer = [f for f in changes if f["what"].startswith("membership observer")]
    assert all("demoted" in f["detail"] for f in observer)
    assert doc["linearizability"]["verdict"] == "linearizable"
    assert not doc["appends"]["lost"] and not doc["appends"]["duplicated"]
    assert doc["operations"].get("append:ok", 0) > 50
    assert child_processes() == children and threads_left(threads) == []


def test_flood_fault_while_clients_run():
    """The flood fault (bad logins, slowloris, a full read-back at one member) really
    attacks, and the history stays linearizable with nothing lost."""
    code, doc = torture(["--nodes", "3", "--duration", "14", "--clients", "4",
                         "--faults", "flood,kill", "--seed", "23", "--hold", "3:4"])
    assert code == EXIT_PASS, (doc["reasons"], doc["faults"])
    floods = [f for f in doc["faults"] if f["fault"] == "flood"]
    assert floods and all(f["error"] is None for f in doc["faults"]), doc["faults"]
    for flood in floods:
        detail = flood["detail"]
        refused = int(detail.split(" bad logins refused")[0].replace(",", ""))
        assert refused > 0, detail                     # the attack reached the handshake
        assert "WRONG-PASSWORD" not in detail and "still running" not in detail, detail
    assert any(" 0 entries" not in f["detail"] for f in floods), floods   # a read-back ran
    assert doc["appends"]["checked"] == doc["operations"]["append:ok"]
    assert not doc["appends"]["lost"]
