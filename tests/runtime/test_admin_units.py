"""The admin commands' parts that need no farm: connection options, the farm file, import
plans, node configs, status rows and tables, and usage errors."""
from __future__ import annotations

import argparse
import dataclasses
import io
import json

import pytest

from consensus.admin.admin import build_parser, command_main, render_status, status_document
from consensus.admin.admin_output import EXIT_USAGE, UsageError, console_for, plain, \
    print_table
from consensus.admin.farm_file import FarmFile, farm_from_view, node_configs, plan_import
from consensus.admin.farm_target import resolve_connection
from consensus.admin.health import member_rows
from consensus.client import ClusterView, FarmStatus, MemberView
from consensus.runtime.config import tomllib  # tomli on Python 3.10

pytestmark = pytest.mark.timeout(30)

NOW = 1_700_000_010_000

MEMBERS = {
    1: MemberView(1, "127.0.0.1:9001", "leader", True, 130,
                  {"date": NOW - 2000, "config": {"wire": "marker", "statusInterval": 5.0},
                   "raft": {"commit": 120, "last": 130, "logSize": 3 * 1024 * 1024},
                   "router": {"uptime": 95_000}}),
    2: MemberView(2, "127.0.0.1:9002", "follower", True, 115,
                  {"date": NOW - 500, "raft": {"commit": 120, "last": 126}}),
    3: MemberView(3, "127.0.0.1:9003", "follower", True, None, None),
    4: MemberView(4, "127.0.0.1:9004", "observer", False, None, {"date": NOW - 3_600_000}),
}
STATUS = FarmStatus("farm", 1, 4, 120, 2, MEMBERS, {1: 0, 2: 5, 4: 30})
SERVERS = ClusterView(1, 4, 120, {1: "127.0.0.1:9001", 2: "127.0.0.1:9002",
                                  3: "127.0.0.1:9003"}, {4: "127.0.0.1:9004"}, {}, MEMBERS)
VIEW = plain(STATUS)


def args_for(name: str, argv: list[str]) -> argparse.Namespace:
    return build_parser(name).parse_args(argv)


def test_connection_options_flags_file_env(tmp_path):
    conf = tmp_path / "node.toml"
    conf.write_text('id = 2\nlisten = "127.0.0.1:9002"\npeers = "1=127.0.0.1:9001,'
                    '3=127.0.0.1:9003"\ncluster = "blue"\nuser = "ops"\npassword = "pw"\n'
                    'data-dir = "/tmp/x"\n')
    target = resolve_connection(args_for("status", ["--config", str(conf)]), environ={})
    assert target.endpoints == ["127.0.0.1:9002", "127.0.0.1:9001", "127.0.0.1:9003"]
    assert (target.cluster, target.username, target.password) == ("blue", "ops", "pw")
    # Flags win over the file; the environment fills what neither gives.
    target = resolve_connection(args_for("status", ["--config", str(conf), "--endpoints",
                                                  "10.0.0.1:1", "--cluster", "red"]),
                              environ={"GARLICFARM_ENDPOINTS": "10.9.9.9:9"})
    assert target.endpoints == ["10.0.0.1:1"] and target.cluster == "red"
    target = resolve_connection(args_for("status", ["--user", "u"]),
                              environ={"GARLICFARM_ENDPOINTS": "127.0.0.1:5,127.0.0.1:6",
                                       "GARLICFARM_PASSWORD": "secret"})
    assert target.endpoints == ["127.0.0.1:5", "127.0.0.1:6"] and target.password == "secret"
    creds = tmp_path / "creds"
    creds.write_text("# farm\nalice:wonder:land\nbob:b\n")
    target = resolve_connection(args_for("status", ["--endpoints", "127.0.0.1:7",
                                                  "--credentials", str(creds)]), environ={})
    assert (target.username, target.password) == ("alice", "wonder:land")


@pytest.mark.parametrize("argv, option", [
    ([], "--endpoints"),
    (["--endpoints", "localhost"], "--endpoints"),
    (["--endpoints", "127.0.0.1:99999"], "--endpoints"),
    (["--endpoints", "127.0.0.1:1", "--user", "u"], "--password"),
    (["--endpoints", "127.0.0.1:1", "--timeout", "0"], "--command-timeout"),
    (["--endpoints", "127.0.0.1:1", "--dial-timeout", "-1"], "--dial-timeout"),
])
def test_connection_errors_name_the_option(argv, option):
    with pytest.raises(UsageError) as info:
        resolve_connection(args_for("status", argv), environ={})
    assert info.value.option == option


