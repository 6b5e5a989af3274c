"""`FarmClient`: the Python client of a farm (JournalKeeper's service API, SPECS §5).

Every connection speaks the Garlic Farm handshake, then JRaft's binary messages and our
extensions (docs/protocol.md): the client says Hello, writes travel as ClientRequests
holding farm commands (envelope.py) and are answered by WriteResults; every other call
is a Call answered by a Reply. The client finds the leader by itself: any member's
Welcome names the leader and the configuration, and a NOT_LEADER answer names the
leader's endpoint. Writes carry a request id (default: 16 random bytes) so a write sent
again after a failure is applied once.

Failures cost bounded time (links.py): one connection attempt gets `connect_timeout`, one
request `answer_timeout`, then the next member is tried (a dead or stalled member is
tried last for a while); the whole call gets `timeout`. A failed call raises a
`FarmError` whose `maybe_applied` is False when no copy of the request reached a member
without a definite answer (R4: the operation certainly did not take effect).

Writes go through a `WritePipe` (pipeline.py): in the caller's thread for `append`,
`append_many` and the other writes, in a background thread for `append_async`, which
returns a `concurrent.futures.Future` and keeps many writes in flight on one connection.

A client is cheap to create and not picklable (it holds sockets): Spark executors build
their own from options. It may be shared by threads (calls take turns; `append_async`
does not wait for them).
"""
from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from typing import Any, Iterable, Iterator, Sequence

import msgpack

from consensus.client.links import (Directory, Link, LinkPool, NoAnswer, NotHosted,
                                    foreign_leader_text)
from consensus.client.pipeline import PendingWrite, WritePipe
from consensus.client.subscription import Subscription
from consensus.common.errors import (AuthenticationError, ConfigError, FarmError,
                                     Incomplete, NotAFarm, NotLeaderError,
                                     ProtocolMismatch,
                                     RetryableWrite, Unavailable, error_from_wire)
from consensus.common.partitions import ABORTED_KEY, check_partition
from consensus.common.results import (BatchCommit, ClusterView, Event,
                                      FarmStatus, LogRecord, MemberView, RowCounts,
                                      VisibleRecords)
from consensus.net.security import Security, split_endpoint
from consensus.raft import Entry, EntryType
from consensus.wire import extensions as ext
from consensus.wire.envelope import (CommandKind, described, encode_command,
                                     new_request_id, record_from_header)
from consensus.wire.extensions import GARLICFARM_REGISTRY
from consensus.wire.journal_pages import JournalPage, page_from_answer
from consensus.wire.jraft import DEFAULT_LIMITS, client_request, encode

_ENTRY_TYPES = {t.value: t for t in EntryType}


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


