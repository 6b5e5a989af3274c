"""The pure map state machine: sequences, deletes, ttl forms and expiry, snapshots."""
from __future__ import annotations

import pytest

from connectors.chp.kvmap import CloneMap, Entry
from connectors.chp.proto import Kthxbai, Kvpub, Kvset, Kvsync, parse_properties
from consensus.wire.errors import InvalidField

T0 = 1_795_333_620.0   # epoch seconds; the map never reads a clock
U1, U2, U3 = (bytes([n]) * 16 for n in (1, 2, 3))


def test_apply_assigns_increasing_sequences_and_keeps_the_clients_frames():
    clone = CloneMap()
    first = clone.apply(Kvset(b"/a", 0, U1, b"x=a=b\nlast=nonl", b"1"), T0)
    second = clone.apply(Kvset(b"/b", 0, U2, b"", b"2"), T0)
    assert first == Kvpub(b"/a", 1, U1, b"x=a=b\nlast=nonl", b"1")
    assert second.sequence == 2 and clone.sequence == 2
    assert clone.get(b"/a") == Entry(b"/a", 1, U1, b"x=a=b\nlast=nonl", b"1")


def test_empty_body_deletes_and_still_takes_a_sequence():
    clone = CloneMap()
    clone.apply(Kvset(b"/a", 0, U1, b"", b"1"), T0)
    delete = clone.apply(Kvset(b"/a", 0, U2, b"", b""), T0)
    assert delete == Kvpub(b"/a", 2, U2, b"", b"")
    assert clone.get(b"/a") is None and len(clone) == 0
    # deleting a missing key is published too, as both reference servers do
    assert clone.apply(Kvset(b"/nope", 0, U3, b"", b""), T0).sequence == 3


def test_relative_ttl_is_published_as_received_and_stored_absolute_in_ms():
    clone = CloneMap()
    pub = clone.apply(Kvset(b"/t", 0, U1, b"p=1\nttl=3\n", b"temp"), T0)
    assert pub.properties == b"p=1\nttl=3\n"
    stored = clone.get(b"/t")
    expires = int(T0 * 1000) + 3000
    assert stored.expires_ms == expires
    assert dict(parse_properties(stored.properties)) == {b"p": b"1", b"ttl": b"%d" % expires}
    kvsync = clone.snapshot_reply()[0]
    assert kvsync == Kvsync(b"/t", 1, U1, stored.properties, b"temp")


def test_ttl_zero_means_no_expiry():
    clone = CloneMap()
    clone.apply(Kvset(b"/t", 0, U1, b"ttl=0\n", b"v"), T0)
    assert clone.get(b"/t").expires_ms is None
    assert clone.next_expiry() is None and clone.expire(T0 + 10 ** 6) == []


def test_expire_deletes_at_the_deadline_with_the_original_uuid_and_absolute_ttl():
    clone = CloneMap()
    clone.apply(Kvset(b"/t", 0, U1, b"ttl=2.5\n", b"temp"), T0)
    clone.apply(Kvset(b"/keep", 0, U2, b"", b"v"), T0)
    assert clone.next_expiry() == pytest.approx(T0 + 2.5)
    assert clone.expire(T0 + 2.499) == []
    stored = clone.get(b"/t")
    deletes = clone.expire(T0 + 2.5)
    assert deletes == [Kvpub(b"/t", 3, U1, stored.properties, b"")]
    assert clone.get(b"/t") is None and clone.get(b"/keep") is not None
    assert clone.next_expiry() is None


def test_an_update_cancels_the_old_ttl():
    clone = CloneMap()
    clone.apply(Kvset(b"/t", 0, U1, b"ttl=1\n", b"a"), T0)
    clone.apply(Kvset(b"/t", 0, U2, b"", b"b"), T0 + 0.5)
    assert clone.expire(T0 + 5) == [] and clone.get(b"/t").body == b"b"
    clone.apply(Kvset(b"/t", 0, U3, b"ttl=10\n", b"c"), T0 + 1)
    assert clone.expire(T0 + 5) == [] and clone.next_expiry() == pytest.approx(T0 + 11)


@pytest.mark.parametrize("key", [b"", b"HUGZ", b"KTHXBAI", b"ICANHAZ?"])
def test_reserved_and_empty_keys_are_refused(key):
    clone = CloneMap()
    with pytest.raises(InvalidField) as err:
        clone.apply(Kvset(key, 0, U1, b"", b"v"), T0)
    assert err.value.field == "key" and clone.sequence == 0


@pytest.mark.parametrize("props", [b"ttl=soon\n", b"ttl=nan\n", b"ttl=\n"])
def test_an_unreadable_ttl_is_refused_and_changes_nothing(props):
    clone = CloneMap(track_changes=True)
    with pytest.raises(InvalidField) as err:
        clone.apply(Kvset(b"/t", 0, U1, props, b"v"), T0)
    assert err.value.field == "properties.ttl"
    assert clone.sequence == 0 and len(clone) == 0 and clone.take_changes() == []


