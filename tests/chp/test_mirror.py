"""The replica sync state machine shared by clients and passive servers, and the passive
server's pending list; no sockets, explicit times."""
from __future__ import annotations

from connectors.chp.kvmap import CloneMap
from connectors.chp.mirror import Mirror, MirrorPhase
from connectors.chp.pending import PendingUpdates
from connectors.chp.proto import Hugz, Icanhaz, Kthxbai, Kvpub, Kvset, Kvsync

T0 = 1_795_333_620.0
U = [bytes([n]) * 16 for n in range(10)]


def synced_replica(subtree: bytes = b"", entries=(), sequence: int = 0) -> Mirror:
    replica = Mirror(subtree)
    replica.on_hugz(Hugz(sequence))
    assert replica.snapshot_request() == Icanhaz(subtree)
    for kvsync in entries:
        replica.on_snapshot(kvsync, T0)
    replica.on_snapshot(Kthxbai(sequence, b"", b"", subtree), T0)
    assert replica.live
    return replica


def test_waits_for_a_live_subscription_before_asking_for_the_snapshot():
    replica = Mirror(b"/a/")
    assert replica.phase is MirrorPhase.SUBSCRIBING and not replica.wants_snapshot
    replica.on_update(Kvpub(b"/a/x", 3, U[1], b"", b"v"), T0)   # proves the subscription
    assert replica.wants_snapshot
    assert replica.snapshot_request() == Icanhaz(b"/a/") and replica.phase is MirrorPhase.SYNCING


def test_updates_during_the_snapshot_are_buffered_and_applied_above_its_sequence():
    replica = Mirror()
    replica.on_hugz(Hugz(1))
    replica.snapshot_request()
    replica.on_update(Kvpub(b"/x", 2, U[2], b"", b"two"), T0)    # already in the snapshot
    replica.on_update(Kvpub(b"/y", 3, U[3], b"", b"three"), T0)  # after it
    assert replica.on_snapshot(Kvsync(b"/x", 2, U[2], b"", b"two"), T0) is None
    synced = replica.on_snapshot(Kthxbai(2), T0)
    assert synced.sequence == 3 and replica.live and replica.map.sequence == 3
    assert [(e.key, e.sequence) for e in synced.changes] == [(b"/x", 2), (b"/y", 3)]


def test_live_updates_apply_only_above_the_last_sequence():
    replica = synced_replica(b"/a/", sequence=10)
    assert replica.on_update(Kvpub(b"/a/1", 9, U[1], b"", b"old"), T0) is None
    assert replica.on_update(Kvpub(b"/a/1", 10, U[1], b"", b"same"), T0) is None
    entry = replica.on_update(Kvpub(b"/a/1", 14, U[1], b"", b"new"), T0)
    assert entry.body == b"new" and replica.map.sequence == 14
    # a key sharing the HUGZ prefix reaches a subtree subscriber: not ours
    assert replica.on_update(Kvpub(b"HUGZ-like", 15, U[2], b"", b"v"), T0) is None
    replica.on_hugz(Hugz(30))   # other subtrees moved the sequence: normal
    assert replica.live


def test_hugz_below_our_sequence_means_the_server_lost_its_state():
    replica = synced_replica(b"/a/", sequence=10)
    replica.on_hugz(Hugz(3))
    assert replica.wants_snapshot and replica.resyncs == 1


def test_a_whole_map_replica_resyncs_on_a_skipped_sequence():
    replica = synced_replica(b"", sequence=5)
    assert replica.on_update(Kvpub(b"/a", 6, U[1], b"", b"v"), T0) is not None
    replica.on_hugz(Hugz(6))
    assert replica.live
    assert replica.on_update(Kvpub(b"/b", 8, U[2], b"", b"v"), T0) is None   # 7 lost
    assert replica.wants_snapshot
    replica2 = synced_replica(b"", sequence=5)
    replica2.on_hugz(Hugz(6))   # HUGZ announces an update we never received
    assert replica2.wants_snapshot


