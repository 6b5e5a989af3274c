"""Membership changes across every partition of a farm (issue 28): a node joins or leaves
each partition (Raft group) the farm runs, as a Kafka operator expects of a broker, not
partition 0 alone.

Each partition is an independent Raft group with its own configuration, so a node is
added to (or removed from) each one by its own change; this module runs them in an
order chosen for what can go wrong and reports every partition's outcome, so a partial
failure is visible and a re-run completes it (each change is idempotent: a partition
that already has what was asked is reported `ALREADY`, not an error).

The order keeps one invariant: **partition 0 lists every node that is a member of any
partition.** Partition 0's configuration is what `garlicfarm status` and `config
export` show as the farm's members, and a node removed from partition 0 stops itself
(node.py). So an add starts with partition 0 (when it fails the others are skipped: a
node serving partition 2 but missing from partition 0 would be invisible to status and
lost by an export/import), and a remove ends with it (when another partition fails,
partition 0 keeps the node, which keeps running and serving that partition).

Draining (`drain`, `set_drained`: `garlicfarm transfer-leader --from N | --release N`)
marks a node in a replicated list (partition 0's key `DRAINED_KEY`) that every node's
balancer reads, so its leaderships move away and are not handed back while it runs.

`garlicfarm add-server | remove-server | transfer-leader` use it; so can a notebook::

    connect = lambda p: FarmClient(eps, ..., partition=p)
    with connect(0) as client:
        n = partition_count(client)
    change = add_member(connect, 4, "10.0.0.4:9001", partitions=range(n))
    change.failed   # [] when every partition has n4 as a voter
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence

from consensus.common.partitions import DRAINED_KEY, parse_drained
from consensus.common.errors import ConfigError, FarmError

if TYPE_CHECKING:
    from consensus.client.client import FarmClient

#: partition -> a client addressing that partition (closed by the caller's `with`)
Connect = Callable[[int], "FarmClient"]
#: (partition, node id) -> a context around a voter's catch-up (progress display)
Around = Callable[[int, int], ContextManager[Any]]


class ChangeOutcome(str, Enum):
    DONE = "done"            #: this call changed the partition's configuration
    ALREADY = "already"      #: the partition already had what was asked (a re-run)
    FAILED = "failed"        #: the change failed: `detail` says why
    SKIPPED = "skipped"      #: not tried: partition 0's invariant (module docstring)


@dataclass
class PartitionChange:
    """One partition's outcome; `error` is the FarmError of a failure (not serialised)."""

    partition: int
    outcome: ChangeOutcome
    detail: str
    role: str | None = None         #: "voter" | "observer": what the node is (or was)
    error: FarmError | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "outcome": self.outcome.value,
                "detail": self.detail}


@dataclass
class FarmChange:
    """Every addressed partition's outcome, in the order they were changed."""

    action: str                     #: "add" | "remove"
    node_id: int
    changes: list[PartitionChange]

    @property
    def failed(self) -> list[int]:
        """Partitions not changed (failed or skipped): what a re-run has left to do."""
        return [c.partition for c in self.changes
                if c.outcome in (ChangeOutcome.FAILED, ChangeOutcome.SKIPPED)]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {"partitions": [c.to_dict() for c in self.changes], "failed": self.failed}

    def check(self) -> None:
        """Raise PartialChange when a partition was not changed (for callers that want
        an exception rather than reading `failed`)."""
        if self.failed:
            raise PartialChange(self)


class PartialChange(FarmError):
    """Some partitions were changed and others not: re-running the same change
    completes them (partitions done report `ALREADY`)."""

    def __init__(self, change: FarmChange) -> None:
        failed = change.failed
        causes = "; ".join(f"partition {c.partition}: {c.detail}" for c in change.changes
                           if c.partition in failed)
        undone = "added to" if change.action == "add" else "removed from"
        super().__init__(f"n{change.node_id} not {undone} "
                         f"partition{'s' * (len(failed) > 1)} {', '.join(map(str, failed))} "
                         f"({causes}); any partition not named here is done. Fix the cause "
                         "and run the same command again: it completes the rest")
        self.change = change


def partition_count(client: "FarmClient") -> int:
    """How many partitions the farm runs: the answer's `count` (a node older than it
    hosts them all: every node of a farm is given the same --partitions)."""
    view = client.partitions()
    return max(1, int(view.get("count") or len(view["partitions"])))


def check_partition_option(text: object, count: int, option: str = "--partition") -> int:
    """A `--partition` value from the CLI, checked against the farm's partition count."""
    try:
        value = int(str(text), 10)
    except ValueError:
        value = None
    if value is None or not 0 <= value < count:
        raise ConfigError(option, f"must be a whole number from 0 to {count - 1} (the "
                                        f"farm has {count} partition{'s' * (count > 1)}), "
                                        f"got {text!r}")
    return value


def add_order(partitions: Sequence[int]) -> list[int]:
    """Partition 0 first, then the others ascending (module docstring)."""
    return sorted(partitions)


