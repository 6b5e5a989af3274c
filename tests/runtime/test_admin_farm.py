"""The admin commands against a real farm of node processes on loopback: status (table
and JSON), membership changes, leader transfer, farm file export and import (extend,
prune, bootstrap a new farm from written node configs), and the errors users see."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys

import pytest

from consensus.admin.admin import EXIT_FARM, EXIT_OK, EXIT_USAGE, command_main
from consensus.torture import LocalCluster
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def run(name: str, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = command_main(name, argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(3, cluster="adm", status_interval=0.5) as cluster:
        cluster.wait_for_leader(timeout=30)
        yield cluster


@pytest.fixture
def base(farm) -> list[str]:
    return ["--endpoints", farm.endpoints, "--cluster", "adm", "--user", farm.username,
            f"--password={farm.password}", "--timeout", "20"]


def servers(farm):
    with farm.client(timeout=10) as client:
        return client.get_servers()


def test_status_table_and_json(farm, base):
    # Every member publishes a status entry: wait until all three are in the view.
    # (Each check reads one answer only: under load the leader may change between calls.)
    def statuses():
        code, out, _ = run("status", base + ["--json"])
        doc = json.loads(out) if code == EXIT_OK else {}
        rows = doc.get("rows", [])
        return doc if len(rows) == 3 and all(r["status_age"] is not None for r in rows) \
            else None
    doc = wait_until(statuses, timeout=20, interval=0.2, message="three statuses")
    assert doc["cluster"] == "adm" and [r["id"] for r in doc["rows"]] == [1, 2, 3]
    assert doc["publisher"] in (1, 2, 3) and doc["leader_id"] in (1, 2, 3)
    roles = {r["id"]: r["role"] for r in doc["rows"]}
    assert roles[doc["leader_id"]] == "leader"
    assert sorted(roles.values()) == ["follower", "follower", "leader"]
    for row in doc["rows"]:
        assert row["endpoint"] == farm.endpoint_of(row["id"])
        assert row["commit"] > 0 and row["uptime"] > 0 and row["log_size"] > 0
        assert row["lag"] is not None and row["lag"] >= 0

    code, out, err = run("status", base)
    assert code == EXIT_OK and not err
    lines = out.splitlines()
    head = lines[0].split()
    assert head[:3] == ["cluster", "adm", "leader"] and head[4] == "term"
    assert head[8] == "publisher" and head[9][1:] in ("1", "2", "3")
    assert lines[1].split()[:3] == ["id", "endpoint", "role"] and set(lines[2]) == {"-"}
    rows = [line.split() for line in lines[3:6]]
    assert [r[1] for r in rows] == [farm.endpoint_of(i) for i in (1, 2, 3)]
    leader_rows = [r[0] for r in rows if r[2] == "leader"]
    assert leader_rows == [head[3][1:]]                    # the header names the leader
    assert out.isascii() and "\x1b[" not in out


def test_add_and_remove_voter_and_observer(farm, base):
    voter = farm.spawn()
    code, out, err = run("add-server", base + [str(voter), farm.endpoint_of(voter)])
    assert code == EXIT_OK, err
    assert out == f"n{voter} ({farm.endpoint_of(voter)}) added as a voter\n"
    assert voter in servers(farm).voters
    observer = farm.spawn(observer=True)
    code, _, err = run("add-server", base + [str(observer), farm.endpoint_of(observer),
                                             "--observer"])
    assert code == EXIT_OK, err
    assert servers(farm).observers == {observer: farm.endpoint_of(observer)}

    code, out, err = run("remove-server", base + [str(observer), "--json"])
    assert code == EXIT_OK, err
    assert json.loads(out) == {"removed": observer, "as": "observer", "forced": False}
    code, _, err = run("remove-server", base + [str(voter)])
    assert code == EXIT_OK, err
    view = servers(farm)
    assert sorted(view.voters) == [1, 2, 3] and view.observers == {}

    code, _, err = run("remove-server", base + ["9"])
    assert code == EXIT_USAGE
    assert "ID: n9 is not a member of the farm (voters [1, 2, 3], observers []): nothing" in err


def test_config_export_import_extend_and_prune(farm, base, tmp_path):
    code, out, err = run("config", ["export"] + base)
    assert code == EXIT_OK, err
    doc = json.loads(out)
    assert doc["format"] == "garlicfarm.farm/1" and doc["cluster"] == "adm"
    assert doc["voters"] == {str(i): farm.endpoint_of(i) for i in (1, 2, 3)}
    assert doc["options"] == {"status-interval": 0.5} and doc["wire"] == "garlicfarm"

    new = farm.spawn()
    doc["voters"][str(new)] = farm.endpoint_of(new)
    path = tmp_path / "farm.json"
    path.write_text(json.dumps(doc))
    code, out, err = run("config", ["import", str(path), "--dry-run"] + base)
    assert code == EXIT_OK, err
    assert out == f"plan (dry run):\n  add voter n{new} {farm.endpoint_of(new)}\n"
    assert new not in servers(farm).voters                    # a dry run changes nothing
    code, out, err = run("config", ["import", str(path)] + base)
    assert code == EXIT_OK, err
    assert out.startswith("applied:\n") and new in servers(farm).voters
    code, out, _ = run("config", ["import", str(path)] + base)
    assert out == "  nothing to change\n"

    del doc["voters"][str(new)]
    path.write_text(json.dumps(doc))
    code, out, _ = run("config", ["import", str(path), "--json"] + base)
    assert json.loads(out)["kept_extra"] == [new] and new in servers(farm).voters
    code, out, err = run("config", ["import", str(path), "--prune"] + base)
    assert code == EXIT_OK, err
    assert f"remove voter n{new}" in out and sorted(servers(farm).voters) == [1, 2, 3]

    doc["cluster"] = "other"
    path.write_text(json.dumps(doc))
    code, _, err = run("config", ["import", str(path)] + base)
    assert code == EXIT_USAGE and "the file is for farm 'other'" in err


def test_transfer_leader(farm, base):
    leader = servers(farm).leader_id
    target = next(i for i in (1, 2, 3) if i != leader)
    code, out, err = run("transfer-leader", base + ["--to", str(target)])
    assert code == EXIT_OK, err
    assert out == f"leadership handed to n{target}\n"
    assert servers(farm).leader_id == target


def test_farm_errors_exit_1_naming_the_cause(farm, base):
    wrong = [a if a != f"--password={farm.password}" else "--password=wrong" for a in base]
    code, _, err = run("status", wrong)
    assert code == EXIT_FARM and "AuthenticationError" in err
    nobody = f"127.0.0.1:{free_port()}"
    code, _, err = run("status", ["--endpoints", nobody, "--user", "u", "--password", "p",
                                  "--timeout", "1"])
    assert code == EXIT_FARM and "Unavailable" in err and nobody in err


def test_import_bootstraps_a_new_farm(tmp_path):
    ports = [free_port() for _ in range(3)]
    doc = {"format": "garlicfarm.farm/1", "cluster": "boot", "wire": "garlicfarm",
           "voters": {str(i + 1): f"127.0.0.1:{p}" for i, p in enumerate(ports)},
           "options": {"status-interval": 0.5, "fsync": "never"}}
    farm_file = tmp_path / "farm.json"
    farm_file.write_text(json.dumps(doc))
    creds = tmp_path / "credentials"
    creds.write_text("boot:s3cret\n")
    configs = tmp_path / "configs"
    code, out, err = run("config", ["import", str(farm_file), "--node-configs", str(configs),
                                    "--credentials", str(creds), "--timeout", "1"])
    assert code == EXIT_OK, err
    assert "no member of farm 'boot' answered" in out
    paths = [configs / f"node-{i}.toml" for i in (1, 2, 3)]
    assert all(f"garlicfarm node --config {p}" in out for p in paths)
    logs = [open(tmp_path / f"node-{i}.log", "wb") for i in (1, 2, 3)]
    procs = [subprocess.Popen([sys.executable, "-m", "consensus.cli", "node", "--config",
                               str(p)], stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL) for p, log in zip(paths, logs)]
    try:
        args = ["--config", str(paths[0]), "--json", "--timeout", "2"]

        def running():
            """A leader, and a status entry from every member (all three run)."""
            code, out, _ = run("status", args)
            doc = json.loads(out) if code == EXIT_OK else {}
            members = doc.get("members", {}).values()
            return doc if doc.get("leader_id") and len(members) == 3 and \
                all(m["status"] for m in members) else None
        doc = wait_until(running, timeout=30, interval=0.2, message="the new farm running")
        assert doc["cluster"] == "boot" and sorted(int(k) for k in doc["members"]) == [1, 2, 3]
        assert all(os.path.isdir(tmp_path / "configs" / "data" / f"node-{i}")
                   for i in (1, 2, 3))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
