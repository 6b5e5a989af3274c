"""A node's network edge: one listening port, a connection per peer we send requests to,
the connections others opened to us, all on one `selectors` loop (no asyncio: its
per-message overhead is too high for the latency goal, see docs/runtime.md).

Connections are directional for requests, as in JRaft and TaskFlux: a node sends its
requests on the connection it dialed and answers a peer's requests on the connection
that peer dialed. Paired responses go back in request order (`ResponseSlot`); if the
core drops a request without answering (it may, e.g. a vote during a leader's lease),
the transport answers with a refusal at the end of the loop turn, so the order holds.
Self-contained messages (pre-votes, extensions) may travel on either connection.

Opening connections blocks (TLS, proxies, the digest handshake), so it runs off the
loop: short dialer threads (`peer_dialer.py`) for ours, the gate thread (`gate.py`, which owns
the listening socket) for everyone else's; both hand the ready socket to the loop
through a queue and a wake-up socket pair. Messages for a peer being dialed wait in a
bounded queue.
"""
from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import deque
from typing import Callable

from consensus.net.security import Security, split_endpoint
from consensus.raft import AppendEntries, Message
from consensus.runtime.accept import AcceptedStream
from consensus.runtime.admission import AdmissionLimits
from consensus.runtime.budget import (CLIENT_QUANTUM, CLIENT_READ_PER_TURN,
                                      DEFAULT_CLIENT_BUDGET, MAX_CLIENT_UNWRITTEN,
                                      OUTSIDER_QUANTUM, PEER_READ_PER_TURN, ClientBudget,
                                      Trust, jraft_limits)
from consensus.runtime.connection import Connection
from consensus.runtime.gate import Gate
from consensus.runtime.groups import GroupSet
from consensus.runtime.jraft_wire import JRaftWire
from consensus.runtime.log_summary import LogSummary
from consensus.runtime.peer_dialer import PeerDialer, PeerKey
from consensus.runtime.peer_hosts import PeerHosts
from consensus.wire import jraft_mapping as jm
from consensus.wire.errors import ProtocolError
from consensus.wire.extensions import Quiesce, node_heartbeat_frame, quiesce_frame
from consensus.wire.jraft import MessageType, RaftRequest, RaftResponse

log = logging.getLogger("garlicfarm.transport")



