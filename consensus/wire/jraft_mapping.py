"""The Raft core's messages on the JRaft / Garlic Farm wire, and back (sans-I/O).

Used by both wires that carry JRaft's bytes: ``garlicfarm`` (after the handshake, with
the extensions of `extensions.py`) and ``jraft`` (JRaft's types only). See
docs/protocol.md for the table; the main points:

* JRaft's responses have no correlation fields, so a connection's initiator keeps, per
  request sent, an `Echo` (what the core's response needs back: AppendEntries' first
  index, count and lease stamp; a snapshot chunk's index) and pairs responses with
  requests in order. `ResponseSlot` is the receiving side's promise of one response per
  request, in order.
* Entries: APPLICATION -> value type 1; the leader's NOOP -> an empty value type 1 (an
  empty Application entry reads back as NOOP); CONFIGURATION -> value type 2, a JRaft
  ClusterConfiguration of the voters (endpoints ``tcp://host:port``), followed on the
  garlicfarm wire by one extra server record with id -1 whose endpoint is ``gf:`` + the
  full configuration JSON (joint and observer sets, which JRaft cannot express).
* PreVote, TimeoutNow and the vote that follows it (leader transfer), ReadIndex and the
  observer pulls exist only as extensions; `to_wire` returns None for them on the plain
  JRaft wire (the node runs without PreVote there, see docs/runtime.md).
* Each core message type is registered once (`_register`): its wire types with their
  `Route` (how the transport handles them on arrival) and its two converters, which
  build messages by keyword. `to_wire` / `from_wire` look the type up.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Union

from consensus.raft import (AppendEntries, AppendEntriesResponse, Configuration, Entry,
                            EntryType, InstallSnapshot, InstallSnapshotResponse,
                            JoinClusterRequest, JoinClusterResponse, LeaveClusterRequest,
                            LeaveClusterResponse, PullEntries, PullEntriesResponse,
                            PullSnapshot, PullSnapshotResponse, ReadIndexRequest,
                            ReadIndexResponse, RequestVote, RequestVoteResponse,
                            SyncLogRequest, SyncLogResponse, TimeoutNow)
from consensus.raft.errors import ConfigurationError
from consensus.raft.messages import RaftMessage
from consensus.wire import extensions as ext
from consensus.wire.errors import InvalidField
from consensus.wire.extensions import ExtType
from consensus.wire.jraft import Message as JRaftMessage
from consensus.wire.jraft import (ENTRY_HEAD, REQUEST_HEAD, RESPONSE_LAYOUT,
                                  ClusterConfiguration, ClusterServer, JRaftLimits, LogEntry,
                                  LogPack, LogPackFormat, MessageType, RaftRequest,
                                  RaftResponse, SnapshotSyncRequest, ValueType, check_shape)

EXT_SERVER_ID = -1
EXT_PREFIX = "gf:"

# -- entries ------------------------------------------------------------------------------

def endpoint_to_jraft(address: str) -> str:
    return address if "://" in address else f"tcp://{address}"


def endpoint_from_jraft(endpoint: str) -> str:
    return endpoint.split("://", 1)[1] if "://" in endpoint else endpoint


def configuration_to_jraft(config: Configuration, log_index: int, extensions: bool
                           ) -> ClusterConfiguration:
    servers = [ClusterServer(v, endpoint_to_jraft(config.addresses.get(v, "")))
               for v in sorted(config.voters)]
    if extensions:
        servers.append(ClusterServer(EXT_SERVER_ID, EXT_PREFIX + config.encode().decode()))
    return ClusterConfiguration(log_index, 0, tuple(servers))


def configuration_from_jraft(cluster: ClusterConfiguration) -> Configuration:
    for server in cluster.servers:
        if server.id == EXT_SERVER_ID and server.endpoint.startswith(EXT_PREFIX):
            try:
                return Configuration.decode(server.endpoint[len(EXT_PREFIX):].encode())
            except ConfigurationError as exc:
                raise InvalidField("configuration", str(exc), protocol="jraft") from None
    voters = [s for s in cluster.servers if s.id > 0]
    return Configuration.of([s.id for s in voters],
                            addresses={s.id: endpoint_from_jraft(s.endpoint) for s in voters})


def entry_to_wire(entry: Entry, extensions: bool) -> LogEntry:
    if entry.type == EntryType.APPLICATION:
        return LogEntry(entry.term, ValueType.APPLICATION, entry.data)
    if entry.type == EntryType.NOOP:
        return LogEntry(entry.term, ValueType.APPLICATION, b"")
    config = Configuration.decode(entry.data)
    return LogEntry(entry.term, ValueType.CONFIGURATION,
                    configuration_to_jraft(config, entry.index, extensions).to_bytes())


def entry_from_wire(wire: LogEntry, index: int) -> Entry:
    if wire.value_type == ValueType.APPLICATION:
        kind = EntryType.APPLICATION if wire.value else EntryType.NOOP
        return Entry(wire.term, index, kind, wire.value)
    if wire.value_type == ValueType.CONFIGURATION:
        config = configuration_from_jraft(ClusterConfiguration.from_bytes(wire.value))
        return Entry(wire.term, index, EntryType.CONFIGURATION, config.encode())
    raise InvalidField("valueType", f"a log entry cannot be {wire.value_type.wire_name}",
                       protocol="jraft")


def entries_to_wire(entries, extensions: bool) -> tuple[LogEntry, ...]:
    app, log_entry = EntryType.APPLICATION, LogEntry
    return tuple(log_entry(e.term, ValueType.APPLICATION, e.data) if e.type == app
                 else entry_to_wire(e, extensions) for e in entries)


def entries_from_wire(wire: tuple[LogEntry, ...], first_index: int) -> list[Entry]:
    out = []
    application, make, noop, app_kind = ValueType.APPLICATION, Entry, EntryType.NOOP, \
        EntryType.APPLICATION
    for i, w in enumerate(wire):
        if w.value_type == application:
            out.append(make(w.term, first_index + i, app_kind if w.value else noop, w.value))
        else:
            out.append(entry_from_wire(w, first_index + i))
    return out


# -- fast paths: the hot messages straight between bytes and core messages -----------------
#
# Replication and client writes are most of the traffic. These read and write them in
# place with the codec's precompiled layouts, without the wire objects (RaftRequest,
# LogEntry) in between. They handle the common shapes only (Application entries and
# no-ops) and return None for anything else, which then takes the generic path - the
# one that also names the field at fault in a malformed message.

def _values(frame: bytes, limits: JRaftLimits) -> list[tuple[int, bytes]] | None:
    """(term, value) of the request's entries when all are Application values within
    the limits; None otherwise."""
    out: list[tuple[int, bytes]] = []
    append, unpack = out.append, ENTRY_HEAD.unpack_from
    max_value, max_entries = limits.max_value_size, limits.max_entries
    pos, end = REQUEST_HEAD.size, len(frame)
    while pos < end:
        if end - pos < ENTRY_HEAD.size or len(out) == max_entries:
            return None
        term, value_type, size = unpack(frame, pos)
        pos += ENTRY_HEAD.size
        if value_type != 1 or not 0 <= size <= max_value or size > end - pos:
            return None
        append((term, frame[pos:pos + size]))
        pos += size
    return out


def append_entries_from_frame(frame: bytes, limits: JRaftLimits) -> AppendEntries | None:
    """An AppendEntriesRequest frame as the core's AppendEntries (None: not the common
    shape, decode it the generic way)."""
    values = _values(frame, limits)
    if values is None:
        return None
    _, source, destination, term, prev_term, prev_index, commit, _ = \
        REQUEST_HEAD.unpack_from(frame)
    make, app, noop = Entry, EntryType.APPLICATION, EntryType.NOOP
    entries = [make(t, i, app if v else noop, v)
               for i, (t, v) in enumerate(values, prev_index + 1)]
    return AppendEntries(term=term, source=source, destination=destination,
                         prev_log_index=prev_index, prev_log_term=prev_term, entries=entries,
                         commit=commit)


def client_values_from_frame(frame: bytes, limits: JRaftLimits) -> list[bytes] | None:
    """A ClientRequest frame's Application values (None: not the common shape)."""
    values = _values(frame, limits)
    if not values:
        return None                     # no entries at all is malformed: say so there
    return [v for _, v in values]


