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
"""
from __future__ import annotations

from dataclasses import dataclass

from consensus.raft import (AppendEntries, AppendEntriesResponse, Configuration, Entry,
                            EntryType, InstallSnapshot, InstallSnapshotResponse,
                            JoinClusterRequest, JoinClusterResponse, LeaveClusterRequest,
                            LeaveClusterResponse, Message, PullEntries, PullEntriesResponse,
                            PullSnapshot, PullSnapshotResponse, PullStatus, ReadIndexRequest,
                            ReadIndexResponse, RequestVote, RequestVoteResponse,
                            SyncLogRequest, SyncLogResponse, TimeoutNow)
from consensus.raft.errors import ConfigurationError
from consensus.runtime import extensions as ext
from consensus.runtime.extensions import ExtType
from consensus.wire.errors import InvalidField, ProtocolError
from consensus.wire.jraft import (ENTRY_HEAD, REQUEST_HEAD, RESPONSE_LAYOUT,
                                  ClusterConfiguration, ClusterServer, JRaftLimits, LogEntry,
                                  LogPack, LogPackFormat, MessageType, RaftRequest,
                                  RaftResponse, SnapshotSyncRequest, ValueType, check_shape)

EXT_SERVER_ID = -1
EXT_PREFIX = "gf:"
_ENTRY_TYPES = {t.value: t for t in EntryType}

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
    return AppendEntries(term, source, destination, prev_index, prev_term, entries, commit)


def client_values_from_frame(frame: bytes, limits: JRaftLimits) -> list[bytes] | None:
    """A ClientRequest frame's Application values (None: not the common shape)."""
    values = _values(frame, limits)
    if not values:
        return None                     # no entries at all is malformed: say so there
    return [v for _, v in values]


def append_response_from_frame(frame: bytes, echo: Echo) -> AppendEntriesResponse:
    """An AppendEntriesResponse frame, completed with its request's echo."""
    _, source, destination, term, next_index, accepted = RESPONSE_LAYOUT.unpack_from(frame)
    return AppendEntriesResponse(term, source, destination, accepted == 1, next_index,
                                 echo.log_index, echo.count, echo.ctx)


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


#: request type -> the JRaft response type that answers it, in order.
RESPONSE_OF = {
    MessageType.REQUEST_VOTE_REQUEST: MessageType.REQUEST_VOTE_RESPONSE,
    ExtType.TRANSFER_VOTE_REQUEST: MessageType.REQUEST_VOTE_RESPONSE,
    MessageType.APPEND_ENTRIES_REQUEST: MessageType.APPEND_ENTRIES_RESPONSE,
    MessageType.INSTALL_SNAPSHOT_REQUEST: MessageType.INSTALL_SNAPSHOT_RESPONSE,
    MessageType.JOIN_CLUSTER_REQUEST: MessageType.JOIN_CLUSTER_RESPONSE,
    MessageType.SYNC_LOG_REQUEST: MessageType.SYNC_LOG_RESPONSE,
    MessageType.LEAVE_CLUSTER_REQUEST: MessageType.LEAVE_CLUSTER_RESPONSE,
    MessageType.CLIENT_REQUEST: MessageType.APPEND_ENTRIES_RESPONSE,
    MessageType.ADD_SERVER_REQUEST: MessageType.ADD_SERVER_RESPONSE,
    MessageType.REMOVE_SERVER_REQUEST: MessageType.REMOVE_SERVER_RESPONSE,
}
FIFO_RESPONSES = frozenset(RESPONSE_OF.values())
_CORE_RESPONSE_TYPE = {
    RequestVoteResponse: MessageType.REQUEST_VOTE_RESPONSE,
    AppendEntriesResponse: MessageType.APPEND_ENTRIES_RESPONSE,
    InstallSnapshotResponse: MessageType.INSTALL_SNAPSHOT_RESPONSE,
    JoinClusterResponse: MessageType.JOIN_CLUSTER_RESPONSE,
    SyncLogResponse: MessageType.SYNC_LOG_RESPONSE,
    LeaveClusterResponse: MessageType.LEAVE_CLUSTER_RESPONSE,
}


def fifo_response_type(msg: Message) -> int | None:
    """The JRaft response type of a core response that answers a paired request (None
    for the self-contained ones: pre-vote answers and extensions)."""
    if isinstance(msg, RequestVoteResponse) and msg.pre_vote:
        return None
    return _CORE_RESPONSE_TYPE.get(type(msg))


