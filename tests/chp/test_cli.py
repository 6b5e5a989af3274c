"""`garlicfarm chp server|get|set|delete|watch|items` as a user runs them."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.chp.support import chp_command, free_port_span
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def chp(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(chp_command(*args), capture_output=True, text=True, timeout=timeout)


def test_set_get_delete_items_and_ttl(servers):
    server = servers("s")
    at = ("--server", server.address)
    done = chp("set", "/c/a", "hello world", *at)
    assert done.returncode == 0 and done.stdout == "sequence 1\n", done.stderr
    got = chp("get", "/c/a", *at)
    assert got.returncode == 0 and got.stdout == "hello world\n"
    # The ttl leaves the items call below (a fresh process) time to start on a loaded machine.
    assert chp("set", "/c/b", "x=1", "--ttl", "4", *at).stdout == "sequence 2\n"
    items = chp("items", "--subtree", "/c/", "--json", *at)
    rows = [json.loads(line) for line in items.stdout.splitlines()]
    assert [(r["key"], r["value"], r["sequence"]) for r in rows] == [
        ("/c/a", "hello world", 1), ("/c/b", "x=1", 2)]
    assert set(rows[1]["properties"]) == {"ttl"}
    wait_until(lambda: chp("get", "/c/b", *at).returncode == 1, 15, interval=0.2,
               message="the ttl to delete /c/b")
    assert chp("delete", "/c/a", *at).stdout == "sequence 4\n"   # 3 was the expiry
    missing = chp("get", "/c/a", *at)
    assert missing.returncode == 1 and "'/c/a' not found" in missing.stderr


def test_watch_prints_the_snapshot_then_updates(servers):
    server = servers("s")
    at = ("--server", server.address)
    chp("set", "/w/0", "zero", *at)
    watcher = subprocess.Popen(chp_command("watch", "--subtree", "/w/", "--snapshot",
                                           "--count", "3", *at),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = watcher.stdout.readline()   # the snapshot: it is synced and watching
        assert first == "1\t/w/0\tzero\n"
        chp("set", "/x/ignored", "no", *at)
        chp("set", "/w/1", "one", *at)
        chp("delete", "/w/0", *at)
        out, err = watcher.communicate(timeout=20)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    assert out == "3\t/w/1\tone\n4\t/w/0\t(deleted)\n"


def test_bad_arguments_are_named(servers, tmp_path):
    bad = chp("get", "/k", "--server", "nowhere")
    assert bad.returncode == 2 and "--server: 'nowhere' is not HOST:PORT" in bad.stderr
    port = free_port_span()
    quiet = chp("get", "/k", "--server", f"127.0.0.1:{port}", "--server-timeout", "0.3",
                "--timeout", "0.8")
    assert quiet.returncode == 1 and f"no snapshot from 127.0.0.1:{port}" in quiet.stderr
    server = servers("s")
    taken = chp("server", "--port", str(server.port), timeout=30)
    assert taken.returncode == 2 and "choose another --port" in taken.stderr
    lonely = chp("server", "--port", str(port), "--bstar-port", "5003")
    assert lonely.returncode == 2 and "needs --primary PEER or --backup PEER" in lonely.stderr
    data = tmp_path / "file"
    data.write_text("not a directory")
    unusable = chp("server", "--port", str(port), "--data-dir", str(data))
    assert unusable.returncode == 1 and f"--data-dir {data}" in unusable.stderr
