"""The clone server's map and sequence, as a pure state machine.

Everything a CHP server decides about its data happens here, with no sockets, threads
or clocks (time comes in as an argument), so the same logic serves the standalone
server, the Binary Star pair and, later, a replicated map driven by Raft commits:

* `apply(kvset, now)` assigns the next sequence and returns the KVPUB to publish (the
  client's frames with the new sequence, properties verbatim, so a relative ttl stays
  relative as both reference peers do). The stored entry keeps an absolute ttl.
* `follow(kvpub, now)` applies an update published by another server (a passive Binary
  Star server following the active): its sequence is adopted, a relative ttl made
  absolute on receipt (SPECS §3).
* `expire(now)` deletes entries whose ttl has passed and returns their delete KVPUBs.
* `snapshot_reply(subtree)` gives the KVSYNCs and the KTHXBAI of an ICANHAZ answer.
* `dump()` / `CloneMap.load(data)` serialise the whole state; with `track_changes` the
  map records every stored `Entry` (an empty body is a delete) for a write-ahead log,
  to be drained with `take_changes()` and replayed with `replay(entry)`.

Times are epoch seconds (floats) in, integer epoch milliseconds inside: the C peer's
unit for absolute ttls, which we emit.

Driven by a replicated log (Raft), every node must reach the same map: apply the
committed KVSETs in log order with the `now` recorded in each entry by the leader that
proposed it (never the local clock), and run `expire` from committed "tick" entries
carrying the leader's time; `dump`/`load` are the state machine snapshot.
"""
from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import msgpack

from consensus.wire.errors import InvalidField, ProtocolError

from .proto import (MAX_EPOCH_MS, MAX_SEQUENCE, MIN_EXPIRY_MS, PROTOCOL, RESERVED_KEYS,
                    TTL, Kthxbai, Kvpub, Kvset, Kvsync, format_absolute_ttl,
                    parse_absolute_ttl, parse_properties, parse_relative_ttl,
                    replace_property)

_DUMP_VERSION = 1
_TTL_LINE = TTL + b"="   # cheap test before parsing any properties


@dataclass(slots=True)
class Entry:
    """One stored key (or, as a change record, its deletion when `body` is empty).
    `properties` is the stored form: the ttl, if any, absolute in epoch ms.

    Shared between the map, change logs, snapshots and watchers, and never modified
    once made: treat it as immutable. (Not a frozen dataclass because every update
    makes one and a frozen one costs ~4x more to construct: 2.6 vs 0.6 us here.)"""
    key: bytes
    sequence: int
    uuid: bytes
    properties: bytes
    body: bytes
    expires_ms: int | None = None

    @property
    def deleted(self) -> bool:
        return not self.body

    def to_kvsync(self) -> Kvsync:
        return Kvsync(self.key, self.sequence, self.uuid, self.properties, self.body)

    def to_record(self) -> list:
        """The msgpack-able form, for logs and snapshots."""
        return [self.key, self.sequence, self.uuid, self.properties, self.body]

    @classmethod
    def from_record(cls, record: list) -> "Entry":
        """Inverse of `to_record`; `InvalidField` for anything `to_record` never makes
        (a log or a checkpoint may come from disk or, bootstrapping, from a peer)."""
        if type(record) is not list or len(record) != 5:
            raise InvalidField("record", "must be [key, sequence, uuid, properties, body]",
                               protocol=PROTOCOL)
        key, sequence, uuid, properties, body = record
        if not (type(key) is type(uuid) is type(properties) is type(body) is bytes):
            raise InvalidField("record", "key, uuid, properties and body must be bytes",
                               protocol=PROTOCOL)
        if type(sequence) is not int or not 0 <= sequence <= MAX_SEQUENCE:
            raise InvalidField("record.sequence", f"{sequence!r} is not a sequence",
                               protocol=PROTOCOL)
        return cls.stored(key, sequence, uuid, properties, body)

    @classmethod
    def stored(cls, key: bytes, sequence: int, uuid: bytes, properties: bytes,
               body: bytes) -> "Entry":
        """An entry whose properties are in stored form (absolute ttl, as in KVSYNC)."""
        return cls(key, sequence, uuid, properties, body,
                   _stored_expiry(properties) if body else None)


def _stored_expiry(properties: bytes) -> int | None:
    """The absolute expiry (epoch ms) in stored properties; None when there is none or
    it cannot be read (a peer's business: we keep the entry rather than guess)."""
    if _TTL_LINE not in properties:
        return None
    try:
        value = dict(parse_properties(properties)).get(TTL)
        return None if value is None else parse_absolute_ttl(value)
    except ProtocolError:
        return None


def to_epoch_ms(now: float) -> int:
    """Epoch seconds to integer epoch ms, rounded: a time given as `ms / 1000` comes back
    as exactly `ms` (the replicated map passes the leader's millisecond stamps that way)."""
    return round(now * 1000)