class FarmClient:
    """See the module docstring and /docs/runtime.md for the API."""

    def __init__(self, endpoints: str | Sequence[str], cluster: str = "farm",
                 username: str | None = None, password: str | None = None,
                 wire: str = "garlicfarm", tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None,
                 proxy: str | None = None, timeout: float = 10.0,
                 connect_timeout: float = 0.5, answer_timeout: float = 1.0, *,
                 tls: bool = False, insecure_skip_tls_verify: bool = False,
                 dial_timeout: float | None = None, partition: int = 0) -> None:
        """TLS: with `tls_ca` the nodes' certificates must chain to it; with `tls=True`,
        `tls_cert` or neither CA given, they are verified against the system trust store
        and the endpoint's host name; `insecure_skip_tls_verify=True` skips verifying
        them (logged as a warning). `tls_cert`/`tls_key`: our client certificate (nodes
        with a tls-ca require one). `dial_timeout`: a call that could connect to no
        member for that long fails then, not at `timeout` (etcdctl's --dial-timeout).
        `partition`: the partition (Raft group) every call addresses (ConfigError if
        unhosted)."""
        if wire != "garlicfarm":
            raise ConfigError("wire", "clients always speak the Garlic Farm handshake and its "
                              "extensions; the node's --wire only concerns its peers")
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout),
                            ("answer_timeout", answer_timeout),
                            ("dial_timeout", 1.0 if dial_timeout is None else dial_timeout)):
            if not value > 0:
                raise ConfigError(name, f"must be positive seconds, got {value}")
        self.endpoints = parse_endpoints(endpoints)
        self.timeout = timeout
        self.dial_timeout = dial_timeout
        self.answer_timeout = answer_timeout
        self.security = Security(cluster=cluster, username=username, password=password,
                                 tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, proxy=proxy,
                                 use_tls=tls, insecure_skip_tls_verify=insecure_skip_tls_verify)
        if username is None:
            raise ConfigError("username", "the farm authenticates clients: give a username "
                              "and password")
        self.directory = Directory(self.endpoints, connect_timeout)
        self.partition = check_partition(partition)
        self.links = LinkPool(self.directory, self.security, new_request_id(), self.partition)
        self._call_ids = itertools.count(1)
        self._lock = threading.RLock()
        self._pipe = self._write_pipe(background=False)   # the calls' writes, in their thread
        self._async: WritePipe | None = None    # append_async's, in a thread of its own

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            pipe, self._async = self._async, None
            self.links.close()
        if pipe is not None:
            pipe.close()

    def _write_pipe(self, *, background: bool) -> WritePipe:
        return WritePipe(self.links, self.answer_timeout, background=background)

    def __enter__(self) -> "FarmClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        raise TypeError("a FarmClient holds live connections and cannot be pickled; build "
                        "one where it is used (e.g. inside a Spark task) from its options")

    # -- connections ----------------------------------------------------------------------------
    def _explained(self, exc: FarmError, since: FarmError | None) -> FarmError:
        """A call that ran out of time while a member refused us at the handshake (a
        wrong cluster name: 404; a certificate refused) says what the member answered,
        not only that no member served it."""
        refused = self.links.refused
        if refused is None or refused is since or not isinstance(exc, Unavailable):
            return exc
        better = ProtocolMismatch(f"{refused} (no member of {', '.join(self.endpoints)} "
                                  f"served the request in time)")
        better.maybe_applied = exc.maybe_applied
        return better

    # -- the retry loop -------------------------------------------------------------------------
    def _with_retries(self, operation, *, leader: bool, endpoint: str | None = None,
                      timeout: float | None = None, patience: float | None = None):
        """Run `operation(link, attempt_deadline)` at the leader (or `endpoint`, or any
        member) until it returns or the deadline. Each attempt gets `patience` seconds
        (default `answer_timeout`) for its answer; then the next member is tried."""
        started = time.monotonic()
        deadline = started + (timeout if timeout is not None else self.timeout)
        # Until a connection succeeds, the dial timeout bounds the call.
        dialing = deadline if self.dial_timeout is None else \
            min(deadline, started + self.dial_timeout)
        patience = self.answer_timeout if patience is None else patience
        last: Exception | None = None
        uncertain = False           # a request went out and got no definite answer
        before = self.links.refused
        with self._lock:
            for candidate in self.directory.attempts(deadline, leader=leader,
                                                     endpoint=endpoint):
                try:
                    link = self.links.shared(candidate, dialing)
                except ProtocolMismatch as exc:
                    if endpoint is not None or \
                            (isinstance(exc, NotAFarm) and self.directory.all_foreign()):
                        raise _final(exc, uncertain) from None
                    last = exc
                    if time.monotonic() >= dialing:
                        break
                    continue
                except NotHosted as exc:
                    if endpoint is not None:    # asked of that member: it cannot serve
                        raise _final(exc, uncertain) from None
                    last = exc                  # its members are in the directory now
                    continue
                except Unavailable as exc:
                    last = exc
                    if time.monotonic() >= dialing:
                        break
                    continue
                except AuthenticationError as exc:
                    raise _final(exc, uncertain) from None
                dialing = deadline
                if leader and endpoint is None and \
                        self.directory.reachable_leader() not in (None, candidate):
                    continue    # its Welcome named the leader: a member would answer a
                    # leader's call it serves too (log_bounds, read_entries) from its own
                    # view, which may not hold our acknowledged writes yet (a leader
                    # that failed us lately is not waited for: the member answers)
                sent = link.sent
                try:
                    return operation(link, min(deadline, time.monotonic() + patience))
                except NoAnswer as exc:
                    uncertain = uncertain or link.sent > sent
                    self.links.drop(candidate, failed=True)
                    last = exc
                except NotLeaderError as exc:
                    if endpoint is not None or not leader:
                        raise _final(exc, uncertain) from None
                    self.directory.redirect(exc)
                    last = exc
                except (Unavailable, RetryableWrite) as exc:   # the member asks to retry
                    last = exc
                except ProtocolMismatch as exc:
                    self.links.drop(candidate, failed=True)
                    if endpoint is not None:
                        raise _final(exc, uncertain) from None
                    last = exc
                except FarmError as exc:
                    raise _final(exc, uncertain or isinstance(exc, Incomplete)) from None
        # a refusal at a handshake (TLS, 404) says more than the attempts after it
        refused = last if isinstance(last, ProtocolMismatch) else \
            self.links.refused if self.links.refused is not before else None
        if dialing < deadline and refused is None:
            raise _final(Unavailable(f"could not connect to {', '.join(self.endpoints)} "
                                     f"within the dial timeout of {self.dial_timeout:g}s "
                                     f"(last: {last}); check the endpoints and that the "
                                     f"members run"), uncertain)
        foreign = self.directory.foreign_leader()
        if foreign is not None and endpoint is None and leader:
            raise _final(Unavailable(foreign_leader_text(foreign)), uncertain)
        if refused is not None:
            raise _final(ProtocolMismatch(f"{refused} (no member of {', '.join(self.endpoints)}"
                                          f" served the request in time)"), uncertain)
        if isinstance(last, NotLeaderError) and endpoint is None:
            raise _final(Unavailable(f"no leader answered within the timeout (last: {last})"),
                         uncertain)
        raise _final(Unavailable(f"no member of {', '.join(self.endpoints)} could serve the "
                                 f"request within the timeout (last: {last}); check that a "
                                 f"majority of the voters runs"), uncertain)

    # -- calls ------------------------------------------------------------------------------------
    def _call(self, op: str, args: dict | None = None, *, leader: bool = True,
              endpoint: str | None = None, timeout: float | None = None) -> Any:
        """A Call; `timeout` is the member's own deadline for calls that wait for an
        effect (membership changes), on top of the client's."""
        args = dict(args or {})
        total, patience = self.timeout, None
        if timeout is not None:
            args["timeout"] = timeout
            total += timeout
            patience = timeout + self.answer_timeout

        def operation(link: Link, deadline: float):
            call_id = next(self._call_ids)
            sent = args
            if leader and endpoint is None and link.endpoint == self.directory.leader:
                sent = {**args, "as_leader": True}   # not leading any more: say who does
            link.send(encode(ext.Call(0, 0, 0, call_id, op, sent), GARLICFARM_REGISTRY))
            while True:
                frame = link.next_frame(deadline)
                if isinstance(frame, ext.Reply) and frame.call_id == call_id:
                    if frame.code:
                        raise error_from_wire(frame.code, frame.message, frame.detail)
                    return frame.result

        return self._with_retries(operation, leader=leader, endpoint=endpoint, timeout=total,
                                  patience=patience)

    def _pending(self, request_id: bytes, data: bytes, deadline: float,
                 future: Future | None = None) -> PendingWrite:
        if len(data) > DEFAULT_LIMITS.max_value_size:
            raise FarmError(f"a write of {len(data)} bytes is above the largest log entry a "
                            f"node accepts ({DEFAULT_LIMITS.max_value_size} bytes): split it")
        return PendingWrite(request_id, client_request((data,)), deadline, future)

    def _write_many(self, payloads: list[tuple[bytes, bytes]]) -> list[ext.WriteResult]:
        """Send farm commands (request id, bytes) pipelined on the leader's connection;
        their WriteResults in order (the first failure is raised)."""
        deadline = time.monotonic() + self.timeout
        writes = [self._pending(rid, data, deadline) for rid, data in payloads]
        before = self.links.refused
        with self._lock:
            if self.links.closed:
                raise FarmError("this FarmClient is closed")
            self._pipe.run(writes)
        for w in writes:
            if w.error is not None:
                raise self._explained(w.error, before)
        return [w.result for w in writes]

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

    def append_async(self, records: Sequence[bytes], *, request_id: bytes | None = None,
                     timeout: float | None = None) -> "Future[tuple[int, int]]":
        """Append the records as one log entry without waiting: a Future of its (index,
        term). Many may be in flight on the client's background connection to the
        leader (up to 1,024 sent at once, the rest queued); each is sent again on
        failures until `timeout` (default: the client's). Callbacks run in the
        client's background thread and may call append_async again."""
        rid = request_id or new_request_id()
        data = encode_command(CommandKind.JOURNAL, rid, _records(records))
        future: Future = Future()
        write = self._pending(rid, data, time.monotonic() + (timeout or self.timeout), future)
        pipe = self._async
        if pipe is None:
            with self._lock:
                if self.links.closed:
                    raise FarmError("this FarmClient is closed")
                if self._async is None:
                    self._async = self._write_pipe(background=True)
                    self._async.start()
                pipe = self._async
        pipe.submit(write)
        return future

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
        aborted = isinstance(metadata, dict) and ABORTED_KEY in metadata
        return BatchCommit(not aborted, index, False, query_id, int(batch_id), tuple(staged),
                           metadata, aborted)

    def prepared_commits(self, decided_from: int = 0
                         ) -> tuple[int, list[tuple[int, str, int]], list[tuple[int, int]]]:
        """A partition's (applied index, prepared commits still waiting as (index, query
        id, batch id), the newest rolled-forward ones decided at or after partition 0's
        index `decided_from` as (index, decision index)), at one moment
        (docs/exactly-once.md, "Partitions")."""
        applied, waiting, resolved = self._query_builtin(["prepared", int(decided_from)])
        return (int(applied), [(int(i), q, int(b)) for i, q, b in waiting],
                [(int(i), int(d)) for i, d in resolved])

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

    def last_applied(self, *, stable: bool = False) -> int:
        """The leader's last applied index; `stable`: the last one a reader may read up
        to, before any batch still waiting for partition 0's decision (a node older than
        that answers the applied index: it holds no such batch)."""
        return int(self._call("last_applied", {"stable": True} if stable else None))

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

    def read_raw_entries(self, start: int, stop: int, *, max_bytes: int = 8 << 20,
                         endpoint: str | None = None) -> list[Entry]:
        """Committed entries [start, stop) of one member (default: the leader) exactly as
        its log holds them (index, term, type, bytes): what a backup copies. May end
        before `stop` at `max_bytes` (at least one entry when start < stop)."""
        answer = self._call("read_entries", {"start": int(start), "stop": int(stop),
                                             "max_bytes": int(max_bytes), "payloads": True},
                            leader=endpoint is None, endpoint=endpoint)
        try:
            return [Entry(term, index, _ENTRY_TYPES[kind], data)
                    for index, term, kind, data in answer["entries"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolMismatch(f"read_entries({start}, {stop}): a malformed answer "
                                   f"({exc!r})") from None

    def read_snapshot(self, index: int = 0, offset: int = 0, *, max_bytes: int = 1 << 20,
                      endpoint: str | None = None) -> dict:
        """A chunk of the snapshot file one member's log builds on (index 0: whichever it
        is now), with that log's first index, the term before it and the applied commit
        index: backups read a snapshot in chunks, never whole (docs/protocol.md,
        "read_snapshot"). An answer naming another index: the member moved on."""
        answer = self._call("read_snapshot", {"index": int(index), "offset": int(offset),
                                              "max_bytes": int(max_bytes)},
                            leader=endpoint is None, endpoint=endpoint)
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), bytes) or \
                not all(isinstance(answer.get(k), int) for k in
                        ("first", "base_term", "applied", "index", "term", "size", "offset")):
            raise ProtocolMismatch("read_snapshot: a malformed answer from the member")
        return answer

    def read_journal(self, start: int, stop: int, *, max_bytes: int = 8 << 20,
                     endpoint: str | None = None) -> JournalPage:
        """The visible journal entries of committed entries [start, stop) of one member
        (default: the leader) as columns (`JournalPage`; docs/runtime-requests.md S8); may
        end before `stop` when `max_bytes` is reached (at least one entry when start <
        stop). FarmError "unknown call" from a member older than the call."""
        answer = self._call("read_journal", {"start": int(start), "stop": int(stop),
                                             "max_bytes": int(max_bytes)},
                            leader=endpoint is None, endpoint=endpoint)
        if not isinstance(answer, dict):
            raise ProtocolMismatch(f"read_journal({start}, {stop}): the member answered "
                                   f"{type(answer).__name__}, not a map")
        return page_from_answer(start, stop, answer)

    def entry_rows(self, start: int, stop: int, *, endpoint: str | None = None) -> RowCounts:
        """Row counts of committed entries [start, stop) of one member (default: the
        leader), for planning: each entry's journal rows and the effective commits'
        headers (docs/runtime-requests.md S7). May end before `stop` (at least one entry
        when start < stop). FarmError "unknown call" from a member older than the call."""
        answer = self._call("entry_rows", {"start": int(start), "stop": int(stop)},
                            leader=endpoint is None, endpoint=endpoint)
        answer = answer if isinstance(answer, dict) else {}
        end, rows = answer.get("stop"), answer.get("rows")
        commits = [record_from_header(h) for h in answer.get("commits") or ()]
        if not isinstance(end, int) or not isinstance(rows, bytes) or \
                not (start < end <= stop or start == end == stop) or \
                len(rows) != 4 * (end - start) or \
                any(not start <= c.index < end or c.commit is None for c in commits):
            raise ProtocolMismatch(f"entry_rows({start}, {stop}): the member answered "
                                   f"entries up to {end!r} with {len(rows or b'')} bytes of "
                                   f"rows; expected 4 bytes for each entry")
        return RowCounts(start, end, rows, commits)

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

    def report_consumer(self, name: str, position: int) -> dict:
        """Tell the leader that consumer `name` has committed up to `position` (the next
        index it reads); its lag as the leader counts it: {"name", "position",
        "lag_entries", "lag_rows" (None: not counted yet), "seen_age"}."""
        return self._call("consumer_position", {"name": str(name), "position": int(position)})

    def partitions(self, endpoint: str | None = None) -> dict:
        """A member's live view of every partition it hosts: {"node", "partitions"}."""
        return self._call("partitions", leader=False, endpoint=endpoint)

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
                          view["publisher"], cluster.members, lag, view.get("leader_since"),
                          view.get("election_timeout"), list(view.get("consumers") or ()))

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
                if self.ping(self.directory.endpoint_of(to)).get("leader") == to:
                    return
            except FarmError:
                pass
            time.sleep(0.05)

    def subscribe(self, events: Sequence[str] = ("leader-changed", "state-changed",
                                                 "voters-changed")) -> Iterator[Event]:
        """Events from one member (reconnecting to another when it goes away). The
        iterator runs until closed; it holds its own connection."""
        return Subscription(self, tuple(events))


def _final(exc: FarmError, maybe_applied: bool) -> FarmError:
    """The error a call ends with, saying whether the operation may have taken effect."""
    exc.maybe_applied = maybe_applied
    return exc


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
                                  m["status"], m.get("ack_age"), m.get("reachable"))
               for k, m in view["members"].items()}
    return ClusterView(view["leader"], view["term"], view["commit"],
                       {int(k): v for k, v in view["voters"].items()},
                       {int(k): v for k, v in view["observers"].items()},
                       {int(k): v for k, v in view["outgoing"].items()}, members)

