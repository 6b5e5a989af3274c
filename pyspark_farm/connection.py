"""How Spark processes reach a farm: the connection options, as one picklable value.

A `FarmClient` holds sockets and is not picklable, so readers and writers carry a
`FarmClientOptions` (plain strings) and each Python process builds its own client from it,
inside `read()` / `write()` / `commit()`, and closes it when done.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import OptionError
from .options import Option, OptionSet, choice, non_empty, positive_float, text

if TYPE_CHECKING:
    from consensus.client import FarmClient

_ENDPOINT = re.compile(r"^(?:tcp://)?([A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})$")


def endpoints_list(value: str) -> str:
    """`host:port[,host:port...]` (a `tcp://` prefix is accepted), normalised."""
    found = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        match = _ENDPOINT.match(part)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise ValueError(f"{part!r} is not host:port")
        found.append(f"{match.group(1)}:{int(match.group(2))}")
    if not found:
        raise ValueError("expected host:port[,host:port...] (any members of the farm)")
    return ",".join(found)


def pem_or_path(option: str):
    """The parser of a PEM option: a file's path, or PEM text (``-----BEGIN ...``), which
    travels in the options to executors on other machines, where a driver-side path does
    not exist. Its errors never quote the value (it may be a private key)."""
    def parse(value: str) -> str:
        if _is_pem(value) and "-----END " not in value:
            raise OptionError(option, "PEM text without its -----END line (cut short?)")
        if not value.strip():
            raise OptionError(option, "expected a PEM file's path or PEM text")
        return value
    return parse


def _is_pem(value: str) -> bool:
    return value.lstrip().startswith("-----BEGIN ")


def pem_file(value: str | None) -> str | None:
    """`value` if it is a path; PEM text written once to a file only this user can read
    (named by its digest, in a private folder of the temp dir), whose path is returned:
    Python's ssl loads certificate chains and keys from files only."""
    if value is None or not _is_pem(value):
        return value
    folder = Path(tempfile.gettempdir()) / f"garlicfarm-tls-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
        raise PermissionError(f"{folder} is not a private folder of this user: remove it")
    path = folder / f"{hashlib.sha256(value.encode()).hexdigest()[:32]}.pem"
    if not path.exists():
        fd, staging = tempfile.mkstemp(dir=folder, suffix=".tmp")   # mode 0600
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(value)
        os.replace(staging, path)
    return str(path)


CONNECTION_OPTIONS = OptionSet("a garlicfarm farm connection", (
    Option("endpoints", endpoints_list, required=True,
           doc="set it to host:port of one or more farm members, e.g. the `endpoints` "
               "of a LocalFarm"),
    Option("cluster", non_empty, "farm", doc="the farm's cluster name (the handshake's path)"),
    Option("username", text, None, doc="Garlic Farm digest user"),
    Option("password", text, None, doc="Garlic Farm digest password"),
    Option("wire", choice("garlicfarm"), "garlicfarm",
           doc="client protocol (clients always speak garlicfarm)"),
    Option("tls.ca", pem_or_path("tls.ca"), None, doc="CA bundle to verify members: a PEM file's path "
           "on every executor, or the PEM text itself"),
    Option("tls.cert", pem_or_path("tls.cert"), None, doc="client certificate (path or PEM text)"),
    Option("tls.key", pem_or_path("tls.key"), None, doc="client key (path or PEM text)"),
    Option("proxy", text, None, doc="HTTP CONNECT proxy host:port"),
    Option("timeout", positive_float, 10.0, doc="seconds per farm call, retries included"),
))


@dataclass(frozen=True)
class FarmClientOptions:
    """Everything needed to open a FarmClient; safe to pickle into Spark tasks."""
    endpoints: str
    cluster: str = "farm"
    username: str | None = None
    password: str | None = None
    wire: str = "garlicfarm"
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    proxy: str | None = None
    timeout: float = 10.0
    partition: int = 0      #: the farm partition (Raft group) every call addresses

    @classmethod
    def from_options(cls, values: dict[str, Any]) -> "FarmClientOptions":
        return cls(endpoints=values["endpoints"], cluster=values["cluster"],
                   username=values["username"], password=values["password"],
                   wire=values["wire"], tls_ca=values["tls.ca"], tls_cert=values["tls.cert"],
                   tls_key=values["tls.key"], proxy=values["proxy"], timeout=values["timeout"])

    def client(self, *, timeout: float | None = None) -> "FarmClient":
        """A new client; `timeout` overrides the option's seconds per call (a probe of
        each member must not wait the whole timeout for one that is down)."""
        from consensus.client import FarmClient
        return FarmClient(self.endpoints, cluster=self.cluster, username=self.username,
                          password=self.password, wire=self.wire, tls_ca=pem_file(self.tls_ca),
                          tls_cert=pem_file(self.tls_cert), tls_key=pem_file(self.tls_key),
                          proxy=self.proxy,
                          timeout=self.timeout if timeout is None else timeout,
                          **({"partition": self.partition} if self.partition else {}))

    def __repr__(self) -> str:   # never print the password in a Spark plan or a log
        return (f"FarmClientOptions(endpoints={self.endpoints!r}, cluster={self.cluster!r}, "
                f"username={self.username!r}, partition={self.partition})")
