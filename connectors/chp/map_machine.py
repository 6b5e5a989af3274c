"""The clone map as the state machine of a garlicfarm Raft log (pure: no I/O, no clock).

Every replicated CHP server applies the same committed log entries in the same order to
a `ReplicatedMap` and so publishes the same KVPUBs under the same sequences. What goes
into the log are *records* inside the farm's journal entries (one entry holds every
record a server proposed in one round), each ``RECORD_MAGIC | msgpack [map, kind,
...]``:

* ``KVSET``: ``[map, 1, key, uuid, properties, body, origin]``, a client's KVSET as a
  server received it; `origin` is a request id the server makes up when the KVSET has
  no UUID (else empty).
* ``TICK``: ``[map, 2]``, "time has passed": proposed when a ttl has run out, so
  expiries happen even when nobody writes.

Decisions, all so that every replica reaches the same state:

* **Time is the leader's.** The farm's leader stamps each entry with its clock; the map
  keeps ``clock_ms``, the largest stamp applied so far (a new leader's clock may be
  behind the old one's: time never goes back). A relative ttl is counted from it.
* **Expiry is evaluated at apply time**, before the records of each entry that holds
  records of this map: every key whose ttl is at or before the entry's clock is deleted
  (one delete KVPUB each, in ttl order). TICK records carry no data; they exist to bring
  a new clock into the log. Servers propose a TICK when a ttl has run out on their own
  clock, but only the leader's stamp decides. (The alternative, "the leader proposes
  expire up to T", needs the CHP servers to know who leads and would still need the
  stamp to be replayable; evaluating at apply time needs nothing but the log.)
* **A KVSET applies once** per (UUID, key): every server proposes what it receives and
  clients send each KVSET to every server, and a client may send it again after a
  failover. The map remembers the last `dedup_window` (UUID, key) pairs it applied, in
  log order (so the same ones on every replica) and as 16-byte digests; a KVSET without
  a UUID is identified by the receiving server's `origin` instead (so it applies once
  per server that received it: give KVSETs UUIDs, as both reference clients do).
  The farm's own request ids are not used for this: its verdict on a retried entry
  depends on when a member is asked, ours on the log alone.
* **Malformed records** (another program's bytes under our magic, a bad ttl, a reserved
  key) are skipped and counted, the same way on every replica.

The map also keeps the last `history` changes (`Entry`, stored form) so a server can
answer a resuming client (`resume`) with exactly the updates it missed.
"""
from __future__ import annotations

import enum
import hashlib
import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Iterable, Sequence

import msgpack

from consensus.wire.errors import InvalidField, LimitExceeded, ProtocolError

from . import resume
from .kvmap import CloneMap, Entry
from .proto import (DEFAULT_LIMITS, PROTOCOL, UUID_LENGTH, Hugz, Kthxbai, Kvpub, Kvset,
                    Kvsync, ChpLimits, parse_properties)

RECORD_MAGIC = b"GFCHP\x01"
DEDUP_WINDOW = 131_072      # (UUID, key) pairs remembered: ~3 MiB of digests
HISTORY = 100_000           # changes kept for resuming clients
MAX_ORIGIN = 32
CHECKPOINT_VERSION = 1
_DIGEST = 16


class RecordKind(enum.IntEnum):
    KVSET = 1
    TICK = 2


@dataclass(frozen=True, slots=True)
class KvsetRecord:
    """A client's KVSET as a server proposed it."""
    key: bytes
    uuid: bytes
    properties: bytes
    body: bytes
    origin: bytes = b""

    def identity(self) -> bytes | None:
        """What makes a retransmission recognisable: (UUID or origin, key), digested."""
        sender = self.uuid or self.origin
        if not sender:
            return None
        return hashlib.blake2b(sender + self.key, digest_size=_DIGEST).digest()


@dataclass(frozen=True, slots=True)
class TickRecord:
    """Time passes (the entry's stamp is the time)."""


Record = KvsetRecord | TickRecord


def encode_kvset(map_name: str, update: Kvset, origin: bytes = b"") -> bytes:
    """The journal record of a KVSET received by a server."""
    return RECORD_MAGIC + msgpack.packb(
        [map_name, int(RecordKind.KVSET), update.key, update.uuid, update.properties,
         update.body, origin], use_bin_type=True)


def encode_tick(map_name: str) -> bytes:
    return RECORD_MAGIC + msgpack.packb([map_name, int(RecordKind.TICK)], use_bin_type=True)


def _bad(field: str, reason: str) -> InvalidField:
    return InvalidField(f"record.{field}", reason, protocol=PROTOCOL)


