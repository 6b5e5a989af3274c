"""The farm's client: `FarmClient` over links to the members (`links`), its write
pipelines (`pipeline`) and event subscriptions (`subscription`); the values and errors
it returns are exported here too. See docs/runtime.md ("The Python API").

Importing it loads no server module, so it stays cheap for Spark executors.
"""
from consensus.client.client import FarmClient
from consensus.common.errors import (AuthenticationError, ConfigError, FarmError,
                                     Incomplete, IndexOverflow, IndexUnderflow,
                                     NotLeaderError, ProtocolMismatch, Unavailable)
from consensus.common.results import (BatchCommit, ClusterView, CommitInfo, Event, FarmStatus,
                                      LogRecord, MemberView, RowCounts, StagedInfo,
                                      VisibleRecords)

__all__ = [
    "AuthenticationError", "BatchCommit", "ClusterView", "CommitInfo", "ConfigError", "Event",
    "FarmClient", "FarmError", "FarmStatus", "Incomplete", "IndexOverflow", "IndexUnderflow",
    "LogRecord", "MemberView", "NotLeaderError", "ProtocolMismatch", "RowCounts",
    "StagedInfo", "Unavailable", "VisibleRecords",
]
