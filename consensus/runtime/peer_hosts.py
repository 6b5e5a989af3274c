"""Whether a connection that did not authenticate may speak for a member.

Plain JRaft has no authentication and TaskFlux's ConnectRequest only names an id, so
what a connection can show is the id it claims and the address it comes from: it is
taken for member N when N is a configured member (not this node) and the connection
comes from an address N's endpoint host resolves to. Anyone on that host can still
claim to be N: plain JRaft is for private networks (docs/operations.md).

Names are resolved on the loop (a member's endpoint is usually an IP address, then
nothing is resolved), at most once per host per `RESOLVE_EVERY` seconds.
"""
from __future__ import annotations

import ipaddress
import socket
import time
from typing import Callable

from consensus.common.errors import ConfigError
from consensus.net.security import split_endpoint

RESOLVE_EVERY = 60.0


class PeerHosts:
    def __init__(self, endpoint_of: Callable[[int], str | None], node_id: int) -> None:
        self.endpoint_of = endpoint_of
        self.node_id = node_id
        self._resolved: dict[str, tuple[float, frozenset[str]]] = {}

    def is_member(self, peer_id: int) -> bool:
        return peer_id > 0 and peer_id != self.node_id and \
            self.endpoint_of(peer_id) is not None

    def comes_from(self, peer_id: int, address: str) -> bool:
        """Whether `address` (a connection's remote IP) is member `peer_id`'s host."""
        if not self.is_member(peer_id):
            return False
        try:
            host, _ = split_endpoint(self.endpoint_of(peer_id) or "")
        except ConfigError:     # an endpoint we cannot parse names no host
            return False
        return _canonical(address) in self._addresses(host)

    def _addresses(self, host: str) -> frozenset[str]:
        host = host.strip("[]")
        try:
            return frozenset({_canonical(host)})
        except ValueError:
            pass
        now = time.monotonic()
        cached = self._resolved.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            found = frozenset(_canonical(info[4][0]) for info in infos)
        except (OSError, ValueError):
            found = frozenset()
        self._resolved[host] = (now + RESOLVE_EVERY, found)
        return found


def _canonical(address: str) -> str:
    """One spelling per IP address (an IPv4-mapped IPv6 address as IPv4). Raises
    ValueError for a name."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)
