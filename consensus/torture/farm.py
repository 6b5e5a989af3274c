"""The torture's farm and clients: a `LocalCluster` whose peer links go through the fault
proxy (`faultproxy.ProxyNetwork`) when the faults need it, what the nemesis does to it
(kill, stop, restart, pause, resume, membership changes with fresh nodes, floods) and the
KV client each workload thread drives (`TortureClient`)."""
from __future__ import annotations

import contextlib
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any, Callable

from consensus.torture.faultproxy import ProxyNetwork
from consensus.torture.flood import Flood
from consensus.torture.nemesis import MEMBERSHIP_SCHEMES, Action

if TYPE_CHECKING:
    from consensus.torture.run import TortureOptions

MEMBERSHIP_TIMEOUT = 60.0   # seconds one membership step may take (retries included)
LEAVE_TIMEOUT = 20.0        # a removed node stops by itself within this (else SIGTERM)


class TortureFarm:
    """A `LocalCluster` whose peer links go through a `ProxyNetwork` (when the faults need
    it), plus what the nemesis needs: kill, stop, restart, pause, resume, the leader."""

    def __init__(self, options: TortureOptions) -> None:
        from consensus.torture.local import LocalCluster

        self.node_ids = list(range(1, options.nodes + 1))
        self.network: ProxyNetwork | None = None
        if any(f.needs_network for f in options.faults):
            self.network = ProxyNetwork(self.node_ids)
        self._client_timeout = options.client_timeout
        self._reads = options.reads
        self._wire = options.wire
        self._admin = None
        self.spawned: list[int] = []        # nodes started by membership faults
        self.retired: set[int] = set()      # ... and out of the farm for good
        if options.data_dir is not None:
            options.data_dir.mkdir(parents=True, exist_ok=True)
        self.partitions = options.partitions
        self._cluster = LocalCluster(
            nodes=options.nodes, wire=options.wire, cluster=options.cluster,
            fsync=options.fsync, data_dir=None if options.data_dir is None
            else str(options.data_dir), partitions=options.partitions,
            peer_address=self._peer_address if self.network is not None else None)
        try:
            self.farm = self._cluster.__enter__()
        except BaseException:
            self._close_network()
            raise

    def _peer_address(self, source: int, target: int, endpoint: str) -> str:
        """Links between the original nodes go through the fault proxy; links to and
        from the nodes of membership faults do not (the proxy's mesh is fixed)."""
        if self.network is None or source not in self.node_ids or target not in self.node_ids:
            return endpoint
        return self.network.link(source, target, endpoint)

    def client(self, index: int) -> "TortureClient | PartitionedClient":
        """Client `index`, bound to a home member (round robin), as jepsen binds clients
        to nodes: its reads go there (a member that believes it still leads answers them
        itself, so a stale leader is seen); its writes start there and follow the
        redirects to the leader (a separate connection, so reads stay home). On a farm
        of several partitions each key goes to its partition's clients."""
        home = self.farm.endpoint_of(self.node_ids[index % len(self.node_ids)])
        timeout = self.client_timeout(index)

        def connect(partition: int) -> TortureClient:
            return TortureClient(
                self.farm.client(timeout=timeout, endpoints=home, partition=partition),
                self.farm.client(timeout=timeout, endpoints=home, partition=partition),
                self._reads)
        return connect(0) if self.partitions == 1 else PartitionedClient(connect,
                                                                         self.partitions)

    def final_client(self, timeout: float) -> Any:
        """The client of the final reads (lease reads at any member, every partition)."""
        if self.partitions == 1:
            return self.farm.client(timeout=timeout)
        return PartitionedClient(lambda p: self.farm.client(timeout=timeout, partition=p),
                                 self.partitions)

    def client_timeout(self, index: int) -> float:
        """Odd clients wait three times longer: short calls give up on a stalled or cut
        off member soon (and meet the rest of the farm), long ones retry the same request
        across a leader change (and meet the de-duplication of retried writes)."""
        return self._client_timeout * (3 if index % 2 else 1)

    def wait_for_leader(self, timeout: float) -> int:
        """Partition 0's leader, once every partition has one (FarmError at `timeout`)."""
        deadline = time.monotonic() + timeout
        for partition in range(self.partitions - 1, 0, -1):
            self.farm.wait_for_leader(timeout=max(0.1, deadline - time.monotonic()),
                                      partition=partition)
        return self.farm.wait_for_leader(timeout=max(0.1, deadline - time.monotonic()))

    def kill(self, node_id: int) -> None:
        self.farm.kill(node_id)

    def stop(self, node_id: int) -> None:
        self.farm.stop(node_id)

    def restart(self, node_id: int) -> None:
        self.farm.restart(node_id)

    def pause(self, node_id: int) -> None:
        self.farm.pause(node_id)

    def resume(self, node_id: int) -> None:
        self.farm.resume(node_id)

    def wait_ready(self, node_id: int, timeout: float) -> bool:
        """Wait until `node_id` answers and names a leader; False at the deadline."""
        from consensus.common.errors import FarmError

        deadline = time.monotonic() + timeout
        with self.farm.client(timeout=1.0, endpoints=self.farm.endpoint_of(node_id)) as c:
            while time.monotonic() < deadline:
                try:
                    if c.ping(self.farm.endpoint_of(node_id)).get("leader") is not None:
                        return True
                except FarmError:
                    pass
                time.sleep(0.05)
        return False

    def leader(self) -> int | None:
        """The leader a member names right now (short timeout; None when unknown)."""
        if self._admin is None:
            self._admin = self.farm.client(timeout=1.0)
        return self._admin.get_servers().leader_id

    # -- membership faults (nemesis: Fault.MEMBERSHIP) -------------------------------
    def membership_schemes(self) -> tuple[str, ...]:
        return MEMBERSHIP_SCHEMES[self._wire]

    def membership_apply(self, action: Action, down: set[int]) -> str:
        """Start a membership fault (`Action.scheme`); what it did, in words."""
        farm = self.farm
        if action.scheme == "add-voter":
            node = self._spawn()
            self._until(f"AddServer n{node}", lambda c, v: c.add_server(
                node, farm.endpoint_of(node), timeout=5.0), lambda v: node in v.voters)
            return f"n{node} added as a voter (AddServer)"
        if action.scheme == "observer":
            node = self._spawn(observer=True)
            self._add_observer(node)
            self._until(f"promoting observer n{node} (joint consensus)",
                        lambda c, v: c.update_voters(add={node: farm.endpoint_of(node)},
                                                     timeout=5.0),
                        lambda v: node in v.voters)
            return f"n{node} added as an observer, promoted to a voter"
        if action.scheme == "joint-kill":
            node = self._spawn()
            leader = self.leader_or_none()
            change = threading.Thread(target=self._quietly, name="torture-joint", daemon=True,
                                      args=(lambda c: c.update_voters(
                                          add={node: farm.endpoint_of(node)}, timeout=5.0),))
            change.start()
            time.sleep(action.kill_after)
            killed = ""
            if leader is not None and leader in self.node_ids:
                self.kill(leader)
                down.add(leader)
                killed = f", leader n{leader} killed"
            change.join(MEMBERSHIP_TIMEOUT)
            return f"joint change adding n{node} started{killed or ', no leader to kill'}"
        raise ValueError(f"unknown membership scheme {action.scheme!r}")

    def membership_heal(self, action: Action, down: set[int]) -> str:
        """Undo a membership fault: the configuration as it was; what it did."""
        farm = self.farm
        node = self.spawned[-1]
        if action.scheme == "add-voter":
            self._remove_voter(node, leave=True)
            self._retire(node)
            return f"n{node} removed (RemoveServer) and stopped"
        if action.scheme == "observer":
            # demoted: a voter cannot become an observer in one configuration; it is
            # removed (and stops), then comes back as an observer
            self._remove_voter(node, leave=False)
            farm.restart(node)
            self._add_observer(node)
            self._caught_up(node)
            self._until(f"removing observer n{node}", lambda c, v: c.update_observers(
                remove=[node], timeout=5.0), lambda v: not _member(v, node))
            self._retire(node)
            return f"n{node} demoted (removed, back as an observer, caught up), removed"
        restarted = []
        for killed in sorted(down):
            farm.restart(killed)
            down.discard(killed)
            restarted.append(f"n{killed}")
            if not self.wait_ready(killed, MEMBERSHIP_TIMEOUT):
                raise RuntimeError(f"n{killed} did not rejoin within {MEMBERSHIP_TIMEOUT:g}s")
        self._until(f"the joint change adding n{node}", lambda c, v: c.update_voters(
            add={node: farm.endpoint_of(node)}, timeout=5.0), lambda v: node in v.voters)
        self._remove_voter(node, leave=False)
        self._retire(node)
        return (f"{', '.join(restarted) or 'nothing'} restarted; n{node} a voter, then "
                f"removed by joint consensus and stopped")

    def membership_restore(self) -> None:
        """The original voters and no one else; every node of a membership fault
        stopped."""
        view = self._until("reading the configuration", lambda c, v: None, lambda v: True)
        for node in sorted(set(view.observers) - set(self.node_ids)):
            self._until(f"removing observer n{node}", lambda c, v, n=node: c.update_observers(
                remove=[n], timeout=5.0), lambda v, n=node: not _member(v, n))
        for node in sorted((set(view.voters) | set(view.outgoing)) - set(self.node_ids)):
            self._remove_voter(node, leave=False)
        for node in self.spawned:
            self._retire(node)

    def flood(self, node_id: int) -> Flood:
        """Hostile and greedy clients at `node_id`'s client endpoint (`flood`)."""
        farm = self.farm
        flood = Flood(farm.endpoint_of(node_id), cluster=farm.cluster,
                      username=farm.username, password=farm.password)
        flood.start()
        return flood

    def leader_or_none(self) -> int | None:
        try:
            return self.leader()
        except Exception:               # noqa: BLE001 - no leader known right now
            return None

    def _spawn(self, observer: bool = False) -> int:
        node = self.farm.spawn(observer=observer)
        self.spawned.append(node)
        return node

    def _add_observer(self, node: int) -> None:
        self._until(f"adding observer n{node}", lambda c, v: c.update_observers(
            add={node: self.farm.endpoint_of(node)}, timeout=5.0),
            lambda v: node in v.observers)

    def _remove_voter(self, node: int, *, leave: bool) -> None:
        """Remove voter `node`: JRaft's RemoveServer (`leave`: the node is asked to
        leave; a leader hands its leadership over first) or joint consensus; then wait
        until it stopped by itself."""
        def step(client, view) -> None:
            if leave and view.leader_id == node:
                target = min(i for i in self.node_ids if self.farm.running(i))
                client.transfer_leader(target, timeout=5.0)
            elif leave:
                client.remove_server(node, timeout=5.0)
            else:
                client.update_voters(remove=[node], timeout=5.0)
        self._until(f"removing voter n{node}", step, lambda v: not _member(v, node))
        self._stopped(node)

    def _stopped(self, node: int) -> None:
        """A removed node stops by itself; one that did not within LEAVE_TIMEOUT (a
        partition hid its removal from it) gets SIGTERM."""
        deadline = time.monotonic() + LEAVE_TIMEOUT
        while self.farm.running(node) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.farm.running(node):
            self.farm.stop(node)

    def _retire(self, node: int) -> None:
        """A node of a membership fault, out of the configuration for good: once it
        stopped, its port is closed (it refuses connections, as a machine taken away
        would; clients that learned its endpoint move on at once)."""
        if node in self.retired:
            return
        self._stopped(node)
        self.farm.retire(node)
        self.retired.add(node)

    def _caught_up(self, node: int) -> None:
        """Wait until `node` applied what the leader had committed (an observer that
        came back pulls the log again)."""
        from consensus.common.errors import FarmError

        endpoint = self.farm.endpoint_of(node)
        deadline = time.monotonic() + MEMBERSHIP_TIMEOUT
        with self.farm.client(timeout=5.0) as client:
            target = None
            while time.monotonic() < deadline:
                try:
                    if target is None:
                        target = client.log_bounds()[1]
                    if client.log_bounds(endpoint)[1] >= target:
                        return
                except FarmError:
                    pass
                time.sleep(0.05)
        raise RuntimeError(f"observer n{node} did not catch up within {MEMBERSHIP_TIMEOUT:g}s")

    def _quietly(self, step) -> None:
        """A membership call whose outcome the nemesis checks later (the leader may die
        under it)."""
        from consensus.common.errors import FarmError

        try:
            with self.farm.client(timeout=5.0) as client:
                step(client)
        except FarmError:
            pass

    def _until(self, what: str, step, done, timeout: float = MEMBERSHIP_TIMEOUT):
        """Call `step(client, view)` (an idempotent membership call) until `done(view)`
        holds in the leader's view and no joint configuration is in force; the view.
        Refusals while another change runs, leader changes and timeouts are retried."""
        from consensus.common.errors import FarmError

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        with self.farm.client(timeout=5.0) as client:
            while True:
                try:
                    view = client.get_servers()
                    if done(view) and not view.outgoing:
                        return view
                    step(client, view)
                except FarmError as exc:
                    last = exc
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"{what} did not complete within {timeout:g}s (last "
                                       f"error: {type(last).__name__}: {last})")
                time.sleep(0.05)

    def close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
        for node_id in self.node_ids:       # a paused process would not stop
            if self.farm.pid(node_id) is not None:
                with contextlib.suppress(ProcessLookupError):
                    self.farm.resume(node_id)
        try:
            self._cluster.__exit__(None, None, None)
        finally:
            self._close_network()

    def _close_network(self) -> None:
        if self.network is not None:
            self.network.close()


