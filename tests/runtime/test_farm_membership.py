"""Membership of every partition at once (issue 28), on real node processes over
loopback: `add-server` makes a new node a voter of each partition of a 3-partition farm
(partition 0 first) and it catches up each; a re-run says "already"; `remove-server`
takes it out of each (partition 0 last, after which it stops by itself); a partition
that cannot take the node (it was started with too few --partitions) is reported, the
command exits 1 naming it, and the same command completes it once the node is fixed;
an observer joins and leaves every partition likewise, and so does `config import`;
`--partition` values out of range are refused naming the option; `transfer-leader`
needs `--partition` on a farm of several, and `--from N` drains a node: it leads no
partition until `--release N`, the balancers included."""
from __future__ import annotations

import io
import json
import time

import pytest

from consensus.admin.admin import EXIT_FARM, EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE, \
    command_main
from consensus.admin.farm_membership import add_order, check_partition_option, \
    drained_nodes, remove_order
from consensus.common.errors import ConfigError, FarmError
from consensus.torture.local import LocalCluster
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

PARTITIONS = 3


def run(name: str, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = command_main(name, argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def base(farm: LocalCluster, timeout: float = 20) -> list[str]:
    return ["--endpoints", farm.endpoints, "--cluster", farm.cluster, "--user",
            farm.username, f"--password={farm.password}", "--timeout", str(timeout)]


def started(farm: LocalCluster) -> LocalCluster:
    for p in range(PARTITIONS):
        farm.wait_for_leader(timeout=20, partition=p)
    return farm


def voters(farm: LocalCluster, partition: int) -> dict[int, str]:
    with farm.client(partition=partition, timeout=10) as client:
        return client.get_servers().voters


def applied_by(farm: LocalCluster, node: int) -> dict[int, int]:
    """The node's own applied index per partition (its `partitions` answer)."""
    try:
        with farm.client(endpoints=farm.endpoint_of(node), timeout=3) as client:
            view = client.partitions(farm.endpoint_of(node))
    except FarmError:
        return {}
    return {int(p["partition"]): int(p["applied"]) for p in view["partitions"]}


def outcomes(doc: dict) -> list[tuple[int, str]]:
    return [(row["partition"], row["outcome"]) for row in doc["partitions"]]


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(3, partitions=PARTITIONS, fsync="never", status_interval=0.5) as f:
        yield started(f)


def test_add_server_joins_every_partition_and_remove_server_leaves_every_one(farm):
    marks = {}
    for p in range(PARTITIONS):
        with farm.client(partition=p, timeout=10) as client:
            marks[p] = client.append([f"before n4 in p{p}".encode()])[0]
    four = farm.spawn()
    code, out, err = run("add-server", base(farm) + [str(four), farm.endpoint_of(four),
                                                     "--json"])
    assert code == EXIT_OK, err
    doc = json.loads(out)
    assert outcomes(doc) == [(0, "done"), (1, "done"), (2, "done")] and doc["failed"] == []
    assert doc["added"] == four and doc["as"] == "voter"
    for p in range(PARTITIONS):
        assert voters(farm, p)[four] == farm.endpoint_of(four)
    wait_until(lambda: all(applied_by(farm, four).get(p, -1) >= marks[p]
                           for p in range(PARTITIONS)), 15, interval=0.1,
               message="n4 applying every partition's log")

    code, out, err = run("add-server", base(farm) + [str(four), farm.endpoint_of(four)])
    assert code == EXIT_OK, err                              # a re-run changes nothing
    assert out.splitlines() == [f"partition {p}: already: n{four} is already a voter"
                                for p in range(PARTITIONS)]

    code, out, err = run("transfer-leader", base(farm) + ["--from", str(four)])
    assert code == EXIT_OK, err                     # drained: it leaves the list with the farm
    code, out, err = run("remove-server", base(farm) + [str(four), "--json"])
    assert code == EXIT_OK, err
    doc = json.loads(out)
    assert outcomes(doc) == [(1, "done"), (2, "done"), (0, "done")]   # partition 0 last
    assert doc["partitions"][2]["detail"].endswith("; taken off the drained list")
    assert four not in drained_nodes(lambda p: farm.client(partition=p, timeout=10))
    for p in range(PARTITIONS):
        assert four not in voters(farm, p)
    wait_until(lambda: not farm.running(four), 15, message="n4 stopping by itself")


def test_partition_option_acts_on_one_and_bad_values_name_the_option(farm):
    five = farm.spawn()
    code, out, err = run("add-server", base(farm) + [str(five), farm.endpoint_of(five),
                                                     "--partition", "0"])
    assert code == EXIT_OK, err
    assert out == f"partition 0: done: n{five} ({farm.endpoint_of(five)}) added as a voter\n"
    assert five in voters(farm, 0) and five not in voters(farm, 1)
    for bad in ("3", "-1", "x", "1.5", "٣"):
        code, out, err = run("remove-server", base(farm) + [str(five), "--partition", bad])
        assert code == EXIT_USAGE and not out, (bad, out)
        assert err == "garlicfarm remove-server: --partition: must be a whole number " + (
            f"from 0 to 2 (the farm has 3 partitions), got '{bad}'\n" if bad == "3" else
            f"from 0 (a partition of the farm), got '{bad}'\n"), err
    assert five in voters(farm, 0)                           # refused: nothing changed
    code, out, err = run("remove-server", base(farm) + [str(five), "--json"])
    assert code == EXIT_OK, err
    assert outcomes(json.loads(out)) == [(1, "already"), (2, "already"), (0, "done")]

    leader = farm.wait_for_leader(partition=2)
    target = next(n for n in (1, 2, 3) if n != leader)
    code, _, err = run("transfer-leader", base(farm) + ["--to", str(target)])
    assert code == EXIT_USAGE and "--partition: the farm has 3 partitions" in err, err
    code, out, err = run("transfer-leader", base(farm) + ["--to", str(target),
                                                          "--partition", "2"])
    assert code == EXIT_OK, err
    assert out == f"partition 2: leadership handed to n{target}\n"


def test_an_observer_joins_and_leaves_every_partition(farm):
    marks = {}
    for p in range(PARTITIONS):
        with farm.client(partition=p, timeout=10) as client:
            marks[p] = client.append([f"for the observer in p{p}".encode()])[0]
    watcher = farm.spawn(observer=True)
    code, out, err = run("add-server", base(farm) + [str(watcher), farm.endpoint_of(watcher),
                                                     "--observer", "--json"])
    assert code == EXIT_OK, err
    assert outcomes(json.loads(out)) == [(0, "done"), (1, "done"), (2, "done")]
    for p in range(PARTITIONS):
        with farm.client(partition=p, timeout=10) as client:
            assert watcher in client.get_servers().observers
    wait_until(lambda: all(applied_by(farm, watcher).get(p, -1) >= marks[p]
                           for p in range(PARTITIONS)), 15, interval=0.1,
               message="the observer pulling every partition's log")
    code, out, err = run("remove-server", base(farm) + [str(watcher), "--json"])
    assert code == EXIT_OK, err
    doc = json.loads(out)
    assert outcomes(doc) == [(1, "done"), (2, "done"), (0, "done")] and doc["as"] == "observer"


def test_config_import_changes_every_partition(farm, tmp_path):
    code, out, err = run("config", ["export"] + base(farm))
    assert code == EXIT_OK, err
    doc = json.loads(out)
    new = farm.spawn()
    doc["voters"][str(new)] = farm.endpoint_of(new)
    path = tmp_path / "farm.json"
    path.write_text(json.dumps(doc))
    code, out, err = run("config", ["import", str(path)] + base(farm))
    assert code == EXIT_OK, err
    for p in range(PARTITIONS):
        assert voters(farm, p)[new] == farm.endpoint_of(new)
    del doc["voters"][str(new)]
    path.write_text(json.dumps(doc))
    code, out, err = run("config", ["import", str(path), "--prune"] + base(farm))
    assert code == EXIT_OK, err
    for p in range(PARTITIONS):
        assert new not in voters(farm, p)


def led_by(farm: LocalCluster) -> dict[int, int]:
    """Each partition's leader from the nodes' own views (a node leads when it says so);
    partitions without one are left out."""
    found = {}
    for node in (1, 2, 3):
        for part in _parts(farm, node):
            if part["role"] == "leader":
                found[int(part["partition"])] = node
    return found


def _parts(farm: LocalCluster, node: int) -> list[dict]:
    try:
        with farm.client(endpoints=farm.endpoint_of(node), timeout=3) as client:
            return client.partitions(farm.endpoint_of(node))["partitions"]
    except FarmError:
        return []


def test_transfer_leader_from_drains_a_node_and_release_gives_its_share_back(farm):
    leaders = wait_until(lambda: f if len(f := led_by(farm)) == PARTITIONS else None, 15,
                         interval=0.1, message="a leader in every partition")
    victim = leaders[0]
    try:
        code, out, err = run("transfer-leader", base(farm) + ["--from", str(victim),
                                                              "--json"])
        assert code == EXIT_OK, err
        doc = json.loads(out)
        assert doc["drained"] == victim and len(doc["leaders"]) == PARTITIONS
        assert victim not in doc["leaders"].values() and None not in doc["leaders"].values()
        # The balancers would hand it a leadership back within INTERVAL + SETTLE (2.5 s)
        # if they did not know it is drained: watch longer than that.
        code, out, err = run("status", base(farm) + ["--json"])
        assert code in (EXIT_OK, EXIT_UNHEALTHY) and json.loads(out)["drained"] == [victim]
        code, out, err = run("status", base(farm))
        assert f"until `garlicfarm transfer-leader --release ID`): n{victim}\n" in out, out
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            assert victim not in led_by(farm).values()
            time.sleep(0.2)
        code, _, err = run("transfer-leader", base(farm) + ["--to", str(victim),
                                                            "--partition", "1"])
        assert code == EXIT_USAGE and f"--release {victim}` first" in err, err
        code, _, err = run("transfer-leader", base(farm) + ["--from", "9"])
        assert code == EXIT_USAGE and "--from: n9 is not a voter" in err, err
    finally:
        code, out, err = run("transfer-leader", base(farm) + ["--release", str(victim)])
    assert code == EXIT_OK and out.startswith(f"n{victim} released"), err
    wait_until(lambda: victim in led_by(farm).values(), 15, interval=0.2,
               message=f"the balancer giving n{victim} a leadership again")
    code, out, err = run("status", base(farm) + ["--json"])
    assert json.loads(out)["drained"] == [], out


def test_a_partition_that_fails_is_named_and_a_rerun_completes_it():
    """n4 started with --partitions 2 cannot join partition 2 (it does not host it): the
    command adds it to 0 and 1, exits 1 naming partition 2 and the fix (asked of n4
    first: no timeout spent on it); restarted with the farm's --partitions, the same
    command reports 0 and 1 as already done and adds 2."""
    with LocalCluster(3, partitions=PARTITIONS, fsync="never", status_interval=0.5) as farm:
        started(farm)
        farm.partitions = 2
        four = farm.spawn()
        farm.partitions = PARTITIONS
        # started, as the docs ask (else the command cannot ask it what it hosts, and
        # partition 2's AddServer times out instead: Incomplete)
        wait_until(lambda: applied_by(farm, four), 15, interval=0.1, message="n4 answering")
        argv = base(farm, timeout=4) + [str(four), farm.endpoint_of(four)]
        code, out, err = run("add-server", argv)
        assert code == EXIT_FARM, (out, err)
        lines = out.splitlines()
        assert lines[0].startswith("partition 0: done:") and \
            lines[1].startswith("partition 1: done:"), out
        assert lines[2] == f"partition 2: failed: n{four} at {farm.endpoint_of(four)} hosts " \
            "partitions 0..1 only (its --partitions is 2): restart it with the farm's " \
            "--partitions (every node the same), then run the same command again", out
        assert f"n{four} not added to partition 2 (partition 2: n{four} at" in err, err
        assert "run the same command again" in err
        assert four in voters(farm, 1) and four not in voters(farm, 2)

        farm.stop(four)
        args = farm._args[four]
        args[args.index("--partitions") + 1] = str(PARTITIONS)
        farm.restart(four)
        code, out, err = run("add-server", base(farm) + [str(four), farm.endpoint_of(four)])
        assert code == EXIT_OK, (out, err)
        assert [line.split(":")[:2] for line in out.splitlines()] == \
            [["partition 0", " already"], ["partition 1", " already"],
             ["partition 2", " done"]], out
        assert four in voters(farm, 2)


def test_partition_order_keeps_partition_0_a_superset():
    assert add_order([2, 0, 1]) == [0, 1, 2]
    assert remove_order([2, 0, 1]) == [1, 2, 0] and remove_order([1]) == [1]
    assert check_partition_option("2", 3) == 2
    with pytest.raises(ConfigError, match=r"--partition: must be a whole number from 0 to 0 "
                                          r"\(the farm has 1 partition\), got '1'"):
        check_partition_option("1", 1)


def test_the_balancer_empties_a_drained_node_and_never_fills_it():
    from consensus.common.partitions import parse_drained
    from consensus.runtime.balancer import Balancer
    from tests.runtime.test_partitions_units import FakeCore
    # node 1 is drained and leads 2 of 3: both go to nodes 2 and 3 (share 2 among them)
    cores = [FakeCore(1, 1), FakeCore(1, 1), FakeCore(1, 2)]
    assert Balancer(1, cores, lambda: frozenset({1})).tick(0.0) == 2
    assert [c.transfers for c in cores] == [[3], [2], []]
    # node 2 leads 2 of 3 and node 1 none: without the drain it would hand one to node 1
    cores = [FakeCore(2, 2, reachable=(1, 3)), FakeCore(2, 2, reachable=(1, 3)),
             FakeCore(2, 3, reachable=(1, 3))]
    assert Balancer(2, cores).tick(0.0) == 1 and cores[0].transfers == [1]
    cores = [FakeCore(2, 2, reachable=(1, 3)), FakeCore(2, 2, reachable=(1, 3)),
             FakeCore(2, 3, reachable=(1, 3))]
    assert Balancer(2, cores, lambda: frozenset({1})).tick(0.0) == 0
    assert parse_drained("[1, 3]") == {1, 3}
    for junk in (None, "", "not json", "{}", '["1", true]'):
        assert parse_drained(junk) == frozenset()