def test_usage_errors_exit_2_with_one_line():
    err = io.StringIO()
    assert command_main("status", [], out=io.StringIO(), err=err) == EXIT_USAGE
    assert err.getvalue().startswith("garlicfarm status: --endpoints: no members")
    err = io.StringIO()
    assert command_main("remove-server", ["x", "--endpoints", "127.0.0.1:1"],
                        out=io.StringIO(), err=err) == EXIT_USAGE
    assert "ID: 'x' is not a node id" in err.getvalue()
    assert command_main("transfer-leader", ["--endpoints", "127.0.0.1:1"],
                        out=io.StringIO(), err=io.StringIO()) == EXIT_USAGE   # --to missing


def test_member_rows_lag_and_ages():
    rows = {r.id: r for r in member_rows(VIEW, NOW)}
    assert rows[1].lag == 0 and rows[2].lag == 5 and rows[3].lag is None
    assert rows[4].lag == 30 and rows[4].voter is False
    assert rows[1].match == 130 and rows[3].match is None
    assert rows[1].status_age == 2.0 and rows[3].status_age is None
    assert rows[1].uptime == 95.0 and rows[1].log_size == 3 * 1024 * 1024
    doc = status_document(VIEW, NOW)
    assert doc["leader_id"] == 1 and [r["id"] for r in doc["rows"]] == [1, 2, 3, 4]
    json.dumps(doc)


def test_status_table_plain_when_not_a_terminal():
    out = io.StringIO()
    render_status(console_for(out), VIEW, NOW)
    text = out.getvalue()
    assert text.isascii() and "\x1b[" not in text            # no colours, no boxes
    lines = text.splitlines()
    assert lines[0] == ("cluster farm  leader n1  term 4  commit 120  publisher n2")
    row2 = next(line for line in lines if "127.0.0.1:9002" in line).split()
    assert row2[:8] == ["2", "127.0.0.1:9002", "follower", "*", "ok", "-", "115",
                        "5"]                                  # publisher, health, ack
    row4 = next(line for line in lines if "127.0.0.1:9004" in line)
    assert "60.0m" in row4 and "observer" in row4 and " 30 " in row4
    assert "3.0 MiB" in text and "95.0s" in text              # log size, uptime


def test_print_table_aligns_numbers_right():
    out = io.StringIO()
    print_table(console_for(out), None, ["name", "n"], [["a", 1], ["b", 1000]], right=["n"])
    rows = [line for line in out.getvalue().splitlines() if line.strip()[:1] in "ab"]
    assert rows[0].rstrip().endswith("   1") and rows[1].rstrip().endswith("1000")


def test_plain_converts_client_results():
    from dataclasses import dataclass

    @dataclass
    class View:
        leader: int
        voters: dict

    assert plain(View(1, {2: "h:1"})) == {"leader": 1, "voters": {"2": "h:1"}}
    assert plain({1: (b"\x01", {3})}) == {"1": ["01", [3]]}


def test_farm_file_round_trip_and_validation(tmp_path):
    farm = farm_from_view("farm", SERVERS)
    assert farm.voters == {1: "127.0.0.1:9001", 2: "127.0.0.1:9002", 3: "127.0.0.1:9003"}
    assert farm.observers == {4: "127.0.0.1:9004"} and farm.wire == "marker"
    assert farm.options == {"status-interval": 5.0}
    doc = farm.to_json({"leader": 1})
    assert FarmFile.from_json(json.loads(json.dumps(doc))) == farm
    path = tmp_path / "farm.json"
    path.write_text(json.dumps(doc))
    assert FarmFile.read(str(path)) == farm

    def bad(change: dict, field: str) -> None:
        with pytest.raises(UsageError) as info:
            FarmFile.from_json({**doc, **change}, "farm.json")
        assert info.value.option == f"farm.json: {field}", info.value

    bad({"format": "v0"}, "format")
    bad({"cluster": ""}, "cluster")
    bad({"wire": "smoke"}, "wire")
    bad({"voters": {}}, "voters")
    bad({"voters": {"0": "h:1"}}, "voters")
    bad({"voters": {"1": "nohost"}}, "voters: 1")
    bad({"observers": {"1": "127.0.0.1:9999"}}, "observers")
    bad({"observers": {"9": "127.0.0.1:9001"}}, "voters")       # endpoint used twice
    bad({"options": []}, "options")
    path.write_text("{not json")
    with pytest.raises(UsageError, match="is not JSON"):
        FarmFile.read(str(path))


