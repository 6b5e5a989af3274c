"""A node's log (issue 30): `--log-format json` writes one JSON object per line (time,
level, logger, node, message) for log shippers; the status of every status interval is
logged at DEBUG, not at INFO."""
from __future__ import annotations

import json
import re

import pytest

from consensus.common.errors import ConfigError
from consensus.runtime.config import NodeConfig
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line.strip()]


def test_json_logs_parse_one_object_per_line():
    with LocalCluster(1, status_interval=0.1,
                      extra_args=["--log-format", "json", "--log-level", "debug"]) as farm:
        farm.wait_for_leader(30)
        path = farm.log_path(1)
        wait_until(lambda: sum("status: {" in x for x in _lines(path)) >= 3, 20, 0.05,
                   "three status lines")
        docs = [json.loads(line) for line in _lines(path)]   # every line is one object
    for doc in docs:
        assert set(doc) >= {"time", "level", "logger", "node", "message"}, doc
        assert doc["node"] == "1" and doc["logger"].startswith("garlicfarm")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["time"])
    statuses = [d for d in docs if "status: {" in d["message"]]
    assert {d["level"] for d in statuses} == {"DEBUG"}
    assert any(d["level"] == "INFO" and "listening on" in d["message"] for d in docs)


def test_status_is_not_logged_at_info():
    with LocalCluster(1, status_interval=0.1) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=10) as client:     # statuses are being published ...
            wait_until(lambda: any(m.status for m in client.status().members.values()),
                       20, 0.05, "a status entry")
        text = _lines(farm.log_path(1))
    assert not any("status: {" in line for line in text), text   # ... but not logged
    assert any(" INFO garlicfarm" in line and "listening on" in line for line in text)


def test_a_bad_log_format_names_the_option():
    with pytest.raises(ConfigError, match="--log-format"):
        NodeConfig.from_mapping({"id": 1, "listen": "127.0.0.1:0", "data-dir": "/tmp/x",
                                 "log-format": "xml"})