def test_a_resync_reports_what_changed_including_deletions():
    replica = synced_replica(b"", [Kvsync(b"/a", 1, U[1], b"", b"1"),
                                   Kvsync(b"/b", 2, U[2], b"", b"2")], sequence=2)
    replica.restart()   # failover to another server
    replica.on_hugz(Hugz(9))
    replica.snapshot_request()
    replica.on_snapshot(Kvsync(b"/a", 1, U[1], b"", b"1"), T0)     # unchanged
    replica.on_snapshot(Kvsync(b"/c", 8, U[3], b"", b"3"), T0)     # new
    synced = replica.on_snapshot(Kthxbai(9), T0)
    assert [(e.key, e.sequence, e.body) for e in synced.changes] == [
        (b"/c", 8, b"3"), (b"/b", 9, b"")]
    assert sorted(e.key for e in replica.map.entries()) == [b"/a", b"/c"]


def test_a_resync_does_not_report_an_update_whose_ttl_was_made_absolute_elsewhere():
    replica = synced_replica(b"", sequence=0)
    replica.on_update(Kvpub(b"/t", 1, U[1], b"ttl=60\n", b"v"), T0)   # our clock
    replica.resync()
    replica.snapshot_request()
    server_form = b"ttl=%d\n" % (int(T0 * 1000) + 60_004)            # the server's
    replica.on_snapshot(Kvsync(b"/t", 1, U[1], server_form, b"v"), T0)
    synced = replica.on_snapshot(Kthxbai(1), T0)
    assert synced.changes == [] and replica.map.get(b"/t").properties == server_form


def test_snapshot_messages_outside_a_request_are_ignored():
    replica = synced_replica(b"", sequence=2)
    assert replica.on_snapshot(Kthxbai(99), T0) is None and replica.map.sequence == 2


def test_the_replica_keeps_the_map_it_was_given_until_a_snapshot_replaces_it():
    mine = CloneMap(track_changes=True)
    mine.apply(Kvset(b"/old", 0, U[1], b"", b"v"), T0)
    replica = Mirror(b"", mine)
    assert replica.map is mine
    replica.on_hugz(Hugz(4))
    replica.snapshot_request()
    replica.on_snapshot(Kthxbai(4), T0)
    assert replica.map is not mine and replica.map.track_changes and len(replica.map) == 0


# --------------------------------------------------------------------------- pending
def test_pending_matches_client_updates_and_publications_in_either_order():
    pending = PendingUpdates(horizon=10.0)
    pending.client_update(Kvset(b"/a", 0, U[1], b"", b"1"), 0.0)
    pending.client_update(Kvset(b"/b", 0, U[2], b"", b"2"), 0.1)
    pending.published(Kvpub(b"/a", 1, U[1], b"", b"1"), 0.2)      # matches, removed
    pending.published(Kvpub(b"/c", 2, U[3], b"", b"3"), 0.3)      # ahead of the KVSET
    pending.client_update(Kvset(b"/c", 0, U[3], b"", b"3"), 0.4)  # dropped on arrival
    pending.client_update(Kvset(b"/d", 0, b"", b"", b"4"), 0.5)   # no uuid: not held
    assert [u.key for u in pending.take(1.0)] == [b"/b"]
    assert len(pending) == 0


def test_pending_forgets_after_the_horizon_and_stays_bounded():
    pending = PendingUpdates(horizon=5.0, max_entries=3)
    pending.published(Kvpub(b"/x", 1, U[1], b"", b""), 0.0)      # e.g. an expiry delete
    pending.client_update(Kvset(b"/old", 0, U[2], b"", b"v"), 0.0)
    pending.prune(5.1)
    pending.client_update(Kvset(b"/x", 0, U[1], b"", b"again"), 5.2)   # not matched now
    for n in range(3, 8):
        pending.client_update(Kvset(b"/n%d" % n, 0, U[n], b"", b"v"), 5.3)
    held = [u.key for u in pending.take(5.4)]
    assert held == [b"/n5", b"/n6", b"/n7"]