def test_import_plans():
    current = FarmFile("farm", {1: "h:1", 2: "h:2", 3: "h:3"}, {4: "h:4"})
    wanted = FarmFile("farm", {1: "h:1", 2: "h:2", 3: "h:3", 5: "h:5"}, {6: "h:6"})
    plan = plan_import(current, wanted, prune=False)
    assert plan.add_voters == {5: "h:5"} and plan.add_observers == {6: "h:6"}
    assert plan.kept_extra == [4] and not plan.remove_observers
    assert plan.steps() == ["add voter n5 h:5", "add observer n6 h:6"]
    plan = plan_import(current, FarmFile("farm", {1: "h:1", 2: "h:2"}), prune=True)
    assert plan.remove_voters == [3] and plan.remove_observers == [4]
    assert plan_import(current, current, prune=True).empty
    # An observer listed as a voter is promoted through AddServer.
    assert plan_import(current, FarmFile("farm", {1: "h:1", 2: "h:2", 3: "h:3", 4: "h:4"}),
                       prune=False).add_voters == {4: "h:4"}
    with pytest.raises(UsageError, match="farm 'other'"):
        plan_import(current, FarmFile("other", {1: "h:1"}), prune=False)
    with pytest.raises(UsageError, match="n2 runs at h:2, the file says h:9"):
        plan_import(current, FarmFile("farm", {1: "h:1", 2: "h:9"}), prune=False)
    with pytest.raises(UsageError, match="n3 is a voter"):
        plan_import(current, FarmFile("farm", {1: "h:1"}, {3: "h:3"}), prune=False)


def test_node_configs_are_valid_node_settings(tmp_path):
    from consensus.runtime.config import NodeConfig

    farm = FarmFile("blue", {1: "127.0.0.1:9001", 2: "127.0.0.1:9002"},
                    {3: "127.0.0.1:9003"}, "marker", {"fsync": "never", "status-interval": 2.0})
    configs = node_configs(farm, data_root=str(tmp_path), credentials="/etc/gf/creds",
                           join=[3])
    assert sorted(configs) == [1, 2, 3]
    for node_id, text in configs.items():
        settings = tomllib.loads(text)
        config = NodeConfig.from_mapping(settings)
        assert config.id == node_id and config.cluster == "blue" and config.wire == "marker"
        assert config.fsync == "never" and config.status_interval == 2.0
        assert config.data_dir == str(tmp_path / f"node-{node_id}")
        assert node_id not in config.peers
        assert config.observer == (node_id == 3) and config.join == (node_id == 3)
    one = NodeConfig.from_mapping(tomllib.loads(configs[1]))
    assert one.peers == {2: "127.0.0.1:9002"} and one.observers == {3: "127.0.0.1:9003"}
    assert one.credentials == "/etc/gf/creds"
    with pytest.raises(UsageError, match="options"):
        node_configs(FarmFile("x", {1: "h:1"}, options={"bad": [1]}), data_root="/d",
                     credentials=None)


def test_unreachable_members_and_no_leader_make_the_farm_unhealthy():
    silent = dataclasses.replace(MEMBERS[2], ack_age=7.1, reachable=False)
    view = plain(dataclasses.replace(STATUS, members={**MEMBERS, 2: silent},
                                     election_timeout=0.3))
    doc = status_document(view, NOW, probes={3: "its endpoint does not answer (refused)"})
    rows = {r["id"]: r for r in doc["rows"]}
    assert doc["healthy"] is False
    assert rows[2]["reachable"] is False and rows[2]["ack_age"] == 7.1
    assert rows[2]["problem"] == "the leader last heard from it 7.1s ago (election " \
                                 "timeout 0.3s)"
    assert rows[3]["reachable"] is False and "refused" in rows[3]["problem"]
    assert rows[1]["reachable"] is True and rows[4]["reachable"] is True
    out = io.StringIO()
    render_status(console_for(out), view, NOW)
    text = out.getvalue()
    assert "UNREACHABLE" in next(x for x in text.splitlines() if "127.0.0.1:9002" in x)
    assert "unhealthy: n2 is unreachable: the leader last heard from it 7.1s ago" in text
    leaderless = status_document(plain(dataclasses.replace(STATUS, leader_id=None)), NOW)
    assert leaderless["problems"] == ["no leader"] and leaderless["healthy"] is False
