"""The operators' HTTP endpoint: the exposure rule (loopback, or HTTP Basic with the
farm's credentials), answers for unknown paths and failing routes."""
from __future__ import annotations

import base64
import logging
import urllib.error
import urllib.request

import pytest

from consensus.common.errors import ConfigError
from consensus.runtime.config import NodeConfig
from consensus.runtime.http_endpoint import HttpEndpoint, Response, parse_listen


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("text, message", [
    ("9100", "--metrics: '9100' is not HOST:PORT"),
    ("127.0.0.1:70000", "is not HOST:PORT"),
    ("0.0.0.0:9100", "--metrics: 0.0.0.0:9100 is not a loopback address"),
    ("10.1.2.3:9100", "give the farm's credentials"),
])
def test_bad_addresses_are_named(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_listen(text, "--metrics", None)


def test_loopback_needs_no_credentials():
    assert parse_listen("127.0.0.1:0", "--metrics", None) == ("127.0.0.1", 0)
    assert parse_listen("[::1]:9100", "--metrics", None) == ("::1", 9100)
    assert parse_listen("localhost:9100", "--metrics", None) == ("localhost", 9100)


def test_off_loopback_every_request_needs_basic_auth(caplog):
    def broken() -> Response:
        raise RuntimeError("the route failed")

    routes = {"/ok": lambda: Response(b"fine\n"), "/broken": broken}
    with HttpEndpoint("0.0.0.0:0", "--serve", routes, credentials={"farm": "s3cret"}) as e:
        url = f"http://127.0.0.1:{e.port}"
        assert _get(f"{url}/ok")[0] == 401
        assert _get(f"{url}/ok", ("farm", "wrong"))[0] == 401
        assert _get(f"{url}/ok", ("other", "s3cret"))[0] == 401
        assert _get(f"{url}/ok", ("farm", "s3cret")) == (200, b"fine\n")
        assert _get(f"{url}/nothing", ("farm", "s3cret"))[0] == 404
        with caplog.at_level(logging.ERROR, "garlicfarm.http"):
            status, body = _get(f"{url}/broken", ("farm", "s3cret"))
        assert status == 500 and b"RuntimeError: the route failed" in body
        assert "/broken failed" in caplog.text


def test_loopback_serves_without_credentials():
    with HttpEndpoint("127.0.0.1:0", "--serve", {"/": lambda: Response(b"hi")},
                      credentials={"farm": "s3cret"}) as e:
        assert _get(f"{e.url}/") == (200, b"hi")


def test_a_node_config_checks_metrics_against_its_credentials(tmp_path):
    with pytest.raises(ConfigError, match="--metrics: 0.0.0.0:9100 is not a loopback"):
        NodeConfig(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path), wire="jraft",
                   metrics="0.0.0.0:9100")
    config = NodeConfig(id=1, listen="127.0.0.1:0", data_dir=str(tmp_path),
                        username="farm", password="pw", metrics="0.0.0.0:9100")
    assert config.metrics == "0.0.0.0:9100"