def slot_key(msg: Message):
    """What identifies the request a core response answers, among requests of its type."""
    if isinstance(msg, AppendEntriesResponse):
        return (msg.log_index, msg.entry_count)
    return None


@dataclass(slots=True)
class ResponseSlot:
    """Receiving side: the response owed for one paired request, in arrival order."""
    response_type: int
    key: object = None
    data: bytes | None = None       #: the encoded response, once known
    source: int = 0
    generation: int = 0             #: Readys handed out before the request was stepped
    claimed: bool = False           #: a Ready holds its answer (sent once persisted)


# -- core -> wire -------------------------------------------------------------------------

def to_wire(msg: Message, extensions: bool) -> tuple[object, Echo | None] | None:
    """A core *request* (or self-contained message) as a wire message and its Echo; None
    when this wire cannot carry it."""
    t = type(msg)
    if t is AppendEntries:
        wire = RaftRequest(MessageType.APPEND_ENTRIES_REQUEST, msg.source, msg.destination,
                           msg.term, msg.prev_log_term, msg.prev_log_index, msg.commit,
                           entries_to_wire(msg.entries, extensions))
        return wire, Echo(MessageType.APPEND_ENTRIES_RESPONSE, msg.prev_log_index + 1,
                          len(msg.entries), msg.ctx)
    if t is RequestVote:
        if msg.pre_vote:
            if not extensions:
                return None
            return RaftRequest(ExtType.PRE_VOTE_REQUEST, msg.source, msg.destination, msg.term,
                               msg.last_log_term, msg.last_log_index), None
        kind = ExtType.TRANSFER_VOTE_REQUEST if msg.leader_transfer and extensions \
            else MessageType.REQUEST_VOTE_REQUEST
        return RaftRequest(kind, msg.source, msg.destination, msg.term, msg.last_log_term,
                           msg.last_log_index), Echo(MessageType.REQUEST_VOTE_RESPONSE)
    if t is InstallSnapshot:
        chunk = SnapshotSyncRequest(
            msg.snapshot_index, msg.snapshot_term,
            configuration_to_jraft(msg.configuration, msg.snapshot_index, extensions),
            msg.offset, bytes(msg.data), msg.done)
        wire = RaftRequest(MessageType.INSTALL_SNAPSHOT_REQUEST, msg.source, msg.destination,
                           msg.term, msg.snapshot_term, msg.snapshot_index, msg.commit,
                           (LogEntry.of(msg.term, chunk),))
        return wire, Echo(MessageType.INSTALL_SNAPSHOT_RESPONSE, msg.snapshot_index,
                          done=msg.done)
    if t is JoinClusterRequest:
        config = configuration_to_jraft(msg.configuration, msg.last_log_index, extensions)
        return RaftRequest(MessageType.JOIN_CLUSTER_REQUEST, msg.source, msg.destination,
                           msg.term, 0, msg.last_log_index, msg.commit,
                           (LogEntry.of(msg.term, config),)), \
            Echo(MessageType.JOIN_CLUSTER_RESPONSE)
    if t is SyncLogRequest:
        pack = LogPack(LogPackFormat.FILE_BASED, entries_to_wire(msg.entries, extensions)) \
            if msg.entries else LogPack(LogPackFormat.EMPTY)
        return RaftRequest(MessageType.SYNC_LOG_REQUEST, msg.source, msg.destination, msg.term,
                           0, msg.start_index - 1, msg.commit,
                           (LogEntry(msg.term, ValueType.LOG_PACK, pack.to_bytes()),)), \
            Echo(MessageType.SYNC_LOG_RESPONSE)
    if t is LeaveClusterRequest:
        return RaftRequest(MessageType.LEAVE_CLUSTER_REQUEST, msg.source, msg.destination,
                           msg.term, 0, msg.last_log_index, msg.commit), \
            Echo(MessageType.LEAVE_CLUSTER_RESPONSE)
    if not extensions:
        return None
    if t is TimeoutNow:
        return RaftRequest(ExtType.TIMEOUT_NOW_REQUEST, msg.source, msg.destination,
                           msg.term), None
    if t is RequestVoteResponse:      # a pre-vote answer (paired responses go elsewhere)
        return RaftResponse(ExtType.PRE_VOTE_RESPONSE, msg.source, msg.destination,
                            msg.term, 0, msg.granted), None
    head = (msg.source, msg.destination, msg.term)
    if t is ReadIndexRequest:
        return ext.ReadIndexRequest(*head, msg.ctx, msg.lease), None
    if t is ReadIndexResponse:
        return ext.ReadIndexResponse(*head, msg.ctx, msg.index, msg.success), None
    if t is PullEntries:
        return ext.PullEntriesRequest(*head, msg.index, msg.max_entries, msg.max_bytes), None
    if t is PullEntriesResponse:
        entries = [[e.term, int(e.type), e.data] for e in msg.entries]
        return ext.PullEntriesResponse(*head, int(msg.status), msg.index, entries,
                                       msg.min_index, msg.commit), None
    if t is PullSnapshot:
        return ext.PullSnapshotRequest(*head, msg.snapshot_index, msg.offset), None
    if t is PullSnapshotResponse:
        return ext.PullSnapshotResponse(*head, msg.snapshot_index, msg.snapshot_term,
                                        msg.configuration.encode(), msg.offset, bytes(msg.data),
                                        msg.done), None
    return None