def append_response_from_frame(frame: bytes, echo: Echo) -> AppendEntriesResponse:
    """An AppendEntriesResponse frame, completed with its request's echo."""
    _, source, destination, term, next_index, accepted = RESPONSE_LAYOUT.unpack_from(frame)
    return AppendEntriesResponse(term=term, source=source, destination=destination,
                                 success=accepted == 1, next_index=next_index,
                                 log_index=echo.log_index, entry_count=echo.count, ctx=echo.ctx)


def append_entries_frame(msg: AppendEntries, bodies: dict) -> bytes | None:
    """The AppendEntriesRequest frame of `msg` (None when an entry is a configuration:
    the generic path encodes those). `bodies` caches the last encoded run of entries,
    which the next follower usually gets too: entries are encoded once per turn."""
    entries = msg.entries
    if entries:
        key = (entries[0].index, entries[-1].index, entries[-1].term)
        body = bodies.get(key)
        if body is None:
            app, noop, pack = EntryType.APPLICATION, EntryType.NOOP, ENTRY_HEAD.pack
            parts = []
            for e in entries:
                if e.type is not app and e.type is not noop:
                    return None
                parts += (pack(e.term, 1, len(e.data)), e.data)
            body = b"".join(parts)
            bodies.clear()
            bodies[key] = body
    else:
        body = b""
    return REQUEST_HEAD.pack(MessageType.APPEND_ENTRIES_REQUEST, msg.source, msg.destination,
                             msg.term, msg.prev_log_term, msg.prev_log_index, msg.commit,
                             len(body)) + body