class Transport:
    """See the module docstring. Single-threaded except for the dial/accept workers."""

    def __init__(self, *, node_id: int, wire: str, security: Security, listen: str,
                 listen_fd: int | None = None,
                 address_of: Callable[[int], str | None],
                 on_core: Callable[[int, Message], None],
                 on_client: Callable[[Connection, object, jm.ResponseSlot | None], None],
                 on_closed: Callable[[Connection], None],
                 accept_marker: Callable[[Connection, int], bool] | None = None,
                 on_client_ack: Callable[[RaftResponse], None] | None = None,
                 endpoint_of: Callable[[int], str | None] | None = None,
                 client_budget: int = DEFAULT_CLIENT_BUDGET,
                 limits: AdmissionLimits = AdmissionLimits(),
                 on_refused: Callable[[str], None] = lambda reason: None,
                 groups: GroupSet = GroupSet(1),
                 on_quiesce: Callable[[int, Quiesce], None] | None = None) -> None:
        self.node_id = node_id
        self.on_quiesce = on_quiesce    #: a leader's Quiesce of a group (None: refused)
        self.wire_name = wire
        self.security = security
        self.address_of = address_of
        self.on_core = on_core
        self.on_client = on_client
        self.on_closed = on_closed
        self.on_client_ack = on_client_ack
        self.groups = groups
        self.selector = selectors.DefaultSelector()
        if listen_fd is not None:
            self.listener = socket.socket(fileno=listen_fd)
        else:
            host, port = split_endpoint(listen, "--listen", any_port=True)
            self.listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind((host, port))
            self.listener.listen(256)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wakeup")
        self._handoffs: deque = deque()
        self._handoff_lock = threading.Lock()
        # (peer id, wire) -> connection we dialed; the wire is ours, except the
        # garlicfarm side connections a marker node uses for client requests (status)
        self.outgoing: dict[tuple[int, str], Connection] = {}
        self.dialer = PeerDialer(node_id=node_id, security=security,
                                 address_of=address_of, hand_off=self._hand_off)
        self.incoming: set[Connection] = set()
        self._incoming_peers: set[Connection] = set()   #: let in as peers (gate counts)
        self.last_in: dict[int, Connection] = {}
        #: peer id -> when we last read bytes from it (any frame, any connection): the
        #: node-level liveness that quiesced groups rely on (docs/runtime.md)
        self.heard: dict[int, float] = {}
        self._new_slots: list[tuple[Connection, jm.ResponseSlot]] = []
        self._generation: dict[int, int] = {}   # group -> Readys handed out so far
        # id(answer) -> (answer, connection, slot): the slot a handed-out answer fills
        self._claims: dict[int, tuple[Message, Connection, jm.ResponseSlot]] = {}
        self._dirty: set[Connection] = set()
        self.bodies: dict[int, dict] = {}   # group -> its last AppendEntries body encoded
        self.jraft = JRaftWire(self, extensions=(wire == "garlicfarm"))
        self.garlicfarm = self.jraft if wire == "garlicfarm" else JRaftWire(self, True)
        self.marker = None
        if wire == "marker":
            from consensus.runtime.marker_wire import MarkerWire
            self.marker = MarkerWire(self, accept_marker)
        self._closing = False
        self.on_bad_input: Callable[[str], None] = lambda kind: None   # metrics
        # who may become a peer: a configured member (from its endpoint's host when
        # it did not authenticate)
        self.peer_hosts = PeerHosts(endpoint_of or (lambda peer_id: None), node_id)
        self.budget = ClientBudget(client_budget)
        self._behind: set[Connection] = set()   # read up to their share: more next turn
        self.woke = self.woke_cpu = 0.0         # when the last wait ended (loop turn time)
        self._turn = 0
        self.bad_packets = LogSummary(log, logging.INFO, "corrupt packets")
        self.bad_streams = LogSummary(log, logging.WARNING, "corrupt streams closed")
        self.bad_groups = LogSummary(log, logging.WARNING, "frames for groups not hosted")
        self.gate = Gate(self.listener, security=security, wire=wire, limits=limits,
                         hand_off=lambda stream: self._hand_off(("accepted", stream)),
                         is_member=self.peer_hosts.is_member, on_refused=on_refused)
        self.gate.start()

    # -- wiring of the wires --------------------------------------------------------------
    def _wire_of_kind(self, kind: str):
        if kind == "marker":
            return self.marker
        return self.garlicfarm if kind == "garlicfarm" else self.jraft

    def _wire_of(self, conn: Connection):
        return self._wire_of_kind(conn.kind)

    # -- the loop -------------------------------------------------------------------------
    def poll(self, timeout: float) -> None:
        """Wait for sockets, then read: peers first, each as much as it has (up to
        `PEER_READ_PER_TURN`), then clients and outsiders within the turn's share
        (`CLIENT_READ_PER_TURN`), the least recently served first, so a turn's length
        is bounded whatever clients send (docs/runtime.md)."""
        behind = self._behind
        clients: list[Connection] = []
        ready = self.selector.select(0.0 if behind else timeout)
        self.woke, self.woke_cpu = time.monotonic(), time.thread_time()
        for key, mask in ready:
            data = key.data
            if data == "wakeup":
                try:
                    self._wake_r.recv(4096)
                except BlockingIOError:
                    pass
            else:
                conn: Connection = data
                if mask & selectors.EVENT_WRITE:
                    self._write(conn)
                if mask & selectors.EVENT_READ and not conn.closed and conn not in behind:
                    if conn.trust is Trust.PEER:
                        self._read(conn, PEER_READ_PER_TURN)
                    else:
                        clients.append(conn)
        if behind:
            self._behind = set()
            for conn in behind:
                if conn.closed or conn.paused:
                    continue
                if conn.trust is Trust.PEER:
                    self._read(conn, PEER_READ_PER_TURN)
                else:
                    clients.append(conn)
        if clients:
            self._read_clients(clients)
        if self._handoffs:
            self._take_handoffs()

    def _read_clients(self, clients: list[Connection]) -> None:
        """Round-robin within the turn's share: who waited longest goes first; those the
        share did not reach are read first next turn."""
        self._turn += 1
        turn = self._turn
        share = CLIENT_READ_PER_TURN
        if len(clients) > 1:
            clients.sort(key=lambda c: c.served)
        for conn in clients:
            if conn.closed or conn.paused:
                continue
            if share <= 0:
                self._behind.add(conn)
                continue
            conn.served = turn
            quantum = CLIENT_QUANTUM if conn.trust is Trust.CLIENT else OUTSIDER_QUANTUM
            share -= self._read(conn, min(share, quantum))

    def _read(self, conn: Connection, limit: int) -> int:
        """Read up to `limit` bytes into the wire; the bytes read."""
        data, eof = conn.receive(limit)
        if data:
            if conn.peer_id is not None and conn.trust is Trust.PEER:
                self.heard[conn.peer_id] = self.woke
            try:
                self._wire_of(conn).on_data(conn, data)
            except ProtocolError as exc:
                self._corrupt(conn, exc)
                return len(data)
        if eof:
            if not conn.closed:
                self.close(conn)
        elif not conn.closed:
            if conn.trust is not Trust.PEER:
                self._account(conn)
            if not conn.paused and conn.more_to_read(len(data), limit):
                self._behind.add(conn)
        return len(data)

    def _corrupt(self, conn: Connection, exc: ProtocolError) -> None:
        """Close a connection whose stream cannot go on: a peer's is logged, an
        outsider's or client's summarised per address (they can repeat it at will)."""
        self.on_bad_input("corrupt_stream")
        if conn.trust is Trust.PEER:
            log.warning("closing %s: corrupt stream: %s", conn.label, exc)
        else:
            self.bad_streams.note(_host_of(conn.label), f"closing {conn.label}: corrupt "
                                  f"stream: {exc}")
        self.close(conn)

    def _account(self, conn: Connection) -> None:
        """Count a client's (outsider's) bytes in the budget; pause it when they do not
        fit, close it when it reads none of its answers."""
        if len(conn.out) > MAX_CLIENT_UNWRITTEN:
            log.warning("closing %s: %d bytes of answers unread (a client may leave at most "
                        "%d)", conn.label, len(conn.out), MAX_CLIENT_UNWRITTEN)
            self.close(conn)
            return
        was = conn.paused
        if self.budget.account(conn) and not was:
            self._behind.discard(conn)
            self._watch(conn)

    def _watch(self, conn: Connection) -> None:
        """Watch the socket for what it needs: reading unless paused, writing while
        output waits."""
        events = (0 if conn.paused else selectors.EVENT_READ) | \
            (selectors.EVENT_WRITE if conn.writing else 0)
        if events == conn.events or conn.closed:
            return
        if not conn.events:
            self.selector.register(conn.sock, events, conn)
        elif not events:
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, events, conn)
        conn.events = events

    def _write(self, conn: Connection) -> None:
        if conn.closed:
            return
        try:
            done = conn.flush()
        except OSError:
            self.close(conn)
            return
        if done and conn.writing:
            conn.writing = False
            self._watch(conn)
        if conn.trust is not Trust.PEER:
            self._account(conn)

    # -- peers among the connections --------------------------------------------------------
    def verified_peer(self, conn: Connection, peer_id: int) -> bool:
        """Whether `conn` may speak for `peer_id`: a configured member, from its
        endpoint's host when the connection did not authenticate."""
        if conn.trust is Trust.CLIENT:
            return self.peer_hosts.is_member(peer_id)
        try:
            address = conn.sock.getpeername()[0]
        except OSError:
            return False
        return self.peer_hosts.comes_from(peer_id, address)

    def promote(self, conn: Connection, peer_id: int) -> None:
        """`conn` showed it is peer `peer_id`: the wire's full limits, read first, no
        budget. A peer dials each of us once per wire, so an older connection that
        showed the same is gone (or an impostor's): closed, which bounds what claiming
        a member's id can hold."""
        if conn.trust is Trust.PEER:
            return
        log.debug("%s is node %d", conn.label, peer_id)
        for other in list(self.incoming):
            if other is not conn and other.trust is Trust.PEER and other.kind == conn.kind \
                    and other.peer_id == peer_id:
                self.close(other)
        conn.trust = Trust.PEER
        if conn.kind == "marker":
            self.marker.promote(conn)
        else:
            conn.decoder.limits = jraft_limits(Trust.PEER)
            conn.decoder.vet = None
        was = conn.paused
        self.budget.release(conn)
        if was:
            self._watch(conn)

    def bad_packet(self, conn: Connection, reason: str) -> None:
        """A packet whose checksum failed (the marker wire asks for it again)."""
        self.on_bad_input("checksum")
        self.bad_packets.note(conn.label, f"corrupt packet ({reason})")

    def mark_dirty(self, conn: Connection) -> None:
        self._dirty.add(conn)

    def handed_out(self, answers: list[Message], group: int = 0) -> None:
        """Group `group`'s core handed out a Ready: claim the slots its paired answers
        will fill (they leave once the Ready is persisted, maybe turns later). A slot of
        that group stepped before this Ready and not claimed by it was dropped by the
        core."""
        for msg in answers:
            rtype = jm.fifo_response_type(msg)
            if rtype is not None:
                found = self._find_slot(msg, rtype, group)
                if found is not None:
                    found[1].claimed = True
                    self._claims[id(msg)] = (msg, *found)
        self._generation[group] = self._generation.get(group, 0) + 1

    def end_turn(self, term_of: Callable[[int], int]) -> None:
        """Answer what the cores dropped (`term_of(group)`: that group's term), then
        write everything queued; read again the clients whose claims fit the budget
        now."""
        if self._new_slots:
            pending = []
            for conn, slot in self._new_slots:
                if slot.data is not None or conn.closed:
                    continue
                if slot.claimed or slot.generation >= self._generation.get(slot.group, 0):
                    pending.append((conn, slot))    # answered later, or not stepped yet
                    continue
                log.debug("refusing a request from %s the core dropped (%s)", conn.label,
                          slot.response_type)
                self._wire_of(conn).refuse(slot, term_of(slot.group))
                self._dirty.add(conn)
            self._new_slots = pending
        self.flush()
        for conn in self.budget.resumable():
            self._watch(conn)
        now = time.monotonic()
        self.bad_packets.flush(now)
        self.bad_streams.flush(now)
        self.bad_groups.flush(now)

    def flush(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for conn in dirty:
            if conn.closed:
                continue
            conn.flush_slots(self.node_id)
            if not conn.out:
                continue
            try:
                done = conn.flush()
            except OSError:
                self.close(conn)
                continue
            if not done and not conn.writing:
                conn.writing = True
                self._watch(conn)
            if conn.trust is not Trust.PEER:
                self._account(conn)

    # -- requests from peers --------------------------------------------------------------
    def note_peer(self, conn: Connection, peer_id: int) -> None:
        if peer_id > 0:
            if conn.peer_id is None:
                conn.peer_id = peer_id
            self.last_in[peer_id] = conn
            if conn.trust is Trust.CLIENT and self.verified_peer(conn, peer_id):
                self.promote(conn, peer_id)

    def select_in(self, conn: Connection, group: int, source: int = 0) -> None:
        """A GroupSelect arrived: the frames that follow on `conn` belong to `group`. A
        group this node does not host is refused: a client gets an error naming the
        groups hosted (then the connection closes), a node's connection (`source`, the
        sender's id) closes with a warning (rate-limited per address): its --partitions
        differs from ours. A partition placed on other nodes (--replicas) is refused
        with NOT_LEADER naming its members: the client goes there."""
        if group in self.groups:
            conn.in_group = group
            return
        self.on_bad_input("unknown_group")
        text = self.groups.unhosted(group, self.node_id)
        if conn.trust is Trust.PEER or source > 0:
            self.bad_groups.note(_host_of(conn.label), f"closing the connection of node "
                                 f"{source or conn.peer_id} ({conn.label}): {text}; give "
                                 f"every node of the farm the same --partitions "
                                 f"and --replicas")
        else:
            self.reply(conn, self.groups.refusal(group, self.node_id,
                                                 self.peer_hosts.endpoint_of))
            self.bad_groups.note(_host_of(conn.label), f"refused {conn.label}: {text}")
            try:
                conn.flush()
            except OSError:
                pass
        self.close(conn)

    def owe(self, conn: Connection, slot: jm.ResponseSlot) -> None:
        """Promise an answer to a request just received, in order; it is refused at the
        end of a turn if the next Ready the core hands out does not answer it."""
        slot.group = group = conn.in_group
        slot.generation = self._generation.get(group, 0)
        conn.slots.append(slot)
        self._new_slots.append((conn, slot))

    def peer_request(self, conn: Connection, wire: RaftRequest) -> None:
        """A paired peer request: promise an answer in order, then hand it to the core."""
        key = (wire.last_log_index + 1, len(wire.entries)) \
            if wire.message_type == MessageType.APPEND_ENTRIES_REQUEST else None
        slot = jm.ResponseSlot(jm.RESPONSE_OF[wire.message_type], key, source=wire.source)
        self.owe(conn, slot)
        self.note_peer(conn, wire.source)
        if wire.destination != self.node_id:
            return              # refused at the end of the turn
        try:
            core = jm.from_wire(wire)
        except ProtocolError as exc:
            log.warning("refusing a malformed request from %s: %s", conn.label, exc)
            return
        self.on_core(conn.in_group, core)

    def peer_core_request(self, conn: Connection, core: AppendEntries, key) -> None:
        """`peer_request` for an AppendEntries the fast path decoded."""
        self.owe(conn, jm.ResponseSlot(MessageType.APPEND_ENTRIES_RESPONSE, key,
                                       source=core.source))
        self.note_peer(conn, core.source)
        if core.destination == self.node_id:
            self.on_core(conn.in_group, core)

    # -- sending core messages --------------------------------------------------------------
    def send(self, msg: Message, group: int = 0) -> None:
        """A core message of group `group` to its destination."""
        rtype = jm.fifo_response_type(msg)
        if rtype is not None:
            self._respond(msg, rtype, group)
            return
        dest = msg.destination
        conn = None
        if jm.is_answer(msg):
            conn = self.last_in.get(dest)
            if conn is not None and conn.closed:
                conn = None
        if conn is None:
            conn = self._outgoing(dest, self.wire_name)
            if conn is None:
                self.dialer.queue((dest, self.wire_name), msg, group)
                return
        if self._send_on(conn, msg, group):
            self._dirty.add(conn)

    def _send_on(self, conn: Connection, msg: Message, group: int) -> bool:
        if conn.kind == "marker":       # single-group wires (NodeConfig checks it)
            return self.marker.send(conn, msg)
        return self._wire_of(conn).send(conn, msg, group)

    def _respond(self, msg: Message, rtype: int, group: int) -> None:
        claim = self._claims.pop(id(msg), None)
        # the claim is this very answer's (an id is reused once its object is gone)
        found = claim[1:] if claim is not None and claim[0] is msg else \
            self._find_slot(msg, rtype, group)
        if found is None or found[0].closed:
            return          # the requester's connection is gone: Raft will ask again
        conn, slot = found
        self._wire_of(conn).respond(slot, msg)
        self._dirty.add(conn)

    def _find_slot(self, msg: Message, rtype: int, group: int):
        """The first open slot of `group`, on the requester's connections, this answer
        fits."""
        key = jm.slot_key(msg)
        for conn in self._answering(msg.destination):
            wire = self._wire_of(conn)
            for slot in conn.slots:
                if slot.data is None and not slot.claimed and slot.group == group and \
                        wire.matches(slot, msg, rtype, key):
                    return conn, slot
        return None

    def _answering(self, peer_id: int):
        conn = self.last_in.get(peer_id)
        if conn is not None and not conn.closed:
            yield conn
        for other in list(self.incoming):
            if other.peer_id == peer_id and other is not conn and not other.closed:
                yield other

    def send_client_entries(self, peer_id: int, entries) -> bool:
        """Send Application entries to `peer_id` (the leader) as a ClientRequest."""
        kind = "garlicfarm" if self.wire_name == "marker" else self.wire_name
        if kind == "garlicfarm" and self.security.username is None:
            return False
        conn = self._outgoing(peer_id, kind)
        if conn is None:
            return False
        self._wire_of(conn).send_client_entries(conn, entries)
        self._dirty.add(conn)
        return True

    def send_quiesce(self, peer_id: int, group: int, term: int, index: int,
                     answer: bool = False) -> None:
        """Tell follower `peer_id` that we quiesce `group` at `index` (on the connection
        our AppendEntries take, after them); `answer`: tell observer `peer_id`, on the
        connection its pull came by, after our answer to it."""
        conn = self.last_in.get(peer_id) if answer else None
        if conn is None or conn.closed:
            conn = self._outgoing(peer_id, self.wire_name)
        if conn is not None:
            conn.select_out(group, self.node_id)
            conn.out += quiesce_frame(self.node_id, peer_id, term, index)
            self._dirty.add(conn)

    def send_node_heartbeat(self, peer_id: int) -> None:
        """One NodeHeartbeat to `peer_id` (dials it when we have no connection)."""
        conn = self._outgoing(peer_id, self.wire_name)
        if conn is not None:
            conn.out += node_heartbeat_frame(self.node_id, peer_id)
            self._dirty.add(conn)

    def reply(self, conn: Connection, data: bytes, group: int = 0) -> None:
        """Bytes for a client connection (service answers, events) from group `group`."""
        if not conn.closed:
            conn.select_out(group, self.node_id)
            conn.out += data
            self._dirty.add(conn)

    # -- outgoing connections -----------------------------------------------------------------
    def _outgoing(self, peer_id: int, kind: str) -> Connection | None:
        conn = self.outgoing.get((peer_id, kind))
        if conn is not None and not conn.closed:
            return conn
        self.dialer.start((peer_id, kind))
        return None

    # -- incoming connections (the gate lets them in: gate.py) ---------------------------------
    def _hand_off(self, item) -> None:
        with self._handoff_lock:
            self._handoffs.append(item)
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _take_handoffs(self) -> None:
        with self._handoff_lock:
            items, self._handoffs = list(self._handoffs), deque()
        for item in items:
            if item[0] == "dialed":
                self._dialed(*item[1:])
            else:
                self._accepted(item[1])

    def _dialed(self, key: PeerKey, address: str, result) -> None:
        peer_id, kind = key
        queued = self.dialer.dialed(key, address, result)
        if queued is None:
            return
        if self._closing:
            result.sock.close()
            return
        label = f"node {peer_id} ({address})"
        wire = self._wire_of_kind(kind)
        conn = Connection(result.sock, kind, wire.decoder(), outgoing=True, peer_id=peer_id,
                          label=label)
        old = self.outgoing.get(key)
        if old is not None:
            self.close(old)
        self.outgoing[key] = conn
        self.selector.register(conn.sock, selectors.EVENT_READ, conn)
        if result.initial:
            self._feed(conn, result.initial)
        for msg, group in queued:
            if self._send_on(conn, msg, group):
                self._dirty.add(conn)

    def _accepted(self, stream: AcceptedStream) -> None:
        if self._closing:
            stream.sock.close()
            self.gate.release(stream.peer)
            return
        wire = self._wire_of_kind(stream.kind)
        conn = Connection(stream.sock, stream.kind, wire.decoder(), outgoing=False,
                          peer_id=None, label=stream.label, username=stream.username)
        self.incoming.add(conn)
        if stream.peer:
            self._incoming_peers.add(conn)
        wire.admit(conn)
        self.selector.register(conn.sock, selectors.EVENT_READ, conn)
        if stream.initial:
            self._feed(conn, stream.initial)

    def _feed(self, conn: Connection, data: bytes) -> None:
        try:
            self._wire_of(conn).on_data(conn, data)
        except ProtocolError as exc:
            self._corrupt(conn, exc)
            return
        if conn.trust is not Trust.PEER and not conn.closed:
            self._account(conn)

    # -- closing --------------------------------------------------------------------------------
    def close(self, conn: Connection) -> None:
        if conn.closed:
            return
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.close()
        if conn in self.incoming:
            self.incoming.discard(conn)
            self.gate.release(conn in self._incoming_peers)
            self._incoming_peers.discard(conn)
        self._behind.discard(conn)
        self.budget.release(conn)
        if conn.outgoing and self.outgoing.get((conn.peer_id, conn.kind)) is conn:
            del self.outgoing[(conn.peer_id, conn.kind)]
        if conn.peer_id is not None and self.last_in.get(conn.peer_id) is conn:
            del self.last_in[conn.peer_id]
        self._dirty.discard(conn)
        self.on_closed(conn)

    def dial_error(self, peer_id: int) -> str | None:
        """Why our last attempt to connect to `peer_id` failed (None: not, or no more)."""
        return self.dialer.error_of(peer_id)

    def drop_peer(self, peer_id: int) -> None:
        """Close our connection to a peer (its address changed, or it left)."""
        for key in [k for k in self.outgoing if k[0] == peer_id]:
            self.close(self.outgoing[key])

    def shutdown(self) -> None:
        self._closing = self.dialer.closing = True
        self.gate.stop()
        for conn in list(self.outgoing.values()) + list(self.incoming):
            try:
                conn.flush()
            except OSError:
                pass
            self.close(conn)
        self.listener.close()
        for sock in (self._wake_r, self._wake_w):
            try:
                self.selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self.selector.close()

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass


def _host_of(label: str) -> str:
    """The address part of a connection's label ("127.0.0.1:5123" -> "127.0.0.1")."""
    return label.rsplit(":", 1)[0] if ":" in label else label