def response_to_wire(msg: Message) -> RaftResponse:
    """A paired core response as JRaft's 26-byte response."""
    kind = _CORE_RESPONSE_TYPE[type(msg)]
    if isinstance(msg, RequestVoteResponse):
        accepted, next_index = msg.granted, 0
    elif isinstance(msg, AppendEntriesResponse):
        accepted, next_index = msg.success, msg.next_index
    elif isinstance(msg, InstallSnapshotResponse):
        accepted, next_index = msg.success, msg.next_offset
    elif isinstance(msg, (JoinClusterResponse, SyncLogResponse)):
        accepted, next_index = msg.accepted, msg.next_index
    else:
        accepted, next_index = msg.accepted, 0
    return RaftResponse(kind, msg.source, msg.destination, msg.term, next_index, accepted)


def refusal(slot: ResponseSlot, me: int, term: int) -> RaftResponse:
    """What to answer a paired request the core dropped (it answers only what it must)."""
    return RaftResponse(slot.response_type, me, slot.source, term, 0, False)


# -- wire -> core -------------------------------------------------------------------------

def response_from_wire(wire: RaftResponse, echo: Echo) -> Message | None:
    """A paired response, completed with its request's Echo (None for a client ack)."""
    if wire.message_type != echo.response_type:
        raise InvalidField("messageType", f"expected the answer {echo.response_type} to the "
                           f"request sent, got {wire.message_type}", protocol="jraft")
    if echo.client:
        return None
    head = (wire.term, wire.source, wire.destination)
    kind = wire.message_type
    if kind == MessageType.APPEND_ENTRIES_RESPONSE:
        return AppendEntriesResponse(*head, wire.accepted, wire.next_index, echo.log_index,
                                     echo.count, echo.ctx)
    if kind == MessageType.REQUEST_VOTE_RESPONSE:
        return RequestVoteResponse(*head, wire.accepted, False)
    if kind == MessageType.INSTALL_SNAPSHOT_RESPONSE:
        return InstallSnapshotResponse(*head, wire.accepted, wire.next_index, echo.log_index,
                                       echo.done)
    if kind == MessageType.JOIN_CLUSTER_RESPONSE:
        return JoinClusterResponse(*head, wire.accepted, wire.next_index)
    if kind == MessageType.SYNC_LOG_RESPONSE:
        return SyncLogResponse(*head, wire.accepted, wire.next_index)
    if kind == MessageType.LEAVE_CLUSTER_RESPONSE:
        return LeaveClusterResponse(*head, wire.accepted)
    raise InvalidField("messageType", f"{kind} is not a response to a Raft request",
                       protocol="jraft")


#: Peer requests the core handles, by type: they are answered in order (slots).
PEER_REQUESTS = frozenset({
    MessageType.REQUEST_VOTE_REQUEST, MessageType.APPEND_ENTRIES_REQUEST,
    MessageType.INSTALL_SNAPSHOT_REQUEST, MessageType.JOIN_CLUSTER_REQUEST,
    MessageType.SYNC_LOG_REQUEST, MessageType.LEAVE_CLUSTER_REQUEST,
    ExtType.TRANSFER_VOTE_REQUEST})


