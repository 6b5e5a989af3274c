"""`garlicfarm status --serve` in headless Chromium (Debian's, driven by Playwright): the
page shows the three members, the leader is killed, the page shows the new leader
without a reload. A screenshot is kept in the test's tmp dir."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from consensus.torture.local import LocalCluster
from tests.operators import logged_url, require_binary, require_module
from tests.support import wait_until

pytestmark = pytest.mark.slow


def _serve(farm: LocalCluster, log_path, *extra: str) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "consensus.cli", "status", "--serve", "127.0.0.1:0",
             "--endpoints", farm.endpoints, "--credentials",
             os.path.join(farm.data_dir, "credentials"), "--timeout", "2", *extra],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(90)
def test_status_page_follows_a_failover_in_chromium(tmp_path):
    chromium = require_binary("chromium", "chromium")
    playwright = require_module("playwright.sync_api", "test")
    with LocalCluster(3, status_interval=0.5) as farm:
        leader = farm.wait_for_leader()
        elected_before = time.time()
        server = _serve(farm, tmp_path / "status.log")
        try:
            url = logged_url(tmp_path / "status.log", r"status page on (http://\S+)/ ")
            with playwright.sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, headless=True)
                try:
                    page = browser.new_page(viewport={"width": 1100, "height": 640})
                    page.goto(f"{url}/farm/farm")
                    rows = page.locator("#members tbody tr")
                    page.wait_for_function("document.querySelectorAll("
                                           "'#members tbody tr').length === 3", timeout=15000)
                    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.id)")) == \
                        ["1", "2", "3"]
                    page.wait_for_function(f"document.getElementById('leader').textContent "
                                           f"=== 'n{leader}'", timeout=15000)
                    assert page.locator(f'tr[data-id="{leader}"]').get_attribute(
                        "data-role") == "leader"

                    farm.kill(leader)
                    new_leader = farm.wait_for_leader(20)
                    page.wait_for_function(f"document.getElementById('leader').textContent "
                                           f"=== 'n{new_leader}'", timeout=15000)
                    assert page.locator(f'tr[data-id="{new_leader}"]').get_attribute(
                        "data-role") == "leader"
                    assert page.locator(f'tr[data-id="{leader}"]').get_attribute(
                        "data-role") != "leader"
                    page.wait_for_function("document.querySelectorAll('#changes li')"
                                           ".length >= 2", timeout=15000)
                    # the dead member: unreachable (the leader stopped hearing from it)
                    page.wait_for_function(f"document.querySelector('tr[data-id=\"{leader}\"]')"
                                           f".dataset.reachable === 'false'", timeout=15000)
                    assert "UNREACHABLE" in page.locator(f'tr[data-id="{leader}"]').inner_text()
                    assert page.locator("#problems li").count() >= 1
                    page.screenshot(path=str(tmp_path / "status-page.png"), full_page=True)
                finally:
                    browser.close()
            assert (tmp_path / "status-page.png").stat().st_size > 0
            # leader changes are timed by the elections, not by when the page looked: the
            # first one happened before the page's server even started
            with urllib.request.urlopen(f"{url}/api/farm/farm", timeout=10) as answer:
                changes = json.load(answer)["leader_changes"]
            assert changes[-1]["leader"] == leader and changes[-1]["at"] < elected_before
            assert changes[0]["leader"] == new_leader and changes[0]["at"] > elected_before
        finally:
            _stop(server)


def test_status_page_refuses_a_public_address_without_credentials(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "consensus.cli", "status", "--serve", "0.0.0.0:0",
         "--endpoints", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--serve: 0.0.0.0:0 is not a loopback address" in result.stderr


def test_status_page_asks_for_basic_auth_off_loopback(tmp_path):
    """On a non-loopback address the page needs the farm's credentials (127.0.0.2 is
    loopback, so the rule is checked on the wildcard address, reached via 127.0.0.1)."""
    with LocalCluster(1, status_interval=0.5) as farm:
        farm.wait_for_leader()
        log_path = tmp_path / "status.log"
        with open(log_path, "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "consensus.cli", "status", "--serve", "0.0.0.0:0",
                 "--endpoints", farm.endpoints, "--credentials",
                 os.path.join(farm.data_dir, "credentials")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            url = logged_url(log_path, r"status page on (http://\S+)/ ")
            local = url.replace("0.0.0.0", "127.0.0.1")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{local}/api/farm/farm", timeout=5)
            assert refused.value.code == 401
            request = urllib.request.Request(f"{local}/api/farm/farm")
            token = base64.b64encode(f"farm:{farm.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
            with urllib.request.urlopen(request, timeout=5) as answer:
                assert answer.status == 200
        finally:
            _stop(server)


def test_one_server_serves_several_farms(tmp_path):
    with LocalCluster(1, cluster="alpha", password="shared-pw", status_interval=0.5) as a, \
            LocalCluster(1, cluster="beta", password="shared-pw", status_interval=0.5) as b:
        a.wait_for_leader()
        b.wait_for_leader()
        log_path = tmp_path / "status.log"
        with open(log_path, "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "consensus.cli", "status", "--serve", "127.0.0.1:0",
                 "--credentials", os.path.join(a.data_dir, "credentials"),
                 "--farm", f"alpha={a.endpoints}", "--farm", f"beta={b.endpoints}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            url = logged_url(log_path, r"status page on (http://\S+)/ ")
            with urllib.request.urlopen(f"{url}/", timeout=5) as answer:
                index = answer.read().decode()
            assert 'href="/farm/alpha"' in index and 'href="/farm/beta"' in index

            def both() -> dict | None:
                docs = {}
                for name in ("alpha", "beta"):
                    with urllib.request.urlopen(f"{url}/api/farm/{name}", timeout=5) as answer:
                        docs[name] = json.load(answer)
                return docs if all(d.get("leader") == 1 for d in docs.values()) else None
            docs = wait_until(both, 15, 0.1, "both farms' status")
            assert {d["cluster"] for d in docs.values()} == {"alpha", "beta"}
            assert [m["role"] for m in docs["beta"]["members"]] == ["leader"]
        finally:
            _stop(server)


def test_farm_without_serve_is_refused():
    result = subprocess.run(
        [sys.executable, "-m", "consensus.cli", "status", "--farm", "a=127.0.0.1:1"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--farm: names the farms of the status page: give --serve" in result.stderr