def _member(view, node: int) -> bool:
    """In the configuration (`view.members` also lists former members with a status)."""
    return node in view.voters or node in view.outgoing or node in view.observers


class TortureClient:
    """The kv calls of one torture client: writes through `writer`, reads through
    `reader` with the run's consistency (`--reads`)."""

    def __init__(self, writer: Any, reader: Any, consistency: str) -> None:
        self._writer = writer
        self._reader = reader
        self._consistency = consistency

    def kv_get(self, key: str) -> str | None:
        return self._reader.kv_get(key, consistency=self._consistency)

    def kv_put(self, key: str, value: str) -> None:
        self._writer.kv_put(key, value)

    def kv_append(self, key: str, value: str) -> None:
        self._writer.kv_append(key, value)

    def kv_cas(self, key: str, expected: str, new: str) -> bool:
        return self._writer.kv_cas(key, expected, new)

    def close(self) -> None:
        self._writer.close()
        self._reader.close()


class PartitionedClient:
    """A torture client of a farm of several partitions: each key lives in one partition
    (CRC-32 of the key mod the partitions, fixed for the run) and its calls go to that
    partition's client, made on first use. The keys are independent registers, so the
    history stays checkable key by key while every partition's group is tortured."""

    def __init__(self, connect: Callable[[int], Any], partitions: int) -> None:
        self._connect = connect
        self._partitions = partitions
        self._clients: dict[int, Any] = {}

    def _client(self, key: str) -> Any:
        partition = zlib.crc32(key.encode()) % self._partitions
        client = self._clients.get(partition)
        if client is None:
            client = self._clients[partition] = self._connect(partition)
        return client

    def kv_get(self, key: str) -> str | None:
        return self._client(key).kv_get(key)

    def kv_put(self, key: str, value: str) -> None:
        self._client(key).kv_put(key, value)

    def kv_append(self, key: str, value: str) -> None:
        self._client(key).kv_append(key, value)

    def kv_cas(self, key: str, expected: str, new: str) -> bool:
        return self._client(key).kv_cas(key, expected, new)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