class CloneMap:
    """The key-value map of a clone server and the sequence of its last update."""

    def __init__(self, sequence: int = 0, entries: Iterable[Entry] = (), *,
                 track_changes: bool = False) -> None:
        self.sequence = sequence
        self._entries: dict[bytes, Entry] = {}
        self._expiries: list[tuple[int, int, bytes]] = []   # (expires_ms, seq, key) heap
        self.track_changes = False
        self._changes: list[Entry] = []
        for entry in entries:
            self._store(entry)
        self.track_changes = track_changes

    @classmethod
    def deferred(cls, sequence: int, load: Callable[[], Iterable[Entry]], *,
                 track_changes: bool = False) -> "CloneMap":
        """A map at `sequence` whose entries are `load()`ed the first time they are
        needed: a client that took a snapshot in bulk for a consumer of its columns
        (and is only asked for its sequence) never builds them."""
        clone = cls.__new__(cls)
        clone.sequence = sequence
        clone.track_changes = track_changes
        clone._changes = []
        clone._load = load
        clone._loading = threading.Lock()
        return clone

    def __getattr__(self, name: str):
        # Reached only for a missing attribute: the entries of a `deferred` map, loaded
        # now, once, by whichever thread reads them first (a client's readers do not
        # take its lock); every other map has them from __init__.
        loading = self.__dict__.get("_loading")
        if name not in ("_entries", "_expiries") or loading is None:
            raise AttributeError(name)
        with loading:
            load = self.__dict__.pop("_load", None)
            if load is not None:
                entries: dict[bytes, Entry] = {}
                expiries: list[tuple[int, int, bytes]] = []
                for entry in load():     # as _store does, not recorded as changes
                    if entry.body:
                        entries[entry.key] = entry
                        if entry.expires_ms is not None:
                            heapq.heappush(expiries, (entry.expires_ms, entry.sequence,
                                                      entry.key))
                    else:
                        entries.pop(entry.key, None)
                self._expiries = expiries
                self._entries = entries
        return object.__getattribute__(self, name)

    # ----------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    def get(self, key: bytes) -> Entry | None:
        return self._entries.get(key)

    def entries(self, subtree: bytes = b"") -> Iterator[Entry]:
        """Stored entries whose key starts with `subtree` (a byte prefix)."""
        if not subtree:
            return iter(list(self._entries.values()))
        return (e for e in list(self._entries.values()) if e.key.startswith(subtree))

    def snapshot_reply(self, subtree: bytes = b"", uuid: bytes = b""
                       ) -> list[Kvsync | Kthxbai]:
        """The answer to ICANHAZ? `subtree`: a KVSYNC per matching entry, then KTHXBAI
        with the current sequence and the subtree as body (RFC 12, Python peer)."""
        entries, end = self.snapshot_parts(subtree, uuid)
        reply: list[Kvsync | Kthxbai] = [e.to_kvsync() for e in entries]
        reply.append(end)
        return reply

    def snapshot_parts(self, subtree: bytes = b"", uuid: bytes = b""
                       ) -> tuple[list[Entry], Kthxbai]:
        """`snapshot_reply` as the stored entries themselves (each encodes as its
        KVSYNC) and the KTHXBAI: no message object per entry for a bulk answer."""
        return list(self.entries(subtree)), Kthxbai(self.sequence, uuid, b"", subtree)

    def next_expiry(self) -> float | None:
        """When the earliest ttl runs out (epoch seconds), or None."""
        self._drop_stale_expiries()
        return self._expiries[0][0] / 1000 if self._expiries else None

    # ----------------------------------------------------------------- updates
    def apply(self, update: Kvset, now: float) -> Kvpub:
        """A client's KVSET: store it (an empty body deletes) under the next sequence
        and return the KVPUB to publish. Raises `ProtocolError` for a reserved or empty
        key, an unreadable or out-of-range ttl, or a sequence at its maximum; nothing
        changes then."""
        key, uuid, properties, body = update.key, update.uuid, update.properties, update.body
        if not key or key in RESERVED_KEYS:
            raise InvalidField("key", f"{key!r} is reserved by the protocol; use another "
                               "key", protocol=PROTOCOL)
        stored = properties
        expires_ms = None
        if body and _TTL_LINE in properties:
            stored, expires_ms = _absolute_ttl(properties, now)
        if self.sequence >= MAX_SEQUENCE:
            raise InvalidField("sequence", f"the map's sequence is at its maximum "
                               f"({MAX_SEQUENCE}): no update can be numbered",
                               protocol=PROTOCOL)
        self.sequence = sequence = self.sequence + 1
        self._store(Entry(key, sequence, uuid, stored, body, expires_ms))
        return Kvpub(key, sequence, uuid, properties, body)

    def follow(self, update: Kvpub, now: float) -> Entry | None:
        """An update another server published: apply it if it is newer than our state
        and adopt its sequence. A republished KVSET's ttl is relative and made absolute
        here (an unreadable ttl was the publisher's call: the entry is kept without
        expiry). Returns the stored entry (empty body: a delete), or None if stale."""
        if update.sequence <= self.sequence:
            return None
        properties = update.properties
        expires_ms = None
        if update.body and _TTL_LINE in properties:
            try:
                properties, expires_ms = _absolute_ttl(properties, now)
            except ProtocolError:
                properties = update.properties
        self.sequence = update.sequence
        entry = Entry(update.key, update.sequence, update.uuid, properties, update.body,
                      expires_ms)
        self._store(entry)
        return entry

    def expire(self, now: float) -> list[Kvpub]:
        """Delete every entry whose ttl has passed; return their delete KVPUBs (empty
        body, original UUID, absolute ttl), each with its own new sequence (none once
        the sequence is at its maximum: nothing could be published)."""
        now_ms = to_epoch_ms(now)
        deletes = []
        heap = self._expiries
        while heap and heap[0][0] <= now_ms and self.sequence < MAX_SEQUENCE:
            _, sequence, key = heapq.heappop(heap)
            entry = self._entries.get(key)
            if entry is None or entry.sequence != sequence:
                continue  # updated or deleted since
            self.sequence += 1
            self._store(Entry(key, self.sequence, entry.uuid, entry.properties, b""))
            deletes.append(Kvpub(key, self.sequence, entry.uuid, entry.properties, b""))
        return deletes

    def _store(self, entry: Entry) -> None:
        if entry.body:
            self._entries[entry.key] = entry
            if entry.expires_ms is not None:
                heapq.heappush(self._expiries, (entry.expires_ms, entry.sequence, entry.key))
        else:
            self._entries.pop(entry.key, None)
        if self.track_changes:
            self._changes.append(entry)

    def _drop_stale_expiries(self) -> None:
        heap = self._expiries
        while heap:
            _, sequence, key = heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.sequence == sequence:
                return
            heapq.heappop(heap)

    # ----------------------------------------------------------------- durability
    def take_changes(self) -> list[Entry]:
        """The entries stored since the last call (deletes have an empty body)."""
        changes, self._changes = self._changes, []
        return changes

    def replay(self, change: Entry) -> None:
        """Re-apply a change taken from a log (recovery); sequences only move forward."""
        self.sequence = max(self.sequence, change.sequence)
        self._store(change)

    def dump(self) -> bytes:
        """The whole state, for a snapshot file."""
        return msgpack.packb([_DUMP_VERSION, self.sequence,
                              [e.to_record() for e in self._entries.values()]])

    @classmethod
    def load(cls, data: bytes, *, track_changes: bool = False) -> "CloneMap":
        """Inverse of `dump`. Raises `InvalidField` naming what is wrong."""
        try:
            version, sequence, records = msgpack.unpackb(data)
            if version == _DUMP_VERSION:
                if type(sequence) is not int or not 0 <= sequence <= MAX_SEQUENCE:
                    raise ValueError(f"the sequence {sequence!r} is not one")
                return cls(sequence, map(Entry.from_record, records),
                           track_changes=track_changes)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:   # InvalidField too
            raise InvalidField("snapshot", f"not a CHP map dump: {exc}",
                               protocol=PROTOCOL) from None
        raise InvalidField("snapshot.version", f"unknown CHP map dump version {version!r}",
                           protocol=PROTOCOL)


