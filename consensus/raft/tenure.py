"""`Tenure`: this node's own place in the configuration, as JRaft's flows see it from the
server's side - invited and catching up (taking SyncLogs), a member, leaving (asked to,
or a committed configuration no longer lists it), removed. Its own object because three
parts learn of it: the elections (a leaving node does not campaign), the receiver (a
leader still talking to a leaving node delays its departure) and membership (which
invites, asks to leave and sees configurations commit)."""
from __future__ import annotations

from .configuration import Configuration
from .log import RaftLog
from .options import RaftOptions
from .state import NodeState


class Tenure:
    def __init__(self, state: NodeState, log: RaftLog, options: RaftOptions) -> None:
        self.state = state
        self.log = log
        self.options = options
        self.catching_up = False        # invited to join: taking SyncLogs
        self.leave_at: int | None = None    # leaving: report removed at this tick
        self.config_at_leave: Configuration | None = None
        self.was_member = False
        self.removed = False

    @property
    def leaving(self) -> bool:
        return self.leave_at is not None

    def note_member(self) -> None:
        """Our configuration names us: from now on, leaving it means we were removed."""
        self.was_member = True

    def caught_up(self) -> None:
        """We are a voter: no longer a joiner taking SyncLogs."""
        self.catching_up = False

    def update_removed(self) -> None:
        """Leaving: we were a member and a committed configuration no longer lists us.
        As in JRaft, a leaving node reports itself removed only after two election
        timeouts without a leader's message, so that a server added back meanwhile
        (or still being told its removal committed) does not stop."""
        log = self.log
        config = log.configuration
        if self.state.id in config.members:
            if self.leave_at is not None and config is not self.config_at_leave:
                self.leave_at = None        # added back since we were asked to leave
                self.removed = False
        elif self.was_member and log.configuration_index <= log.committed \
                and not self.catching_up and self.leave_at is None:
            self.start_leaving()

    def start_leaving(self) -> None:
        if self.leave_at is None:
            self.config_at_leave = self.log.configuration
        self.leave_at = self.state.ticks + 2 * self.options.election_timeout_max

    def count_down(self) -> None:
        """Every tick: a leaving node reports itself removed when its time is up."""
        if self.leave_at is not None and self.state.ticks >= self.leave_at:
            self.removed = True
