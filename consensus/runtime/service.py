"""The client-facing side of a node: JournalKeeper's service API (SPECS §5) over the Garlic
Farm wire, plus JRaft's own client requests (docs/protocol.md has the frames).

* **Writes** (updateClusterState) arrive as JRaft ClientRequests. At the leader each
  Application entry is stamped with the leader's clock (farm commands, envelope.py) and
  all writes of a loop turn go to the core in one `propose_many`. A write is answered
  once its entry is applied: a client that said Hello gets a WriteResult (the result,
  index and term of the entry that first carried its request id); a plain JRaft client
  gets JRaft's type-4 answer (nextIndex = index + 1). A request id already applied is
  answered at once from the state machine's memory; one still in the leader's log waits
  for that entry instead of being appended twice. An entry replaced after a leader
  change is answered RETRY, and the client sends it again. A follower answers NOT_LEADER
  with the leader's id and endpoint (and, for a Hello client, the configuration in the
  Welcome), which settles the seed's open question of a client not knowing the leader.
* **Reads**: queryClusterState at the leader after a ReadIndex (or JournalKeeper's lease
  check), queryServerState at any member, lastApplied (a confirmed ReadIndex), and
  querySnapshot (two-step reads over sparse snapshots); read_entries / log_bounds serve
  the committed log to readers (the Spark raft source): log_calls.py, whose pages are
  built on reader threads.
* **Membership and admin**: getServers, status (with the publisher), updateVoters (joint
  consensus), updateObservers, JRaft's AddServer / RemoveServer flows, forced removal,
  leader transfer. Calls that take effect later are answered when they have (or at their
  deadline).
* **Events**: leader-changed, state-changed, voters-changed to subscribed connections.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from consensus.common.errors import (FarmError, NotLeaderError, RetryableWrite, Unavailable,
                                     error_detail)
from consensus.raft import (Configuration, Entry, EntryType, MembershipChangeError, NotLeader,
                            ProposalDropped, ReadStatus, Role)
from consensus.raft.retention import catch_up_index
from consensus.runtime.log_calls import LogCalls
from consensus.runtime.machines import CommandError, CommandOutcome
from consensus.runtime.membership_calls import LATER, AdminWaits, MembershipCalls
from consensus.storage import SnapshotNotFoundError
from consensus.wire import extensions as ext
from consensus.wire.envelope import (HEAD, decode_command, is_command, journal_request_id,
                                     request_id_of, stamp_head)
from consensus.wire.errors import ProtocolError
from consensus.wire.extensions import GARLICFARM_REGISTRY, ExtType
from consensus.wire.jraft import MessageType, RaftResponse, ValueType, check_shape, encode
from consensus.wire.jraft_mapping import ResponseSlot

if TYPE_CHECKING:
    from consensus.runtime.connection import Connection
    from consensus.runtime.node_view import NodeView

log = logging.getLogger("garlicfarm.service")

READ_TIMEOUT = 5.0
EVENTS = ("leader-changed", "state-changed", "voters-changed")


@dataclass(slots=True)
class _WriteWaiter:
    """A client waiting for the entry (or request id) it wrote to be applied."""
    conn: "Connection"
    request_id: bytes | None
    slot: ResponseSlot | None = None    #: plain JRaft client: answered with type 4
    index: int = 0
    term: int = 0
    done: bool = False


@dataclass(slots=True)
class _Proposal:
    """A write waiting for the turn's `propose_many`."""
    data: bytes
    command: bool                       #: a farm command: stamped with the leader's clock
    request_id: bytes | None = None
    waiter: _WriteWaiter | None = None


@dataclass(slots=True)
class _Read:
    conn: "Connection"
    call_id: int
    then: Callable[[], Any]
    deadline: float


