"""A real node's ``--metrics`` under hostile HTTP clients (issue 26, item 8): 1,000 idle
connections cost it neither threads nor file descriptors and a scrape still answers;
clients that hang up mid-request leave no traceback in its log; with
``--metrics-tls-cert`` Prometheus-style scrapes go over HTTPS and plain HTTP is refused;
the status page (``--serve-tls-cert``) likewise."""
from __future__ import annotations

import json
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from consensus.common.errors import ConfigError
from consensus.runtime.config import NodeConfig
from consensus.torture.local import LocalCluster
from tests.operators import logged_url, scrape
from tests.runtime.test_tls_and_proxy import certificates  # noqa: F401 - a fixture
from tests.support import wait_until

pytestmark = pytest.mark.timeout(90)

METRICS_LINE = r"metrics on (https?://\S+)/metrics"
IDLE = 1000


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads line for {pid}")


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0): a client that hangs up abruptly."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_thousand_idle_connections_hold_no_threads():
    with LocalCluster(1, extra_args=["--metrics", "127.0.0.1:0"]) as farm:
        url = logged_url(farm.log_path(1), METRICS_LINE) + "/metrics"
        pid = farm.pid(1)
        host, port = url.split("//")[1].split("/")[0].split(":")
        idle = []
        try:
            deadline = time.monotonic() + 15
            for _ in range(IDLE):
                idle.append(socket.create_connection((host, int(port)), timeout=5))
                assert time.monotonic() < deadline, \
                    f"{len(idle)} connections in 15 s: the listen backlog overflows"
            # a scrape on a later connection answers: the listen queue is first in,
            # first out, so the node has accepted every idle connection made before it
            samples = scrape(url)
            threads, fds = _threads(pid), len(os.listdir(f"/proc/{pid}/fd"))
            assert threads < 100, f"{threads} threads for {IDLE} idle HTTP connections"
            assert fds < 300, f"{fds} file descriptors for {IDLE} idle HTTP connections"
            assert samples["garlicfarm_server_uptime_seconds"] > 0
            assert samples["garlicfarm_http_accepted_connections_total"] >= IDLE + 1
            assert samples["garlicfarm_http_open_connections"] <= 64
        finally:
            for sock in idle:
                sock.close()


def test_clients_hanging_up_mid_request_leave_no_traceback():
    with LocalCluster(1, extra_args=["--metrics", "127.0.0.1:0"]) as farm:
        url = logged_url(farm.log_path(1), METRICS_LINE) + "/metrics"
        host, port = url.split("//")[1].split("/")[0].split(":")
        key = 'garlicfarm_http_dropped_connections_total{reason="hung_up"}'
        for i in range(100):
            sock = socket.create_connection((host, int(port)), timeout=5)
            if i % 2:       # half a request head, then gone
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            else:           # a whole request, gone before the answer
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            _reset(sock)
        # at least the 50 half requests were seen and counted as hang-ups
        log_path = Path(farm.log_path(1))
        wait_until(lambda: scrape(url).get(key, 0) >= 50 or b"Traceback" in
                   log_path.read_bytes(), 10, 0.05, "the hang-ups counted (or traced)")
        assert b"Traceback" not in log_path.read_bytes()
        counted = scrape(url)[key]
        farm.stop(1)        # the endpoint says the rest of its news as it closes
        log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and "BrokenPipe" not in log \
        and "ConnectionReset" not in log
    summaries = [line for line in log.splitlines() if "garlicfarm.http" in line
                 and "in the last" in line]
    assert 1 <= len(summaries) <= 2, summaries     # the first at once, the rest at close
    reported = sum(int(n.replace(",", "")) for line in summaries
                   for n in re.findall(r"([\d,]+) clients hung up mid-request", line))
    assert reported >= counted


def test_metrics_over_tls_with_the_ca_and_plain_http_refused(certificates):  # noqa: F811
    args = ["--metrics", "127.0.0.1:0", "--metrics-tls-cert", certificates["node.pem"],
            "--metrics-tls-key", certificates["node.key"]]
    with LocalCluster(1, extra_args=args) as farm:
        url = logged_url(farm.log_path(1), METRICS_LINE) + "/metrics"
        assert url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=certificates["ca.pem"])
        with urllib.request.urlopen(url, timeout=5, context=context) as answer:
            assert answer.status == 200
            assert b"garlicfarm_server_term" in answer.read()
        plain = url.replace("https://", "http://")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(plain, timeout=5)
        body = refused.value.read()
        assert refused.value.code == 400 and b"HTTPS only" in body
        assert b"garlicfarm_server_term" not in body
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(url, timeout=5)      # without the CA


def test_the_status_page_over_tls(tmp_path, certificates):  # noqa: F811
    with LocalCluster(1, status_interval=0.5) as farm:
        farm.wait_for_leader()
        log_path = tmp_path / "status.log"
        with open(log_path, "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "consensus.cli", "status", "--serve", "127.0.0.1:0",
                 "--serve-tls-cert", certificates["node.pem"], "--serve-tls-key",
                 certificates["node.key"], "--endpoints", farm.endpoints, "--credentials",
                 os.path.join(farm.data_dir, "credentials")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            url = logged_url(log_path, r"status page on (https://\S+)/ ")
            context = ssl.create_default_context(cafile=certificates["ca.pem"])

            def members() -> list | None:
                with urllib.request.urlopen(f"{url}/api/farm/farm", timeout=5,
                                            context=context) as answer:
                    return json.load(answer)["members"] or None
            assert [m["id"] for m in wait_until(members, 15, 0.1, "the farm's members")] \
                == [1]
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url.replace("https:", "http:") + "/", timeout=5)
            assert refused.value.code == 400
        finally:
            server.terminate()
            server.wait(10)


def test_tls_options_name_what_is_missing(tmp_path, certificates):  # noqa: F811
    result = subprocess.run(
        [sys.executable, "-m", "consensus.cli", "status", "--serve-tls-cert",
         certificates["node.pem"], "--endpoints", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--serve-tls-cert: protects the status page: give " \
        "--serve HOST:PORT too" in result.stderr
    with pytest.raises(ConfigError, match="--metrics-tls-key: --metrics-tls-cert and "
                                          "--metrics-tls-key go together"):
        NodeConfig(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path), username="farm",
                   password="pw", metrics="127.0.0.1:0",
                   metrics_tls_cert=certificates["node.pem"])
    with pytest.raises(ConfigError, match="--metrics-tls-cert: protects the --metrics"):
        NodeConfig(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path), username="farm",
                   password="pw", metrics_tls_cert=certificates["node.pem"],
                   metrics_tls_key=certificates["node.key"])