def append_response_frame(msg: AppendEntriesResponse) -> bytes:
    return RESPONSE_LAYOUT.pack(MessageType.APPEND_ENTRIES_RESPONSE, msg.source,
                                msg.destination, msg.term, msg.next_index,
                                1 if msg.success else 0)


# -- pairing ------------------------------------------------------------------------------

@dataclass(slots=True)
class Echo:
    """What a sent request's response must get back from the request (initiator side)."""
    response_type: int
    log_index: int = 0          #: AppendEntries: prev + 1; InstallSnapshot: snapshot index
    count: int = 0
    ctx: int = 0
    done: bool = False
    client: bool = False        #: a ClientRequest (e.g. a status entry): ack only
    group: int = 0              #: the Raft group the request was sent for


@dataclass(slots=True)
class ResponseSlot:
    """Receiving side: the response owed for one paired request, in arrival order."""
    response_type: int
    key: object = None
    data: bytes | None = None       #: the encoded response, once known
    source: int = 0
    generation: int = 0             #: Readys handed out before the request was stepped
    claimed: bool = False           #: a Ready holds its answer (sent once persisted)
    group: int = 0                  #: the Raft group the request came for


# -- the registry: each core message once, with its wire types and mapping ---------------------
#
# A new message: its dataclass in consensus/raft/messages.py (and in `RaftMessage`), its
# wire shape (a JRaft type byte, or an extension type byte with its body in
# `extensions.RAFT_CODECS`), and one registration here (`_register`, `_paired_response`,
# `_as_is`).
# The transport routes by the `Route` of each type byte (docs/development.md).

class Route(enum.Enum):
    """What the transport does with a type byte that arrives."""
    PAIRED_REQUEST = "paired request"    #: owe an answer, in order, on this connection
    PAIRED_RESPONSE = "paired response"  #: complete it from the oldest Echo
    PEER_REQUEST = "peer request"        #: self-contained; its connection may carry answers
    PEER_ANSWER = "peer answer"          #: self-contained


@dataclass(frozen=True, slots=True)
class WireType:
    type_byte: int
    route: Route
    answer: int | None = None       #: a paired request's response type


#: One core message on the wire: `to_wire(msg, extensions)` -> (wire message, Echo or
#: None) or None; `from_wire(wire, echo)` -> the core message (echo: paired responses).
ToWire = Callable[[Any, bool], "tuple[WireMessage, Echo | None] | None"]
FromWire = Callable[[Any, "Echo | None"], RaftMessage]


@dataclass(frozen=True, slots=True)
class Mapping:
    """How one core message type crosses the wire (see `_register`)."""
    to_wire: ToWire
    from_wire: FromWire
    #: the response type when the message answers a paired request (None: never)
    answers: int | None
    #: for a message that answers only sometimes: whether this one does
    paired_when: Callable[[Any], bool] | None
    #: a self-contained answer: it goes back on the connection its request came on
    is_answer: bool


