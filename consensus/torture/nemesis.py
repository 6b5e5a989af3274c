"""The torture test's nemesis: which fault comes next (`plan`, pure: a random source and
the cluster's shape in, an `Action` out) and the thread that applies, holds and heals
one fault at a time (`Nemesis`).

Faults, aimed half the time at the current leader (where Raft bugs hide):
- ``kill``: SIGKILL a node, keep it down for the hold time, start it again;
- ``restart``: SIGTERM a node and start it again at once (a clean restart);
- ``pause``: SIGSTOP a node for the hold time, then SIGCONT (a GC pause, a stalled VM:
  a paused leader that wakes after a new one was elected must not serve stale reads);
- ``partition``: through the fault proxy: one node isolated, the leader in a minority,
  a random majority/minority split, a bridge (two sides that only one node reaches), or
  a one-way fault (the leader cannot send, or cannot hear);
- ``delay``: every link of one node, or of all, holds each chunk 5-100 ms;
- ``membership``: configuration changes while the clients run, with a fresh node each
  time (its links do not go through the fault proxy), in turn:
  ``add-voter`` (AddServer, then RemoveServer: the node leaves and stops by itself),
  ``observer`` (added as an observer, promoted to a voter by joint consensus, demoted:
  removed, restarted as an observer and added again, then removed) and
  ``joint-kill`` (a joint-consensus change adding a voter, the leader SIGKILLed at a
  random moment of it, restarted after the hold; the change is then finished and undone
  the same way). A change the farm refuses while another is under way is retried; one
  that does not complete within `MEMBERSHIP_TIMEOUT` is a fault error. Each action
  ends with the configuration as it started (the original voters, no observers);
- ``flood``: hostile and greedy clients at one member for the hold time
  (`flood`): wrong-password logins as fast as it lets them, slowloris
  connections, and a reader paging through its whole log.

kill -9 of a process does not lose what it wrote without fsync (the page cache survives),
so these faults test the protocol, not durability against power loss; the storage tests
cover that (crash at every byte).
"""
from __future__ import annotations

import enum
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from consensus.torture.faultproxy import ProxyNetwork

READY_TIMEOUT = 20.0        # seconds a restarted node gets to rejoin before the next fault


class Fault(enum.Enum):
    KILL = "kill"
    RESTART = "restart"
    PAUSE = "pause"
    PARTITION = "partition"
    DELAY = "delay"
    MEMBERSHIP = "membership"
    FLOOD = "flood"

    @property
    def needs_network(self) -> bool:
        return self in (Fault.PARTITION, Fault.DELAY)


# How often each kind is chosen, relative to the others enabled: a partition that cuts the
# leader off is what shows a stale leader, a kill of the leader what shows a retried write
# applied twice.
WEIGHTS = {Fault.PARTITION: 3, Fault.KILL: 2, Fault.PAUSE: 2, Fault.RESTART: 1, Fault.DELAY: 1,
           Fault.MEMBERSHIP: 2, Fault.FLOOD: 2}

# Membership schemes, taken in turn; which ones a wire can carry (observers and leader
# transfers need the garlicfarm wire's extensions, AddServer JRaft's flow, joint
# consensus our configuration entries).
MEMBERSHIP_SCHEMES = {"garlicfarm": ("add-voter", "observer", "joint-kill"),
                      "marker": ("joint-kill",),
                      "jraft": ()}     # no leader transfer, no joint consensus


@dataclass(frozen=True)
class Action:
    """One fault to apply. `drops` are the directed pairs (a, b) whose messages from a to
    b are dropped (partitions); `delay` is in seconds (delay faults)."""

    fault: Fault
    nodes: tuple[int, ...] = ()
    drops: frozenset[tuple[int, int]] = frozenset()
    delay: float = 0.0
    hold: float = 0.0
    description: str = ""
    scheme: str = ""                    #: membership faults: which change
    kill_after: float = 0.0             #: joint-kill: seconds into the change


def _cross(a: Sequence[int], b: Sequence[int]) -> set[tuple[int, int]]:
    """Every pair between the two sides, both ways."""
    return {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}


