"""An embedded farm beside the Spark driver: `garlicfarm node` processes on loopback, or
on an address executors on other machines reach.

`LocalFarm` is `consensus.torture.LocalCluster` plus what a Spark program wants from it:
a ready-made option map for the data source (`farm.options`), a wait for the first leader
on start, credentials it generated itself, and a safety net (atexit) so a notebook that
forgets `close()` leaves no node running.

    with LocalFarm(nodes=3) as farm:
        df = spark.readStream.format("garlicfarm").options(**farm.options).load()
"""
from __future__ import annotations

import atexit
import logging
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from consensus.net.security import WILDCARDS, is_loopback

if TYPE_CHECKING:
    from consensus.client import FarmClient
    from consensus.torture import LocalCluster

    from .farm_certificates import FarmCertificates

log = logging.getLogger(__name__)


class LocalFarm:
    """A Raft farm of `nodes` local processes (a temporary data dir unless one is given).

    `extra_args` go to every `garlicfarm node` (e.g. ``("--snapshot-interval", "100")``);
    other keyword arguments to LocalCluster (e.g. ``status_interval``). `partitions` Raft
    groups; `replicas` places each partition k >= 1 on that many of the nodes (Kafka's
    replication factor, `--replicas`; default every node; partition 0 is on every node).

    On a cluster whose executors run on other machines, listen where they reach the
    driver: `host` (an address of the driver's machine, or "0.0.0.0") and `advertise` (the
    address or name the executors dial, e.g. ``spark.conf.get("spark.driver.host")``;
    defaults to `host`). Authentication is always on (a generated password unless one is
    given); `tls` (default: on unless `host` is loopback) makes a private CA and node
    certificate, and `options` then carries the CA as PEM text (`tls.ca`). Each node
    serves Prometheus metrics on a loopback port (`metrics_port(node_id)`; `metrics=False`
    turns them off)."""

    def __init__(self, nodes: int = 3, data_dir: str | Path | None = None, *,
                 cluster: str = "farm", username: str = "spark", password: str | None = None,
                 wire: str = "garlicfarm", observers: int = 0, fsync: str = "batch",
                 leader_timeout: float = 30.0, extra_args: Sequence[str] = (),
                 host: str = "127.0.0.1", advertise: str | None = None,
                 tls: bool | None = None, metrics: bool = True, partitions: int = 1,
                 replicas: int | None = None, **cluster_options: Any) -> None:
        if nodes < 1:
            raise ValueError("LocalFarm needs nodes >= 1")
        if host in WILDCARDS and not advertise:
            raise ValueError(f"LocalFarm(host={host!r}) listens on every address: give "
                             "`advertise`, the address or name executors reach the driver "
                             "at (e.g. spark.conf.get('spark.driver.host'))")
        self.host, self.advertise = host, advertise or host
        self.tls = not is_loopback(host) if tls is None else tls
        if not self.tls and not is_loopback(host):
            log.warning("LocalFarm listens on %s without TLS (tls=False): the digest keeps "
                        "the password off the network, but the rows travel in clear", host)
        self._certificates: "FarmCertificates | None" = None
        self._certificates_temp: str | None = None
        self.nodes = nodes
        self.partitions = partitions        #: Raft groups of the farm (`--partitions`)
        self.replicas = replicas            #: nodes per partition k >= 1 (`--replicas`)
        self.cluster_name = cluster
        self.username = username
        self.password = password or secrets.token_hex(16)   # safe on any command line
        self.leader_timeout = leader_timeout
        self._settings: dict[str, Any] = dict(
            nodes=nodes, data_dir=None if data_dir is None else str(data_dir), wire=wire,
            cluster=cluster, username=username, password=self.password, fsync=fsync,
            observers=observers, extra_args=tuple(extra_args), metrics=metrics,
            partitions=partitions, replicas=replicas, **cluster_options)
        self._cluster: "LocalCluster | None" = None

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "LocalFarm":
        """Start the nodes and wait for a leader; `close()` stops them (or leave a `with`)."""
        if self._cluster is not None:
            return self
        from consensus.torture import LocalCluster
        if self._settings["data_dir"] is not None:
            Path(self._settings["data_dir"]).mkdir(parents=True, exist_ok=True)
        network = dict(host=self.host, advertise=self.advertise)
        if self.tls:
            network.update(self._tls_settings())
        cluster = LocalCluster(**{**self._settings, **network})
        cluster.__enter__()
        self._cluster = cluster
        atexit.register(self.close)
        try:
            for partition in range(self.partitions):
                cluster.wait_for_leader(timeout=self.leader_timeout, partition=partition)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every process this farm started (idempotent)."""
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            atexit.unregister(self.close)
            cluster.__exit__(None, None, None)
        temp, self._certificates_temp = self._certificates_temp, None
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)

    def __enter__(self) -> "LocalFarm":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def cluster(self) -> "LocalCluster":
        if self._cluster is None:
            raise RuntimeError("this LocalFarm is not running: use `with LocalFarm() as farm:` "
                               "or call farm.start()")
        return self._cluster

    # -- what Spark programs use -------------------------------------------------------------------
    @property
    def endpoints(self) -> str:
        """The `endpoints` option's value: "127.0.0.1:P1,127.0.0.1:P2,..."."""
        return self.cluster.endpoints

    @property
    def options(self) -> dict[str, str]:
        """Options that connect the garlicfarm data source to this farm (with TLS, the CA
        as PEM text: executors on other machines need no file of the driver's)."""
        options = {"endpoints": self.endpoints, "cluster": self.cluster_name,
                   "username": self.username, "password": self.password}
        if self._certificates is not None:
            options["tls.ca"] = self._certificates.ca_pem
        return options

    def _tls_settings(self) -> dict[str, Any]:
        """Certificates for this start (under data_dir/tls, else a temporary folder), the
        nodes' TLS arguments and the TLS of the farm's own clients. Clients authenticate
        with the digest, so the nodes ask them for no certificate; peers present theirs."""
        from .farm_certificates import make_farm_certificates
        if self._settings["data_dir"] is not None:
            folder = Path(self._settings["data_dir"]) / "tls"
        else:
            folder = Path(self._certificates_temp or tempfile.mkdtemp(prefix="garlicfarm-tls-"))
            self._certificates_temp = str(folder)
        names = [self.advertise, "127.0.0.1"] + ([] if self.host in WILDCARDS else [self.host])
        certificates = make_farm_certificates(folder, names, self.cluster_name)
        self._certificates = certificates
        tls_args = ("--tls-cert", certificates.cert, "--tls-key", certificates.key,
                    "--tls-ca", certificates.ca, "--tls-client-cert", "optional")
        return dict(extra_args=tuple(self._settings["extra_args"]) + tls_args,
                    client_options=dict(tls_ca=certificates.ca))

    def client(self, **kwargs: Any) -> "FarmClient":
        return self.cluster.client(**kwargs)

    # -- faults and maintenance ------------------------------------------------------------------
    def kill(self, node_id: int) -> None:
        """SIGKILL one node."""
        self.cluster.kill(node_id)

    def stop(self, node_id: int) -> None:
        """SIGTERM one node and wait for it to exit."""
        self.cluster.stop(node_id)

    def restart(self, node_id: int) -> None:
        """Start a stopped or killed node again, on its port and data dir."""
        self.cluster.restart(node_id)

    def wait_for_leader(self, timeout: float | None = None, *, partition: int = 0) -> int:
        return self.cluster.wait_for_leader(timeout=timeout or self.leader_timeout,
                                            partition=partition)

    @property
    def node_ids(self) -> list[int]:
        return list(self.cluster.node_ids)

    @property
    def data_dir(self) -> Path:
        return Path(self.cluster.data_dir)

    def endpoint_of(self, node_id: int) -> str:
        return self.cluster.endpoint_of(node_id)

    def metrics_port(self, node_id: int) -> int:
        """Where `node_id` serves its Prometheus metrics since its last start:
        ``http://127.0.0.1:PORT/metrics``."""
        return self.cluster.metrics_port(node_id)
