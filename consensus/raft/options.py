"""Tunables of the Raft core. Time is counted in ticks; the runtime picks the tick length.

The defaults mimic the Raft paper's advice at a 10 ms tick: election timeouts drawn from
150-300 ms, heartbeats every 50 ms, and JournalKeeper's lease window of twice the
heartbeat interval (100 ms), which stays below the shortest election timeout so that no
follower can vote for a new leader while the old one still trusts its lease.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import OptionsError


@dataclass(frozen=True)
class RaftOptions:
    election_timeout_min: int = 15          #: ticks; a follower waits a random time in
    election_timeout_max: int = 30          #: [min, max) without a leader, then campaigns
    heartbeat_interval: int = 5             #: ticks between a leader's heartbeats
    pre_vote: bool = True                   #: ask for pre-votes before raising the term
    check_quorum: bool = True               #: a leader not heard by a quorum steps down,
                                            #: and followers in a lease refuse votes
    lease_ticks: int | None = None          #: JournalKeeper's validity window; default
                                            #: 2 * heartbeat_interval
    max_inflight: int = 16                  #: AppendEntries in flight per follower
    max_entries_per_message: int = 4096
    max_bytes_per_message: int = 1 << 20
    max_committed_bytes_per_ready: int = 8 << 20
    max_uncommitted_entries: int = 1 << 20  #: proposals beyond this are refused
    retry_ticks: int | None = None          #: resend an unanswered request after this;
                                            #: default 2 * heartbeat_interval
    snapshot_chunk_bytes: int = 64 << 10    #: InstallSnapshot / PullSnapshot chunk size
    observer: bool = False                  #: start as an observer (JournalKeeper): pull
                                            #: committed entries, never vote or campaign,
                                            #: until a configuration makes it a voter
    observer_pull_interval: int = 2         #: ticks between pulls once caught up
    observer_pull_max_entries: int = 4096
    observer_parents: tuple[int, ...] = ()  #: where an observer pulls; default: members
    log_sync_batch: int = 4096              #: entries per SyncLogRequest (JRaft)
    log_sync_stop_gap: int = 64             #: a joiner this close joins the configuration
    membership_retries: int = 5             #: JoinCluster/SyncLog/LeaveCluster resends
    max_pending_reads: int = 4096
    seed: int | None = None                 #: randomized timeouts; default: the node id

    @property
    def lease(self) -> int:
        return self.lease_ticks if self.lease_ticks is not None else 2 * self.heartbeat_interval

    @property
    def retry(self) -> int:
        return self.retry_ticks if self.retry_ticks is not None else 2 * self.heartbeat_interval

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and f.name != "seed" \
                    and value <= 0:
                raise OptionsError(f.name, f"must be positive, got {value}")
        if self.election_timeout_max <= self.election_timeout_min:
            raise OptionsError("election_timeout_max", "must be above election_timeout_min "
                               f"({self.election_timeout_max} <= {self.election_timeout_min})")
        if self.heartbeat_interval >= self.election_timeout_min:
            raise OptionsError("heartbeat_interval", "must be below election_timeout_min, or "
                               "followers time out between heartbeats")
        if self.lease >= self.election_timeout_min:
            raise OptionsError("lease_ticks", f"the lease window ({self.lease} ticks) must be "
                               f"shorter than election_timeout_min ({self.election_timeout_min}),"
                               " or a lease read could miss a newer leader's writes")
