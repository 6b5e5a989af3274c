"""A small HTTP endpoint for operators: Prometheus metrics (``--metrics``) and the status
page (``garlicfarm status --serve``).

Why the standard library's `ThreadingHTTPServer` and not h11: these endpoints serve a
handful of fixed paths to a scraper and a browser, once a second at most, from a thread
beside the node's loop; a threaded blocking server is the least code that does that,
and h11 would need a socket loop of our own around it.

**Exposure rule** (the same for metrics and the status page): on a loopback address
anyone on the machine may read; on any other address the endpoint requires HTTP Basic
authentication with the farm's credentials (``user:password`` pairs, as the CLI and the
nodes use), and refuses to start without them. Basic authentication travels in clear:
outside a private network, put a TLS proxy in front.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import logging
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Mapping

from consensus.runtime.errors import ConfigError
from consensus.runtime.security import is_loopback, split_endpoint

log = logging.getLogger("garlicfarm.http")


@dataclass(frozen=True)
class Response:
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200


Route = Callable[[], Response]




FARM_CREDENTIALS = "--credentials FILE or --user/--password"


def parse_listen(text: str, option: str, credentials: Mapping[str, str] | None,
                 credential_options: str | None = FARM_CREDENTIALS) -> tuple[str, int]:
    """``HOST:PORT`` (port 0: any free) checked against the exposure rule; the
    ConfigError names `option` and says what to do. `credential_options` names the
    options that give credentials (None: this process has none to give)."""
    host, port = split_endpoint(text, option, any_port=True)
    if not is_loopback(host) and not credentials:
        fix = "listen on 127.0.0.1:PORT and scrape or browse from this machine"
        if credential_options:
            fix += (f", or give the farm's credentials ({credential_options}), which the "
                    "endpoint then requires as HTTP Basic authentication")
        raise ConfigError(option, f"{text} is not a loopback address and there are no "
                          f"credentials to protect it with: {fix}")
    return host, port


class HttpEndpoint:
    """Serves `routes` (exact paths) on a daemon thread until `close()`."""

    def __init__(self, listen: str, option: str, routes: Mapping[str, Route], *,
                 credentials: Mapping[str, str] | None = None,
                 credential_options: str | None = FARM_CREDENTIALS,
                 name: str = "http") -> None:
        host, port = parse_listen(listen, option, credentials, credential_options)
        self.routes = dict(routes)
        self.credentials = dict(credentials or {}) if not is_loopback(host) else {}
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:       # noqa: N802 - the stdlib's name
                endpoint.handle(self)

            def log_message(self, format: str, *args) -> None:   # noqa: A002
                log.debug("%s: " + format, self.address_string(), *args)

        try:
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ConfigError(option, f"cannot listen on {listen}: {exc.strerror}") from None
        self.server.daemon_threads = True
        self.host = host
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name=name)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def authorized(self, header: str | None) -> bool:
        if not self.credentials:
            return True
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        known = self.credentials.get(user)
        return bool(sep) and known is not None and hmac.compare_digest(known.encode(),
                                                                     password.encode())

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if not self.authorized(request.headers.get("Authorization")):
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="garlicfarm"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        route = self.routes.get(request.path.split("?", 1)[0])
        if route is None:
            answer = Response(b"not found\n", status=404)
        else:
            try:
                answer = route()
            except Exception as exc:    # noqa: BLE001 - answered and logged, never lost
                log.exception("%s failed", request.path)
                answer = Response(f"{type(exc).__name__}: {exc}\n".encode(), status=500)
        request.send_response(answer.status)
        request.send_header("Content-Type", answer.content_type)
        request.send_header("Content-Length", str(len(answer.body)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        request.wfile.write(answer.body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def __enter__(self) -> "HttpEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def metrics_route(registry) -> Route:
    """/metrics of a prometheus_client registry."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return lambda: Response(generate_latest(registry), CONTENT_TYPE_LATEST)


def serve_metrics(listen: str, option: str, registry, *,
                  credentials: Mapping[str, str] | None = None,
                  credential_options: str | None = FARM_CREDENTIALS,
                  name: str = "metrics") -> HttpEndpoint:
    """`registry` on ``http://LISTEN/metrics``; the address is logged (port 0: the
    chosen one), as ``metrics on http://HOST:PORT/metrics``."""
    endpoint = HttpEndpoint(listen, option, {"/metrics": metrics_route(registry)},
                            credentials=credentials, credential_options=credential_options,
                            name=name)
    log.info("metrics on %s/metrics", endpoint.url)
    return endpoint