#: what crosses the Garlic Farm wire: JRaft's messages, and the core messages the
#: extension codec carries as they are
WireMessage = Union[JRaftMessage, RaftMessage]
_BY_CORE: dict[type, Mapping] = {}
_BY_TYPE: dict[int, tuple[Mapping, WireType]] = {}
_EXTENSION_TYPES = frozenset(ExtType)


def _register(core: type, wire_types: tuple[WireType, ...], to_wire_: ToWire,
              from_wire_: FromWire, paired_when: Callable[[Any], bool] | None = None) -> None:
    """Map `core` onto `wire_types` (each type byte belongs to one core message)."""
    if core in _BY_CORE:
        raise ValueError(f"{core.__name__} is registered twice")
    answers = next((t.type_byte for t in wire_types if t.route is Route.PAIRED_RESPONSE), None)
    mapping = Mapping(to_wire_, from_wire_, answers, paired_when,
                      any(t.route is Route.PEER_ANSWER for t in wire_types))
    _BY_CORE[core] = mapping
    for wire_type in wire_types:
        if wire_type.type_byte in _BY_TYPE:
            raise ValueError(f"type {wire_type.type_byte} is mapped twice")
        _BY_TYPE[wire_type.type_byte] = (mapping, wire_type)


def _head(msg: RaftMessage) -> dict[str, int]:
    return {"source": msg.source, "destination": msg.destination, "term": msg.term}


def _core_head(wire: WireMessage) -> dict[str, int]:
    return {"term": wire.term, "source": wire.source, "destination": wire.destination}


def _answer(kind: int, msg: RaftMessage, accepted: bool, next_index: int = 0) -> RaftResponse:
    return RaftResponse(kind, **_head(msg), next_index=next_index, accepted=accepted)


def _paired_response(core: type, kind: int, accepted: str, next_index: str | None = None,
                     from_echo: Callable[[Echo], dict] | None = None) -> None:
    """Register a core response carried by JRaft's 26-byte response `kind`: the core
    fields named `accepted` and `next_index` map onto it, `from_echo` gives the rest
    from the Echo of the request it answers."""
    def to_wire_(msg, extensions: bool):
        return _answer(kind, msg, getattr(msg, accepted),
                       getattr(msg, next_index) if next_index else 0), None

    def from_wire_(wire: RaftResponse, echo: Echo | None):
        values = {accepted: wire.accepted, **(from_echo(echo) if from_echo else {})}
        if next_index:
            values[next_index] = wire.next_index
        return core(**_core_head(wire), **values)

    _register(core, (WireType(kind, Route.PAIRED_RESPONSE),), to_wire_, from_wire_)


# elections
def _vote_to_wire(msg: RequestVote, extensions: bool):
    if msg.pre_vote:
        kind, echo = ExtType.PRE_VOTE_REQUEST, None
    else:
        kind = ExtType.TRANSFER_VOTE_REQUEST if msg.leader_transfer and extensions \
            else MessageType.REQUEST_VOTE_REQUEST
        echo = Echo(MessageType.REQUEST_VOTE_RESPONSE)
    return RaftRequest(kind, **_head(msg), last_log_term=msg.last_log_term,
                       last_log_index=msg.last_log_index), echo


def _vote_from_wire(wire: RaftRequest, echo: Echo | None) -> RequestVote:
    kind = wire.message_type
    return RequestVote(**_core_head(wire), last_log_index=wire.last_log_index,
                       last_log_term=wire.last_log_term,
                       pre_vote=kind == ExtType.PRE_VOTE_REQUEST,
                       leader_transfer=kind == ExtType.TRANSFER_VOTE_REQUEST)


_register(RequestVote, (
    WireType(MessageType.REQUEST_VOTE_REQUEST, Route.PAIRED_REQUEST,
             MessageType.REQUEST_VOTE_RESPONSE),
    WireType(ExtType.PRE_VOTE_REQUEST, Route.PEER_REQUEST),
    WireType(ExtType.TRANSFER_VOTE_REQUEST, Route.PAIRED_REQUEST,
             MessageType.REQUEST_VOTE_RESPONSE),
), _vote_to_wire, _vote_from_wire)


