"""The test harness on real processes, beside the simulator (`consensus.sim`) and sharing
its vocabulary (nemesis, workload): `LocalCluster`, a farm of node processes on loopback
(tests, demos, `pyspark_farm.LocalFarm`), and ``garlicfarm torture`` (``python -m
consensus.torture``), which injects faults into one and checks linearizability."""
from consensus.torture.local import LocalCluster

__all__ = ["LocalCluster"]
