"""The admin CLI tells the truth (issue 19), run as an operator runs it: the `garlicfarm`
command in a subprocess against a farm of real node processes on loopback, configured
from TOML files and a credentials file as docs/operations.md describes.

- credentials on the command line win over the ones of ``--config NODE.toml``;
- ``add-server`` of an id that is already a member at another endpoint is refused;
- ``remove-server --force`` of a node that is not a member is refused;
- ``add-server`` of a node that does not answer says so (and the leader stops);
- ``remove-server`` of a dead voter works without ``--force`` (as the docs now say);
- ``ping`` at an observer names the leader it follows;
- ``config import --credentials`` writes absolute paths into the node configs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

from consensus.runtime.config import tomllib  # tomli on Python 3.10
from consensus.torture import LocalCluster
from tests.support import free_port, wait_until

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def garlicfarm(*args: str, env: dict | None = None, cwd: str | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    """The `garlicfarm` command, as a user runs it (no GARLICFARM_* from our env)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GARLICFARM_")}
    return subprocess.run([sys.executable, "-m", "consensus.cli", *args], cwd=cwd,
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(3, cluster="truth", status_interval=0.5) as cluster:
        cluster.wait_for_leader(timeout=30)
        yield cluster


@pytest.fixture(scope="module")
def node_toml(farm, tmp_path_factory) -> str:
    """node-1's config file, as an operator writes it (credentials in a file)."""
    path = tmp_path_factory.mktemp("conf") / "node-1.toml"
    peers = ",".join(f"{i}={farm.endpoint_of(i)}" for i in (2, 3))
    path.write_text(f'id = 1\nlisten = "{farm.endpoint_of(1)}"\npeers = "{peers}"\n'
                    f'data-dir = "{farm.node_dir(1)}"\ncluster = "truth"\n'
                    f'credentials = "{os.path.join(farm.data_dir, "credentials")}"\n')
    return str(path)


def servers(farm):
    with farm.client(timeout=10) as client:
        return client.get_servers()


# --- defect 4: credentials on the command line win over --config ---------------------------

def test_command_line_credentials_win_over_the_config_file(farm, node_toml, tmp_path):
    ok = garlicfarm("status", "--config", node_toml, "--json")
    assert ok.returncode == 0, ok.stderr                 # the file's credentials work

    wrong = garlicfarm("status", "--config", node_toml, "--user", "mallory", "--password", "x",
                       "--timeout", "3")
    assert wrong.returncode == 1, wrong.stdout
    assert "AuthenticationError" in wrong.stderr

    env_wrong = garlicfarm("status", "--config", node_toml, "--user", "mallory",
                           "--timeout", "3", env={"GARLICFARM_PASSWORD": "wrong"})
    assert env_wrong.returncode == 1, env_wrong.stdout
    assert "AuthenticationError" in env_wrong.stderr

    own_password = garlicfarm("status", "--config", node_toml, "--password=wrong",
                              "--timeout", "3")
    assert own_password.returncode == 1 and "AuthenticationError" in own_password.stderr

    good = tmp_path / "mine"
    good.write_text(f"{farm.username}:{farm.password}\n")
    bad = tmp_path / "bad-creds"
    bad.write_text("mallory:nope\n")
    assert garlicfarm("status", "--config", node_toml, "--credentials",
                      str(good)).returncode == 0
    refused = garlicfarm("status", "--config", node_toml, "--credentials", str(bad),
                         "--timeout", "3")
    assert refused.returncode == 1 and "AuthenticationError" in refused.stderr

    both = garlicfarm("status", "--config", node_toml, "--credentials", str(good),
                      "--user", "x", "--password", "y")
    assert both.returncode == 2
    assert "--credentials" in both.stderr and "--user" in both.stderr


# --- defect 2: add-server of an existing id at another endpoint -----------------------------

def test_add_server_refuses_an_existing_id_at_another_endpoint(farm, node_toml):
    elsewhere = f"127.0.0.1:{free_port()}"
    result = garlicfarm("add-server", "2", elsewhere, "--config", node_toml, "--timeout", "10")
    assert result.returncode == 2, result.stdout
    assert "added" not in result.stdout
    assert f"n2 is already a voter at {farm.endpoint_of(2)}" in result.stderr
    assert "remove-server 2" in result.stderr
    result = garlicfarm("add-server", "2", elsewhere, "--observer", "--config", node_toml)
    assert result.returncode == 2 and f"at {farm.endpoint_of(2)}" in result.stderr
    assert servers(farm).voters[2] == farm.endpoint_of(2)

    # The same refusal from the leader itself (the Python API, or a race with the CLI)
    from consensus.client import FarmError
    with farm.client(timeout=10) as client:
        with pytest.raises(FarmError, match=f"node 2 is already a voter at "
                                            f"{farm.endpoint_of(2)}"):
            client.add_server(2, elsewhere)
        client.add_server(2, farm.endpoint_of(2))       # the same endpoint: nothing to do


# --- defect 3: remove-server --force of a non-member ----------------------------------------

def test_remove_server_force_refuses_a_non_member(farm, node_toml):
    before = servers(farm)
    result = garlicfarm("remove-server", "99", "--force", "--config", node_toml)
    assert result.returncode == 2, result.stdout
    assert "removed" not in result.stdout
    assert "ID: n99 is not a member of the farm (voters [1, 2, 3], observers [])" \
        in result.stderr
    assert servers(farm).voters == before.voters


# --- messages that misled ---------------------------------------------------------------------

def test_add_server_of_a_node_that_does_not_answer_says_so(farm, node_toml):
    nobody = f"127.0.0.1:{free_port()}"
    result = garlicfarm("add-server", "6", nobody, "--config", node_toml, "--timeout", "6",
                        timeout=30)
    assert result.returncode == 1, result.stdout
    assert "added" not in result.stdout
    assert f"node 6 did not answer at {nobody}" in result.stderr, result.stderr
    assert "unreachable" in result.stderr and "join = true" in result.stderr
    assert "no leader answered" not in result.stderr
    leader = servers(farm).leader_id
    wait_until(lambda: "stopped inviting node 6" in open(farm.log_path(leader)).read(), 10,
               message="the leader to give up on node 6")
    assert 6 not in servers(farm).members


def test_remove_server_of_a_dead_voter_needs_no_force(farm, node_toml):
    voter = farm.spawn()
    added = garlicfarm("add-server", str(voter), farm.endpoint_of(voter), "--config",
                       node_toml)
    assert added.returncode == 0, added.stderr
    farm.kill(voter)
    result = garlicfarm("remove-server", str(voter), "--config", node_toml, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"removed": voter, "as": "voter", "forced": False}
    assert voter not in servers(farm).members
    # A client meeting the farm from now on is not told the removed node's endpoint
    # (it used to be, from the configuration's addresses, and tried it for ever).
    from consensus.client.links import Link
    from consensus.raft import Configuration
    with farm.client(timeout=5) as client:
        link = Link(farm.endpoint_of(1), client.security, 5.0, b"w" * 16)
        try:
            config = Configuration.decode(link.welcome.configuration)
        finally:
            link.close()
    assert set(config.addresses) == {1, 2, 3}, config.addresses
    # LocalCluster.retire: the node's port refuses connections, as a machine taken away
    # would (a stopped node's port is otherwise held open for a restart)
    endpoint = farm.endpoint_of(voter)
    farm.retire(voter)
    import socket
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(endpoint.rsplit(":", 1)[1])), timeout=5)
    with pytest.raises(RuntimeError, match="retired"):
        farm.restart(voter)
    assert farm.endpoint_of(voter) == endpoint and farm.spawn() > voter


