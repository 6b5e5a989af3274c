"""The service's membership and admin calls (getServers, status, updateVoters,
updateObservers, AddServer, RemoveServer, leader transfer, and JRaft's own membership
requests), and the waits that answer a call once its change took effect (or at its
deadline)."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from consensus.common.errors import FarmError, Incomplete, NotLeaderError
from consensus.raft import MembershipChangeError, NotLeader, Role
from consensus.wire import extensions as ext
from consensus.wire.errors import ProtocolError
from consensus.wire.jraft import (ClusterServer, MessageType, RaftResponse, ServerId,
                                  check_shape, encode)
from consensus.wire.jraft_mapping import ResponseSlot, endpoint_from_jraft

if TYPE_CHECKING:
    from consensus.runtime.connection import Connection
    from consensus.runtime.node_view import NodeView

log = logging.getLogger("garlicfarm.service")

DEFAULT_CALL_TIMEOUT = 10.0
LATER = object()        #: a call's result when it is answered later


class Answers(Protocol):
    """How calls are answered (the Service)."""

    def reply(self, conn: "Connection", call_id: int, result: Any) -> None: ...
    def fail(self, conn: "Connection", call_id: int, exc: FarmError) -> None: ...
    def not_leader(self) -> NotLeaderError: ...
    def leader_and_term(self) -> tuple[int | None, int]: ...


@dataclass(slots=True)
class AdminWait:
    """An admin call answered when `check()` says so (or at its deadline). A change
    only a leader drives (`leader_only`) is answered NOT_LEADER as soon as this node
    stops leading: the client retries at the new leader (membership calls are
    idempotent) instead of waiting here for a change nobody drives any more."""
    conn: "Connection"
    call_id: int
    deadline: float
    check: Callable[[], tuple[bool, Any]]
    timeout_message: str | Callable[[], str]
    leader_only: bool = True
    given_up: Callable[[], None] | None = None  #: called when it ends unanswered-for


def deadline(args: dict) -> float:
    """When a call with these arguments times out (its `timeout`, seconds)."""
    timeout = args.get("timeout", DEFAULT_CALL_TIMEOUT)
    return time.monotonic() + max(0.05, float(timeout))


class AdminWaits:
    """Calls answered when `check()` says so, looked at every tick."""

    def __init__(self, answers: Answers) -> None:
        self._answers = answers
        self._waits: list[AdminWait] = []

    def __len__(self) -> int:
        return len(self._waits)

    def add(self, conn: "Connection", call: ext.Call, args: dict,
            check: Callable[[], tuple[bool, Any]], timeout_message: str | Callable[[], str],
            *, leader_only: bool = True, given_up: Callable[[], None] | None = None) -> object:
        self._waits.append(AdminWait(conn, call.call_id, deadline(args), check,
                                     timeout_message, leader_only, given_up))
        return LATER

    def tick(self, now: float, leading: bool) -> None:
        if not self._waits:
            return
        answers = self._answers
        keep = []
        for wait in self._waits:
            if wait.conn.closed:
                if wait.given_up is not None:
                    wait.given_up()
                continue
            if wait.leader_only and not leading:
                answers.fail(wait.conn, wait.call_id, answers.not_leader())
                continue
            try:
                done, result = wait.check()
            except FarmError as exc:
                answers.fail(wait.conn, wait.call_id, exc)
                continue
            if done:
                if result is not LATER:     # LATER: handed on (a log read's page)
                    answers.reply(wait.conn, wait.call_id, result)
            elif now >= wait.deadline:
                message = f"{wait.timeout_message} (it may still complete: check " \
                    f"get_servers)" if isinstance(wait.timeout_message, str) \
                    else wait.timeout_message()      # a callable says it all
                answers.fail(wait.conn, wait.call_id, Incomplete(message))
                if wait.given_up is not None:
                    wait.given_up()
            else:
                keep.append(wait)
        self._waits = keep

    def clear(self) -> None:
        self._waits.clear()


class MembershipCalls:
    #: the calls this class answers (methods of the same name)
    CALLS = ("get_servers", "status", "update_voters", "update_observers", "add_server",
             "remove_server", "transfer_leader")

    def __init__(self, node: "NodeView", answers: Answers, waits: AdminWaits) -> None:
        self.node, self.answers, self.waits = node, answers, waits

    def jraft_request(self, conn: "Connection", wire, slot: ResponseSlot | None) -> None:
        """JRaft's AddServerRequest / RemoveServerRequest: the answer says whether the
        change was started."""
        raft = self.node.core
        accepted = False
        try:
            check_shape(wire)
            payload = wire.entries[0].payload()
            if isinstance(payload, ClusterServer):
                address = endpoint_from_jraft(payload.endpoint)
                self.node.learn_address(payload.id, address)
                raft.add_server(payload.id, address)
            elif isinstance(payload, ServerId):
                raft.remove_server(payload.id)
            accepted = True
        except (ProtocolError, MembershipChangeError, NotLeader) as exc:
            log.info("node %d: refused %s from %s: %s", self.node.id,
                     MessageType(wire.message_type).wire_name, conn.label, exc)
        if slot is not None:
            slot.data = encode(RaftResponse(slot.response_type, self.node.id,
                                            raft.leader_id or 0, raft.term,
                                            raft.last_index + 1, accepted))
            self.node.transport.mark_dirty(conn)

    def members_view(self) -> dict:
        node = self.node
        raft = node.core
        config = raft.configuration
        address = node.address_of
        progress = raft.progress if raft.role is Role.LEADER else {}
        contact = raft.follower_contact()
        tick = node.config.tick
        statuses = node.machine.statuses
        members = {}
        leader, term = self.answers.leader_and_term()
        for member in sorted(config.members | set(statuses)):
            if member == leader:
                role = "leader"
            elif member in config.voters:
                role = "follower"
            elif member in config.outgoing:
                role = "leaving"
            elif member in config.observers:
                role = "observer"
            else:
                role = "former"
            match = raft.last_index if member == node.id and raft.role is Role.LEADER else \
                (progress[member].match if member in progress else None)
            heard = contact.get(member)
            members[member] = {"endpoint": address(member) or "", "role": role,
                               "voter": config.is_voter(member), "match": match,
                               "status": statuses.get(member),
                               "ack_age": None if heard is None or heard.ack_age is None
                               else round(heard.ack_age * tick, 3),
                               "reachable": True if member == node.id else
                               None if heard is None else heard.reachable}
        return {"leader": leader, "term": term, "commit": raft.commit_index,
                "voters": {v: address(v) or "" for v in sorted(config.voters)},
                "observers": {o: address(o) or "" for o in sorted(config.observers)},
                "outgoing": {o: address(o) or "" for o in sorted(config.outgoing)},
                "members": members, "node": node.id}

    def get_servers(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        return self.members_view()

    def status(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        view = self.members_view()
        view["publisher"] = self.node.machine.publisher()
        view["cluster"] = self.node.config.cluster
        view["self"] = mine = self.node.status()
        view["leader_since"] = mine.get("leaderSince")
        view["election_timeout"] = self.node.config.election_ticks * self.node.config.tick
        if self.node.core.role is Role.LEADER:
            view["consumers"] = self.node.consumers.view()
        return view

    def _leader(self):
        raft = self.node.core
        if raft.role is not Role.LEADER:
            raise self.answers.not_leader()
        return raft

    def _committed(self, conn: "Connection", call: ext.Call, args: dict, result: Any,
                   what: str) -> object:
        """A membership call whose change is already in force: answer once it commits
        (a retry of a change made through a leader that lost leadership meanwhile)."""
        return self.waits.add(conn, call, args, lambda: (self._config_committed(), result),
                          f"the configuration {what} did not commit in time")

    def _config_committed(self) -> bool:
        return self.node.log.configuration_committed

    def _addresses(self, args: dict, key: str = "add") -> dict[int, str]:
        raw = args.get(key) or {}
        added = {int(k): str(v) for k, v in raw.items()}
        for node_id, endpoint in added.items():
            self._check_not_moved(node_id, endpoint)
        for node_id, endpoint in added.items():
            self.node.learn_address(node_id, endpoint)
        return added

    def _check_not_moved(self, node_id: int, endpoint: str) -> None:
        """Adding a member again is a no-op only at its own endpoint: a member cannot
        move by being added (its log and votes live at the old one)."""
        config = self.node.core.configuration
        if node_id not in config.members:
            return
        current = self.node.address_of(node_id)
        if current and current != endpoint:
            kind = "voter" if node_id in config.voters else "observer" \
                if node_id in config.observers else "leaving voter"
            raise FarmError(f"node {node_id} is already a {kind} at {current}, not "
                            f"{endpoint}: remove it first to move it (or give the new node "
                            f"another id)")

    def update_voters(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        self._needs("joint consensus", ("garlicfarm", "marker"), "JRaft's configuration "
                    "entries hold voters only: change one server at a time with add_server "
                    "and remove_server")
        raft = self._leader()
        add = self._addresses(args)
        remove = {int(r) for r in args.get("remove") or ()}
        voters = (raft.configuration.voters | set(add)) - remove
        if voters == raft.configuration.voters and not raft.configuration.is_joint:
            return self._committed(conn, call, args, sorted(voters), "with these voters")
        log.info("node %d: changing the voters to %s (joint consensus)", self.node.id,
                 sorted(voters))
        raft.change_voters(voters, add)

        def check():
            config = raft.configuration
            done = not config.is_joint and config.voters == voters and self._config_committed()
            return done, sorted(config.voters)
        return self.waits.add(conn, call, args, check,
                          f"the voters did not become {sorted(voters)} in time")

    def _needs(self, what: str, wires: tuple[str, ...], instead: str) -> None:
        wire = self.node.config.wire
        if wire not in wires:
            raise FarmError(f"{what} cannot travel on --wire {wire} ({instead})")

    def update_observers(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        self._needs("observers' pulls", ("garlicfarm",), "observers need the garlicfarm "
                    "wire's extensions")
        raft = self._leader()
        add = self._addresses(args)
        remove = {int(r) for r in args.get("remove") or ()}
        config = raft.configuration
        if set(add) <= config.observers and not remove & config.observers:
            return self._committed(conn, call, args, sorted(config.observers),
                                   "with these observers")
        log.info("node %d: observers +%s -%s", self.node.id, sorted(add), sorted(remove))
        raft.update_observers(add=set(add), remove=remove, addresses=add)

        def check():
            config = raft.configuration
            done = set(add) <= config.observers and not (remove & config.observers) \
                and self._config_committed()
            return done, sorted(config.observers)
        return self.waits.add(conn, call, args, check, "the observer change did not commit in time")

    def add_server(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        self._needs("JRaft's AddServer flow", ("garlicfarm", "jraft"),
                    "use update_voters, which needs only AppendEntries")
        raft = self._leader()
        node_id, endpoint = int(args["id"]), str(args["endpoint"])
        self._check_not_moved(node_id, endpoint)
        if node_id in raft.configuration.voters:
            return self._committed(conn, call, args, node_id, f"with node {node_id}")
        self.node.learn_address(node_id, endpoint)
        log.info("node %d: adding node %d at %s (AddServer)", self.node.id, node_id, endpoint)
        raft.add_server(node_id, endpoint)

        def check():
            if node_id in raft.configuration.voters:
                return self._config_committed(), node_id
            if raft.role is Role.LEADER:
                try:                    # the leader gives up on a silent joiner after a
                    raft.add_server(node_id, endpoint)      # few invitations: invite again
                except MembershipChangeError:
                    pass                # still under way
            return False, node_id

        def timed_out() -> str:
            error = self.node.transport.dial_error(node_id)
            if error is not None or not self._heard_from(node_id):
                why = f" (the leader's last attempt: {error})" if error else ""
                return (f"node {node_id} did not answer at {endpoint}{why}: it is unreachable "
                        f"or not running. Start it with join = true (the farm's cluster and "
                        f"credentials) where the leader reaches it, then add it again; the "
                        f"leader has stopped inviting it")
            return (f"node {node_id} answered at {endpoint} but did not finish catching up "
                    f"in time (it may still complete: check get_servers)")

        def given_up() -> None:
            if node_id not in raft.configuration.voters:
                log.info("node %d: the add_server call for node %d ended; stopped inviting "
                         "node %d (the leader drops it after its last invitations)",
                         self.node.id, node_id, node_id)
        return self.waits.add(conn, call, args, check, timed_out, given_up=given_up)

    def _heard_from(self, node_id: int) -> bool:
        """Whether a connection from or to `node_id` is open (it answered us)."""
        transport = self.node.transport
        return any(peer == node_id for peer, _ in transport.outgoing) or \
            node_id in transport.last_in

    def remove_server(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        raft = self._leader()
        node_id = int(args["id"])
        config = raft.configuration
        if node_id not in config.members:
            return self._committed(conn, call, args, node_id, f"without node {node_id}")
        log.info("node %d: removing node %d", self.node.id, node_id)
        if node_id in config.observers:
            raft.update_observers(remove={node_id})
        elif self.node.config.wire == "marker" or \
                (args.get("force") and self.node.config.wire == "garlicfarm"):
            raft.change_voters(config.voters - {node_id})   # joint consensus
        else:
            raft.remove_server(node_id)

        def check():
            config = raft.configuration
            return node_id not in config.members and not config.is_joint \
                and self._config_committed(), node_id
        return self.waits.add(conn, call, args, check, f"node {node_id} was not removed in time")

    def transfer_leader(self, conn: "Connection", call: ext.Call, args: dict) -> Any:
        self._needs("TimeoutNow (leader transfer)", ("garlicfarm",), "it is a garlicfarm "
                    "extension")
        raft = self._leader()
        target = int(args["to"])
        raft.transfer_leader(target)

        def check():
            moved = raft.role is not Role.LEADER or raft.transferring_to is None
            return moved, {"leader": raft.leader_id}
        return self.waits.add(conn, call, args, check, f"leadership did not move to {target}",
                          leader_only=False)