def check_update(update: Kvset) -> None:
    """What `CloneMap.apply` refuses whatever the map holds (a reserved or empty key,
    an unreadable or out-of-range ttl): `ProtocolError` naming the field. A replicated
    server asks before it puts a KVSET in the log."""
    if not update.key or update.key in RESERVED_KEYS:
        raise InvalidField("key", f"{update.key!r} is reserved by the protocol; use another "
                           "key", protocol=PROTOCOL)
    if update.body and _TTL_LINE in update.properties:
        value = dict(parse_properties(update.properties)).get(TTL)
        if value is not None:
            parse_relative_ttl(value)


def _absolute_ttl(properties: bytes, now: float) -> tuple[bytes, int | None]:
    """Stored properties and expiry for a relative ttl received at `now`. An expiry
    before 1973 is stored as `MIN_EXPIRY_MS` (past either way): an earlier one would
    read back as seconds, and a map loaded from a dump would expire it at another
    time than the map that stored it. One past 64-bit epoch milliseconds raises
    `InvalidField` (a ttl is bounded, but `now` of a replicated map is whatever its
    leaders stamped)."""
    value = dict(parse_properties(properties)).get(TTL)
    seconds = None if value is None else parse_relative_ttl(value)
    if seconds is None:
        return properties, None
    expires_ms = max(to_epoch_ms(now) + round(seconds * 1000), MIN_EXPIRY_MS)
    if expires_ms > MAX_EPOCH_MS:
        raise InvalidField("properties.ttl", f"{value[:32]!r} seconds from {now!r} is past "
                           "what an expiry can hold", protocol=PROTOCOL)
    return replace_property(properties, TTL, format_absolute_ttl(expires_ms)), expires_ms


__all__ = ["CloneMap", "Entry", "check_update", "to_epoch_ms"]
