"""`FarmClient`: the Python client of a farm (JournalKeeper's service API, SPECS §5).

Every connection speaks the Garlic Farm handshake, then JRaft's binary messages and our
extensions (docs/protocol.md): the client says Hello, writes travel as ClientRequests
holding farm commands (envelope.py) and are answered by WriteResults; every other call
is a Call answered by a Reply. The client finds the leader by itself: any member's
Welcome names the leader and the configuration, and a NOT_LEADER answer names the
leader's endpoint. Calls retry with backoff within `timeout`; writes carry a request id
(default: a fresh uuid4) so a write retried after a failure is applied once.

A client is cheap to create and not picklable (it holds sockets): Spark executors build
their own from options. It may be shared by threads (calls take turns).
"""
from __future__ import annotations

import itertools
import socket
import threading
import time
from collections import deque
from typing import Any, Iterable, Iterator, Sequence

import msgpack

from consensus.raft import Configuration, Entry, EntryType
from consensus.runtime import extensions as ext
from consensus.runtime.connection import close_quietly
from consensus.runtime.dial import dial
from consensus.runtime.envelope import (CommandKind, described, encode_command,
                                        new_request_id, record_from_header)
from consensus.runtime.errors import (ConfigError, FarmError, Incomplete, NotLeaderError,
                                      ProtocolMismatch, RetryableWrite, Unavailable,
                                      error_from_wire)
from consensus.runtime.extensions import GARLICFARM_REGISTRY
from consensus.runtime.results import (BatchCommit, ClusterView, Event,
                                       FarmStatus, LogRecord, MemberView, VisibleRecords)
from consensus.runtime.security import Security, split_endpoint
from consensus.wire.errors import ProtocolError
from consensus.wire.jraft import (DEFAULT_LIMITS, JRaftDecoder, LogEntry, MessageType,
                                  RaftRequest, ValueType, encode)

_ENTRY_TYPES = {t.value: t for t in EntryType}
_RETRYABLE = (Unavailable, NotLeaderError, RetryableWrite)
_MAX_PIPELINE = 1024


def parse_endpoints(endpoints: str | Sequence[str]) -> list[str]:
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, port = split_endpoint(item, "endpoints")
        out.append(f"{host}:{port}")
    if not out:
        raise ConfigError("endpoints", "give at least one HOST:PORT of a farm member")
    return out


class _Link:
    """One authenticated connection to one member."""

    def __init__(self, endpoint: str, security: Security, timeout: float,
                 client_id: bytes) -> None:
        self.endpoint = endpoint
        dialed = dial(endpoint, security, wire="garlicfarm", timeout=timeout)
        self.sock = dialed.sock
        self.decoder = JRaftDecoder(registry=GARLICFARM_REGISTRY)
        self.frames: deque = deque()
        self.closed = False
        if dialed.initial:
            self.frames.extend(self.decoder.feed(dialed.initial))
        self.send(encode(ext.Hello(0, 0, 0, client_id, 1), GARLICFARM_REGISTRY))
        welcome = self.next_frame(time.monotonic() + timeout)
        if not isinstance(welcome, ext.Welcome):
            self.close()
            raise ProtocolMismatch(f"{endpoint} answered Hello with {type(welcome).__name__}")
        self.welcome = welcome

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise Unavailable(f"lost the connection to {self.endpoint}: {exc}") from None

    def next_frame(self, deadline: float):
        while not self.frames:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(f"no answer from {self.endpoint} in time")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                raise Unavailable(f"no answer from {self.endpoint} in time") from None
            except OSError as exc:
                self.close()
                raise Unavailable(f"lost the connection to {self.endpoint}: {exc}") from None
            if not data:
                self.close()
                raise Unavailable(f"{self.endpoint} closed the connection")
            try:
                self.frames.extend(self.decoder.feed(data))
            except ProtocolError as exc:
                self.close()
                raise ProtocolMismatch(f"corrupt answer from {self.endpoint}: {exc}") from None
        return self.frames.popleft()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_quietly(self.sock)