def decode_record(data: bytes, map_name: str,
                  limits: ChpLimits = DEFAULT_LIMITS) -> Record | None:
    """The record of map `map_name` in `data`, or None when `data` is not a CHP record
    or belongs to another map. Raises `ProtocolError` naming the field for a CHP record
    that is malformed; sizes are bounded by `limits` before anything is unpacked."""
    if not data.startswith(RECORD_MAGIC):
        return None
    largest = limits.max_frame_bytes
    try:
        body = msgpack.unpackb(data[len(RECORD_MAGIC):], raw=False, max_bin_len=largest,
                               max_str_len=256, max_array_len=8, max_map_len=0,
                               max_ext_len=0)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise _bad("body", f"not a msgpack array within the limits ({exc})") from None
    if type(body) is not list or len(body) < 2:
        raise _bad("body", "must be an array [map, kind, ...]")
    if type(body[0]) is not str:
        raise _bad("map", "must be a string")
    if body[0] != map_name:
        return None
    kind = body[1]
    if kind == RecordKind.TICK and type(kind) is int:
        if len(body) != 2:
            raise _bad("tick", f"takes no fields, got {len(body) - 2}")
        return TickRecord()
    if kind != RecordKind.KVSET or type(kind) is not int:
        raise _bad("kind", f"{kind!r} is not a record kind (1 KVSET, 2 TICK)")
    if len(body) != 7:
        raise _bad("kvset", f"has 5 fields (key, uuid, properties, body, origin), got "
                   f"{len(body) - 2}")
    key, uuid, properties, value, origin = body[2:]
    for name, field in (("key", key), ("uuid", uuid), ("properties", properties),
                        ("value", value), ("origin", origin)):
        if type(field) is not bytes:
            raise _bad(name, "must be bytes")
    if len(key) > limits.max_key_bytes:
        raise LimitExceeded("record.key", f"{len(key)} bytes > limit {limits.max_key_bytes}",
                            protocol=PROTOCOL)
    if len(properties) > limits.max_properties_bytes:
        raise LimitExceeded("record.properties", f"{len(properties)} bytes > limit "
                            f"{limits.max_properties_bytes}", protocol=PROTOCOL)
    if len(value) > limits.max_body_bytes:
        raise LimitExceeded("record.value", f"{len(value)} bytes > limit "
                            f"{limits.max_body_bytes}", protocol=PROTOCOL)
    if uuid and len(uuid) != UUID_LENGTH:
        raise _bad("uuid", f"must be 16 bytes or empty, got {len(uuid)}")
    if len(origin) > MAX_ORIGIN:
        raise _bad("origin", f"at most {MAX_ORIGIN} bytes, got {len(origin)}")
    try:   # as on a collector: a KVPUB of ours must decode at every client
        parse_properties(properties, limits)
    except ProtocolError as exc:
        raise _bad("properties", exc.reason) from None
    return KvsetRecord(key, uuid, properties, value, origin)