class Service:
    def __init__(self, node: "NodeView") -> None:
        self.node = node
        self._pending: list[_Proposal] = []
        self._by_request: dict[bytes, list[_WriteWaiter]] = {}
        self._by_index: dict[int, list[_WriteWaiter]] = {}
        self._inflight: dict[bytes, int] = {}       # request id -> index in the log, unapplied
        self._inflight_at: dict[int, bytes] = {}
        self._reads: dict[bytes, _Read] = {}
        self._applied_waits: list = []
        self._seq = itertools.count(1)
        self._subscribers: set["Connection"] = set()
        self.waits = AdminWaits(self)
        self.membership = MembershipCalls(node, self, self.waits)
        self.log_calls = LogCalls(node, self, self.waits)
        self._calls: dict[str, Callable[..., Any]] = {
            **{op: partial(fn, self) for op, fn in self._CALLS.items()},
            **{op: getattr(self.membership, op) for op in MembershipCalls.CALLS},
            **{op: getattr(self.log_calls, op) for op in LogCalls.CALLS}}

    # -- frames ----------------------------------------------------------------------------
    def _frame(self, message: ext.ExtensionMessage) -> bytes:
        return encode(message, GARLICFARM_REGISTRY)

    def _send(self, conn: "Connection", message: ext.ExtensionMessage) -> None:
        self.node.transport.reply(conn, self._frame(message))

    def _head(self) -> tuple[int, int, int]:
        return (self.node.id, 0, self.node.core.term)

    def answer_frames(self, call_id: int) -> tuple[Callable[[Any], bytes],
                                                   Callable[[FarmError], bytes]]:
        """Builders of the answer frame and of the error frame of a call, with this
        node's head as of now, for use on any thread (the log reads' reader threads)."""
        head = self._head()
        return partial(reply_frame, head, call_id), partial(error_frame, head, call_id)

    def head(self) -> tuple[int, int, int]:
        """This node's head of an answer, as of now (the reader process frames with it)."""
        return self._head()

    def reply(self, conn: "Connection", call_id: int, result: Any) -> None:
        self._send(conn, ext.Reply(*self._head(), call_id, 0, result, "", {}))

    def fail(self, conn: "Connection", call_id: int, exc: FarmError) -> None:
        self._send(conn, ext.Reply(*self._head(), call_id, int(exc.code), None, str(exc),
                                   error_detail(exc)))

    def leader_and_term(self) -> tuple[int | None, int]:
        """The leader this node follows and its term. A voter knows them from the
        leader's messages; an observer hears from no leader (it pulls the log), so it
        tells them from the log it applied: the term of its last committed entry, and
        the member whose latest status entry says it leads in that term (None until
        the leader of a newer term has published its status)."""
        raft = self.node.core
        if raft.leader_id is not None or raft.role is not Role.OBSERVER:
            return raft.leader_id, raft.term
        term = max(raft.term, self.node.log.term(raft.commit_index) or 0)
        leader, leader_term = None, -1
        for member, status in self.node.machine.statuses.items():
            state = status.get("raft") or {}
            if state.get("role") == "leader" and int(state.get("term") or 0) > leader_term:
                leader, leader_term = member, int(state.get("term") or 0)
        if leader is not None and leader_term >= term:
            return leader, leader_term
        return None, term

    def not_leader(self) -> NotLeaderError:
        raft = self.node.core
        leader, _ = self.leader_and_term()
        endpoint = self.node.address_of(leader) if leader is not None else None
        where = f"node {leader} at {endpoint}" if leader is not None else "no leader is known yet"
        members = {m: self.node.address_of(m) or "" for m in raft.configuration.members}
        return NotLeaderError(f"node {self.node.id} is not the leader ({where})", leader, endpoint,
                              members)

    # -- dispatch ---------------------------------------------------------------------------
    def on_client(self, conn: "Connection", wire, slot: ResponseSlot | None) -> None:
        if wire.__class__ is list:          # a Hello client's ClientRequest, its values
            self._writes(conn, wire)        # (the transport's fast path)
            return
        kind = wire.message_type
        if kind == ExtType.HELLO:
            conn.extensions = True
            conn.client_id = wire.client_id
            raft = self.node.core
            config = raft.configuration     # the endpoints of its members only: a client
            members = config.members        # would try a removed node's for ever
            config = Configuration(config.voters, config.outgoing, config.observers,
                                   {m: a for m, a in config.addresses.items() if m in members})
            self._send(conn, ext.Welcome(*self._head(), self.node.id, self.node.config.cluster,
                                         raft.leader_id, raft.role.value, config.encode()))
        elif kind == ExtType.CALL:
            self._call(conn, wire)
        elif kind == MessageType.CLIENT_REQUEST:
            self._client_request(conn, wire, slot)
        else:
            self.membership.jraft_request(conn, wire, slot)

    def on_closed(self, conn: "Connection") -> None:
        self._subscribers.discard(conn)

    # -- writes ---------------------------------------------------------------------------
    def _client_request(self, conn: "Connection", wire, slot: ResponseSlot | None) -> None:
        raft = self.node.core
        entries = wire.entries
        if not entries or any(e.value_type != ValueType.APPLICATION for e in entries):
            try:                    # the common shape passes the quick test; say what is
                check_shape(wire)   # wrong with the others
            except ProtocolError as exc:
                self._refuse_write(conn, wire, slot,
                                   FarmError(f"malformed ClientRequest: {exc}"))
                return
        if conn.extensions:
            self._writes(conn, [entry.value for entry in entries])
            return
        if raft.role is not Role.LEADER:
            self._refuse_write(conn, wire, slot, self.not_leader())
            return
        waiter = _WriteWaiter(conn, None, slot)      # a plain JRaft client: one answer for all
        last = len(entries) - 1
        for i, entry in enumerate(entries):
            value = entry.value
            self._pending.append(_Proposal(value, len(value) >= HEAD.size and is_command(value),
                                           None, waiter if i == last else None))

    def _writes(self, conn: "Connection", values: list[bytes]) -> None:
        """A Hello client's writes: farm commands, each answered by a WriteResult (other
        bytes go to the application state machine, answered once applied)."""
        if self.node.core.role is not Role.LEADER:
            error = self.not_leader()
            for data in values:
                found = request_id_of(data)
                self._write_result_error(conn, found[1] if found else b"", error)
            return
        for data in values:
            request_id = journal_request_id(data)   # the common case, checked quickly
            if request_id is not None:
                self._write(conn, data, request_id)
            elif not is_command(data):
                self._pending.append(_Proposal(data, False, None, _WriteWaiter(conn, None)))
            else:
                try:
                    command = decode_command(data)
                except ProtocolError as exc:
                    found = request_id_of(data)
                    self._write_result_error(conn, found[1] if found else b"",
                                             FarmError(f"malformed command: {exc}"))
                    continue
                self._write(conn, data, command.request_id)

    def _write(self, conn: "Connection", data: bytes, request_id: bytes) -> None:
        known = self.node.machine.requests.get(request_id)
        if known is not None:
            self._write_result(conn, known)
            return
        waiter = _WriteWaiter(conn, request_id)
        if request_id in self._inflight:         # the same write is in the log already
            self._by_request.setdefault(request_id, []).append(waiter)
            return
        self._pending.append(_Proposal(data, True, request_id, waiter))

    def propose_raw(self, data: bytes, *, command: bool = False) -> None:
        """An entry of the node's own (its status; a `command`: stamped as the clients'
        are, e.g. an abort of prepared commits), answered to nobody."""
        self._pending.append(_Proposal(data, command))

    @property
    def has_pending(self) -> bool:
        """Writes wait for the next `propose_pending`."""
        return bool(self._pending)

    @property
    def waits_for_time(self) -> bool:
        """Does a call here wait for the clock (a write not proposed yet, a read's or an
        admin call's deadline)? Its group keeps ticking (docs/runtime.md, "Quiescing")."""
        return bool(self._pending or self._reads or self.waits)

    def propose_pending(self) -> None:
        """Every write of the turn in one `propose_many`; commands get the leader's
        clock (envelope.stamp), the same for all of them."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        raft = self.node.core
        head = stamp_head(_now_ms())
        try:
            last = raft.propose_many([head + p.data[HEAD.size:] if p.command else p.data
                                      for p in pending])
        except (NotLeader, ProposalDropped) as exc:
            error = self.not_leader() if isinstance(exc, NotLeader) else Unavailable(
                f"the leader refused the write for now ({exc}); retry")
            self.node.proposals_dropped(len(pending))
            for p in pending:
                if p.waiter is not None:
                    self._fail_waiter(p.waiter, error)
            return
        term = raft.term
        inflight, inflight_at = self._inflight, self._inflight_at
        by_request, by_index = self._by_request, self._by_index
        for index, p in enumerate(pending, last - len(pending) + 1):
            request_id, waiter = p.request_id, p.waiter
            if request_id is not None:
                inflight[request_id] = index
                inflight_at[index] = request_id
                if waiter is not None:
                    waiters = by_request.get(request_id)
                    if waiters is None:
                        by_request[request_id] = [waiter]
                    else:
                        waiters.append(waiter)
            elif waiter is not None:
                waiter.index, waiter.term = index, term
                by_index.setdefault(index, []).append(waiter)

    def on_became_leader(self) -> None:
        """Note the request ids in our unapplied log tail (the previous leader's writes):
        a retry of one of them waits for it instead of being appended again."""
        raft = self.node.core
        applied, last = self.node.machine.applied, raft.last_index
        if last <= applied:
            return
        for entry in self.node.log.slice(applied + 1, last + 1):
            found = request_id_of(entry.data) if entry.type == EntryType.APPLICATION else None
            if found is not None:
                self._inflight[found[1]] = entry.index
                self._inflight_at[entry.index] = found[1]

    def on_applied(self, entry: Entry, outcome: CommandOutcome | None) -> None:
        index = entry.index
        request_id = self._inflight_at.pop(index, None) if self._inflight_at else None
        if request_id is not None:
            if self._inflight.get(request_id) == index:
                del self._inflight[request_id]
            if outcome is None or outcome.request_id != request_id:
                # the entry that carried this request id here was replaced (a leader
                # change): whoever waits for the id must send it again
                for waiter in list(self._by_request.get(request_id, ())):
                    if not waiter.done:
                        self._fail_waiter(waiter, RetryableWrite(
                            f"the write at index {index} was replaced after a leader "
                            f"change; send it again"))
        if outcome is not None and self._by_request:
            waiters = self._by_request.pop(outcome.request_id, None)
            if waiters:
                frame = self._result_frame(outcome)
                reply = self.node.transport.reply
                for waiter in waiters:
                    if not waiter.done:
                        waiter.done = True
                        reply(waiter.conn, frame)
        if self._by_index:
            for waiter in self._by_index.pop(index, ()):
                if waiter.done:
                    continue
                if entry.term != waiter.term:
                    self._fail_waiter(waiter, RetryableWrite(
                        f"the write at index {index} was replaced after a leader change; "
                        f"send it again"))
                else:
                    waiter.done = True
                    self._ack(waiter, entry)

    def on_truncated(self, first: int) -> None:
        """Our log lost its entries from `first` on (a new leader's differ): the writes
        waiting there whose entry is gone must be sent again."""
        log_ = self.node.log
        for index in [i for i in self._by_index if i >= first]:
            term = log_.term(index)
            for waiter in self._by_index[index]:
                if not waiter.done and waiter.term != term:
                    self._fail_waiter(waiter, RetryableWrite(
                        f"the write at index {index} was dropped by a new leader; send it "
                        f"again"))
        for index in [i for i in self._inflight_at if i >= first]:
            request_id = self._inflight_at[index]
            if self._request_id_at(index) != request_id:
                del self._inflight_at[index]
                if self._inflight.get(request_id) == index:
                    del self._inflight[request_id]
                for waiter in list(self._by_request.get(request_id, ())):
                    if not waiter.done:
                        self._fail_waiter(waiter, RetryableWrite(
                            f"the write at index {index} was dropped by a new leader; send "
                            f"it again"))

    def _request_id_at(self, index: int) -> bytes | None:
        log_ = self.node.log
        if not log_.first_index() <= index <= log_.last_index():
            return None
        entry = log_.slice(index, index + 1)[0]
        found = request_id_of(entry.data) if entry.type == EntryType.APPLICATION else None
        return found[1] if found else None

    def _ack(self, waiter: _WriteWaiter, entry: Entry) -> None:
        """A write without a request id was applied."""
        if waiter.slot is not None:
            raft = self.node.core
            waiter.slot.data = encode(RaftResponse(
                MessageType.APPEND_ENTRIES_RESPONSE, self.node.id, raft.leader_id or 0,
                raft.term, entry.index + 1, True))
            self.node.transport.mark_dirty(waiter.conn)
        else:
            self._send(waiter.conn, ext.WriteResult(*self._head(), b"", entry.index,
                                                    entry.term, 0, None, "", {}))

    def _fail_waiter(self, waiter: _WriteWaiter, exc: FarmError) -> None:
        waiter.done = True
        if waiter.request_id is not None:
            waiters = self._by_request.get(waiter.request_id)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._by_request[waiter.request_id]
        if waiter.slot is not None:
            raft = self.node.core
            waiter.slot.data = encode(RaftResponse(
                MessageType.APPEND_ENTRIES_RESPONSE, self.node.id, raft.leader_id or 0,
                raft.term, 0, False))
            self.node.transport.mark_dirty(waiter.conn)
        else:
            self._write_result_error(waiter.conn, waiter.request_id or b"", exc)

    def _refuse_write(self, conn: "Connection", wire, slot: ResponseSlot | None,
                      exc: FarmError) -> None:
        if slot is not None:
            raft = self.node.core
            slot.data = encode(RaftResponse(MessageType.APPEND_ENTRIES_RESPONSE, self.node.id,
                                            raft.leader_id or 0, raft.term, 0, False))
            self.node.transport.mark_dirty(conn)
            return
        for entry in wire.entries:
            found = request_id_of(entry.value)
            self._write_result_error(conn, found[1] if found else b"", exc)

    def _result_frame(self, outcome: CommandOutcome) -> bytes:
        code, message = outcome.error if outcome.error is not None else (0, "")
        return ext.write_result_frame(self.node.id, self.node.core.term, outcome.request_id,
                                      outcome.index, outcome.term, code,
                                      None if code else outcome.result, message)

    def _write_result(self, conn: "Connection", outcome: CommandOutcome) -> None:
        self.node.transport.reply(conn, self._result_frame(outcome))

    def _write_result_error(self, conn: "Connection", request_id: bytes, exc: FarmError) -> None:
        self._send(conn, ext.WriteResult(*self._head(), request_id, 0, 0, int(exc.code), None,
                                         str(exc), error_detail(exc)))

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, conn: "Connection", call: ext.Call) -> None:
        handler = self._calls.get(call.op)
        if handler is None:
            self.fail(conn, call.call_id, FarmError(
                f"unknown call {call.op!r}; this node knows {', '.join(sorted(self._calls))}"))
            return
        if call.args.get("as_leader") and self.node.core.role is not Role.LEADER:
            # a call any member serves, sent here as to the leader: name the leader, or
            # the client keeps reading a former leader's view after a transfer
            self.fail(conn, call.call_id, self.not_leader())
            return
        try:
            result = handler(conn, call, call.args)
        except FarmError as exc:
            self.fail(conn, call.call_id, exc)
            return
        except (CommandError, MembershipChangeError, ValueError, TypeError, KeyError) as exc:
            self.fail(conn, call.call_id, _farm_error(exc))
            return
        except NotLeader:
            self.fail(conn, call.call_id, self.not_leader())
            return
        if result is not LATER:
            self.reply(conn, call.call_id, result)

    # reads -----------------------------------------------------------------------------------
    def _read(self, conn: "Connection", call: ext.Call, then: Callable[[], Any], *,
              lease: bool) -> object:
        node = self.node
        raft = node.core
        if raft.role is not Role.LEADER and (node.config.wire != "garlicfarm"
                                             or raft.role is Role.OBSERVER):
            raise self.not_leader()
        ctx = next(self._seq).to_bytes(8, "big")
        try:
            raft.read_index(ctx, lease=lease)
        except NotLeader:
            raise self.not_leader() from None
        self._reads[ctx] = _Read(conn, call.call_id, then, time.monotonic() + READ_TIMEOUT)
        return LATER

    def on_read_states(self, states) -> None:
        for state in states:
            read = self._reads.pop(state.ctx, None)
            if read is None:
                continue
            if state.status is ReadStatus.OK:
                self._when_applied(state.index, lambda read=read: self._finish_read(read))
            elif state.status is ReadStatus.NOT_LEADER:
                self.fail(read.conn, read.call_id, self.not_leader())
            else:
                self.fail(read.conn, read.call_id, Unavailable(
                    "the leader could not confirm its leadership with a quorum in time; retry"))

    def _finish_read(self, read: _Read) -> None:
        try:
            result = read.then()
        except FarmError as exc:
            self.fail(read.conn, read.call_id, exc)
            return
        except CommandError as exc:
            self.fail(read.conn, read.call_id, _farm_error(exc))
            return
        self.reply(read.conn, read.call_id, result)

    def _when_applied(self, index: int, callback: Callable[[], None]) -> None:
        if self.node.machine.applied >= index:
            callback()
        else:
            heapq.heappush(self._applied_waits, (index, next(self._seq), callback))

    def on_state_changed(self, applied: int) -> None:
        waits = self._applied_waits
        while waits and waits[0][0] <= applied:
            heapq.heappop(waits)[2]()
        if self._subscribers:
            self.publish_event("state-changed", {"applied": applied})

    def on_restored(self, index: int) -> None:
        """A snapshot from the leader replaced our log: pending writes are unknown here."""
        self.on_truncated(0)
        self.on_state_changed(index)

    def _c_last_applied(self, conn, call, args):
        """The last applied index; with `stable`, the last one readers may read up to
        (before a batch that waits for partition 0's decision)."""
        machine = self.node.machine
        if args.get("stable"):
            return self._read(conn, call, machine.stable_applied, lease=False)
        return self._read(conn, call, lambda: machine.applied, lease=False)

    def _c_query(self, conn, call, args):
        query = _bytes(args, "query")
        consistency = args.get("consistency", "lease")
        if consistency not in ("lease", "read_index", "sequential"):
            raise FarmError(f"consistency {consistency!r}: use lease, read_index or sequential")
        machine = self.node.machine
        if consistency == "sequential":
            return machine.query(query)
        return self._read(conn, call, lambda: machine.query(query),
                          lease=consistency == "lease")

    def _c_query_server(self, conn, call, args):
        return self.node.machine.query(_bytes(args, "query"))

    def pump_reads(self) -> None:
        """Queue the finished pages on their connections (the loop, every turn)."""
        self.log_calls.pump()

    def _c_log_bounds(self, conn, call, args):
        node = self.node
        snapshot = node.latest_snapshot()
        return [node.log.first_index(), min(node.core.commit_index, node.machine.applied),
                snapshot.index if snapshot is not None else 0]

    def _c_subscribe(self, conn, call, args):
        events = set(args.get("events") or EVENTS)
        unknown = events - set(EVENTS)
        if unknown:
            raise FarmError(f"unknown events {sorted(unknown)}; known: {', '.join(EVENTS)}")
        conn.subscriptions = events
        self._subscribers.add(conn)
        return {"node": self.node.id, "events": sorted(events)}

    def _c_partitions(self, conn, call, args):
        """This node's live view of every partition (Raft group) it hosts, and how many
        the farm has (`count`: with --replicas a node hosts only some)."""
        config = self.node.config
        return {"node": self.node.id, "partitions": self.node.partitions(),
                "count": config.partitions, "replicas": config.replicas}

    def _c_ping(self, conn, call, args):
        leader, term = self.leader_and_term()
        return {"node": self.node.id, "role": self.node.core.role.value, "leader": leader,
                "term": term}

    def _c_read_snapshot(self, conn, call, args):
        """A chunk of the snapshot file the log builds on (the oldest kept at or above
        the log's base: the catch-up snapshot), with the log's bounds, for backups
        (consensus/admin/backup.py); `index` 0 asks for whichever that is now. A
        different index in the answer means the log moved on: start again."""
        node = self.node
        offset, max_bytes = int(args.get("offset", 0)), int(args.get("max_bytes", 1 << 20))
        if offset < 0 or not 1 <= max_bytes <= 8 << 20:
            raise FarmError(f"read_snapshot: offset {offset} must be >= 0 and max_bytes "
                            f"{max_bytes} within 1..{8 << 20}")
        first = node.log.first_index()
        store = node.snapshots.store
        index = catch_up_index(store.indexes(), first) or 0
        answer = {"first": first, "base_term": node.log.term(first - 1) or 0,
                  "applied": min(node.core.commit_index, node.machine.applied),
                  "index": index, "term": 0, "meta": {}, "size": 0, "offset": offset,
                  "data": b""}
        if index and index == int(args.get("index") or index):
            try:
                chunk = store.read_chunk(index, offset, max_bytes)
            except SnapshotNotFoundError:
                raise Unavailable(f"node {node.id} pruned snapshot {index} just now; "
                                  f"retry") from None
            answer.update(term=chunk.term, meta=chunk.meta, size=chunk.file_size,
                          data=chunk.data)
        return answer

    def _c_consumer_position(self, conn, call, args):
        """A reader's committed position, kept by the leader (consumers.py); answered
        with its lag."""
        if self.node.core.role is not Role.LEADER:
            raise self.not_leader()
        return self.node.consumers.report(args.get("name"), args.get("position"))

    _CALLS: dict[str, Callable[..., Any]] = {
        "last_applied": _c_last_applied, "query": _c_query, "query_server": _c_query_server,
        "log_bounds": _c_log_bounds,
        "subscribe": _c_subscribe, "ping": _c_ping, "read_snapshot": _c_read_snapshot,
        "partitions": _c_partitions,
        "consumer_position": _c_consumer_position,
    }

    # -- time ----------------------------------------------------------------------------------
    def on_tick(self, now: float) -> None:
        self.waits.tick(now, self.node.core.role is Role.LEADER)
        if self._reads:
            for ctx in [c for c, r in self._reads.items() if now >= r.deadline]:
                read = self._reads.pop(ctx)
                self.fail(read.conn, read.call_id, Unavailable(
                    "the read was not confirmed in time (leader unreachable?); retry"))

    # -- events ---------------------------------------------------------------------------------
    def publish_event(self, name: str, data: dict) -> None:
        if not self._subscribers:
            return
        raft = self.node.core
        frame = None
        for conn in list(self._subscribers):
            if conn.closed:
                self._subscribers.discard(conn)
            elif name in conn.subscriptions:
                frame = frame or self._frame(ext.EventMessage(*self._head(), name,
                                                              raft.leader_id, data))
                self.node.transport.reply(conn, frame)

    def shutdown(self) -> None:
        self.waits.clear()
        self._reads.clear()
        self.log_calls.close()




def reply_frame(head: tuple[int, int, int], call_id: int, value: Any) -> bytes:
    """The frame answering call `call_id` with `value` (any thread, or the reader process)."""
    return encode(ext.Reply(*head, call_id, 0, value, "", {}), GARLICFARM_REGISTRY)


def error_frame(head: tuple[int, int, int], call_id: int, exc: FarmError) -> bytes:
    """The frame answering call `call_id` with the error `exc`."""
    return encode(ext.Reply(*head, call_id, int(exc.code), None, str(exc),
                            error_detail(exc)), GARLICFARM_REGISTRY)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _bytes(args: dict, key: str) -> bytes:
    value = args.get(key)
    if not isinstance(value, bytes):
        raise FarmError(f"{key} must be bytes")
    return value


def _farm_error(exc: Exception) -> FarmError:
    if isinstance(exc, MembershipChangeError) and "retry" in str(exc):
        return Unavailable(str(exc))
    if isinstance(exc, (KeyError,)):
        return FarmError(f"missing argument {exc}")
    return FarmError(str(exc))