def _pick_target(rng: random.Random, nodes: Sequence[int], leader: int | None) -> tuple[int, str]:
    if leader is not None and leader in nodes and rng.random() < 0.5:
        return leader, f"n{leader} (leader)"
    node = rng.choice(nodes)
    return node, f"n{node}" + (" (leader)" if node == leader else "")


def _partition(rng: random.Random, nodes: Sequence[int],
               leader: int | None) -> tuple[set[tuple[int, int]], str]:
    nodes = list(nodes)
    minority = (len(nodes) - 1) // 2
    # Weighted towards cutting the leader off: that is where a stale leader shows.
    schemes = {"isolate": 3, "leader-minority": 3, "split": 2, "one-way": 2}
    if len(nodes) >= 5:
        schemes["bridge"] = 2
    scheme = rng.choices(list(schemes), weights=list(schemes.values()))[0]
    if scheme == "leader-minority" and leader is None:
        scheme = "split"
    if scheme == "isolate":
        node, name = _pick_target(rng, nodes, leader)
        rest = [n for n in nodes if n != node]
        return _cross([node], rest), f"isolate {name}"
    if scheme == "split":
        rng.shuffle(nodes)
        small, big = sorted(nodes[:minority]), sorted(nodes[minority:])
        return _cross(small, big), f"split {small} | {big}"
    if scheme == "leader-minority":
        others = [n for n in nodes if n != leader]
        rng.shuffle(others)
        small = sorted([leader, *others[:minority - 1]])   # type: ignore[list-item]
        big = sorted(others[minority - 1:])
        return _cross(small, big), f"leader n{leader} in minority {small} | {big}"
    if scheme == "bridge":
        rng.shuffle(nodes)
        bridge, half = nodes[0], (len(nodes) - 1) // 2
        left, right = sorted(nodes[1:1 + half]), sorted(nodes[1 + half:])
        return _cross(left, right), f"bridge n{bridge} between {left} and {right}"
    node, name = _pick_target(rng, nodes, leader)
    rest = [n for n in nodes if n != node]
    if rng.random() < 0.5:
        return {(node, n) for n in rest}, f"one-way: {name} cannot send"
    return {(n, node) for n in rest}, f"one-way: {name} cannot hear"


def plan(rng: random.Random, faults: Sequence[Fault], nodes: Sequence[int],
         leader: int | None, hold: tuple[float, float], *,
         schemes: Sequence[str] = (), turn: int = 0) -> Action:
    """The next fault: a kind from `faults` (partitions and kills, the richest, come
    more often: `WEIGHTS`), its targets, how long it lasts. Membership faults take
    `schemes` in turn (`turn` counts the membership faults so far)."""
    kinds = [f for f in faults if f is not Fault.MEMBERSHIP or schemes]
    fault = rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
    seconds = rng.uniform(*hold)
    if fault is Fault.MEMBERSHIP:
        scheme = schemes[turn % len(schemes)]
        kill_after = rng.uniform(0.0, 0.3) if scheme == "joint-kill" else 0.0
        what = {"add-voter": "add a voter, then remove it",
                "observer": "add an observer, promote it, demote it, remove it",
                "joint-kill": f"joint change adding a voter, leader killed after "
                              f"{kill_after:.2f}s, undone likewise"}[scheme]
        return Action(fault, hold=seconds, scheme=scheme, kill_after=kill_after,
                      description=f"membership {scheme}: {what} (hold {seconds:.1f}s)")
    if fault is Fault.PARTITION:
        drops, text = _partition(rng, nodes, leader)
        return Action(fault, drops=frozenset(drops), hold=seconds,
                      description=f"partition {text} for {seconds:.1f}s")
    if fault is Fault.DELAY:
        delay = rng.choice((0.005, 0.02, 0.05, 0.1))
        if rng.random() < 0.5:
            return Action(fault, tuple(nodes), delay=delay, hold=seconds,
                          description=f"delay all links {delay * 1e3:.0f} ms for {seconds:.1f}s")
        node, name = _pick_target(rng, nodes, leader)
        return Action(fault, (node,), delay=delay, hold=seconds,
                      description=f"delay links of {name} {delay * 1e3:.0f} ms "
                                  f"for {seconds:.1f}s")
    node, name = _pick_target(rng, nodes, leader)
    if fault is Fault.FLOOD:
        return Action(fault, (node,), hold=seconds,
                      description=f"flood {name} with bad logins, slowloris and a full "
                                  f"read-back for {seconds:.1f}s")
    if fault is Fault.RESTART:
        return Action(fault, (node,), description=f"restart {name}")
    verb = "kill -9" if fault is Fault.KILL else "pause"
    return Action(fault, (node,), hold=seconds, description=f"{verb} {name} for {seconds:.1f}s")


