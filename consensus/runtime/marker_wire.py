"""The Raft core's messages on the marker-byte wire (TaskFlux's protocol, SPECS §2).

TaskFlux's connection model, as its code does it (tests/vectors/marker/LAYOUT.md):

* each node dials each peer and is the only one to send requests on that connection;
  the first exchange is ``C`` (our id) -> ``c``; the receiver refuses an id that is its
  own or not in the cluster (ids out of range do not decode), and a second connection
  from the same id replaces the first;
* answers come in request order. TaskFlux sends one request at a time; we keep up to
  `WINDOW` in flight (a TaskFlux receiver reads them one after the other). The receiver
  of a request whose CRC fails answers ``R`` in that request's place, and we send the
  request again (its answer then comes after the others'). An answer whose CRC fails
  here is treated the same way: we send the request again rather than ``R``, because
  "repeat your last answer" names no answer when several are in flight. A TaskFlux
  initiator, one request at a time, gets ``R`` from us and we repeat our last answer;
* ``A``/``a`` replicate (``a`` carries no index: a refusal backs the leader off by one),
  ``V``/``v`` vote, ``S``/``B``/``b``/``s`` move a snapshot in chunks: ``S`` (the header)
  is answered ``b``, each ``B`` chunk ``b``, the empty ``B`` that ends it ``s``; ``s``
  anywhere else refuses the snapshot.

Indexes: TaskFlux counts log positions from 0 with -1 for "none" (Lsn); the core counts
from 1 with 0 for none, so Lsn = index - 1. An empty log's (index, term) is (-1, 1).
Entries carry only (term, bytes), so entry kinds ride in the bytes: application data as
it is, the leader's no-op as no bytes, a configuration as ``0xC2`` + its JSON, and
application data that happens to start with 0xC2 or 0xC3 behind an ``0xC3`` escape.
The snapshot's configuration travels in front of its data in the first chunk
(``u32 length | configuration JSON``).

Not on this wire (docs/runtime.md): pre-votes, TimeoutNow (no leader transfer), ReadIndex
forwarding (followers send readers to the leader), observer pulls and JRaft's
Join/SyncLog/LeaveCluster flows (change voters with update_voters instead).
"""
from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from consensus.raft import (AppendEntries, AppendEntriesResponse, Configuration, Entry,
                            EntryType, InstallSnapshot, InstallSnapshotResponse, Message,
                            RequestVote, RequestVoteResponse)
from consensus.raft.errors import ConfigurationError
from consensus.runtime.budget import Trust, marker_limits
from consensus.runtime.connection import Connection
from consensus.wire import marker as mk
from consensus.wire.errors import InvalidField, ProtocolError
from consensus.wire.jraft_mapping import ResponseSlot

if TYPE_CHECKING:
    from consensus.runtime.transport import Transport

CONFIG_TAG = 0xC2
ESCAPE_TAG = 0xC3
MAX_QUEUED = 1024
WINDOW = 16
_U32 = struct.Struct(">I")
_A, _V, _S, _B = "append", "vote", "snapshot", "chunk"


# -- entries --------------------------------------------------------------------------------

def entry_bytes(entry: Entry) -> bytes:
    if entry.type == EntryType.NOOP:
        return b""
    if entry.type == EntryType.CONFIGURATION:
        return bytes((CONFIG_TAG,)) + entry.data
    data = entry.data
    if data and data[0] in (CONFIG_TAG, ESCAPE_TAG):
        return bytes((ESCAPE_TAG,)) + data
    return data


def entry_from_bytes(term: int, index: int, data: bytes) -> Entry:
    if not data:
        return Entry(term, index, EntryType.NOOP, b"")
    if data[0] == CONFIG_TAG:
        try:
            Configuration.decode(data[1:])
        except ConfigurationError as exc:
            raise InvalidField("entries.data", f"bad configuration: {exc}",
                               protocol=mk.PROTOCOL) from None
        return Entry(term, index, EntryType.CONFIGURATION, data[1:])
    if data[0] == ESCAPE_TAG:
        return Entry(term, index, EntryType.APPLICATION, data[1:])
    return Entry(term, index, EntryType.APPLICATION, data)


def _name(event) -> str:
    """A packet's protocol name (a CorruptPacket: the name of the packet it was)."""
    return (event.marker if isinstance(event, mk.CorruptPacket) else event.MARKER).wire_name


def _lsn(index: int) -> int:
    return index - 1


