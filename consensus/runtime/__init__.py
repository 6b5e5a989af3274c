"""The farm runtime: networked Raft nodes, their transports, the service API and its
client, the built-in state machines, and LocalCluster. See docs/runtime.md.

Only the client side is imported here (a node's modules load on demand), so importing
`consensus.runtime` stays cheap for Spark executors.
"""
from consensus.runtime.client import FarmClient
from consensus.runtime.errors import (AuthenticationError, ConfigError, FarmError,
                                      Incomplete, IndexOverflow, IndexUnderflow,
                                      NotLeaderError, ProtocolMismatch, Unavailable)
from consensus.runtime.local import LocalCluster
from consensus.runtime.results import (BatchCommit, ClusterView, CommitInfo, Event, FarmStatus,
                                       LogRecord, MemberView, RowCounts, StagedInfo,
                                       VisibleRecords)

__all__ = [
    "AuthenticationError", "BatchCommit", "ClusterView", "CommitInfo", "ConfigError", "Event",
    "FarmClient", "FarmError", "FarmStatus", "Incomplete", "IndexOverflow", "IndexUnderflow",
    "LocalCluster", "LogRecord", "MemberView", "NotLeaderError", "ProtocolMismatch",
    "RowCounts", "StagedInfo", "Unavailable", "VisibleRecords",
]
