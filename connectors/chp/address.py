"""Server addresses as users write them: ``host:port`` or ``tcp://host:port``.

A CHP server is named by its snapshot port P; it also uses P+1 (publisher) and P+2
(collector), so P may be at most 65533.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ChpConfigError

PUBLISHER_OFFSET = 1
COLLECTOR_OFFSET = 2


@dataclass(frozen=True, slots=True)
class ServerAddress:
    host: str
    port: int   # the snapshot port P

    @property
    def snapshot(self) -> str:
        return endpoint(self.host, self.port)

    @property
    def publisher(self) -> str:
        return endpoint(self.host, self.port + PUBLISHER_OFFSET)

    @property
    def collector(self) -> str:
        return endpoint(self.host, self.port + COLLECTOR_OFFSET)

    def __str__(self) -> str:
        return endpoint(self.host, self.port)[len("tcp://"):]


def endpoint(host: str, port: int) -> str:
    """The ZeroMQ TCP endpoint; IPv6 hosts in brackets."""
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def check_port(port: int, option: str, *, span: int = 3) -> int:
    """`port` if it and the `span - 1` ports after it are valid TCP ports."""
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65536 - span:
        raise ChpConfigError(f"{option}: {port!r} is not a port in 1..{65536 - span} "
                          f"(the server also uses the {span - 1} ports after it)")
    return port


def parse_address(text: str, option: str = "--server") -> ServerAddress:
    """``host:port`` or ``tcp://host:port`` (the server's snapshot port)."""
    value = text[len("tcp://"):] if text.startswith("tcp://") else text
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ChpConfigError(f"{option}: {text!r} is not HOST:PORT (e.g. 127.0.0.1:5556, "
                          "the server's snapshot port)")
    return ServerAddress(host.strip("[]"), check_port(int(port), option))


__all__ = ["COLLECTOR_OFFSET", "PUBLISHER_OFFSET", "ServerAddress", "check_port",
           "endpoint", "parse_address"]