def _vote_response_to_wire(msg: RequestVoteResponse, extensions: bool):
    kind = ExtType.PRE_VOTE_RESPONSE if msg.pre_vote else MessageType.REQUEST_VOTE_RESPONSE
    return _answer(kind, msg, msg.granted), None


def _vote_response_from_wire(wire: RaftResponse, echo: Echo | None) -> RequestVoteResponse:
    return RequestVoteResponse(**_core_head(wire), granted=wire.accepted,
                               pre_vote=wire.message_type == ExtType.PRE_VOTE_RESPONSE)


_register(RequestVoteResponse, (
    WireType(MessageType.REQUEST_VOTE_RESPONSE, Route.PAIRED_RESPONSE),
    WireType(ExtType.PRE_VOTE_RESPONSE, Route.PEER_ANSWER),
), _vote_response_to_wire, _vote_response_from_wire,
    paired_when=lambda msg: not msg.pre_vote)     # a pre-vote answer is self-contained

_register(TimeoutNow, (WireType(ExtType.TIMEOUT_NOW_REQUEST, Route.PEER_REQUEST),),
          lambda msg, extensions: (RaftRequest(ExtType.TIMEOUT_NOW_REQUEST, **_head(msg)),
                                   None),
          lambda wire, echo: TimeoutNow(**_core_head(wire)))


# replication
def _append_to_wire(msg: AppendEntries, extensions: bool):
    wire = RaftRequest(MessageType.APPEND_ENTRIES_REQUEST, **_head(msg),
                       last_log_term=msg.prev_log_term, last_log_index=msg.prev_log_index,
                       commit_index=msg.commit,
                       entries=entries_to_wire(msg.entries, extensions))
    return wire, Echo(MessageType.APPEND_ENTRIES_RESPONSE, log_index=msg.prev_log_index + 1,
                      count=len(msg.entries), ctx=msg.ctx)


def _append_from_wire(wire: RaftRequest, echo: Echo | None) -> AppendEntries:
    return AppendEntries(**_core_head(wire), prev_log_index=wire.last_log_index,
                         prev_log_term=wire.last_log_term,
                         entries=entries_from_wire(wire.entries, wire.last_log_index + 1),
                         commit=wire.commit_index)


_register(AppendEntries, (WireType(MessageType.APPEND_ENTRIES_REQUEST, Route.PAIRED_REQUEST,
                                   MessageType.APPEND_ENTRIES_RESPONSE),),
          _append_to_wire, _append_from_wire)

_paired_response(AppendEntriesResponse, MessageType.APPEND_ENTRIES_RESPONSE, "success",
                 "next_index", lambda echo: {"log_index": echo.log_index,
                                             "entry_count": echo.count, "ctx": echo.ctx})


def _snapshot_to_wire(msg: InstallSnapshot, extensions: bool):
    chunk = SnapshotSyncRequest(
        last_log_index=msg.snapshot_index, last_log_term=msg.snapshot_term,
        last_config=configuration_to_jraft(msg.configuration, msg.snapshot_index, extensions),
        offset=msg.offset, data=bytes(msg.data), done=msg.done)
    wire = RaftRequest(MessageType.INSTALL_SNAPSHOT_REQUEST, **_head(msg),
                       last_log_term=msg.snapshot_term, last_log_index=msg.snapshot_index,
                       commit_index=msg.commit, entries=(LogEntry.of(msg.term, chunk),))
    return wire, Echo(MessageType.INSTALL_SNAPSHOT_RESPONSE, log_index=msg.snapshot_index,
                      done=msg.done)


def _snapshot_from_wire(wire: RaftRequest, echo: Echo | None) -> InstallSnapshot:
    chunk = _single_payload(wire)
    return InstallSnapshot(**_core_head(wire), snapshot_index=chunk.last_log_index,
                           snapshot_term=chunk.last_log_term,
                           configuration=configuration_from_jraft(chunk.last_config),
                           offset=chunk.offset, data=chunk.data, done=chunk.done,
                           commit=wire.commit_index)