class FarmControl(Protocol):
    """What the nemesis does to the farm (the torture's `TortureFarm`)."""

    node_ids: Sequence[int]
    network: ProxyNetwork | None

    def kill(self, node_id: int) -> None: ...
    def stop(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def leader(self) -> int | None: ...
    def wait_ready(self, node_id: int, timeout: float) -> bool: ...
    # membership faults (only when they are enabled)
    def membership_schemes(self) -> Sequence[str]: ...
    def membership_apply(self, action: Action, down: set[int]) -> str: ...
    def membership_heal(self, action: Action, down: set[int]) -> str: ...
    def membership_restore(self) -> None: ...
    # flood faults
    def flood(self, node_id: int) -> "Flooding": ...


class Flooding(Protocol):
    """A flood under way (`flood.Flood`)."""

    def stop(self) -> str: ...


@dataclass
class FaultRecord:
    """One fault as it happened (monotonic seconds)."""

    action: Action
    started: float
    ended: float | None = None
    error: str | None = None
    detail: str = ""                    #: what a membership fault did (nodes, the kill)


@dataclass
class NemesisLog:
    records: list[FaultRecord] = field(default_factory=list)
    heal_errors: list[str] = field(default_factory=list)    # of the final healing

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.action.fault.value] = out.get(r.action.fault.value, 0) + 1
        return out

    def errors(self) -> list[str]:
        return [f"{r.action.description}: {r.error}" for r in self.records if r.error] \
            + self.heal_errors


