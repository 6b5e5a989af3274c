"""The pure Raft core (placeholder docstring, replaced below)."""
from .configuration import Configuration
from .entry import Entry, EntryType
from .errors import (CompactedError, ConfigurationError, MembershipChangeError, NotLeader,
                     OptionsError, ProposalDropped, RaftError, StorageStateError,
                     UnavailableError)
from .messages import *  # noqa: F401,F403
from .messages import Message, PullStatus
from .node import RaftNode
from .options import RaftOptions
from .ready import Ready, Role, SoftState
from .reads import ReadState, ReadStatus, SnapshotQueryResult, StateMachine, query_snapshot
from .storage import HardState, MemoryStorage, Snapshot, Storage
