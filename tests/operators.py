"""Test helpers for the operators' tools (metrics, Prometheus, the status page): the
external binaries they need, a real Prometheus server, scraping an endpoint."""
from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import wait_until


def _missing(reason: str) -> None:
    """Skip, except in CI (``CI`` set), where .ci/run installs what the operators' tests
    need: there it fails, so CI cannot skip them silently."""
    if os.environ.get("CI"):
        pytest.fail(f"CI: {reason}")
    pytest.skip(reason)


def require_binary(name: str, package: str) -> str:
    """The binary's path (see `_missing` when it is absent)."""
    path = shutil.which(name)
    if path is None:
        _missing(f"{name} is not installed (Debian package {package}; .ci/run installs it)")
    return path


def require_module(name: str, extra: str) -> Any:
    """The imported module (see `_missing` when it is absent)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        _missing(f"Python module {name} is not installed (pyproject.toml's [{extra}] extra)")


def logged_url(log_path: str | Path, pattern: str, timeout: float = 15.0) -> str:
    """The first match of `pattern`'s group 1 in a process's log (ports chosen at 0)."""
    def find() -> str | None:
        try:
            text = Path(log_path).read_text(errors="replace")
        except OSError:
            return None
        found = re.search(pattern, text)
        return found.group(1) if found else None
    return wait_until(find, timeout, 0.05, f"{pattern!r} in {log_path}")


def scrape(url: str, auth: str | None = None) -> dict[str, float]:
    """A metrics endpoint's samples: ``name{label="v",...}`` -> value."""
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", auth)
    with urllib.request.urlopen(request, timeout=5) as answer:
        text = answer.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


class Prometheus:
    """A real Prometheus server (Debian's binary) scraping `targets` every 250 ms:
    ``{"job": [(host:port, {"label": "value"}), ...]}``."""

    def __init__(self, workdir: Path, targets: dict[str, list[tuple[str, dict[str, str]]]],
                 scrape: dict[str, Any] | None = None) -> None:
        """`scrape`: more settings of every job (scheme, tls_config, basic_auth...)."""
        self.binary = require_binary("prometheus", "prometheus")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        jobs = [{"job_name": job, "scrape_interval": "250ms", "scrape_timeout": "200ms",
                 "static_configs": [{"targets": [t], "labels": labels}
                                    for t, labels in entries], **(scrape or {})}
                for job, entries in targets.items()]
        self.config = workdir / "prometheus.yml"
        self.config.write_text(json.dumps({"scrape_configs": jobs}))   # YAML reads JSON
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> "Prometheus":
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 "--web.listen-address=127.0.0.1:0"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            address = logged_url(self.log_path, r'msg="Listening on" address=(\S+)')
            self.url = f"http://{address}"
            wait_until(self._ready, 20, 0.1, "prometheus ready")
        except BaseException:
            self.close()
            raise
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            f"prometheus exited:\n{self.log_path.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector: [{"metric": {...}, "value": [t, "v"]}]."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as answer:
            doc = json.load(answer)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def values(self, expr: str, label: str) -> dict[str, float]:
        """The query's values by one label."""
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(expr)}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __exit__(self, *exc: object) -> None:
        self.close()