class Nemesis:
    """Applies one fault at a time on its own thread: a quiet spell, a fault, its hold,
    its healing; `stop` heals whatever is in force and restarts every node it stopped."""

    def __init__(self, farm: FarmControl, faults: Sequence[Fault], rng: random.Random, *,
                 quiet: tuple[float, float] = (0.5, 1.5),
                 hold: tuple[float, float] = (1.0, 3.0),
                 note: Callable[[str, str], None] | None = None) -> None:
        if not faults:
            raise ValueError("the nemesis needs at least one fault kind")
        if any(f.needs_network for f in faults) and farm.network is None:
            raise ValueError("partition and delay faults need the fault proxy network")
        self._farm = farm
        self._faults = list(faults)
        self._rng = rng
        self._quiet = quiet
        self._hold = hold
        self._note = note or (lambda f, v: None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torture-nemesis", daemon=True)
        self.log = NemesisLog()
        self._down: set[int] = set()       # killed, to start again
        self._paused: set[int] = set()
        self._flooding: list[Flooding] = []
        self._membership_turn = 0
        self._schemes: Sequence[str] = farm.membership_schemes() \
            if Fault.MEMBERSHIP in faults else ()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop injecting and heal everything (joins the thread first). A step that
        fails is recorded in the log and the others still run."""
        self._stop.set()
        self._thread.join()
        steps: list[tuple[str, Callable[[], None]]] = []
        if self._farm.network is not None:
            steps.append(("heal the network", self._farm.network.heal))
        farm = self._farm
        steps += [("stop the flood", flood.stop) for flood in self._flooding]
        steps += [(f"resume n{n}", lambda n=n: farm.resume(n)) for n in sorted(self._paused)]
        steps += [(f"restart n{n}", lambda n=n: farm.restart(n)) for n in sorted(self._down)]
        if self._schemes:
            steps.append(("restore the configuration", farm.membership_restore))
        for what, step in steps:
            try:
                step()
            except Exception as error:      # noqa: BLE001 - reported with the verdict
                self.log.heal_errors.append(f"{what}: {type(error).__name__}: {error}")
        self._paused.clear()
        self._down.clear()
        self._flooding.clear()

    def _run(self) -> None:
        while not self._stop.wait(self._rng.uniform(*self._quiet)):
            action = plan(self._rng, self._faults, list(self._farm.node_ids),
                          self._leader(), self._hold, schemes=self._schemes,
                          turn=self._membership_turn)
            if action.fault is Fault.MEMBERSHIP:
                self._membership_turn += 1
            record = FaultRecord(action, time.monotonic())
            self.log.records.append(record)
            self._note(action.fault.value, action.description)
            try:
                record.detail = self._apply(action)
                self._stop.wait(action.hold)
                healed = self._heal(action)
                record.detail = "; ".join(filter(None, (record.detail, healed)))
            except Exception as error:      # noqa: BLE001 - reported, the run goes on
                record.error = f"{type(error).__name__}: {error}"
                if action.fault is Fault.MEMBERSHIP:
                    self._recover_membership(record)
            record.ended = time.monotonic()
            self._note("heal", action.description)

    def _recover_membership(self, record: FaultRecord) -> None:
        """After a membership fault that failed midway: start what it killed and put
        the configuration back, so that the run goes on from the usual farm."""
        try:
            for node in sorted(self._down):
                self._farm.restart(node)
                self._down.discard(node)
                self._farm.wait_ready(node, READY_TIMEOUT)
            self._farm.membership_restore()
        except Exception as error:          # noqa: BLE001 - reported with the verdict
            record.error += f"; and restoring the configuration: {type(error).__name__}: " \
                            f"{error}"

    def _leader(self) -> int | None:
        try:
            return self._farm.leader()
        except Exception:                   # noqa: BLE001 - no leader known right now
            return None

    def _apply(self, action: Action) -> str:
        """Apply the fault; what a membership fault did, in words ("" for others)."""
        farm, net = self._farm, self._farm.network
        if action.fault is Fault.KILL:
            for node in action.nodes:
                farm.kill(node)
                self._down.add(node)
        elif action.fault is Fault.RESTART:
            for node in action.nodes:
                farm.stop(node)
                farm.restart(node)
        elif action.fault is Fault.PAUSE:
            for node in action.nodes:
                farm.pause(node)
                self._paused.add(node)
        elif action.fault is Fault.PARTITION:
            assert net is not None
            for a, b in sorted(action.drops):
                net.drop(a, b)
        elif action.fault is Fault.MEMBERSHIP:
            return farm.membership_apply(action, self._down)
        elif action.fault is Fault.FLOOD:
            self._flooding = [farm.flood(node) for node in action.nodes]
        else:
            assert net is not None
            net.delay(action.delay, action.nodes)
        return ""

    def _heal(self, action: Action) -> str:
        if action.fault is Fault.MEMBERSHIP:
            return self._farm.membership_heal(action, self._down)
        if action.fault in (Fault.KILL, Fault.RESTART):
            for node in action.nodes:
                if action.fault is Fault.KILL:
                    self._farm.restart(node)
                    self._down.discard(node)
                # The next fault waits until the node is back (it knows a leader): a
                # second node down in a 3-node farm would only measure unavailability.
                if not self._farm.wait_ready(node, READY_TIMEOUT):
                    raise RuntimeError(f"n{node} did not rejoin within {READY_TIMEOUT:g}s")
        elif action.fault is Fault.PAUSE:
            for node in action.nodes:
                self._farm.resume(node)
                self._paused.discard(node)
        elif action.fault is Fault.FLOOD:
            floods, self._flooding = self._flooding, []
            return "; ".join(flood.stop() for flood in floods)
        elif action.fault.needs_network:
            assert self._farm.network is not None
            self._farm.network.heal()
        return ""


def connectivity(nodes: Sequence[int], drops: frozenset[tuple[int, int]]) -> dict[int, set[int]]:
    """Who each node can still send to under `drops` (for reports and tests)."""
    return {a: {b for b in nodes if b != a and (a, b) not in drops} for a in nodes}


def majority_sides(nodes: Sequence[int], drops: frozenset[tuple[int, int]]) -> list[set[int]]:
    """The groups of nodes that can all talk to each other both ways and form a
    majority (a partition that leaves none cannot elect a leader)."""
    reach = connectivity(nodes, drops)
    need = len(nodes) // 2 + 1
    sides = []
    for size in range(len(nodes), need - 1, -1):
        for group in itertools.combinations(nodes, size):
            if all(b in reach[a] for a in group for b in group if a != b):
                sides.append(set(group))
        if sides:
            break
    return sides
