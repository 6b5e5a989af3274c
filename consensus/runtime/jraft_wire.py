"""JRaft's bytes on a node's connections (`--wire jraft`; `--wire garlicfarm` and every
client: with our extensions): frames in to core messages, client calls and paired
answers; core messages out to frames (docs/runtime.md, "The hot path").

The hot messages (AppendEntries, its response, a Hello client's ClientRequest) are read
and written in place with the codec's precompiled structs (`jraft_mapping`); anything
else, and every malformed frame, takes the generic decoder that names the field at fault.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from consensus.raft import AppendEntries, AppendEntriesResponse, Message
from consensus.runtime.budget import Trust, jraft_limits
from consensus.runtime.connection import Connection
from consensus.wire import jraft_mapping as jm
from consensus.wire.errors import ProtocolError
from consensus.wire.extensions import GARLICFARM_REGISTRY, ExtType, NodeHeartbeat, Quiesce
from consensus.wire.jraft import REGISTRY, JRaftDecoder, MessageType, RaftRequest, encode
from consensus.wire.jraft_mapping import Route

if TYPE_CHECKING:
    from consensus.runtime.transport import Transport

_CLIENT_REQUESTS = frozenset({MessageType.CLIENT_REQUEST, MessageType.ADD_SERVER_REQUEST,
                              MessageType.REMOVE_SERVER_REQUEST})
_CLIENT_EXTENSIONS = frozenset({ExtType.HELLO, ExtType.CALL})
_NODE_FRAMES = frozenset({ExtType.QUIESCE, ExtType.NODE_HEARTBEAT})
_SOURCE = struct.Struct(">i")       # every JRaft message's source id, after its type byte


def _paired(conn: Connection, echo: jm.Echo) -> jm.Echo:
    """The request a paired response answers; it must come in the request's group (the
    peer answers in request order, switching groups as its requests did)."""
    if echo.group != conn.in_group:
        raise ProtocolError("group", f"a response in group {conn.in_group} to a request of "
                            f"group {echo.group}")
    return echo


class JRaftWire:
    """JRaft's bytes on a connection (garlicfarm: with our extensions)."""

    def __init__(self, transport: "Transport", extensions: bool) -> None:
        self.t = transport
        self.extensions = extensions
        self.registry = GARLICFARM_REGISTRY if extensions else REGISTRY

    def decoder(self) -> JRaftDecoder:
        return JRaftDecoder(registry=self.registry)

    def admit(self, conn: Connection) -> None:
        """An incoming connection starts with the limits of its trust; an outsider is
        vetted at each message head until it shows it is a configured member."""
        conn.decoder.limits = jraft_limits(conn.trust)
        if conn.trust is Trust.OUTSIDER:
            t = self.t

            def vet(registration, buffer, pos: int) -> None:
                (source,) = _SOURCE.unpack_from(buffer, pos + 1)
                if t.verified_peer(conn, source):
                    t.promote(conn, source)
            conn.decoder.vet = vet

    def on_data(self, conn: Connection, data: bytes) -> None:
        t = self.t
        decoder = conn.decoder
        limits = decoder.limits
        for registration, frame in decoder.split(data):
            kind = registration.message_type
            if kind == ExtType.GROUP_SELECT and self.extensions:
                select = registration.codec.decode(frame, kind, limits)
                t.select_in(conn, select.group, select.source)
                if conn.closed:
                    return
                continue
            if kind in _NODE_FRAMES and self.extensions:
                self._node_frame(conn, registration.codec.decode(frame, kind, limits))
                continue
            # the hot messages first, straight to core messages (jraft_mapping)
            if kind == MessageType.APPEND_ENTRIES_REQUEST:
                core = jm.append_entries_from_frame(frame, limits)
                if core is not None:
                    t.peer_core_request(conn, core, (core.prev_log_index + 1,
                                                     len(core.entries)))
                    continue
            elif kind == MessageType.APPEND_ENTRIES_RESPONSE:
                echoes = conn.echoes
                if echoes and echoes[0].response_type == kind and not echoes[0].client:
                    echo = _paired(conn, echoes.popleft())
                    t.on_core(echo.group, jm.append_response_from_frame(frame, echo))
                    continue
            elif kind == MessageType.CLIENT_REQUEST and conn.extensions:
                values = jm.client_values_from_frame(frame, limits)
                if values is not None:
                    t.on_client(conn, values, None)
                    continue
            w = registration.codec.decode(frame, kind, limits)
            wire_type = jm.route(kind)
            how = None if wire_type is None else wire_type.route
            if how is Route.PAIRED_RESPONSE:
                if not conn.echoes:
                    raise ProtocolError("messageType", f"response {kind} to no request")
                echo = _paired(conn, conn.echoes.popleft())
                core = jm.response_from_wire(w, echo)
                if core is not None:
                    t.on_core(echo.group, core)
                elif t.on_client_ack is not None:
                    t.on_client_ack(w)
            elif how is Route.PAIRED_REQUEST:
                t.peer_request(conn, w)
            elif how is not None:                 # self-contained: pre-votes, reads, pulls
                if how is Route.PEER_REQUEST:
                    t.note_peer(conn, w.source)
                if w.destination == t.node_id:
                    t.on_core(conn.in_group, jm.from_wire(w))
            elif kind in _CLIENT_REQUESTS:
                slot = None
                if not conn.extensions:
                    slot = jm.ResponseSlot(jm.RESPONSE_OF[kind], source=w.source,
                                           group=conn.in_group)
                    conn.slots.append(slot)
                t.on_client(conn, w, slot)
            elif kind in _CLIENT_EXTENSIONS:
                t.on_client(conn, w, None)
            else:
                raise ProtocolError("messageType", f"{kind} is not accepted by a node")

    def _node_frame(self, conn: Connection, msg: Quiesce | NodeHeartbeat) -> None:
        """A peer's Quiesce or NodeHeartbeat: only a configured peer may send one (its
        bytes counted as heard when read); anyone else breaks the stream."""
        t = self.t
        t.note_peer(conn, msg.source)
        if conn.trust is not Trust.PEER or msg.source <= 0:
            raise ProtocolError("messageType", f"{type(msg).__name__} is accepted from "
                                "peers only")
        if type(msg) is Quiesce and msg.destination == t.node_id and \
                t.on_quiesce is not None:
            t.on_quiesce(conn.in_group, msg)

    def send(self, conn: Connection, msg: Message, group: int = 0) -> bool:
        if type(msg) is AppendEntries:
            frame = jm.append_entries_frame(msg, self.t.bodies.setdefault(group, {}))
            if frame is not None:
                conn.select_out(group, self.t.node_id)
                conn.out += frame
                conn.echoes.append(jm.Echo(MessageType.APPEND_ENTRIES_RESPONSE,
                                           msg.prev_log_index + 1, len(msg.entries), msg.ctx,
                                           group=group))
                return True
        mapped = jm.to_wire(msg, self.extensions)
        if mapped is None:
            return False
        wire, echo = mapped
        conn.select_out(group, self.t.node_id)
        conn.out += encode(wire, self.registry)
        if echo is not None:
            echo.group = group
            conn.echoes.append(echo)
        return True

    def matches(self, slot: jm.ResponseSlot, msg: Message, rtype: int, key) -> bool:
        return slot.response_type == rtype and (key is None or slot.key is None
                                                or slot.key == key)

    def respond(self, slot: jm.ResponseSlot, msg: Message) -> None:
        if type(msg) is AppendEntriesResponse:
            slot.data = jm.append_response_frame(msg)
        else:
            slot.data = encode(jm.to_wire(msg, self.extensions)[0], self.registry)

    def refuse(self, slot: jm.ResponseSlot, term: int) -> None:
        slot.data = encode(jm.refusal(slot, self.t.node_id, term), self.registry)

    def send_client_entries(self, conn: Connection, entries) -> bool:
        """A ClientRequest on our own connection (status entries for the leader)."""
        request = RaftRequest(MessageType.CLIENT_REQUEST, entries=tuple(entries))
        conn.select_out(0, self.t.node_id)
        conn.out += encode(request, self.registry)
        conn.echoes.append(jm.Echo(MessageType.APPEND_ENTRIES_RESPONSE, client=True))
        return True
