"""A node's settings: from the command line, a config file, or code (LocalCluster).

A config file (``--config FILE``, TOML) holds the same settings as the options, with the
option names as keys (dashes or underscores)::

    id = 1
    listen = "127.0.0.1:9001"
    peers = "2=127.0.0.1:9002,3=127.0.0.1:9003"     # or a table: [peers] 2 = "..."
    data-dir = "/var/lib/garlicfarm/1"
    cluster = "farm"
    wire = "garlicfarm"
    credentials = "/etc/garlicfarm/credentials"
    fsync = "batch"
    status-interval = 5.0
    max-connections = 1024

Options given on the command line win over the file.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

from consensus.common.errors import ConfigError
from consensus.common.partitions import (DEFAULT_PREPARED_TIMEOUT, check_partitions,
                                         check_prepared_timeout, check_replicas,
                                         placed_members)
from consensus.net.security import Security, split_endpoint
from consensus.runtime.budget import DEFAULT_CLIENT_BUDGET, check_client_budget
from consensus.runtime.log_format import LOG_FORMATS
from consensus.runtime.sync_rounds import SHARED_FSYNC_GROUPS
from consensus.storage import FsyncPolicy

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomllib's origin, a dependency there (pyproject.toml)
    import tomli as tomllib

if TYPE_CHECKING:
    import ssl

WIRES = ("garlicfarm", "marker", "jraft")


def parse_members(text: str | Mapping[Any, str] | None, option: str) -> dict[int, str]:
    """``ID=HOST:PORT,...`` (or a mapping) -> {id: "host:port"}."""
    if not text:
        return {}
    items = text.items() if isinstance(text, Mapping) else \
        [part.strip().partition("=")[::2] for part in text.split(",") if part.strip()]
    members: dict[int, str] = {}
    for key, endpoint in items:
        try:
            node_id = int(key)
        except (TypeError, ValueError):
            raise ConfigError(option, f"{key!r} is not a node id (ID=HOST:PORT)") from None
        if node_id <= 0:
            raise ConfigError(option, f"node ids are positive integers, got {node_id}")
        if not endpoint:
            raise ConfigError(option, f"node {node_id} has no HOST:PORT")
        host, port = split_endpoint(endpoint, option)
        members[node_id] = f"{host}:{port}"
    return members


def _switch(value: Any, option: str) -> bool:
    """on/off (the option), true/false (TOML)."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("on", "true", "yes", "1"):
        return True
    if str(value).lower() in ("off", "false", "no", "0"):
        return False
    raise ConfigError(option, f"{value!r} is not on or off")


#: who builds the pages of read_entries and read_journal (docs/runtime.md)
LOG_READERS = ("threads", "process")