def remove_order(partitions: Sequence[int]) -> list[int]:
    """The others ascending, partition 0 last (module docstring)."""
    return sorted(p for p in partitions if p != 0) + [p for p in partitions if p == 0]


def _conflict(view: Any, node_id: int, endpoint: str, observer: bool) -> str | None:
    members = {**view.observers, **view.outgoing, **view.voters}
    if node_id in members and members[node_id] != endpoint:
        kind = "voter" if node_id in view.voters else "observer" \
            if node_id in view.observers else "leaving voter"
        return (f"n{node_id} is already a {kind} at {members[node_id]}, not {endpoint}: to "
                f"move it, `garlicfarm remove-server {node_id}` first, then add it again "
                f"(or give the new node another ID)")
    if observer and node_id in view.voters:
        return (f"n{node_id} is a voter: `garlicfarm remove-server {node_id}` first to make "
                "it an observer")
    return None


def add_member(connect: Connect, node_id: int, endpoint: str, *, observer: bool = False,
               partitions: Sequence[int], wait: float | None = None,
               around: Around | None = None) -> FarmChange:
    """Make `node_id` at `endpoint` a voter (JRaft's AddServer: it catches up, then
    joins) or an observer of each of `partitions`, partition 0 first. Every partition is
    checked first: a conflict (the id is a member at another endpoint, or a voter when
    an observer is asked) raises ConfigError before anything changes. `wait`: the
    seconds each partition's leader waits for its change."""
    order = add_order(partitions)
    for p in order:
        with connect(p) as client:
            problem = _conflict(client.get_servers(), node_id, endpoint, observer)
        if problem:
            where = "" if order == [0] else f"partition {p}: "
            raise ConfigError("ENDPOINT" if "already a" in problem else "--observer",
                                    where + problem)
    hosted = _hosted_by(connect, endpoint) if any(order) else None
    changes: list[PartitionChange] = []
    for p in order:
        if changes and changes[0].partition == 0 and changes[0].outcome is ChangeOutcome.FAILED:
            changes.append(PartitionChange(p, ChangeOutcome.SKIPPED, "partition 0 failed: it must "
                                           "list the node before any other partition does"))
        elif hosted is not None and p >= hosted:
            changes.append(PartitionChange(p, ChangeOutcome.FAILED, (
                f"n{node_id} at {endpoint} hosts partition{'s 0..' if hosted > 1 else ' '}"
                f"{hosted - 1} only (its --partitions is {hosted}): restart it with the "
                "farm's --partitions (every node the same), then run the same command "
                "again")))
        else:
            changes.append(_add_one(connect, p, node_id, endpoint, observer, wait, around))
    return FarmChange("add", node_id, changes)


def _hosted_by(connect: Connect, endpoint: str) -> int | None:
    """How many partitions the node at `endpoint` hosts (None: it did not answer; its
    AddServer then says so). Asked first so that a node started with too small a
    --partitions is told at once, not after each partition's change timed out."""
    try:
        with connect(0) as client:
            return len(client.partitions(endpoint)["partitions"])
    except FarmError:
        return None


def _add_one(connect: Connect, p: int, node_id: int, endpoint: str, observer: bool,
             wait: float | None, around: Around | None) -> PartitionChange:
    kind = "an observer" if observer else "a voter"
    try:
        with connect(p) as client:
            view = client.get_servers()
            if (view.observers if observer else view.voters).get(node_id) == endpoint \
                    and node_id not in view.outgoing:
                return PartitionChange(p, ChangeOutcome.ALREADY, f"n{node_id} is already {kind}",
                                       kind.split()[-1])
            if observer:
                client.update_observers(add={node_id: endpoint}, timeout=wait)
            else:
                with (around(p, node_id) if around else contextlib.nullcontext()):
                    client.add_server(node_id, endpoint, timeout=wait)
        return PartitionChange(p, ChangeOutcome.DONE, f"n{node_id} ({endpoint}) added as {kind}",
                               kind.split()[-1])
    except FarmError as exc:
        return PartitionChange(p, ChangeOutcome.FAILED, f"{type(exc).__name__}: {exc}",
                               error=exc)


def remove_member(connect: Connect, node_id: int, *, force: bool = False,
                  partitions: Sequence[int], wait: float | None = None) -> FarmChange:
    """Take `node_id` (voter or observer) out of each of `partitions`, partition 0 last
    (its removal stops the node). A node that is a member of none of them raises
    ConfigError; a partition without it is reported `ALREADY`."""
    order = remove_order(partitions)
    views = {}
    for p in order:
        with connect(p) as client:
            views[p] = client.get_servers()
    if not any(node_id in v.voters or node_id in v.observers or node_id in v.outgoing
               for v in views.values()):
        view = views[order[-1]]
        where = "the farm" if len(order) == 1 else f"any of partitions {sorted(order)}"
        raise ConfigError("ID", f"n{node_id} is not a member of {where} (voters "
                                      f"{sorted(view.voters)}, observers "
                                      f"{sorted(view.observers)}): nothing to remove (check "
                                      "the id with `garlicfarm status`)")
    changes: list[PartitionChange] = []
    for p in order:
        failed = [c.partition for c in changes if c.outcome is not ChangeOutcome.DONE
                  and c.outcome is not ChangeOutcome.ALREADY]
        if p == 0 and failed:
            changes.append(PartitionChange(0, ChangeOutcome.SKIPPED, f"kept: n{node_id} is still a "
                                           f"member of partition(s) {failed}, and leaving "
                                           "partition 0 stops it"))
            continue
        changes.append(_remove_one(connect, p, node_id, force, wait))
    last = changes[-1]
    if last.partition == 0 and last.outcome is ChangeOutcome.DONE:
        _forget_drained(connect, node_id, last)
    return FarmChange("remove", node_id, changes)


