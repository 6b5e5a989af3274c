"""An embedded farm beside the Spark driver: `garlicfarm node` processes on loopback.

`LocalFarm` is `consensus.runtime.LocalCluster` plus what a Spark program wants from it:
a ready-made option map for the data source (`farm.options`), a wait for the first leader
on start, credentials it generated itself, and a safety net (atexit) so a notebook that
forgets `close()` leaves no node running.

    with LocalFarm(nodes=3) as farm:
        df = spark.readStream.format("garlicfarm").options(**farm.options).load()
"""
from __future__ import annotations

import atexit
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from consensus.runtime import FarmClient, LocalCluster


class LocalFarm:
    """A Raft farm of `nodes` local processes (a temporary data dir unless one is given).

    `extra_args` go to every `garlicfarm node` (e.g. ``("--snapshot-interval", "100")``);
    other keyword arguments to LocalCluster (e.g. ``status_interval``)."""

    def __init__(self, nodes: int = 3, data_dir: str | Path | None = None, *,
                 cluster: str = "farm", username: str = "spark", password: str | None = None,
                 wire: str = "garlicfarm", observers: int = 0, fsync: str = "batch",
                 leader_timeout: float = 30.0, extra_args: Sequence[str] = (),
                 **cluster_options: Any) -> None:
        if nodes < 1:
            raise ValueError("LocalFarm needs nodes >= 1")
        self.nodes = nodes
        self.cluster_name = cluster
        self.username = username
        self.password = password or secrets.token_hex(16)   # safe on any command line
        self.leader_timeout = leader_timeout
        self._settings: dict[str, Any] = dict(
            nodes=nodes, data_dir=None if data_dir is None else str(data_dir), wire=wire,
            cluster=cluster, username=username, password=self.password, fsync=fsync,
            observers=observers, extra_args=tuple(extra_args), **cluster_options)
        self._cluster: "LocalCluster | None" = None

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "LocalFarm":
        """Start the nodes and wait for a leader; `close()` stops them (or leave a `with`)."""
        if self._cluster is not None:
            return self
        from consensus.runtime import LocalCluster
        if self._settings["data_dir"] is not None:
            Path(self._settings["data_dir"]).mkdir(parents=True, exist_ok=True)
        cluster = LocalCluster(**self._settings)
        cluster.__enter__()
        self._cluster = cluster
        atexit.register(self.close)
        try:
            cluster.wait_for_leader(timeout=self.leader_timeout)
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
        """Options that connect the garlicfarm data source to this farm."""
        return {"endpoints": self.endpoints, "cluster": self.cluster_name,
                "username": self.username, "password": self.password}

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

    def wait_for_leader(self, timeout: float | None = None) -> int:
        return self.cluster.wait_for_leader(timeout=timeout or self.leader_timeout)

    @property
    def node_ids(self) -> list[int]:
        return list(self.cluster.node_ids)

    @property
    def data_dir(self) -> Path:
        return Path(self.cluster.data_dir)

    def endpoint_of(self, node_id: int) -> str:
        return self.cluster.endpoint_of(node_id)