def test_ping_at_an_observer_names_the_leader_it_follows(farm, node_toml):
    observer = farm.spawn(observer=True)
    added = garlicfarm("add-server", str(observer), farm.endpoint_of(observer), "--observer",
                       "--config", node_toml)
    assert added.returncode == 0, added.stderr
    try:
        with farm.client(timeout=5) as client:
            def agreed():
                leader = client.ping(farm.endpoint_of(farm.wait_for_leader(20)))
                seen = client.ping(farm.endpoint_of(observer))
                return seen if seen["role"] == "observer" and \
                    (seen["leader"], seen["term"]) == (leader["leader"], leader["term"]) \
                    else None
            seen = wait_until(agreed, 20, interval=0.2,
                              message="the observer to name the leader and its term")
            assert seen["leader"] in (1, 2, 3) and seen["term"] >= 1
    finally:
        removed = garlicfarm("remove-server", str(observer), "--config", node_toml)
        assert removed.returncode == 0, removed.stderr


def test_config_import_writes_absolute_paths(tmp_path):
    ports = [free_port() for _ in range(2)]
    doc = {"format": "garlicfarm.farm/1", "cluster": "rel", "wire": "garlicfarm",
           "voters": {"1": f"127.0.0.1:{ports[0]}"}, "observers": {"2": f"127.0.0.1:{ports[1]}"}}
    (tmp_path / "farm.json").write_text(json.dumps(doc))
    (tmp_path / "credentials").write_text("rel:secret\n")
    result = garlicfarm("config", "import", "farm.json", "--node-configs", "configs",
                        "--credentials", "credentials", "--timeout", "1", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    for node_id in (1, 2):
        path = tmp_path / "configs" / f"node-{node_id}.toml"
        settings = tomllib.loads(path.read_text())
        assert settings["credentials"] == str(tmp_path / "credentials")
        assert settings["data-dir"] == str(tmp_path / "configs" / "data" / f"node-{node_id}")
        assert f"garlicfarm node --config {path}" in result.stdout
    # and a node started from another directory finds its files
    other = tmp_path / "elsewhere"
    other.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "consensus.cli", "node", "--config",
                             str(tmp_path / "configs" / "node-1.toml")], cwd=str(other),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        from consensus.client import FarmClient
        with FarmClient(doc["voters"]["1"], cluster="rel", username="rel",
                        password="secret", timeout=2) as client:
            wait_until(lambda: _answers(client), 20, interval=0.1,
                       message="the node started from another directory to answer")
    finally:
        proc.terminate()
        proc.wait(15)
    assert not (other / "configs").exists()