def _forget_drained(connect: Connect, node_id: int, change: PartitionChange) -> None:
    """A node that left the farm leaves the drained list too: a new node given its id
    later must not start drained."""
    try:
        if node_id in drained_nodes(connect):
            set_drained(connect, node_id, False)
            change.detail += "; taken off the drained list"
    except FarmError as exc:
        change.detail += (f"; still on the drained list ({type(exc).__name__}: {exc}): "
                          f"`garlicfarm transfer-leader --release {node_id}`")


def _remove_one(connect: Connect, p: int, node_id: int, force: bool,
                wait: float | None) -> PartitionChange:
    try:
        with connect(p) as client:
            view = client.get_servers()
            if node_id in view.observers:
                client.update_observers(remove=[node_id], timeout=wait)
                kind = "observer"
            elif node_id in view.voters or node_id in view.outgoing:
                client.remove_server(node_id, force=force, timeout=wait)
                kind = "voter"
            else:
                return PartitionChange(p, ChangeOutcome.ALREADY, f"n{node_id} is not a member")
        return PartitionChange(p, ChangeOutcome.DONE, f"n{node_id} removed ({kind}"
                                                f"{', forced' if force else ''})", kind)
    except FarmError as exc:
        return PartitionChange(p, ChangeOutcome.FAILED, f"{type(exc).__name__}: {exc}",
                               error=exc)


# --- draining a node's leaderships (Kafka's controlled shutdown) ---------------------------

def drained_nodes(connect: Connect) -> frozenset[int]:
    """The drained node ids (partition 0's `DRAINED_KEY`, read at its leader)."""
    with connect(0) as client:
        return parse_drained(client.kv_get(DRAINED_KEY, consistency="read_index"))


def set_drained(connect: Connect, node_id: int, drained: bool) -> frozenset[int]:
    """Add `node_id` to the drained list (every node's balancer then moves its
    leaderships away and never gives it one) or take it off; the new list. A
    compare-and-set on partition 0, so two operators' changes do not undo each other."""
    with connect(0) as client:
        for attempt in range(8):
            text = client.kv_get(DRAINED_KEY, consistency="read_index")
            now = parse_drained(text)
            wanted = now | {node_id} if drained else now - {node_id}
            if wanted == now or client.kv_cas(DRAINED_KEY, text, json.dumps(sorted(wanted))):
                return wanted
            time.sleep(0.05 * 2 ** attempt)          # another writer won: read again
    raise FarmError(f"the drained list ({DRAINED_KEY!r} of partition 0) kept changing under "
                    "8 attempts; run the command again")


def partition_leaders(connect: Connect, partitions: Sequence[int]) -> dict[int, int | None]:
    """Each partition's leader, as its leader answers (None: none known)."""
    leaders: dict[int, int | None] = {}
    for p in partitions:
        with connect(p) as client:
            leaders[p] = client.get_servers().leader_id
    return leaders


def drain(connect: Connect, node_id: int, *, partitions: Sequence[int],
          timeout: float) -> dict[int, int | None]:
    """Mark `node_id` drained and wait until it leads none of `partitions` (the
    balancers move its leaderships to the live voters that lead the fewest); each
    partition's leader then. It stays drained (also across restarts: the list is
    replicated) until `set_drained(connect, node_id, False)`. FarmError at `timeout`
    naming the partitions it still leads."""
    with connect(0) as client:
        if node_id not in client.get_servers().voters:
            raise ConfigError("--from", f"n{node_id} is not a voter of the farm: it leads "
                                        "nothing to drain (check the id with `garlicfarm "
                                        "status`)")
    set_drained(connect, node_id, True)
    deadline = time.monotonic() + timeout
    delay = 0.1
    while True:
        leaders = partition_leaders(connect, partitions)
        held = [p for p, leader in leaders.items() if leader == node_id or leader is None]
        if not held:
            return leaders
        if time.monotonic() + delay > deadline:
            raise FarmError(f"n{node_id} is drained but partition(s) {held} had no other "
                            f"leader within {timeout}s (a drained node hands a leadership "
                            "only to a live, caught-up voter: check `garlicfarm status`); "
                            "the balancers keep trying, run the command again to wait")
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)