def request_from_wire(wire: RaftRequest) -> Message:
    """A peer's request (type in PEER_REQUESTS, or 0x20 / 0x22) as a core message."""
    head = (wire.term, wire.source, wire.destination)
    kind = wire.message_type
    if kind == MessageType.APPEND_ENTRIES_REQUEST:
        entries = entries_from_wire(wire.entries, wire.last_log_index + 1)
        return AppendEntries(*head, wire.last_log_index, wire.last_log_term, entries,
                             wire.commit_index)
    if kind in (MessageType.REQUEST_VOTE_REQUEST, ExtType.PRE_VOTE_REQUEST,
                ExtType.TRANSFER_VOTE_REQUEST):
        return RequestVote(*head, wire.last_log_index, wire.last_log_term,
                           pre_vote=kind == ExtType.PRE_VOTE_REQUEST,
                           leader_transfer=kind == ExtType.TRANSFER_VOTE_REQUEST)
    if kind == ExtType.TIMEOUT_NOW_REQUEST:
        return TimeoutNow(*head)
    if kind == MessageType.LEAVE_CLUSTER_REQUEST:
        return LeaveClusterRequest(*head, wire.commit_index, wire.last_log_index)
    payload = _single_payload(wire)
    if kind == MessageType.INSTALL_SNAPSHOT_REQUEST:
        config = configuration_from_jraft(payload.last_config)
        return InstallSnapshot(*head, payload.last_log_index, payload.last_log_term, config,
                               payload.offset, payload.data, payload.done, wire.commit_index)
    if kind == MessageType.JOIN_CLUSTER_REQUEST:
        return JoinClusterRequest(*head, configuration_from_jraft(payload), wire.commit_index,
                                  wire.last_log_index)
    if kind == MessageType.SYNC_LOG_REQUEST:
        return SyncLogRequest(*head, wire.last_log_index + 1,
                              entries_from_wire(payload.entries, wire.last_log_index + 1),
                              wire.commit_index)
    raise InvalidField("messageType", f"{kind} is not a peer request", protocol="jraft")


def _single_payload(wire: RaftRequest):
    check_shape(wire)
    return wire.entries[0].payload()


def self_contained_from_wire(wire) -> Message:
    """An extension message (or a PreVoteResponse) as a core message."""
    if isinstance(wire, RaftResponse):          # 0x21
        return RequestVoteResponse(wire.term, wire.source, wire.destination, wire.accepted,
                                   True)
    head = (wire.term, wire.source, wire.destination)
    t = type(wire)
    if t is ext.ReadIndexRequest:
        return ReadIndexRequest(*head, wire.ctx, wire.lease)
    if t is ext.ReadIndexResponse:
        return ReadIndexResponse(*head, wire.ctx, wire.index, wire.success)
    if t is ext.PullEntriesRequest:
        return PullEntries(*head, wire.index, wire.max_entries, wire.max_bytes)
    if t is ext.PullEntriesResponse:
        return PullEntriesResponse(*head, _pull_status(wire.status), wire.index,
                                   _pulled_entries(wire.entries, wire.index), wire.min_index,
                                   wire.commit)
    if t is ext.PullSnapshotRequest:
        return PullSnapshot(*head, wire.snapshot_index, wire.offset)
    if t is ext.PullSnapshotResponse:
        try:
            config = Configuration.decode(wire.configuration)
        except ConfigurationError as exc:
            raise InvalidField("configuration", str(exc), protocol=ext.PROTOCOL) from None
        return PullSnapshotResponse(*head, wire.snapshot_index, wire.snapshot_term, config,
                                    wire.offset, wire.data, wire.done)
    raise InvalidField("messageType", f"{wire.message_type} is not a Raft message",
                       protocol=ext.PROTOCOL)


def _pull_status(value: int) -> PullStatus:
    try:
        return PullStatus(value)
    except ValueError:
        raise InvalidField("status", f"{value} is not a pull status",
                           protocol=ext.PROTOCOL) from None


def _pulled_entries(items: list, first: int) -> list[Entry]:
    out = []
    for i, item in enumerate(items):
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                and item[1] in _ENTRY_TYPES and isinstance(item[2], bytes)):
            raise InvalidField(f"entries[{i}]", "must be [term, entry type, data]",
                               protocol=ext.PROTOCOL)
        out.append(Entry(item[0], first + i, _ENTRY_TYPES[item[1]], item[2]))
    return out


__all__ = ["Echo", "ResponseSlot", "to_wire", "response_to_wire", "response_from_wire",
           "append_entries_from_frame", "client_values_from_frame", "append_response_from_frame",
           "append_entries_frame", "append_response_frame",
           "request_from_wire", "self_contained_from_wire", "fifo_response_type", "slot_key",
           "refusal", "RESPONSE_OF", "FIFO_RESPONSES", "PEER_REQUESTS", "ProtocolError"]
