"""The tests drive consensus.sim.local's in-memory cluster."""
from consensus.sim.local import OPTIONS, LocalCluster as Cluster, take

__all__ = ["OPTIONS", "Cluster", "take"]