@dataclass
class NodeConfig:
    id: int
    listen: str                                 #: HOST:PORT to bind (port 0: any free)
    data_dir: str
    peers: dict[int, str] = field(default_factory=dict)        #: the other voters
    observers: dict[int, str] = field(default_factory=dict)    #: observers of the bootstrap
    cluster: str = "farm"
    wire: str = "garlicfarm"
    username: str | None = None
    password: str | None = None
    credentials: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_client_cert: str | None = None          #: with tls_ca: "required" (default), "optional"
    insecure_skip_tls_verify: bool = False      #: dial peers without verifying them (unsafe)
    proxy: str | None = None
    fsync: str = "batch"
    observer: bool = False                      #: this node starts as an observer
    join: bool = False                          #: no bootstrap: wait to be added
    advertise: str | None = None                #: the endpoint peers use (default: listen)
    listen_fd: int | None = None                #: an inherited listening socket
    peer_address: dict[int, str] = field(default_factory=dict)  #: dial these instead
    status_interval: float = 5.0
    status_entries: bool | None = None          #: status JSON into the log (default: not on jraft)
    tick: float = 0.01                          #: seconds per Raft tick
    election_ticks: int = 30                    #: election timeout in [n, 2n) ticks
    snapshot_interval: int = 100_000            #: entries between snapshots
    retain_entries: int = 100_000               #: log entries kept below the latest snapshot
    segment_bytes: int = 64 << 20               #: log segment size (compaction drops whole ones)
    max_connections: int = 1024                 #: open client connections (peers apart)
    client_buffer_budget: int = DEFAULT_CLIENT_BUDGET   #: bytes all clients may hold
    log_level: str = "info"
    log_format: str = "text"                    #: text, or json: one object per line
    metrics: str | None = None                  #: HOST:PORT of /metrics (Prometheus)
    metrics_tls_cert: str | None = None         #: with metrics_tls_key: /metrics over HTTPS
    metrics_tls_key: str | None = None
    consumer_expiry: float = 86400.0            #: seconds a silent consumer stays listed
    partitions: int = 1                         #: Raft groups of the farm (0..n-1)
    replicas: int | None = None                 #: nodes per partition k >= 1 (None: all)
    #: seconds a batch prepared in partitions 1.. waits for partition 0's decision
    prepared_timeout: float = DEFAULT_PREPARED_TIMEOUT
    log_readers: str = "threads"                #: who builds log pages: threads or process
    log_reader_nice: int = 0                    #: the reader process's niceness above the node's
    shared_fsync_groups: int = SHARED_FSYNC_GROUPS  #: rounds this large share syncfs flushes

    def __post_init__(self) -> None:
        if not isinstance(self.id, int) or self.id <= 0:
            raise ConfigError("--id", f"must be a positive integer, got {self.id!r}")
        split_endpoint(self.listen, "--listen", any_port=True)
        if self.log_format not in LOG_FORMATS:
            raise ConfigError("--log-format", f"{self.log_format!r} is not one of "
                              f"{', '.join(LOG_FORMATS)}")
        if self.wire not in WIRES:
            raise ConfigError("--wire", f"{self.wire!r} is not one of {', '.join(WIRES)}")
        try:
            FsyncPolicy.parse(self.fsync)
        except ValueError:
            raise ConfigError("--fsync", f"{self.fsync!r} is not always, batch or never") \
                from None
        if not self.data_dir:
            raise ConfigError("--data-dir", "is required")
        if self.id in self.peers and self.id in self.observers:
            raise ConfigError("--observers", f"node {self.id} is listed as a voter too")
        if self.observer and not set(self.peers) - {self.id}:
            # An observer pulls; no leader ever sends it anything. Without members to
            # pull from it would wait, empty, for ever (a joining voter needs no peers:
            # the leader invites it).
            raise ConfigError("--peers", "an observer pulls the log from the farm's members "
                              "and no leader contacts it: give peers = \"ID=HOST:PORT,...\" "
                              "(--peers; any voters of the farm: it learns the others from "
                              "the log)")
        for name, minimum in (("status_interval", 0.05), ("tick", 0.001)):
            if getattr(self, name) < minimum:
                raise ConfigError(f"--{name.replace('_', '-')}", f"must be at least {minimum}")
        if self.log_readers not in LOG_READERS:
            raise ConfigError("--log-readers", f"{self.log_readers!r} is not one of "
                              f"{', '.join(LOG_READERS)} (who builds the log reads' pages: "
                              f"the node's reader threads or its reader process)")
        if isinstance(self.log_reader_nice, bool) or not isinstance(self.log_reader_nice, int) \
                or not 0 <= self.log_reader_nice <= 19:
            raise ConfigError("--log-reader-nice", f"must be a whole number from 0 to 19 "
                              f"(added to the node's niceness), got {self.log_reader_nice!r}")
        if isinstance(self.shared_fsync_groups, bool) \
                or not isinstance(self.shared_fsync_groups, int) \
                or not 0 <= self.shared_fsync_groups <= 1_000_000:
            raise ConfigError("--shared-fsync-groups", f"must be a whole number from 0 (never) "
                              f"to 1000000 (groups in a sync round), got "
                              f"{self.shared_fsync_groups!r}")
        if isinstance(self.max_connections, bool) or not isinstance(self.max_connections, int) \
                or not 1 <= self.max_connections <= 1_000_000:
            raise ConfigError("--max-connections", f"must be a whole number from 1 to "
                              f"1000000 (client connections), got {self.max_connections!r}")
        if not 1.0 <= self.consumer_expiry <= 366 * 86400.0:
            raise ConfigError("--consumer-expiry", f"{self.consumer_expiry!r}: give seconds "
                              "from 1 to 31622400 (366 days)")
        for name in ("snapshot_interval", "retain_entries", "election_ticks", "segment_bytes"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')}", "must be positive")
        if self.tls_ca and not self.tls_cert:
            raise ConfigError("--tls-ca", "a node checks certificates against --tls-ca only "
                              "when it has one itself: give --tls-cert and --tls-key too")
        if self.insecure_skip_tls_verify and not self.tls_cert:
            raise ConfigError("--insecure-skip-tls-verify", "concerns the TLS a node dials its "
                              "peers with, which it does only with --tls-cert/--tls-key")
        if self.metrics is not None:
            from consensus.runtime.http_endpoint import parse_listen
            parse_listen(self.metrics, "--metrics", self.security().accepted)
        if self.metrics_tls_cert or self.metrics_tls_key:
            if self.metrics is None:
                raise ConfigError("--metrics-tls-cert", "protects the --metrics endpoint: "
                                  "give --metrics HOST:PORT too")
            self.metrics_tls()      # the files load, or the option at fault is named
        try:
            check_client_budget(self.client_buffer_budget)
        except ValueError as exc:
            raise ConfigError("--client-buffer-budget", str(exc)) from None
        check_partitions(self.partitions)
        self.prepared_timeout = check_prepared_timeout(self.prepared_timeout)
        if self.partitions > 1 and self.wire != "garlicfarm":
            raise ConfigError("--partitions", f"the {self.wire} wire carries one Raft group: "
                              f"a farm of {self.partitions} partitions needs --wire garlicfarm")
        if self.replicas is not None:
            self._check_replicas()
        if self.election_ticks < 4:
            raise ConfigError("--election-ticks", "must be at least 4 (heartbeats need room)")

    def _check_replicas(self) -> None:
        if self.join or self.observer or self.observers:
            raise ConfigError("--replicas", "placement is computed from the bootstrap voters "
                              "(--peers and --id); a joining node, an observer or "
                              "--observers cannot be placed yet: leave --replicas out "
                              "(every node hosts every partition)")
        check_replicas(self.replicas, len(self.farm_nodes))

    @property
    def farm_nodes(self) -> list[int]:
        """The voters of the bootstrap (--peers and this node), placement's node list."""
        return sorted(set(self.peers) | ({self.id} if not self.observer else set()))

    def members_of(self, partition: int) -> list[int]:
        """The nodes `partition` is placed on (every node without --replicas)."""
        return placed_members(partition, self.farm_nodes, self.replicas)

    def hosted(self) -> list[int]:
        """The partitions this node hosts (creates a group for)."""
        if self.replicas is None:
            return list(range(self.partitions))
        return [p for p in range(self.partitions) if self.id in self.members_of(p)]

    @property
    def publishes_status(self) -> bool:
        """Whether status JSON goes into the log: on by default, except on the raw JRaft
        wire, where JRaft applications would take it for their own data."""
        return self.status_entries if self.status_entries is not None else self.wire != "jraft"

    @property
    def endpoint(self) -> str:
        return self.advertise or self.listen

    def metrics_tls(self) -> "ssl.SSLContext | None":
        """The server context of the metrics endpoint (None: plain HTTP)."""
        from consensus.runtime.http_endpoint import tls_context
        return tls_context(self.metrics_tls_cert, self.metrics_tls_key, "--metrics-tls")

    def security(self) -> Security:
        tls = dict(tls_cert=self.tls_cert, tls_key=self.tls_key, tls_ca=self.tls_ca,
                   tls_client_cert=self.tls_client_cert,
                   insecure_skip_tls_verify=self.insecure_skip_tls_verify,
                   proxy=self.proxy, cluster=self.cluster)
        if self.credentials:
            return Security.from_file(self.credentials, **tls)
        if self.wire == "garlicfarm" and not self.username:
            raise ConfigError("--user", "the garlicfarm wire authenticates peers and clients: "
                              "give --user and --password, or --credentials FILE")
        return Security(username=self.username, password=self.password, **tls)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "NodeConfig":
        """Settings from a config file or parsed options (unknown keys are refused)."""
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = key.replace("-", "_")
            if name == "user":
                name = "username"
            if name not in known:
                raise ConfigError(key, f"unknown setting (known: {', '.join(sorted(known))})")
            kwargs[name] = value
        if isinstance(kwargs.get("peer_address"), (list, tuple)):
            kwargs["peer_address"] = ",".join(kwargs["peer_address"])
        for option in ("peers", "observers", "peer_address"):
            if option in kwargs:
                kwargs[option] = parse_members(kwargs[option],
                                               f"--{option.replace('_', '-')}")
        if "status_entries" in kwargs:
            kwargs["status_entries"] = _switch(kwargs["status_entries"], "status-entries")
        if "insecure_skip_tls_verify" in kwargs:
            kwargs["insecure_skip_tls_verify"] = _switch(kwargs["insecure_skip_tls_verify"],
                                                         "insecure-skip-tls-verify")
        for name in ("data_dir", "credentials", "tls_cert", "tls_key", "tls_ca",
                     "metrics_tls_cert", "metrics_tls_key"):
            if kwargs.get(name):
                kwargs[name] = os.path.expanduser(str(kwargs[name]))
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ConfigError("config", str(exc)) from None


def load_config(path: str, **overrides: Any) -> NodeConfig:
    """A node's settings from its config file (options given as `overrides` win)."""
    values = load_config_file(path)
    values.update(overrides)
    return NodeConfig.from_mapping(values)


def load_config_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