class ReplicatedMap:
    """A `CloneMap` driven by committed log entries; the same entries give the same map,
    sequence and KVPUBs on every replica."""

    def __init__(self, name: str = "chp", identity: bytes | None = None, *,
                 dedup_window: int = DEDUP_WINDOW, history: int = HISTORY,
                 limits: ChpLimits = DEFAULT_LIMITS) -> None:
        if dedup_window < 1 or history < 0:
            raise ValueError(f"dedup_window must be >= 1 and history >= 0, got "
                             f"{dedup_window}, {history}")
        self.name = name
        self.identity = identity if identity is not None else name.encode()
        self.dedup_window = dedup_window
        self.limits = limits
        self.map = CloneMap(track_changes=True)
        self.applied_index = 0     # the last log entry applied
        self.clock_ms = 0          # the largest leader stamp applied
        self.rejected = 0          # malformed records and refused KVSETs skipped
        self.duplicates = 0        # KVSETs applied before (same UUID and key)
        self.last_reject = ""
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._history: deque[Entry] = deque(maxlen=history)

    @property
    def sequence(self) -> int:
        return self.map.sequence

    # ----------------------------------------------------------------- applying
    def apply_entry(self, index: int, timestamp_ms: int, records: Iterable[bytes] = ()
                    ) -> list[Kvpub]:
        """Apply the committed entry at `index` (stamped `timestamp_ms` by the leader)
        whose journal records are `records` (none for other kinds of entries); returns
        the KVPUBs to publish, in order. An entry at or below `applied_index` was
        applied before (a replay after a restart) and is ignored."""
        if index <= self.applied_index:
            return []
        self.applied_index = index
        ours = []
        for data in records:
            try:
                record = decode_record(data, self.name, self.limits)
            except ProtocolError as exc:
                self._reject(index, exc)
                continue
            if record is not None:
                ours.append(record)
        if not ours:
            return []
        self.clock_ms = max(self.clock_ms, timestamp_ms)
        now = self.clock_ms / 1000
        published = self.map.expire(now)
        for record in ours:
            if type(record) is KvsetRecord and self._first_time(record):
                try:
                    published.append(self.map.apply(
                        Kvset(record.key, 0, record.uuid, record.properties, record.body), now))
                except ProtocolError as exc:
                    self._reject(index, exc)
        self._history.extend(self.map.take_changes())
        return published

    def _first_time(self, record: KvsetRecord) -> bool:
        """Remember the record's identity; False when it was applied before."""
        identity = record.identity()
        if identity is None:
            return True
        seen = self._seen
        if identity in seen:
            self.duplicates += 1
            return False
        seen[identity] = None
        if len(seen) > self.dedup_window:
            seen.popitem(last=False)
        return True

    def _reject(self, index: int, exc: ProtocolError) -> None:
        self.rejected += 1
        self.last_reject = f"entry {index}: {exc}"

    def next_expiry(self) -> float | None:
        """When the earliest ttl runs out, in epoch seconds of the leaders' clock."""
        return self.map.next_expiry()

    # ----------------------------------------------------------------- serving
    def hugz(self) -> Hugz:
        return Hugz(self.map.sequence, b"", resume.announce(self.identity))

    def snapshot_reply(self, subtree: bytes = b"", request_properties: bytes = b""
                       ) -> list[Kvsync | Kthxbai]:
        """The answer to ICANHAZ: the updates after the client's sequence when it asks
        to resume this map and the history reaches back far enough, else every entry
        under `subtree`; then KTHXBAI with the current sequence and the identity."""
        request = resume.parse_request(request_properties) if request_properties else None
        missed = self._missed(request.since) if request is not None and \
            request.identity == self.identity else None
        if missed is None:
            reply: list[Kvsync | Kthxbai] = [e.to_kvsync() for e in self.map.entries(subtree)]
            since = None
        else:
            reply = [e.to_kvsync() for e in missed if e.key.startswith(subtree)]
            since = request.since
        reply.append(Kthxbai(self.map.sequence, b"", resume.answer(self.identity, since),
                             subtree))
        return reply

    def _missed(self, since: int) -> Sequence[Entry] | None:
        """The changes after sequence `since`, or None when the history lacks some."""
        current = self.map.sequence
        if since > current:
            return None
        if since == current:
            return ()
        history = self._history
        if not history or history[0].sequence > since + 1:
            return None
        return list(itertools.islice(history, since + 1 - history[0].sequence, None))

    # ----------------------------------------------------------------- checkpoints
    def dump(self) -> bytes:
        """Everything that decides future results (not the history: a restarted server
        answers resuming clients from what it applied since)."""
        return msgpack.packb([CHECKPOINT_VERSION, self.name, self.applied_index,
                              self.clock_ms, self.map.dump(), list(self._seen)],
                             use_bin_type=True)

    def restore(self, data: bytes) -> None:
        """Replace the state by a `dump`; raises `InvalidField` naming what is wrong."""
        try:
            version, name, applied, clock, dumped, seen = msgpack.unpackb(data, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise InvalidField("checkpoint", f"not a replicated CHP map checkpoint: {exc}",
                               protocol=PROTOCOL) from None
        if version != CHECKPOINT_VERSION:
            raise InvalidField("checkpoint.version", f"unknown version {version!r}",
                               protocol=PROTOCOL)
        if name != self.name:
            raise InvalidField("checkpoint.map", f"the checkpoint is of map {name!r}, not "
                               f"{self.name!r}", protocol=PROTOCOL)
        for field, value in (("applied", applied), ("clock", clock)):
            if type(value) is not int or not 0 <= value < 1 << 64:
                raise InvalidField(f"checkpoint.{field}", f"{value!r} is not a u64",
                                   protocol=PROTOCOL)
        if type(dumped) is not bytes or type(seen) is not list or \
                not all(type(s) is bytes and len(s) == _DIGEST for s in seen):
            raise InvalidField("checkpoint", "the map must be bytes and the applied "
                               f"identities {_DIGEST}-byte digests", protocol=PROTOCOL)
        self.map = CloneMap.load(dumped, track_changes=True)
        self.applied_index, self.clock_ms = applied, clock
        self._seen = OrderedDict((s, None) for s in seen[-self.dedup_window:])
        self._history.clear()


__all__ = ["CHECKPOINT_VERSION", "DEDUP_WINDOW", "HISTORY", "KvsetRecord", "RECORD_MAGIC",
           "Record", "RecordKind", "ReplicatedMap", "TickRecord", "decode_record",
           "encode_kvset", "encode_tick"]