def test_snapshot_reply_filters_by_byte_prefix_and_ends_with_the_current_sequence():
    clone = CloneMap()
    for key in (b"/a/1", b"/a/2", b"/ab", b"/b/1"):
        clone.apply(Kvset(key, 0, U1, b"", b"v"), T0)
    clone.apply(Kvset(b"/a/2", 0, U2, b"", b""), T0)   # delete: sequence 5
    reply = clone.snapshot_reply(b"/a/")
    assert [m.key for m in reply[:-1]] == [b"/a/1"]
    assert reply[-1] == Kthxbai(5, b"", b"", b"/a/")
    assert {m.key for m in clone.snapshot_reply(b"/a")[:-1]} == {b"/a/1", b"/ab"}
    assert len(clone.snapshot_reply()) == 4


def test_follow_adopts_newer_sequences_only_and_makes_relative_ttls_absolute():
    clone = CloneMap()
    applied = clone.follow(Kvpub(b"/t", 7, U1, b"ttl=3\n", b"v"), T0)
    assert applied.sequence == 7 and clone.sequence == 7
    assert applied.expires_ms == int(T0 * 1000) + 3000
    assert clone.follow(Kvpub(b"/t", 7, U2, b"", b"stale"), T0) is None
    assert clone.follow(Kvpub(b"/t", 5, U2, b"", b"older"), T0) is None
    assert clone.get(b"/t").body == b"v"
    deleted = clone.follow(Kvpub(b"/t", 8, U1, b"ttl=1795333623000\n", b""), T0)
    assert deleted.deleted and clone.get(b"/t") is None and clone.sequence == 8
    # a ttl the publisher let through but we cannot read: keep the entry, no expiry
    kept = clone.follow(Kvpub(b"/odd", 9, U3, b"ttl=later\n", b"v"), T0)
    assert kept.expires_ms is None and clone.get(b"/odd").properties == b"ttl=later\n"


def test_changes_are_tracked_for_the_log_and_replay_rebuilds_the_map():
    clone = CloneMap(track_changes=True)
    clone.apply(Kvset(b"/a", 0, U1, b"ttl=5\n", b"1"), T0)
    clone.apply(Kvset(b"/b", 0, U2, b"", b"2"), T0)
    clone.apply(Kvset(b"/b", 0, U3, b"", b""), T0)
    clone.expire(T0 + 6)
    changes = clone.take_changes()
    assert [(c.key, c.sequence, c.deleted) for c in changes] == [
        (b"/a", 1, False), (b"/b", 2, False), (b"/b", 3, True), (b"/a", 4, True)]
    assert clone.take_changes() == []
    rebuilt = CloneMap()
    for change in changes[:2]:
        rebuilt.replay(Entry.from_record(change.to_record()))
    assert rebuilt.sequence == 2 and rebuilt.get(b"/a").expires_ms == int(T0 * 1000) + 5000
    for change in changes[2:]:
        rebuilt.replay(change)
    assert rebuilt.sequence == 4 and len(rebuilt) == 0


def test_dump_and_load_round_trip_with_expiries():
    clone = CloneMap()
    clone.apply(Kvset(b"/a", 0, U1, b"ttl=5\n", b"1"), T0)
    clone.apply(Kvset(b"/b", 0, b"", b"x=y\n", b"2"), T0)
    loaded = CloneMap.load(clone.dump())
    assert loaded.sequence == 2
    assert list(loaded.entries()) == list(clone.entries())
    assert loaded.next_expiry() == pytest.approx(T0 + 5)
    assert [d.key for d in loaded.expire(T0 + 5)] == [b"/a"]


@pytest.mark.parametrize("data, field", [
    (b"\x93\x02\x00\x90", "snapshot.version"), (b"garbage", "snapshot"), (b"", "snapshot"),
    (b"\x93\x01\x00\x91\x92\x01\x02", "snapshot")])
def test_load_rejects_what_is_not_a_dump(data, field):
    with pytest.raises(InvalidField) as err:
        CloneMap.load(data)
    assert err.value.field == field


def test_a_deferred_map_loads_its_entries_once_when_first_read():
    """A client's bulk snapshot: the map answers its sequence without the entries, and
    builds them once (threads reading at once included), not as recorded changes."""
    import threading
    calls = []

    def load():
        calls.append(1)
        return [Entry.stored(b"/a", 1, b"u" * 16, b"ttl=99999999999999\n", b"1"),
                Entry(b"/gone", 2, b"u" * 16, b"", b""), Entry(b"/b", 3, b"u" * 16, b"", b"2")]

    clone = CloneMap.deferred(3, load, track_changes=True)
    assert clone.sequence == 3 and calls == []
    with pytest.raises(AttributeError):
        clone.unknown_attribute
    seen = []
    readers = [threading.Thread(target=lambda: seen.append(clone.get(b"/b").body))
               for _ in range(4)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(10)
    assert seen == [b"2"] * 4 and calls == [1] and len(clone) == 2
    assert clone.next_expiry() == 99999999999.999 and clone.take_changes() == []
    assert clone.follow(Kvpub(b"/c", 4, b"u" * 16, b"", b"3"), 0.0) is not None
    assert [e.key for e in clone.take_changes()] == [b"/c"] and len(clone) == 3
