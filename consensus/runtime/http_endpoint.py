"""The operators' HTTP endpoints: Prometheus metrics (``--metrics``) and the status page
(``garlicfarm status --serve``): fixed paths, the exposure rule, optional TLS, on the
bounded one-thread server of `http_server` (why that server: its docstring).

**Exposure rule** (the same for metrics and the status page): on a loopback address
anyone on the machine may read; on any other address the endpoint requires HTTP Basic
authentication with the farm's credentials (``user:password`` pairs, as the CLI and the
nodes use), and refuses to start without them. Basic authentication travels in clear
over plain HTTP: off a private network give the endpoint a certificate
(``--metrics-tls-cert/--metrics-tls-key``, ``--serve-tls-cert/--serve-tls-key``) and it
speaks HTTPS only (a plain HTTP request is answered 400 and served nothing).
"""
from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import socket
import ssl
from typing import Callable, Iterable, Mapping

from consensus.common.errors import ConfigError
from consensus.net.security import is_loopback, split_endpoint
from consensus.runtime.http_server import HttpLimits, HttpServer, Request, Response

log = logging.getLogger("garlicfarm.http")

__all__ = ["HttpEndpoint", "HttpLimits", "Response", "Route", "parse_listen",
           "serve_metrics", "tls_context"]

Route = Callable[[], Response]


def tls_context(cert: str | None, key: str | None, option: str) -> ssl.SSLContext | None:
    """The server context of an endpoint's ``{option}-cert``/``{option}-key`` (PEM files;
    None without them); a ConfigError names the option at fault."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        missing = f"{option}-cert" if cert is None else f"{option}-key"
        raise ConfigError(missing, f"{option}-cert and {option}-key go together")
    for name, path in ((f"{option}-cert", cert), (f"{option}-key", key)):
        if not os.path.isfile(path):
            raise ConfigError(name, f"{path} is not a readable file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{option}-cert", f"cannot load {cert} with the key {key}: "
                          f"{exc}: give a PEM certificate and its private key") from None
    return context


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
    """Serves `routes` (exact paths) until `close()`; with `tls`, over HTTPS only."""

    def __init__(self, listen: str, option: str, routes: Mapping[str, Route], *,
                 credentials: Mapping[str, str] | None = None,
                 credential_options: str | None = FARM_CREDENTIALS,
                 name: str = "http", tls: ssl.SSLContext | None = None,
                 limits: HttpLimits = HttpLimits()) -> None:
        host, port = parse_listen(listen, option, credentials, credential_options)
        self.routes = dict(routes)
        self.credentials = dict(credentials or {}) if not is_loopback(host) else {}
        self.tls = tls is not None
        sock = _listen(host, port, limits.backlog, listen, option)
        self.host = host
        self.port = sock.getsockname()[1]
        self.server = HttpServer(sock, self.handle, name=name, limits=limits, context=tls)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

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

    def handle(self, request: Request) -> Response:
        if not self.authorized(request.headers.get("authorization")):
            return Response(b"", status=401,
                            headers=(("WWW-Authenticate", 'Basic realm="garlicfarm"'),))
        path = request.target.split("?", 1)[0]
        route = self.routes.get(path)
        if route is None:
            return Response(b"not found\n", status=404)
        try:
            return route()
        except Exception as exc:    # noqa: BLE001 - answered and logged, never lost
            log.exception("%s failed", path)
            return Response(f"{type(exc).__name__}: {exc}\n".encode(), status=500)

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> "HttpEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _listen(host: str, port: int, backlog: int, listen: str, option: str) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(option, f"cannot listen on {listen}: {exc.strerror}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ConfigError(option, f"cannot listen on {listen}: {exc.strerror}") from None
    return sock


def metrics_route(registry) -> Route:
    """/metrics of a prometheus_client registry."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return lambda: Response(generate_latest(registry), CONTENT_TYPE_LATEST)


class EndpointCollector:
    """The endpoint's own counters, beside what it serves: open and accepted
    connections, requests, and connections dropped by reason (`http_server`'s)."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server

    def collect(self) -> Iterable:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        server = self.server
        yield GaugeMetricFamily("garlicfarm_http_open_connections", "Open connections to "
                                "this HTTP endpoint.", value=server.open_connections)
        yield CounterMetricFamily("garlicfarm_http_accepted_connections", "Connections "
                                  "this HTTP endpoint accepted.", value=server.accepted)
        yield CounterMetricFamily("garlicfarm_http_requests", "Requests answered.",
                                  value=server.requests)
        dropped = CounterMetricFamily("garlicfarm_http_dropped_connections", "Connections "
                                      "closed before an answer or by a bound, by reason.",
                                      labels=["reason"])
        for reason, count in sorted(server.stats.items()):
            dropped.add_metric([reason.replace(" ", "_")], count)
        yield dropped


def serve_metrics(listen: str, option: str, registry, *,
                  credentials: Mapping[str, str] | None = None,
                  credential_options: str | None = FARM_CREDENTIALS,
                  name: str = "metrics", tls: ssl.SSLContext | None = None) -> HttpEndpoint:
    """`registry` (and the endpoint's own counters) on ``http(s)://LISTEN/metrics``; the
    address is logged (port 0: the chosen one), as ``metrics on URL/metrics``."""
    endpoint = HttpEndpoint(listen, option, {"/metrics": metrics_route(registry)},
                            credentials=credentials, credential_options=credential_options,
                            name=name, tls=tls)
    registry.register(EndpointCollector(endpoint.server))
    log.info("metrics on %s/metrics", endpoint.url)
    return endpoint