class FarmClient:
    """See the module docstring and /docs/runtime.md for the API."""

    def __init__(self, endpoints: str | Sequence[str], cluster: str = "farm",
                 username: str | None = None, password: str | None = None,
                 wire: str = "garlicfarm", tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 proxy: str | None = None, timeout: float = 10.0) -> None:
        if wire != "garlicfarm":
            raise ConfigError("wire", "clients always speak the Garlic Farm handshake and its "
                              "extensions; the node's --wire only concerns its peers")
        if timeout <= 0:
            raise ConfigError("timeout", f"must be positive, got {timeout}")
        self.endpoints = parse_endpoints(endpoints)
        self.timeout = timeout
        self.security = Security(cluster=cluster, username=username, password=password,
                                 tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, proxy=proxy)
        if username is None:
            raise ConfigError("username", "the farm authenticates clients: give a username "
                              "and password")
        self._links: dict[str, _Link] = {}
        self._book: dict[int, str] = {}         # node id -> endpoint
        self._leader: str | None = None
        self._client_id = new_request_id()
        self._call_ids = itertools.count(1)
        self._lock = threading.RLock()
        self._rotation = 0
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._closed = True
            for link in self._links.values():
                link.close()
            self._links.clear()

    def __enter__(self) -> "FarmClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError("a FarmClient holds live connections and cannot be pickled; build "
                        "one where it is used (e.g. inside a Spark task) from its options")

    # -- connections ----------------------------------------------------------------------------
    def _link(self, endpoint: str, deadline: float) -> _Link:
        if self._closed:
            raise FarmError("this FarmClient is closed")
        link = self._links.get(endpoint)
        if link is not None and not link.closed:
            return link
        timeout = max(0.05, min(5.0, deadline - time.monotonic()))
        link = _Link(endpoint, self.security, timeout, self._client_id)
        self._links[endpoint] = link
        self._learn(link.welcome)
        return link

    def _learn(self, welcome: ext.Welcome) -> None:
        try:
            config = Configuration.decode(welcome.configuration)
        except Exception:       # a member with no configuration yet
            config = None
        if config is not None:
            for node_id, address in config.addresses.items():
                self._book[node_id] = address
        if welcome.leader_id is not None and welcome.leader_id in self._book:
            self._leader = self._book[welcome.leader_id]

    def _drop(self, endpoint: str) -> None:
        link = self._links.pop(endpoint, None)
        if link is not None:
            link.close()
        if self._leader == endpoint:
            self._leader = None

    def _candidates(self, leader: bool) -> list[str]:
        known = list(dict.fromkeys(self.endpoints + list(self._book.values())))
        self._rotation += 1
        shift = self._rotation % len(known)
        order = known[shift:] + known[:shift]
        if leader and self._leader is not None:
            order = [self._leader] + [e for e in order if e != self._leader]
        return order

    def _redirect(self, exc: NotLeaderError) -> None:
        for node_id, address in exc.members.items():
            if address:
                self._book[node_id] = address
        endpoint = exc.leader_endpoint or (self._book.get(exc.leader_id)
                                           if exc.leader_id is not None else None)
        self._leader = endpoint

    # -- the retry loop -------------------------------------------------------------------------
    def _attempts(self, deadline: float, leader: bool, endpoint: str | None):
        """Endpoints to try until the deadline: a round over the members (the leader
        first), straight to a new leader when redirected, with backoff between rounds."""
        delay, redirects = 0.02, 0
        while True:
            redirected = False
            for candidate in ([endpoint] if endpoint else self._candidates(leader)):
                if time.monotonic() >= deadline:
                    return
                yield candidate
                if leader and endpoint is None and self._leader not in (None, candidate):
                    redirected = True
                    break
            if redirected and redirects < 3:
                redirects += 1
                continue
            redirects = 0
            if time.monotonic() + delay >= deadline:
                return
            time.sleep(delay)
            delay = min(0.5, delay * 2)

    def _with_retries(self, operation, *, leader: bool, endpoint: str | None = None,
                      timeout: float | None = None):
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        last: Exception | None = None
        with self._lock:
            # the common case first: the member we used last is there and answers
            first = endpoint or (self._leader if leader else None)
            link = self._links.get(first) if first is not None else None
            if link is not None and not link.closed:
                try:
                    return operation(link, deadline)
                except (NotLeaderError, Unavailable, ProtocolMismatch, RetryableWrite) as exc:
                    last = self._failed(first, exc, leader, endpoint)
            for candidate in self._attempts(deadline, leader, endpoint):
                try:
                    return operation(self._link(candidate, deadline), deadline)
                except (NotLeaderError, Unavailable, ProtocolMismatch, RetryableWrite) as exc:
                    last = self._failed(candidate, exc, leader, endpoint)
        if isinstance(last, NotLeaderError) and endpoint is None:
            raise Unavailable(f"no leader answered within the timeout (last: {last})")
        if isinstance(last, (Unavailable, NotLeaderError)) or last is None:
            raise Unavailable(f"no member of {', '.join(self.endpoints)} could serve the "
                              f"request within the timeout (last: {last}); check that a "
                              f"majority of the voters runs") from None
        raise last

    def _failed(self, candidate: str, exc: Exception, leader: bool,
                endpoint: str | None) -> Exception:
        """Learn from a failed attempt (redirect, drop a dead link); re-raise what
        retrying cannot fix. Returns the error to report if nothing succeeds."""
        if isinstance(exc, NotLeaderError):
            if endpoint is not None or not leader:
                raise exc
            self._redirect(exc)
        elif isinstance(exc, (Unavailable, ProtocolMismatch)):
            link = self._links.get(candidate)
            if link is None or link.closed:
                self._drop(candidate)
            if isinstance(exc, ProtocolMismatch) and endpoint is not None:
                raise exc
        return exc

    # -- calls ------------------------------------------------------------------------------------
    def _call(self, op: str, args: dict | None = None, *, leader: bool = True,
              endpoint: str | None = None, timeout: float | None = None) -> Any:
        """A Call; `timeout` is the member's own deadline for calls that wait for an
        effect (membership changes), on top of the client's."""
        args = dict(args or {})
        total = self.timeout
        if timeout is not None:
            args["timeout"] = timeout
            total += timeout

        def operation(link: _Link, deadline: float):
            call_id = next(self._call_ids)
            link.send(encode(ext.Call(0, 0, 0, call_id, op, args), GARLICFARM_REGISTRY))
            while True:
                frame = link.next_frame(deadline)
                if isinstance(frame, ext.Reply) and frame.call_id == call_id:
                    if frame.code:
                        raise error_from_wire(frame.code, frame.message, frame.detail)
                    return frame.result

        return self._with_retries(operation, leader=leader, endpoint=endpoint, timeout=total)

    def _write_many(self, payloads: list[tuple[bytes, bytes]]) -> list[ext.WriteResult]:
        """Send farm commands (request id, bytes) pipelined, at most `_MAX_PIPELINE` in
        flight; their WriteResults in order. Each answer must come within the timeout."""
        results: dict[bytes, ext.WriteResult] = {}

        def operation(link: _Link, deadline: float):
            todo = deque((rid, data) for rid, data in payloads if rid not in results)
            outstanding: set[bytes] = set()
            retry: Exception | None = None
            while todo or outstanding:
                if todo and len(outstanding) <= _MAX_PIPELINE // 2:
                    batch = [todo.popleft()
                             for _ in range(min(len(todo), _MAX_PIPELINE - len(outstanding)))]
                    link.send(b"".join(_client_request(data) for _, data in batch))
                    outstanding.update(rid for rid, _ in batch)
                frame = link.next_frame(time.monotonic() + self.timeout)
                if not isinstance(frame, ext.WriteResult) or frame.request_id not in outstanding:
                    continue
                outstanding.discard(frame.request_id)
                if frame.code:
                    error = error_from_wire(frame.code, frame.message, frame.detail)
                    if not isinstance(error, _RETRYABLE):
                        raise error
                    retry = retry or error
                    continue
                results[frame.request_id] = frame
            if retry is not None:
                raise retry
            return [results[rid] for rid, _ in payloads]

        return self._with_retries(operation, leader=True)

    def _write(self, kind: CommandKind, *args: Any, request_id: bytes | None = None) -> Any:
        rid = request_id or new_request_id()
        return self._write_many([(rid, encode_command(kind, rid, *args))])[0]

    # -- writes ---------------------------------------------------------------------------------
    def append(self, records: Sequence[bytes], *,
               request_id: bytes | None = None) -> tuple[int, int]:
        """Append the records to the journal as one log entry; (index, term) of it."""
        result = self._write(CommandKind.JOURNAL, _records(records), request_id=request_id)
        return result.index, result.entry_term

    def append_many(self, batches: Iterable[Sequence[bytes]]) -> list[tuple[int, int]]:
        """Several journal appends pipelined on one connection (one entry per batch)."""
        payloads = []
        for records in batches:
            rid = new_request_id()
            payloads.append((rid, encode_command(CommandKind.JOURNAL, rid, _records(records))))
        return [(r.index, r.entry_term) for r in self._write_many(payloads)]

    def kv_put(self, key: str, value: str) -> None:
        self._write(CommandKind.KV_PUT, _text(key, "key"), _text(value, "value"))

    def kv_append(self, key: str, value: str) -> None:
        self._write(CommandKind.KV_APPEND, _text(key, "key"), _text(value, "value"))

    def kv_cas(self, key: str, expected: str | None, new: str) -> bool:
        if expected is not None:
            _text(expected, "expected")
        return bool(self._write(CommandKind.KV_CAS, _text(key, "key"), expected,
                                _text(new, "new")).result)

    def kv_get(self, key: str, *, consistency: str = "lease") -> str | None:
        """The value, or None for a key never written. `consistency`: "lease" (leader,
        JournalKeeper's lease check), "read_index" (leader, a heartbeat round) or
        "sequential" (the member answering, possibly stale)."""
        return self._query_builtin(["kv_get", _text(key, "key")], consistency=consistency)

    # -- the sink ledger ---------------------------------------------------------------------------
    def stage(self, query_id: str, batch_id: int, partition: int, attempt: int,
              payload: bytes, *, content_type: str = "arrow",
              request_id: bytes | None = None) -> int:
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        return int(self._write(CommandKind.STAGE, query_id, int(batch_id), int(partition),
                               int(attempt), content_type, bytes(payload),
                               request_id=request_id).result)

    def commit_batch(self, query_id: str, batch_id: int, staged: Sequence[int], *,
                     metadata: dict | None = None,
                     request_id: bytes | None = None) -> BatchCommit:
        result = self._write(CommandKind.COMMIT, query_id, int(batch_id),
                             [int(s) for s in staged], dict(metadata or {}),
                             request_id=request_id)
        committed, index, duplicate = result.result
        status = self.batch_status(query_id, batch_id) if duplicate else None
        return BatchCommit(bool(committed), int(index), bool(duplicate), query_id, int(batch_id),
                           status.staged if status else tuple(int(s) for s in staged),
                           status.metadata if status else dict(metadata or {}))

    def abort_batch(self, query_id: str, batch_id: int) -> None:
        self._write(CommandKind.ABORT, query_id, int(batch_id))

    def batch_status(self, query_id: str, batch_id: int) -> BatchCommit | None:
        found = self._query_builtin(["batch_status", query_id, int(batch_id)])
        if found is None:
            return None
        index, staged, metadata = found
        return BatchCommit(True, index, False, query_id, int(batch_id), tuple(staged), metadata)

    def last_committed_batch(self, query_id: str) -> int | None:
        return self._query_builtin(["last_batch", query_id])

    def allocate_sequences(self, key: str, count: int, *, owner: tuple[str, int]) -> int:
        query_id, batch_id = owner
        return int(self._write(CommandKind.ALLOCATE, _text(key, "key"), int(count),
                               query_id, int(batch_id)).result)

    # -- reads --------------------------------------------------------------------------------------
    def _query_builtin(self, request: list, consistency: str = "lease") -> Any:
        answer = self.query(msgpack.packb(request, use_bin_type=True), consistency=consistency)
        return msgpack.unpackb(answer, raw=False, strict_map_key=False)

    def last_applied(self) -> int:
        return int(self._call("last_applied"))

    def log_bounds(self, endpoint: str | None = None) -> tuple[int, int, int]:
        first, commit, snapshot = self._call("log_bounds", leader=endpoint is None,
                                             endpoint=endpoint)
        return int(first), int(commit), int(snapshot)

    def read_entries(self, start: int, stop: int, *, max_bytes: int = 8 << 20,
                     endpoint: str | None = None, payloads: bool = True) -> list[LogRecord]:
        """Committed entries [start, stop) of one member (default: the leader, so a reader
        sees its own acknowledged writes); may end before
        `stop` when `max_bytes` is reached (at least one entry when start < stop). With
        ``payloads=False`` records carry their headers only (type, count, staged and
        commit info; no journal records or payloads)."""
        answer = self._call("read_entries", {"start": int(start), "stop": int(stop),
                                             "max_bytes": int(max_bytes),
                                             "payloads": bool(payloads)},
                            leader=endpoint is None, endpoint=endpoint)
        if not payloads:
            return [record_from_header(h) for h in answer["headers"]]
        verdicts = answer["verdicts"]
        return [described(Entry(term, index, _ENTRY_TYPES[kind], data),
                          verdicts.get(index, True))
                for index, term, kind, data in answer["entries"]]

    def read_committed(self, start: int, stop: int, **kw: Any) -> Iterator[VisibleRecords]:
        """The read-committed view of [start, stop) (see docs/runtime.md)."""
        index = start
        while index < stop:
            page = self.read_entries(index, stop, **kw)
            if not page:
                return
            for record in page:
                visible = self._visible(record, kw)
                if visible is not None:
                    yield visible
            index = page[-1].index + 1

    def _visible(self, record: LogRecord, kw: dict) -> VisibleRecords | None:
        if record.type == "journal" and not record.duplicate:
            return VisibleRecords(record.index, record.term, record.timestamp_ms,
                                  list(record.records or ()))
        if record.type != "commit" or not record.commit.effective:
            return None
        staged = self._fetch(record.commit.staged, kw)
        return VisibleRecords(record.index, record.term, record.timestamp_ms,
                              [s.payload for s in staged], record.commit,
                              tuple(s.staged.content_type for s in staged))

    def _fetch(self, indexes: Sequence[int], kw: dict) -> list[LogRecord]:
        """The staged entries a commit names (they may lie before the range read)."""
        wanted = sorted(set(indexes))
        options = {k: v for k, v in kw.items() if k in ("endpoint", "max_bytes")}
        found: dict[int, LogRecord] = {}
        for index in wanted:
            if index not in found:
                for record in self.read_entries(index, wanted[-1] + 1, **options):
                    found[record.index] = record
        out = []
        for index in indexes:
            record = found.get(index)
            if record is None or record.staged is None:
                raise FarmError(f"the commit names entry {index}, which is not a staged entry")
            out.append(record)
        return out

    def query(self, query: bytes, *, consistency: str = "lease") -> bytes:
        return self._call("query", {"query": bytes(query), "consistency": consistency})

    def query_server(self, endpoint: str, query: bytes) -> bytes:
        return self._call("query_server", {"query": bytes(query)}, leader=False,
                          endpoint=parse_endpoints(endpoint)[0])

    def query_snapshot(self, index: int, query: bytes, *, endpoint: str | None = None) -> bytes:
        return self._call("query_snapshot", {"index": int(index), "query": bytes(query)},
                          leader=False, endpoint=endpoint)

    def ping(self, endpoint: str | None = None) -> dict:
        """One member's view: {"node", "role", "leader", "term"} (any member by default)."""
        return self._call("ping", leader=False,
                          endpoint=parse_endpoints(endpoint)[0] if endpoint else None)

    # -- membership and admin -------------------------------------------------------------------------
    def get_servers(self) -> ClusterView:
        return _cluster_view(self._call("get_servers"))

    def status(self) -> FarmStatus:
        view = self._call("status")
        cluster = _cluster_view(view)
        commit = cluster.commit_index
        lag = {}
        for node_id, member in cluster.members.items():
            if member.match_index is not None:
                lag[node_id] = max(0, commit - member.match_index)
            elif member.status is not None:
                lag[node_id] = max(0, commit - int(member.status.get("raft", {}).get("commit", 0)))
        return FarmStatus(view["cluster"], cluster.leader_id, cluster.term, commit,
                          view["publisher"], cluster.members, lag)

    def update_voters(self, add: dict[int, str] | None = None, remove: Sequence[int] = (),
                      *, timeout: float | None = None) -> None:
        self._call("update_voters", {"add": {int(k): v for k, v in (add or {}).items()},
                                     "remove": [int(r) for r in remove]}, timeout=timeout)

    def update_observers(self, add: dict[int, str] | None = None, remove: Sequence[int] = (),
                         *, timeout: float | None = None) -> None:
        self._call("update_observers", {"add": {int(k): v for k, v in (add or {}).items()},
                                        "remove": [int(r) for r in remove]}, timeout=timeout)

    def add_server(self, node_id: int, endpoint: str, *, timeout: float | None = None) -> None:
        self._call("add_server", {"id": int(node_id), "endpoint": parse_endpoints(endpoint)[0]},
                   timeout=timeout)

    def remove_server(self, node_id: int, *, force: bool = False,
                      timeout: float | None = None) -> None:
        self._call("remove_server", {"id": int(node_id), "force": bool(force)}, timeout=timeout)

    def transfer_leader(self, to: int, *, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            view = self.get_servers()
            if view.leader_id == to:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(f"leadership did not move to node {to} within {timeout}s")
            try:
                self._call("transfer_leader", {"to": int(to)}, timeout=min(left, 5.0))
            except (Unavailable, NotLeaderError, Incomplete):   # another node won, or the
                pass                                            # attempt ended: again
            self._wait_for_leader(to, deadline)

    def _wait_for_leader(self, to: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                if self.ping(self._book.get(to)).get("leader") == to:
                    return
            except FarmError:
                pass
            time.sleep(0.05)

    def subscribe(self, events: Sequence[str] = ("leader-changed", "state-changed",
                                                 "voters-changed")) -> Iterator[Event]:
        """Events from one member (reconnecting to another when it goes away). The
        iterator runs until closed; it holds its own connection."""
        return _Subscription(self, tuple(events))


class _Subscription:
    """The iterator `FarmClient.subscribe` returns; `close()` ends it (from any thread)."""

    def __init__(self, client: FarmClient, events: tuple[str, ...]) -> None:
        self.client = client
        self.events = events
        self.link: _Link | None = None
        self.closed = False

    def __iter__(self) -> "_Subscription":
        return self

    def _connect(self) -> _Link:
        client = self.client
        deadline = time.monotonic() + client.timeout
        last: Exception | None = None
        for endpoint in client._attempts(deadline, False, None):
            try:
                link = _Link(endpoint, client.security, max(0.05, deadline - time.monotonic()),
                             new_request_id())
                link.send(encode(ext.Call(0, 0, 0, 1, "subscribe", {"events": list(self.events)}),
                                 GARLICFARM_REGISTRY))
                while True:
                    frame = link.next_frame(deadline)
                    if isinstance(frame, ext.Reply) and frame.call_id == 1:
                        if frame.code:
                            raise error_from_wire(frame.code, frame.message, frame.detail)
                        return link
            except (Unavailable, ProtocolMismatch) as exc:
                last = exc
        raise Unavailable(f"no member accepted the subscription (last: {last})")

    def __next__(self) -> Event:
        while True:
            if self.closed:
                raise StopIteration
            if self.link is None or self.link.closed:
                self.link = self._connect()
            try:
                frame = self.link.next_frame(time.monotonic() + 3600.0)
            except (Unavailable, ProtocolMismatch):
                self.link.close()
                continue
            if isinstance(frame, ext.EventMessage):
                return Event(frame.name, frame.source, frame.term, frame.leader_id,
                             dict(frame.data))

    def close(self) -> None:
        self.closed = True
        if self.link is not None:
            try:
                self.link.sock.shutdown(socket.SHUT_RDWR)   # wakes a reader blocked in recv
            except OSError:
                pass
            self.link.close()


def _client_request(data: bytes) -> bytes:
    if len(data) > DEFAULT_LIMITS.max_value_size:
        raise FarmError(f"a write of {len(data)} bytes is above the largest log entry a node "
                        f"accepts ({DEFAULT_LIMITS.max_value_size} bytes): split it")
    return encode(RaftRequest(MessageType.CLIENT_REQUEST,
                              entries=(LogEntry(0, ValueType.APPLICATION, data),)),
                  GARLICFARM_REGISTRY)


def _records(records: Sequence[bytes]) -> list[bytes]:
    if isinstance(records, (bytes, bytearray)):
        raise TypeError("records is a sequence of bytes records, not one bytes object: "
                        "wrap it in a list")
    out = []
    for i, record in enumerate(records):
        if not isinstance(record, (bytes, bytearray, memoryview)):
            raise TypeError(f"records[{i}] must be bytes, not {type(record).__name__}")
        out.append(bytes(record))
    return out


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type(value).__name__}")
    return value


def _cluster_view(view: dict) -> ClusterView:
    members = {int(k): MemberView(int(k), m["endpoint"], m["role"], m["voter"], m["match"],
                                  m["status"]) for k, m in view["members"].items()}
    return ClusterView(view["leader"], view["term"], view["commit"],
                       {int(k): v for k, v in view["voters"].items()},
                       {int(k): v for k, v in view["observers"].items()},
                       {int(k): v for k, v in view["outgoing"].items()}, members)