def _answers(client) -> bool:
    from consensus.client import FarmError
    try:
        return client.ping()["node"] == 1
    except FarmError:
        return False


# --- defect 1: an observer started as documented ----------------------------------------------

def _observer_toml(farm, tmp_path, node_id: int, port: int, peers: str | None) -> str:
    path = tmp_path / f"node-{node_id}.toml"
    text = (f'id = {node_id}\nlisten = "127.0.0.1:{port}"\ndata-dir = "{tmp_path / "data"}"\n'
            f'cluster = "truth"\ncredentials = "{os.path.join(farm.data_dir, "credentials")}"\n'
            f'join = true\nobserver = true\nstatus-interval = 0.5\n')
    if peers is not None:
        text += f'peers = "{peers}"\n'
    path.write_text(text)
    return str(path)


@contextmanager
def observer_10(farm, tmp_path) -> Iterator[tuple[subprocess.Popen, str]]:
    """Node 10 started as documented (an observer joining with the three voters as
    peers), as a process logging to node-10.log: (the process, its endpoint). A failure
    inside carries the tail of its log; the process is terminated at the end."""
    port = free_port()
    config = _observer_toml(farm, tmp_path, 10, port,
                            ",".join(f"{i}={farm.endpoint_of(i)}" for i in (1, 2, 3)))
    log = open(tmp_path / "node-10.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "consensus.cli", "node", "--config", config],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc, f"127.0.0.1:{port}"
    except Exception as exc:    # what the observer said makes the failure readable
        log.flush()
        tail = (tmp_path / "node-10.log").read_bytes()[-4000:].decode(errors="replace")
        raise AssertionError(f"{exc}\nnode 10 (exit {proc.poll()}) logged:\n{tail}") from exc
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def test_an_observer_without_peers_refuses_to_start(farm, tmp_path):
    config = _observer_toml(farm, tmp_path, 10, free_port(), peers=None)
    proc = subprocess.Popen([sys.executable, "-m", "consensus.cli", "node", "--config", config],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("an observer without peers started (and would stay empty for ever)")
    assert proc.returncode == 2
    assert "--peers: an observer pulls the log from the farm's members" in err, err


def test_an_observer_started_as_documented_catches_up(farm, node_toml, tmp_path):
    with observer_10(farm, tmp_path) as (_, endpoint):
        wait_until(lambda: _answers_at(farm, endpoint), 20, interval=0.1,
                   message="node 10 to listen")
        added = garlicfarm("add-server", "10", endpoint, "--observer", "--config", node_toml)
        assert added.returncode == 0, added.stderr
        with farm.client(timeout=10) as client:
            index, _ = client.append([b"for the observer"])
            wait_until(lambda: client.log_bounds(endpoint)[1] >= index, 20, interval=0.1,
                       message="the observer to apply the farm's log")
        removed = garlicfarm("remove-server", "10", "--config", node_toml)
        assert removed.returncode == 0, removed.stderr


def test_a_joining_observer_is_not_removed_before_it_was_added(farm, tmp_path):
    """An observer started with `join = true` pulls the farm's log before it is added. A
    committed configuration in that log that does not name it is not its removal: it
    took it for one (its bootstrap named it) and stopped itself two election timeouts
    later, whenever the add-server came later than that (1 run in 5 under load)."""
    with farm.client(timeout=10) as client:     # a committed configuration without node 10
        client.update_observers(add={11: f"127.0.0.1:{free_port()}"})
        client.update_observers(remove=[11])
        configured = client.log_bounds()[1]
    with observer_10(farm, tmp_path) as (proc, endpoint), farm.client(timeout=10) as client:
        wait_until(lambda: _answers_at(farm, endpoint)
                   and client.log_bounds(endpoint)[1] >= configured, 20, interval=0.1,
                   message="node 10 to pull the configuration")
        # it left 2 election timeouts (<= 0.6 s of ticks) after pulling; give it 5 s
        deadline = time.monotonic() + 5
        wait_until(lambda: proc.poll() is not None or time.monotonic() > deadline, 10,
                   interval=0.1, message="five seconds to pass")
        assert proc.poll() is None, "node 10 stopped before it was added"
        assert client.ping(endpoint)["role"] == "observer"
    assert "removed from the cluster" not in (tmp_path / "node-10.log").read_text()


def _answers_at(farm, endpoint: str) -> bool:
    from consensus.client import FarmError
    try:
        with farm.client(timeout=1, endpoints=endpoint) as client:
            return bool(client.ping(endpoint))
    except FarmError:
        return False


def test_the_client_says_what_the_node_answered(farm):
    """A wrong cluster name: every member answers 404; the error says so (it was
    "Unavailable ... check that a majority of the voters runs")."""
    from consensus.client import FarmClient, ProtocolMismatch
    with FarmClient(farm.endpoints, cluster="wrong", username=farm.username,
                    password=farm.password, timeout=2) as client:
        with pytest.raises(ProtocolMismatch) as write:
            client.append([b"x"])
        with pytest.raises(ProtocolMismatch) as call:
            client.ping()
    for info in (write, call):
        message = str(info.value)
        assert "/GarlicFarm/wrong/1/websocket (404 Not Found)" in message, message
        assert "check the cluster option ('wrong')" in message
        assert "majority" not in message
