"""The tests drive consensus.sim.local's in-memory cluster (InMemoryCluster)."""
from consensus.sim.local import OPTIONS, InMemoryCluster as Cluster, take

__all__ = ["OPTIONS", "Cluster", "take"]