_register(InstallSnapshot, (WireType(MessageType.INSTALL_SNAPSHOT_REQUEST,
                                     Route.PAIRED_REQUEST,
                                     MessageType.INSTALL_SNAPSHOT_RESPONSE),),
          _snapshot_to_wire, _snapshot_from_wire)

_paired_response(InstallSnapshotResponse, MessageType.INSTALL_SNAPSHOT_RESPONSE, "success",
                 "next_offset", lambda echo: {"snapshot_index": echo.log_index,
                                              "done": echo.done})


# JRaft's membership flows
def _join_to_wire(msg: JoinClusterRequest, extensions: bool):
    config = configuration_to_jraft(msg.configuration, msg.last_log_index, extensions)
    return RaftRequest(MessageType.JOIN_CLUSTER_REQUEST, **_head(msg),
                       last_log_index=msg.last_log_index, commit_index=msg.commit,
                       entries=(LogEntry.of(msg.term, config),)), \
        Echo(MessageType.JOIN_CLUSTER_RESPONSE)


_register(JoinClusterRequest, (WireType(MessageType.JOIN_CLUSTER_REQUEST, Route.PAIRED_REQUEST,
                                        MessageType.JOIN_CLUSTER_RESPONSE),),
          _join_to_wire,
          lambda wire, echo: JoinClusterRequest(
              **_core_head(wire), configuration=configuration_from_jraft(_single_payload(wire)),
              commit=wire.commit_index, last_log_index=wire.last_log_index))


def _sync_to_wire(msg: SyncLogRequest, extensions: bool):
    pack = LogPack(LogPackFormat.FILE_BASED, entries_to_wire(msg.entries, extensions)) \
        if msg.entries else LogPack(LogPackFormat.EMPTY)
    return RaftRequest(MessageType.SYNC_LOG_REQUEST, **_head(msg),
                       last_log_index=msg.start_index - 1, commit_index=msg.commit,
                       entries=(LogEntry(msg.term, ValueType.LOG_PACK, pack.to_bytes()),)), \
        Echo(MessageType.SYNC_LOG_RESPONSE)


_register(SyncLogRequest, (WireType(MessageType.SYNC_LOG_REQUEST, Route.PAIRED_REQUEST,
                                    MessageType.SYNC_LOG_RESPONSE),),
          _sync_to_wire,
          lambda wire, echo: SyncLogRequest(
              **_core_head(wire), start_index=wire.last_log_index + 1,
              entries=entries_from_wire(_single_payload(wire).entries,
                                        wire.last_log_index + 1),
              commit=wire.commit_index))

_register(LeaveClusterRequest, (WireType(MessageType.LEAVE_CLUSTER_REQUEST, Route.PAIRED_REQUEST,
                                         MessageType.LEAVE_CLUSTER_RESPONSE),),
          lambda msg, extensions: (RaftRequest(
              MessageType.LEAVE_CLUSTER_REQUEST, **_head(msg),
              last_log_index=msg.last_log_index, commit_index=msg.commit),
              Echo(MessageType.LEAVE_CLUSTER_RESPONSE)),
          lambda wire, echo: LeaveClusterRequest(
              **_core_head(wire), commit=wire.commit_index, last_log_index=wire.last_log_index))

_paired_response(JoinClusterResponse, MessageType.JOIN_CLUSTER_RESPONSE, "accepted",
                 "next_index")
_paired_response(SyncLogResponse, MessageType.SYNC_LOG_RESPONSE, "accepted", "next_index")
_paired_response(LeaveClusterResponse, MessageType.LEAVE_CLUSTER_RESPONSE, "accepted")


# extensions: reads and observer pulls, each carried as it is by its extension frame
def _as_is(core: type, how: Route) -> None:
    """Register a core message the extension codec encodes and decodes itself
    (`extensions.RAFT_CODECS`: its type byte and body); not on the plain JRaft wire."""
    _register(core, (WireType(ext.RAFT_CODECS[core].type_byte, how),),
              lambda msg, extensions: (msg, None) if extensions else None,
              lambda wire, echo: wire)


