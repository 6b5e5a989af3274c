"""The one place that drives a `Ready`: the runtime node, the simulator and the
in-memory test cluster all hand their Readys to `ReadyDriver`, each with its own disk,
network, application and clock, so the simulator's seeds exercise the order the real
nodes keep.

The order, for one Ready (docs/raft-core.md, "The Ready loop", says why it is safe):

1. `app.on_ready(rd)`: soft state and tracing see the Ready first;
2. `network.send_now(rd.send_now)`: nothing in them depends on this Ready's writes;
3. `disk.write(rd)`: the snapshot (durable when `write` returns), then the entries
   (stored entries from `entries[0].index` on dropped first; not yet durable);
   `app.restore(snapshot)` and `app.on_truncated(index)` follow;
4. when `rd.must_sync`, `disk.start_sync()`. If it runs on (an fsync thread, the
   simulator's slow disk), the committed entries and read states are handed to the
   application now - they were durable before this Ready (`RaftLog.next_committed`
   stops at the persisted index) - and `network.flush()` lets their answers leave
   while the fsync runs; the driver then waits for `disk.sync_done()`;
5. once durable: `disk.save_hard_state(rd.hard_state)`, then
   `network.send_persisted(rd.send_after_persist)` (votes and acknowledgements promise
   durability);
6. committed entries and read states, when step 4 did not hand them out already;
7. `node.advance(rd)`, then `app.after_advance()` when the Ready applied something
   (snapshots, compaction).
"""
from __future__ import annotations

from typing import Protocol

from .entry import Entry
from .messages import Message
from .node import RaftNode
from .reads import ReadState
from .ready import Ready
from .storage import HardState, Snapshot


class Disk(Protocol):
    """Where a node's log, snapshot and hard state go."""

    def write(self, rd: Ready) -> bool:
        """Store `rd.snapshot` (durable on return) and `rd.entries` (need not be durable
        yet); True when stored entries were dropped to make room for them."""

    def start_sync(self) -> bool:
        """Make what `write` stored durable: False when done on return, True when it
        runs on (then `sync_done` says when it finished)."""

    def sync_done(self) -> bool:
        """Has the sync that `start_sync` began finished?"""

    def save_hard_state(self, state: HardState, *, urgent: bool) -> None:
        """Save the hard state; `urgent` when the term or vote changed (a new commit
        index alone may be saved lazily)."""


class Network(Protocol):
    def send_now(self, msgs: list[Message]) -> None:
        """Send messages that need nothing durable first."""

    def send_persisted(self, msgs: list[Message]) -> None:
        """Send messages that promise this Ready is durable (it is, by now)."""

    def flush(self) -> None:
        """Write what is queued (the answers to what was applied) now."""


class Application(Protocol):
    def on_ready(self, rd: Ready) -> None:
        """A Ready was handed out (soft state changes, tracing)."""

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the state by a snapshot received from the leader (already stored)."""

    def on_truncated(self, index: int) -> None:
        """Stored entries from `index` on were replaced."""

    def apply(self, entries: list[Entry]) -> None:
        """Apply committed entries, in order (all types: skip what is not APPLICATION)."""

    def on_read_states(self, states: list[ReadState]) -> None:
        """Hand each read state to its reader once applied up to its index."""

    def after_advance(self) -> None:
        """A Ready that applied entries or a snapshot is done: the place to take a
        snapshot and compact."""


class Clock(Protocol):
    def due(self) -> int:
        """Ticks that came due since the last call (missed ones too)."""


class ReadyDriver:
    """Drives one `RaftNode`: ticks from `clock`, Readys through `disk`, `network` and
    `app` in the order above. Not thread-safe: one loop owns it."""

    def __init__(self, node: RaftNode, disk: Disk, network: Network, app: Application,
                 clock: Clock) -> None:
        self.node = node
        self._disk, self._network, self._app, self._clock = disk, network, app, clock
        self._syncing: Ready | None = None      # written, waiting for its sync

    @property
    def syncing(self) -> bool:
        """A Ready is written and waits for its sync (the node may step meanwhile)."""
        return self._syncing is not None

    def tick(self) -> int:
        """Deliver the ticks that came due; returns how many."""
        due = self._clock.due()
        if due:
            self.node.tick(due)
        return due

    def busy(self) -> bool:
        """Is there work for `run` (a Ready, or a sync that finished)?"""
        return self._disk.sync_done() if self._syncing is not None else self.node.has_ready()

    def run(self) -> bool:
        """Handle Readys until none is left or one waits for its sync; True when
        something was done."""
        done = False
        if self._syncing is not None:
            done = self.resume()
            if not done:
                return False
        has_ready, handle_one = self.node.has_ready, self.handle_one
        while has_ready():
            done = True
            if not handle_one():
                break
        return done

    def resume(self) -> bool:
        """Finish the Ready waiting for its sync, if the sync is done; True if it was."""
        rd = self._syncing
        if rd is None or not self._disk.sync_done():
            return False
        self._syncing = None
        self._persisted(rd)
        self.node.advance(rd)
        if rd.committed_entries or rd.snapshot is not None:
            self._app.after_advance()
        return True

    def handle_one(self) -> bool:
        """Take one Ready as far as the disk allows now: True when it is done, False
        when it waits for its sync (`resume` finishes it)."""
        if self._syncing is not None:
            raise RuntimeError("a Ready is still waiting for its sync: resume() first")
        node = self.node
        rd = node.ready()
        app, network, disk = self._app, self._network, self._disk
        app.on_ready(rd)
        if rd.send_now:
            network.send_now(rd.send_now)
        if rd.snapshot is not None or rd.entries:
            truncated = disk.write(rd)
            if rd.snapshot is not None:
                app.restore(rd.snapshot)
            if truncated:
                app.on_truncated(rd.entries[0].index)
        if rd.must_sync and disk.start_sync():
            # durable before this Ready (see the module docstring): apply while it syncs
            if rd.committed_entries:
                app.apply(rd.committed_entries)
            if rd.read_states:
                app.on_read_states(rd.read_states)
            network.flush()
            self._syncing = rd
            return False
        if rd.hard_state is not None or rd.send_after_persist:
            self._persisted(rd)
        if rd.committed_entries:
            app.apply(rd.committed_entries)
        if rd.read_states:
            app.on_read_states(rd.read_states)
        node.advance(rd)
        if rd.committed_entries or rd.snapshot is not None:
            app.after_advance()
        return True

    def abandon(self) -> None:
        """The node crashed: forget the Ready waiting for its sync."""
        self._syncing = None

    def _persisted(self, rd: Ready) -> None:
        """The Ready is durable: save the hard state, send what promised it."""
        if rd.hard_state is not None:
            self._disk.save_hard_state(rd.hard_state, urgent=rd.term_or_vote_changed)
        if rd.send_after_persist:
            self._network.send_persisted(rd.send_after_persist)
