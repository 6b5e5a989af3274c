"""Who may talk to a node, and how connections are protected: credentials, TLS, proxy.

**Credentials are per cluster** (handshake.py): every node and client of a farm uses
the same cluster name, and a node accepts any username/password pair it knows. A node
presents its own `username`/`password` when it dials a peer. ``--credentials FILE``
holds ``username:password`` lines (``#`` starts a comment); the first line is the one
the node presents. Digest challenges are cached per (host, cluster) for an hour, so a
reconnect skips the challenge round trip.

**TLS**, one model for nodes and clients (docs/operations.md, "TLS and proxies"):

* Accepting (a node with ``--tls-cert/--tls-key``): only TLS. With ``--tls-ca`` every
  connection, a peer's or a client's, must present a certificate that chains to that CA
  (``--tls-client-cert optional`` accepts connections without one; one that is
  presented must still chain to the CA). Without ``--tls-ca`` no client certificate is
  asked for (the digest handshake still authenticates everyone).
* Dialing (clients, and nodes dialing their peers): TLS when a CA, a certificate,
  ``tls=True`` (``--tls``) or ``--insecure-skip-tls-verify`` is given. The node's
  certificate is always verified: against ``--tls-ca`` when given (host names are not
  checked: the farm's own CA signs only the farm's members, which are named by id and
  address), otherwise against the system trust store **and** the endpoint's host name
  (a public CA signs anyone's name). ``--insecure-skip-tls-verify`` alone skips the
  verification; it is logged as a warning every time a context is made.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import threading
from dataclasses import dataclass, field

from consensus.common.errors import ConfigError
from consensus.wire.handshake import (DEFAULT_CLUSTER, CredentialCache, NonceStore,
                                      handshake_path)

log = logging.getLogger("garlicfarm.security")

CLIENT_CERT_MODES = ("required", "optional")


def read_credentials_file(path: str) -> list[tuple[str, str]]:
    """``username:password`` lines of a credentials file."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ConfigError("--credentials", f"cannot read {path}: {exc.strerror}") from None
    pairs = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise ConfigError("--credentials", f"{path} line {number}: expected "
                              f"username:password")
        pairs.append((user, password))
    if not pairs:
        raise ConfigError("--credentials", f"{path} holds no username:password line")
    return pairs


@dataclass
class Security:
    """One process's settings for authenticating and protecting connections."""
    cluster: str = DEFAULT_CLUSTER
    username: str | None = None
    password: str | None = None
    accepted: dict[str, str] = field(default_factory=dict)   #: user -> password
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    proxy: str | None = None        #: "host:port" of an HTTP CONNECT proxy for dialing
    tls_client_cert: str | None = None  #: accepting with tls_ca: "required" (default) or
    #: "optional" client certificates
    use_tls: bool = False           #: dial with TLS even without a CA or certificate
    insecure_skip_tls_verify: bool = False  #: dial without verifying the node (unsafe)

    def __post_init__(self) -> None:
        try:
            handshake_path(self.cluster)
        except ValueError as exc:
            raise ConfigError("--cluster", str(exc)) from None
        if self.username is not None:
            if self.password is None:
                raise ConfigError("--password", f"user {self.username!r} needs a password")
            self.accepted.setdefault(self.username, self.password)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("--tls-key" if self.tls_key is None else "--tls-cert",
                              "--tls-cert and --tls-key go together")
        for option, path in (("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key),
                             ("--tls-ca", self.tls_ca)):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(option, f"{path} is not a readable file")
        if self.tls_client_cert is not None:
            if self.tls_client_cert not in CLIENT_CERT_MODES:
                raise ConfigError("--tls-client-cert", f"{self.tls_client_cert!r} is not "
                                  f"{' or '.join(CLIENT_CERT_MODES)}")
            if self.tls_ca is None or self.tls_cert is None:
                raise ConfigError("--tls-client-cert", "client certificates are checked "
                                  "against --tls-ca by a node with --tls-cert/--tls-key: "
                                  "give those too, or drop --tls-client-cert")
        if self.insecure_skip_tls_verify and self.tls_ca is not None:
            raise ConfigError("--insecure-skip-tls-verify", "a --tls-ca is given to verify "
                              "the nodes with: drop one of the two")
        if self.proxy is not None:
            self.proxy = parse_proxy(self.proxy)
        # digest stores, shared by the threads that dial and accept (not thread-safe
        # themselves: hold the lock)
        self.cache = CredentialCache()
        self.cache_lock = threading.Lock()
        self.nonces = NonceStore(os.urandom)
        self.nonce_lock = threading.Lock()
        self._server_context: ssl.SSLContext | None = None
        self._client_context: ssl.SSLContext | None = None

    @classmethod
    def from_file(cls, path: str, **kw) -> "Security":
        pairs = read_credentials_file(path)
        return cls(username=pairs[0][0], password=pairs[0][1], accepted=dict(pairs), **kw)

    def password_of(self, username: str) -> str | None:
        return self.accepted.get(username)

    # -- TLS ----------------------------------------------------------------------------------
    @property
    def tls(self) -> bool:
        """Whether we dial with TLS (see the module docstring)."""
        return self.tls_cert is not None or self.tls_ca is not None or self.use_tls \
            or self.insecure_skip_tls_verify

    @property
    def client_certs_required(self) -> bool:
        """Whether a node accepting connections requires a client certificate."""
        return self.tls_ca is not None and self.tls_client_cert != "optional"

    def server_context(self) -> ssl.SSLContext | None:
        if self.tls_cert is None:
            return None
        if self._server_context is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
            if self.tls_ca is not None:
                ctx.load_verify_locations(self.tls_ca)
                ctx.verify_mode = ssl.CERT_REQUIRED if self.client_certs_required \
                    else ssl.CERT_OPTIONAL
            self._server_context = ctx
        return self._server_context

    def client_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        if self._client_context is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            if self.insecure_skip_tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                log.warning("TLS WITHOUT VERIFICATION (--insecure-skip-tls-verify): the "
                            "nodes' certificates are NOT verified; anyone between us and "
                            "them can pose as the farm and read the digest exchange and "
                            "the data. Give --tls-ca instead")
            elif self.tls_ca is not None:
                ctx.check_hostname = False      # the farm's own CA: named by id and address
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(self.tls_ca)
            else:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.check_hostname = True       # a public CA signs anyone's name
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
            if self.tls_cert is not None:
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
            self._client_context = ctx
        return self._client_context


WILDCARDS = ("0.0.0.0", "::", "")     #: listen addresses that mean "every address"


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_proxy(value: str) -> str:
    """``http://host:port`` (or ``host:port``) -> ``host:port``."""
    rest = value
    if "://" in value:
        scheme, _, rest = value.partition("://")
        if scheme.lower() != "http":
            raise ConfigError("--proxy", f"{value!r}: only http:// proxies (HTTP CONNECT) "
                              f"are supported")
    rest = rest.rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError("--proxy", f"{value!r} is not http://HOST:PORT")
    return rest


def split_endpoint(endpoint: str, option: str = "endpoint",
                   any_port: bool = False) -> tuple[str, int]:
    """``host:port`` (or ``tcp://host:port``) -> (host, port); port 0 only with
    `any_port` (a listening address: the OS picks)."""
    text = endpoint.split("://", 1)[1] if "://" in endpoint else endpoint
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or \
            not (0 if any_port else 1) <= int(port) < 65536:
        raise ConfigError(option, f"{endpoint!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