def _log_term(index: int, term: int) -> int:
    return term if index > 0 else 1         # TaskFlux's tomb: (term 1, index -1)


# -- per connection state ----------------------------------------------------------------------

@dataclass(slots=True)
class _Echo:
    """What the answer to one sent packet means to the core."""
    kind: str
    message: Message | None = None      #: the core request it belongs to
    answer: bool = True                 #: its answer becomes a core message


@dataclass
class _Outgoing:
    queue: deque = field(default_factory=deque)     # (bytes, _Echo) not sent yet
    inflight: deque = field(default_factory=deque)  # (bytes, _Echo) awaiting answers


@dataclass
class _Incoming:
    peer_id: int | None = None
    snapshot: list | None = None    # [term, leader, index, last_term, configuration, offset]


class MarkerWire:
    def __init__(self, transport: "Transport",
                 accept_peer: Callable[[Connection, int], bool] | None) -> None:
        self.t = transport
        self.accept_peer = accept_peer or (lambda conn, peer: True)

    def decoder(self) -> mk.MarkerDecoder:
        return mk.MarkerDecoder()

    def admit(self, conn: Connection) -> None:
        """An incoming connection is an outsider until its ConnectRequest is accepted:
        until then it may send small packets only."""
        conn.decoder.limits = marker_limits(conn.trust)

    def promote(self, conn: Connection) -> None:
        conn.decoder.limits = marker_limits(Trust.PEER)

    def _state(self, conn: Connection):
        if conn.marker_state is None:
            conn.marker_state = _Outgoing() if conn.outgoing else _Incoming()
        return conn.marker_state

    # -- bytes in ----------------------------------------------------------------------------
    def on_data(self, conn: Connection, data: bytes) -> None:
        for event in conn.decoder.feed(data):
            if conn.closed:
                return
            if conn.outgoing:
                self._answer_in(conn, event)
            else:
                self._request_in(conn, event)

    def _request_in(self, conn: Connection, packet) -> None:
        state: _Incoming = self._state(conn)
        t = self.t
        if state.peer_id is None:
            if not isinstance(packet, mk.ConnectRequest):
                raise ProtocolError("marker", f"{packet.MARKER.wire_name} before ConnectRequest")
            accepted = self.accept_peer(conn, packet.node_id)
            if accepted and not t.verified_peer(conn, packet.node_id):
                accepted = False
                t.bad_streams.note(conn.label.rsplit(":", 1)[0], f"refused marker connection "
                                   f"from {conn.label}: node {packet.node_id}'s endpoint is "
                                   f"not on that host")
            self._answer(conn, mk.encode(mk.ConnectResponse(accepted)))
            if not accepted:
                conn.flush_slots()
                try:
                    conn.flush()
                except OSError:
                    pass
                t.close(conn)
                return
            state.peer_id = conn.peer_id = packet.node_id
            conn.label = f"node {packet.node_id} ({conn.label})"
            t.promote(conn, packet.node_id)     # (it replaces an older one from that id)
            t.last_in[packet.node_id] = conn
            return
        if isinstance(packet, mk.CorruptPacket):
            t.bad_packet(conn, f"{packet.error.reason}: asked for it again")
            self._answer(conn, mk.encode(mk.RetransmitRequest()))
            return
        if isinstance(packet, mk.RetransmitRequest):
            conn.out += conn.last_answer
            t.mark_dirty(conn)
            return
        me = t.node_id
        if isinstance(packet, mk.AppendEntriesRequest):
            prev = packet.prev_log_index + 1
            entries = [entry_from_bytes(e.term, prev + 1 + i, e.data)
                       for i, e in enumerate(packet.entries)]
            message: Message = AppendEntries(
                term=packet.term, source=packet.leader_id, destination=me, prev_log_index=prev,
                prev_log_term=packet.prev_log_term if prev > 0 else 0, entries=entries,
                commit=packet.leader_commit + 1)
            self._slot(conn, _A, (prev + 1, len(entries)), message)
        elif isinstance(packet, mk.RequestVoteRequest):
            last = packet.last_log_index + 1
            message = RequestVote(term=packet.candidate_term, source=packet.candidate_id,
                                  destination=me, last_log_index=last,
                                  last_log_term=packet.last_log_term if last > 0 else 0)
            self._slot(conn, _V, None, message)
        elif isinstance(packet, mk.InstallSnapshotRequest):
            state.snapshot = [packet.term, packet.leader_id, packet.last_index + 1,
                              packet.last_term, None, 0]
            self._answer(conn, mk.encode(mk.InstallSnapshotChunkResponse()))
        elif isinstance(packet, mk.InstallSnapshotChunkRequest):
            self._chunk_in(conn, state, packet.chunk)
        else:
            raise ProtocolError("marker", f"{packet.MARKER.wire_name} is not a request")

    def _chunk_in(self, conn: Connection, state: _Incoming, chunk: bytes) -> None:
        snap = state.snapshot
        if snap is None:                    # no header first: refused at the turn's end
            self.t.owe(conn, ResponseSlot(0, (_B, None), source=state.peer_id or 0))
            return
        term, leader, index, last_term, config, offset = snap
        if config is None:
            if len(chunk) < 4 or len(chunk) < 4 + _U32.unpack_from(chunk)[0]:
                raise InvalidField("chunk", "the first chunk must start with the "
                                   "configuration", protocol=mk.PROTOCOL)
            size = _U32.unpack_from(chunk)[0]
            try:
                config = Configuration.decode(chunk[4:4 + size])
            except ConfigurationError as exc:
                raise InvalidField("chunk", f"bad configuration: {exc}",
                                   protocol=mk.PROTOCOL) from None
            snap[4] = config
            chunk = chunk[4 + size:]
        done = not chunk
        message = InstallSnapshot(term=term, source=leader, destination=self.t.node_id,
                                  snapshot_index=index, snapshot_term=last_term,
                                  configuration=config, offset=offset, data=chunk, done=done,
                                  commit=0)
        snap[5] = offset + len(chunk)
        self._slot(conn, _B, None, message)
        if done:
            state.snapshot = None

    def _slot(self, conn: Connection, kind: str, key, message: Message) -> None:
        self.t.owe(conn, ResponseSlot(0, (kind, key), source=message.source))
        self.t.on_core(0, message)

    def _answer(self, conn: Connection, data: bytes) -> None:
        """An answer known at once, queued in order behind any still owed."""
        conn.slots.append(ResponseSlot(0, ("now", None), data=data))
        self.t.mark_dirty(conn)

    def _answer_in(self, conn: Connection, packet) -> None:
        state: _Outgoing = self._state(conn)
        t = self.t
        if not state.inflight:
            raise ProtocolError("marker", f"{_name(packet)} answers no request")
        if isinstance(packet, (mk.CorruptPacket, mk.RetransmitRequest)):
            sent = state.inflight.popleft()
            what = "our request arrived corrupt" if isinstance(packet, mk.RetransmitRequest) \
                else f"its answer arrived corrupt ({packet.error.reason})"
            t.bad_packet(conn, f"{what}; sent the request again")
            state.inflight.append(sent)
            conn.out += sent[0]
            t.mark_dirty(conn)
            return
        _sent, echo = state.inflight.popleft()
        core = self._core_answer(conn, echo, packet)
        if core is not None:
            t.on_core(0, core)
        self._send_next(conn, state)

    def _core_answer(self, conn: Connection, echo: _Echo, packet) -> Message | None:
        me, peer = self.t.node_id, conn.peer_id
        request = echo.message
        if echo.kind == _A and isinstance(packet, mk.AppendEntriesResponsePacket):
            first = request.prev_log_index + 1
            count = len(request.entries)
            next_index = first + count if packet.success else max(1, first - 1)
            return AppendEntriesResponse(term=packet.term, source=peer, destination=me,
                                         success=packet.success, next_index=next_index,
                                         log_index=first, entry_count=count, ctx=request.ctx)
        if echo.kind == _V and isinstance(packet, mk.RequestVoteResponsePacket):
            return RequestVoteResponse(term=packet.current_term, source=peer, destination=me,
                                       granted=packet.vote_granted)
        if echo.kind in (_S, _B):
            request: InstallSnapshot
            end = request.offset + len(request.data)
            if isinstance(packet, mk.InstallSnapshotChunkResponse):
                if not echo.answer:
                    return None
                return InstallSnapshotResponse(term=request.term, source=peer, destination=me,
                                               success=True, next_offset=end,
                                               snapshot_index=request.snapshot_index)
            if isinstance(packet, mk.InstallSnapshotResponsePacket):
                state: _Outgoing = self._state(conn)
                finished = echo.answer and request.done
                if not finished:        # a refusal: forget the rest of this snapshot
                    state.queue = deque(item for item in state.queue
                                        if item[1].kind not in (_S, _B))
                return InstallSnapshotResponse(term=packet.current_term, source=peer,
                                               destination=me, success=finished,
                                               next_offset=end if finished else 0,
                                               snapshot_index=request.snapshot_index,
                                               done=finished)
        raise ProtocolError("marker", f"{_name(packet)} does not answer a {echo.kind}")

    # -- bytes out -----------------------------------------------------------------------------
    def send(self, conn: Connection, msg: Message) -> bool:
        packets = self._packets(msg)
        if packets is None:
            return False
        state: _Outgoing = self._state(conn)
        state.queue.extend(packets)
        while len(state.queue) > MAX_QUEUED:
            state.queue.popleft()
        self._send_next(conn, state)
        return True

    def _send_next(self, conn: Connection, state: _Outgoing) -> None:
        while state.queue and len(state.inflight) < WINDOW:
            item = state.queue.popleft()
            state.inflight.append(item)
            conn.out += item[0]
            self.t.mark_dirty(conn)

    def _packets(self, msg: Message) -> list[tuple[bytes, _Echo]] | None:
        t = type(msg)
        if t is AppendEntries:
            prev = msg.prev_log_index
            entries = tuple(mk.LogEntry(e.term, entry_bytes(e)) for e in msg.entries)
            packet = mk.AppendEntriesRequest(
                leader_commit=_lsn(msg.commit), term=msg.term,
                prev_log_term=_log_term(prev, msg.prev_log_term), prev_log_index=_lsn(prev),
                leader_id=msg.source, entries=entries)
            return [(mk.encode(packet), _Echo(_A, msg))]
        if t is RequestVote and not msg.pre_vote:
            packet = mk.RequestVoteRequest(
                candidate_id=msg.source, candidate_term=msg.term,
                last_log_term=_log_term(msg.last_log_index, msg.last_log_term),
                last_log_index=_lsn(msg.last_log_index))
            return [(mk.encode(packet), _Echo(_V, msg))]
        if t is InstallSnapshot:
            out = []
            data = msg.data
            if msg.offset == 0:
                out.append((mk.encode(mk.InstallSnapshotRequest(
                    term=msg.term, leader_id=msg.source, last_index=_lsn(msg.snapshot_index),
                    last_term=max(1, msg.snapshot_term))), _Echo(_S, msg, answer=False)))
                config = msg.configuration.encode()
                data = _U32.pack(len(config)) + config + data
            if data or msg.offset == 0:
                out.append((mk.encode(mk.InstallSnapshotChunkRequest(data)),
                            _Echo(_B, msg, answer=not msg.done)))
            if msg.done:
                out.append((mk.encode(mk.InstallSnapshotChunkRequest(b"")), _Echo(_B, msg)))
            return out
        return None

    def respond(self, slot: ResponseSlot, msg: Message) -> None:
        if isinstance(msg, AppendEntriesResponse):
            packet = mk.AppendEntriesResponsePacket(success=msg.success, term=max(1, msg.term))
        elif isinstance(msg, RequestVoteResponse):
            packet = mk.RequestVoteResponsePacket(current_term=max(1, msg.term),
                                                  vote_granted=msg.granted)
        elif isinstance(msg, InstallSnapshotResponse) and msg.success and not msg.done:
            packet = mk.InstallSnapshotChunkResponse()
        else:
            packet = mk.InstallSnapshotResponsePacket(current_term=max(1, msg.term))
        slot.data = mk.encode(packet)

    def refuse(self, slot: ResponseSlot, term: int) -> None:
        kind = slot.key[0]
        term = max(1, term)
        if kind == _A:
            slot.data = mk.encode(mk.AppendEntriesResponsePacket(success=False, term=term))
        elif kind == _V:
            slot.data = mk.encode(mk.RequestVoteResponsePacket(current_term=term,
                                                               vote_granted=False))
        else:
            slot.data = mk.encode(mk.InstallSnapshotResponsePacket(current_term=term))

    def matches(self, slot: ResponseSlot, msg: Message, rtype: int, key) -> bool:
        kind, key = slot.key
        if isinstance(msg, AppendEntriesResponse):
            return kind == _A and key == (msg.log_index, msg.entry_count)
        if isinstance(msg, RequestVoteResponse):
            return kind == _V
        return kind == _B and isinstance(msg, InstallSnapshotResponse)

    def send_client_entries(self, conn: Connection, entries) -> bool:
        return False