_as_is(ReadIndexRequest, Route.PEER_REQUEST)
_as_is(ReadIndexResponse, Route.PEER_ANSWER)
_as_is(PullEntries, Route.PEER_REQUEST)
_as_is(PullEntriesResponse, Route.PEER_ANSWER)
_as_is(PullSnapshot, Route.PEER_REQUEST)
_as_is(PullSnapshotResponse, Route.PEER_ANSWER)
_CARRIED_AS_IS = frozenset(ext.RAFT_CODECS)


# -- the converters ---------------------------------------------------------------------------

def to_wire(msg: RaftMessage, extensions: bool) -> tuple[WireMessage, Echo | None] | None:
    """A core message as a wire message and, for a paired request, its Echo; None when
    this wire cannot carry it (an extension on the plain JRaft wire)."""
    mapped = _BY_CORE[type(msg)].to_wire(msg, extensions)
    if mapped is None or (not extensions and mapped[0].message_type in _EXTENSION_TYPES):
        return None
    return mapped


def from_wire(wire: WireMessage, echo: Echo | None = None) -> RaftMessage:
    """The core message of a wire message (a paired response: with its request's Echo,
    see `response_from_wire`). The extension codec decodes reads and pulls to the core
    messages themselves."""
    if wire.__class__ in _CARRIED_AS_IS:
        return wire
    found = _BY_TYPE.get(wire.message_type)
    if found is None:
        raise InvalidField("messageType", f"{wire.message_type} is not a Raft message",
                           protocol="jraft")
    return found[0].from_wire(wire, echo)


def route(type_byte: int) -> WireType | None:
    """How the transport handles an arriving type byte (None: not a Raft message)."""
    found = _BY_TYPE.get(type_byte)
    return None if found is None else found[1]


def fifo_response_type(msg: RaftMessage) -> int | None:
    """The JRaft response type of a core response that answers a paired request (None
    for the self-contained ones: pre-vote answers and extensions)."""
    mapping = _BY_CORE[type(msg)]
    if mapping.paired_when is not None and not mapping.paired_when(msg):
        return None
    return mapping.answers


def slot_key(msg: RaftMessage):
    """What identifies the request a core response answers, among requests of its type."""
    if isinstance(msg, AppendEntriesResponse):
        return (msg.log_index, msg.entry_count)
    return None


def is_answer(msg: RaftMessage) -> bool:
    """Whether a message that `fifo_response_type` left out answers a peer's request
    (pre-vote answers, reads, pulls): it is sent back where the request came from."""
    return _BY_CORE[type(msg)].is_answer


def response_from_wire(wire: RaftResponse, echo: Echo) -> RaftMessage | None:
    """A paired response, completed with its request's Echo (None for a client ack)."""
    if wire.message_type != echo.response_type:
        raise InvalidField("messageType", f"expected the answer {echo.response_type} to the "
                           f"request sent, got {wire.message_type}", protocol="jraft")
    if echo.client:
        return None
    return from_wire(wire, echo)


def refusal(slot: ResponseSlot, me: int, term: int) -> RaftResponse:
    """What to answer a paired request the core dropped (it answers only what it must)."""
    return RaftResponse(slot.response_type, source=me, destination=slot.source, term=term)


#: request type -> the JRaft response type that answers it, in order (peers' requests
#: from the registry; the client requests a node answers with an ack).
RESPONSE_OF: dict[int, int] = {
    **{t.type_byte: t.answer for _, t in _BY_TYPE.values() if t.answer is not None},
    MessageType.CLIENT_REQUEST: MessageType.APPEND_ENTRIES_RESPONSE,
    MessageType.ADD_SERVER_REQUEST: MessageType.ADD_SERVER_RESPONSE,
    MessageType.REMOVE_SERVER_REQUEST: MessageType.REMOVE_SERVER_RESPONSE,
}
FIFO_RESPONSES = frozenset(RESPONSE_OF.values())


def _single_payload(wire: RaftRequest):
    check_shape(wire)
    return wire.entries[0].payload()


__all__ = ["Echo", "ResponseSlot", "Route", "WireType", "Mapping", "WireMessage", "to_wire",
           "from_wire", "route", "is_answer", "response_from_wire", "fifo_response_type", "slot_key",
           "refusal", "RESPONSE_OF", "FIFO_RESPONSES", "append_entries_from_frame",
           "client_values_from_frame", "append_response_from_frame", "append_entries_frame",
           "append_response_frame"]
