"""`garlicfarm status` tells the truth about health (issue 30): against real node
processes on loopback, a killed member shows as unreachable (with the age of the
leader's last acknowledgement from it) and the command exits 3 within a bounded time;
a closed port fails within the dial timeout; a web server that is not a farm is named
as such at once; `--username` is accepted like the Spark option."""
from __future__ import annotations

import http.server
import io
import json
import threading
import time

import pytest

from consensus.admin.admin import EXIT_FARM, EXIT_OK, EXIT_UNHEALTHY, command_main
from consensus.torture import LocalCluster
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def run(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    code = command_main("status", argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue(), time.monotonic() - started


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(3, cluster="health", status_interval=0.5) as cluster:
        cluster.wait_for_leader(timeout=30)
        yield cluster


def base(farm) -> list[str]:
    return ["--endpoints", farm.endpoints, "--cluster", "health", "--username",
            farm.username, f"--password={farm.password}", "--dial-timeout", "1"]


def test_a_healthy_farm_exits_0_with_recent_acknowledgements(farm):
    def healthy():
        code, out, _, _ = run(base(farm) + ["--json"])
        return json.loads(out) if code == EXIT_OK else None
    doc = wait_until(healthy, timeout=20, interval=0.2, message="a healthy status")
    assert doc["healthy"] is True and doc["problems"] == []
    assert doc["election_timeout"] == pytest.approx(0.3)
    assert doc["leader_since_ms"] <= time.time() * 1000
    for row in doc["rows"]:
        assert row["reachable"] is True and row["problem"] is None
        if row["id"] != doc["leader_id"]:      # the leader heard from it lately
            assert row["ack_age"] is not None and row["ack_age"] < doc["election_timeout"]


def test_a_killed_member_is_unreachable_and_status_exits_3(farm):
    with farm.client(timeout=10) as client:
        leader = client.get_servers().leader_id
    victim = next(i for i in (1, 2, 3) if i != leader)
    farm.kill(victim)

    def unreachable():
        code, out, err, took = run(base(farm) + ["--json"])
        if code != EXIT_UNHEALTHY:
            return None
        rows = {r["id"]: r for r in json.loads(out)["rows"]}
        return (code, json.loads(out), rows, took) if rows[victim]["reachable"] is False \
            and rows[victim]["ack_age"] is not None and rows[victim]["ack_age"] > 0.3 \
            else None
    code, doc, rows, took = wait_until(unreachable, timeout=15, interval=0.2,
                                       message=f"n{victim} unreachable")
    assert took < 6                     # a dial timeout of 1 s bounds the probe
    assert doc["healthy"] is False
    assert "the leader last heard from it" in rows[victim]["problem"]
    assert "its endpoint does not answer" in rows[victim]["problem"]
    assert [r["reachable"] for i, r in rows.items() if i != victim] == [True, True]

    code, out, err, _ = run(base(farm))
    assert code == EXIT_UNHEALTHY, err
    line = next(x for x in out.splitlines() if x.split()[:1] == [str(victim)])
    assert "UNREACHABLE" in line.split()
    assert f"unhealthy: n{victim} is unreachable" in out


def test_a_closed_port_fails_within_the_dial_timeout():
    nobody = f"127.0.0.1:{free_port()}"
    code, _, err, took = run(["--endpoints", nobody, "--user", "u", "--password", "p",
                              "--dial-timeout", "0.5", "--command-timeout", "30"])
    assert code == EXIT_FARM and "dial timeout" in err and nobody in err
    assert took < 3                     # not the 30 s command timeout


def test_a_web_server_that_is_not_a_farm_is_named_at_once():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"127.0.0.1:{server.server_address[1]}"
        code, _, err, took = run(["--endpoints", endpoint, "--user", "u", "--password",
                                  "p", "--command-timeout", "20"])
    finally:
        server.shutdown()
        server.server_close()
    assert code == EXIT_FARM and took < 3, (took, err)
    assert "not as a Garlic Farm node" in err and "Server: SimpleHTTP" in err
    assert "cluster option" not in err


def test_bad_timeouts_name_their_option():
    for option in ("--dial-timeout", "--command-timeout", "--timeout"):
        code, _, err, _ = run(["--endpoints", "127.0.0.1:1", "--user", "u", "--password",
                               "p", option, "0"])
        assert code == 2 and ("--dial-timeout" if option == "--dial-timeout"
                              else "--command-timeout") in err, err
