"""The replicated map (pure): records, determinism, dedup, leader-clock ttl, resume."""
from __future__ import annotations

import random

import msgpack
import pytest

from connectors.chp import proto, resume
from connectors.chp.map_machine import (RECORD_MAGIC, KvsetRecord, ReplicatedMap,
                                        TickRecord, decode_record, encode_kvset,
                                        encode_tick)
from connectors.chp.mirror import Mirror
from connectors.chp.proto import Hugz, Icanhaz, Kthxbai, Kvpub, Kvset, Kvsync
from consensus.wire.errors import InvalidField, LimitExceeded

T0 = 1_800_000_000_000      # a leader stamp, epoch ms
U = [bytes([n]) * 16 for n in range(256)]


def kvset(key: bytes, body: bytes, uuid: bytes = b"", props: bytes = b"",
          origin: bytes = b"", name: str = "chp") -> bytes:
    return encode_kvset(name, Kvset(key, 0, uuid, props, body), origin)


def published(kvpubs):
    return [(p.key, p.sequence, p.uuid, p.body) for p in kvpubs]


# ----------------------------------------------------------------- records
def test_records_round_trip_and_other_maps_or_programs_are_not_ours():
    record = decode_record(kvset(b"/a", b"v", U[1], b"ttl=3\n", name="orders"), "orders")
    assert record == KvsetRecord(b"/a", U[1], b"ttl=3\n", b"v", b"")
    assert decode_record(encode_tick("orders"), "orders") == TickRecord()
    assert decode_record(kvset(b"/a", b"v", name="other"), "orders") is None
    assert decode_record(b"a Spark journal record", "orders") is None


@pytest.mark.parametrize("body, field", [
    (b"\xc1", "record.body"),                                   # not msgpack
    (msgpack.packb({"a": 1}), "record.body"),                   # not an array
    (msgpack.packb([1, 1]), "record.map"),
    (msgpack.packb(["chp", 9]), "record.kind"),
    (msgpack.packb(["chp", True]), "record.kind"),
    (msgpack.packb(["chp", 2, b"x"]), "record.tick"),
    (msgpack.packb(["chp", 1, b"k"]), "record.kvset"),
    (msgpack.packb(["chp", 1, "k", b"", b"", b"v", b""]), "record.key"),
    (msgpack.packb(["chp", 1, b"k", b"short", b"", b"v", b""]), "record.uuid"),
    (msgpack.packb(["chp", 1, b"k", b"", b"", b"v", bytes(33)]), "record.origin"),
])
def test_malformed_records_raise_protocol_errors_naming_the_field(body, field):
    with pytest.raises(InvalidField) as err:
        decode_record(RECORD_MAGIC + body, "chp")
    assert err.value.field == field


def test_record_sizes_are_bounded_before_use():
    limits = proto.ChpLimits(max_key_bytes=8, max_body_bytes=16)
    with pytest.raises(LimitExceeded) as err:
        decode_record(kvset(b"k" * 9, b"v"), "chp", limits)
    assert err.value.field == "record.key"
    with pytest.raises(InvalidField) as err:   # refused by msgpack's own bound
        decode_record(kvset(b"k", b"v" * 100_000), "chp", limits)
    assert err.value.field == "record.body"


# ----------------------------------------------------------------- applying
def test_sequences_are_assigned_at_apply_time_and_duplicates_apply_once():
    m = ReplicatedMap()
    first = m.apply_entry(1, T0, [kvset(b"/a", b"1", U[1]), kvset(b"/b", b"2", U[2])])
    # the same KVSETs proposed by another server, and a retransmission after failover
    again = m.apply_entry(2, T0 + 5, [kvset(b"/b", b"2", U[2]), kvset(b"/a", b"1", U[1])])
    later = m.apply_entry(3, T0 + 9, [kvset(b"/a", b"3", U[3]), kvset(b"/b", b"", U[4])])
    assert published(first) == [(b"/a", 1, U[1], b"1"), (b"/b", 2, U[2], b"2")]
    assert again == [] and m.duplicates == 2
    assert published(later) == [(b"/a", 3, U[3], b"3"), (b"/b", 4, U[4], b"")]
    assert m.sequence == 4 and m.map.get(b"/a").body == b"3" and b"/b" not in m.map
    # the same UUID on another key is another update
    assert published(m.apply_entry(4, T0, [kvset(b"/c", b"x", U[3])])) == \
        [(b"/c", 5, U[3], b"x")]


def test_kvsets_without_uuid_are_told_apart_by_the_origin_the_server_gave_them():
    m = ReplicatedMap()
    m.apply_entry(1, T0, [kvset(b"/a", b"1", origin=b"server-A-1"),
                          kvset(b"/a", b"1", origin=b"server-A-1"),    # a retried round
                          kvset(b"/a", b"1", origin=b"server-B-1")])   # the other server's copy
    assert m.sequence == 2 and m.duplicates == 1


def test_entries_applied_before_are_ignored_and_other_entries_only_move_the_index():
    m = ReplicatedMap()
    m.apply_entry(5, T0, [kvset(b"/a", b"1", U[1])])
    assert m.apply_entry(5, T0, [kvset(b"/z", b"1", U[9])]) == []
    assert m.apply_entry(4, T0, [kvset(b"/z", b"1", U[9])]) == []
    assert m.apply_entry(6, T0 + 99_999, [b"someone else's record"]) == []
    assert m.applied_index == 6 and m.sequence == 1
    assert m.clock_ms == T0   # entries without our records bring no time


def test_bad_records_and_refused_kvsets_are_skipped_and_counted():
    m = ReplicatedMap()
    out = m.apply_entry(1, T0, [RECORD_MAGIC + b"\xc1", kvset(b"HUGZ", b"x", U[1]),
                                kvset(b"/t", b"x", U[2], b"ttl=soon\n"),
                                kvset(b"/ok", b"fine", U[3])])
    assert published(out) == [(b"/ok", 1, U[3], b"fine")]
    assert m.rejected == 3 and "entry 1" in m.last_reject


def test_ttl_runs_on_the_leaders_clock_and_expiry_is_evaluated_at_apply_time():
    m = ReplicatedMap()
    m.apply_entry(1, T0, [kvset(b"/t", b"v", U[1], b"ttl=2\n")])
    assert m.map.get(b"/t").expires_ms == T0 + 2000
    assert m.apply_entry(2, T0 + 1999, [encode_tick("chp")]) == []
    assert b"/t" in m.map
    # a new leader whose clock is behind: time does not go back
    assert m.apply_entry(3, T0 + 1000, [encode_tick("chp")]) == [] and m.clock_ms == T0 + 1999
    out = m.apply_entry(4, T0 + 2000, [encode_tick("chp"), kvset(b"/n", b"new", U[2])])
    assert published(out) == [(b"/t", 2, U[1], b""), (b"/n", 3, U[2], b"new")]
    assert out[0].get_property(b"ttl") == b"%d" % (T0 + 2000)    # absolute, as stored


def test_replicas_fed_the_same_log_agree_whatever_the_paging():
    rng = random.Random(7)
    log = []
    for index in range(1, 300):
        records = []
        for _ in range(rng.randrange(0, 4)):
            key = b"/k/%d" % rng.randrange(20)
            uuid = U[rng.randrange(60)]
            props = b"ttl=%d\n" % rng.randrange(1, 5) if rng.random() < 0.3 else b""
            body = b"" if rng.random() < 0.1 else b"v%d" % index
            records.append(kvset(key, body, uuid, props))
        if rng.random() < 0.2:
            records.append(encode_tick("chp"))
        log.append((index, T0 + index * 37, records))
    a, b = ReplicatedMap(), ReplicatedMap()
    out_a = [p for entry in log for p in a.apply_entry(*entry)]
    # b gets the log twice over in places (a restarted follower re-reading pages)
    out_b = []
    for start in range(0, len(log), 50):
        for entry in log[max(0, start - 10):start + 50]:
            out_b += b.apply_entry(*entry)
    assert published(out_a) == published(out_b)
    assert [p.sequence for p in out_a] == list(range(1, a.sequence + 1))
    assert a.dump() == b.dump()


def test_a_checkpoint_restores_everything_that_decides_future_results():
    a = ReplicatedMap("orders", dedup_window=4)
    a.apply_entry(1, T0, [kvset(b"/a", b"1", U[1], b"ttl=5\n"), kvset(b"/b", b"2", U[2])])
    b = ReplicatedMap("orders", dedup_window=4)
    b.restore(a.dump())
    tail = (2, T0 + 6000, [kvset(b"/a", b"1", U[1]), kvset(b"/c", b"3", U[3])])
    assert published(a.apply_entry(*tail)) == published(b.apply_entry(*tail))
    assert b.dump() == a.dump() and b.applied_index == 2
    with pytest.raises(InvalidField) as err:
        ReplicatedMap("chp").restore(a.dump())
    assert err.value.field == "checkpoint.map"
    with pytest.raises(InvalidField):
        ReplicatedMap("orders").restore(b"not a checkpoint")


def test_the_dedup_window_forgets_the_oldest_first():
    m = ReplicatedMap(dedup_window=2)
    m.apply_entry(1, T0, [kvset(b"/a", b"1", U[1]), kvset(b"/a", b"2", U[2]),
                          kvset(b"/a", b"3", U[3])])
    m.apply_entry(2, T0, [kvset(b"/a", b"1", U[1]), kvset(b"/a", b"3", U[3])])
    assert m.sequence == 4 and m.duplicates == 1   # U[1] was forgotten, U[3] was not


# ----------------------------------------------------------------- serving and resuming
def test_hugz_and_kthxbai_announce_the_map_identity():
    m = ReplicatedMap("orders", b"farm/orders")
    m.apply_entry(1, T0, [kvset(b"/a", b"1", U[1], name="orders")])
    assert resume.identity_of(m.hugz().properties) == b"farm/orders" and m.hugz().sequence == 1
    reply = m.snapshot_reply(b"/")
    assert [type(r) for r in reply] == [Kvsync, Kthxbai]
    assert resume.identity_of(reply[-1].properties) == b"farm/orders"
    assert resume.resumed_from(reply[-1].properties) is None and reply[-1].subtree == b"/"


def _server_with_updates(history: int = 100) -> ReplicatedMap:
    m = ReplicatedMap("chp", b"farm/chp", history=history)
    m.apply_entry(1, T0, [kvset(b"/a/1", b"1", U[1]), kvset(b"/b/1", b"1", U[2])])
    m.apply_entry(2, T0, [kvset(b"/a/2", b"2", U[3], b"ttl=1\n"), kvset(b"/a/1", b"", U[4])])
    m.apply_entry(3, T0 + 1000, [encode_tick("chp"), kvset(b"/a/3", b"3", U[5])])
    return m   # sequences 1..6: /a/1, /b/1, /a/2, del /a/1, expire /a/2, /a/3


def test_a_resuming_client_gets_exactly_the_updates_after_its_sequence():
    m = _server_with_updates()
    reply = m.snapshot_reply(b"/a/", resume.request(1, b"farm/chp"))
    assert [(r.key, r.sequence, r.body) for r in reply[:-1]] == \
        [(b"/a/2", 3, b"2"), (b"/a/1", 4, b""), (b"/a/2", 5, b""), (b"/a/3", 6, b"3")]
    assert resume.resumed_from(reply[-1].properties) == 1 and reply[-1].sequence == 6
    # the expiry delete carries the absolute ttl, as stored
    assert dict(proto.parse_properties(reply[2].properties))[b"ttl"] == b"%d" % (T0 + 1000)
    up_to_date = m.snapshot_reply(b"", resume.request(6, b"farm/chp"))
    assert len(up_to_date) == 1 and resume.resumed_from(up_to_date[0].properties) == 6


@pytest.mark.parametrize("request_properties", [
    resume.request(1, b"farm/other"),      # another map
    resume.request(7, b"farm/chp"),        # ahead of this server
    b"since=x\nmap=farm/chp\n",            # unreadable
])
def test_a_resume_this_server_cannot_honour_gets_a_whole_snapshot(request_properties):
    reply = _server_with_updates().snapshot_reply(b"", request_properties)
    assert resume.resumed_from(reply[-1].properties) is None
    assert sorted(r.key for r in reply[:-1]) == [b"/a/3", b"/b/1"]


def test_a_resume_beyond_the_history_gets_a_whole_snapshot():
    m = _server_with_updates(history=3)    # keeps sequences 4..6
    assert resume.resumed_from(m.snapshot_reply(b"", resume.request(3, b"farm/chp"))[-1]
                               .properties) == 3
    assert resume.resumed_from(m.snapshot_reply(b"", resume.request(2, b"farm/chp"))[-1]
                               .properties) is None


def _feed(replica: Mirror, reply) -> object:
    synced = None
    for msg in reply:
        synced = replica.on_snapshot(msg, T0 / 1000)
    return synced


def test_a_client_replica_resumes_from_a_server_of_the_same_map_without_gap_or_repeat():
    server = _server_with_updates()
    replica = Mirror(b"/a/")
    replica.on_hugz(server.hugz())
    request = replica.snapshot_request()
    assert request.properties == b""             # nothing to resume from yet: a snapshot
    first = ReplicatedMap("chp", b"farm/chp")
    first.apply_entry(1, T0, [kvset(b"/a/1", b"1", U[1]), kvset(b"/b/1", b"1", U[2])])
    _feed(replica, first.snapshot_reply(request.subtree, request.properties))
    assert replica.live and replica.identity == b"farm/chp" and replica.map.sequence == 2

    replica.restart()                            # failover to `server`, further on
    replica.on_hugz(server.hugz())
    request = replica.snapshot_request()
    assert resume.parse_request(request.properties) == resume.ResumeRequest(2, b"farm/chp")
    assert proto.decode(proto.encode(request), proto.Channel.SNAPSHOT_REQUEST) == request
    replica.on_update(Kvpub(b"/a/4", 7, U[6], b"", b"4"), T0 / 1000)   # live, buffered
    synced = _feed(replica, server.snapshot_reply(request.subtree, request.properties))
    assert [(e.key, e.sequence, e.body) for e in synced.changes] == \
        [(b"/a/2", 3, b"2"), (b"/a/1", 4, b""), (b"/a/2", 5, b""), (b"/a/3", 6, b"3"),
         (b"/a/4", 7, b"4")]
    assert sorted(replica.map.entries(), key=lambda e: e.key) and \
        {e.key: e.body for e in replica.map.entries()} == {b"/a/3": b"3", b"/a/4": b"4"}
    assert replica.map.sequence == 7


def test_a_client_asks_for_a_whole_snapshot_from_a_server_of_another_map():
    replica = Mirror()
    replica.identity = b"farm/chp"
    replica.on_hugz(Hugz(3, b"", resume.announce(b"farm/other")))
    assert replica.snapshot_request() == Icanhaz(b"")
    replica.restart()
    replica.on_hugz(Hugz(3))                      # a standalone server announces nothing
    assert replica.snapshot_request().properties == b""


def test_a_resumed_answer_the_client_did_not_ask_for_makes_it_resync():
    replica = Mirror()
    replica.on_hugz(Hugz(0))
    replica.snapshot_request()
    bogus = Kthxbai(5, b"", resume.answer(b"farm/chp", 3))
    assert replica.on_snapshot(bogus, T0 / 1000) is None
    assert replica.wants_snapshot and replica.identity is None


# ----------------------------------------------------------------- bootstrap
def test_a_state_travels_in_chunks_to_a_server_of_the_same_map_only(monkeypatch):
    from connectors.chp import bootstrap
    monkeypatch.setattr(bootstrap, "CHUNK", 64)
    source = _server_with_updates()
    dump = source.dump()
    reply = bootstrap.reply(dump, source.applied_index, source.sequence, b"farm/chp")
    assert len(reply) == -(-len(dump) // 64) + 1 > 3
    wire = [proto.decode(proto.encode(m), proto.Channel.SNAPSHOT_REPLY) for m in reply]
    index, data = bootstrap.assemble(wire, b"farm/chp")
    copy = ReplicatedMap("chp", b"farm/chp")
    copy.restore(data)
    assert index == 3 and copy.dump() == dump
    assert bootstrap.assemble(wire, b"farm/other") is None
    assert bootstrap.assemble(wire[:1] + wire[2:], b"farm/chp") is None   # a chunk lost
    assert bootstrap.assemble(source.snapshot_reply(), b"farm/chp") is None   # a snapshot
    request = proto.decode(proto.encode(bootstrap.request(b"farm/chp")),
                           proto.Channel.SNAPSHOT_REQUEST)
    assert bootstrap.wanted(request) == b"farm/chp"
    assert bootstrap.wanted(Icanhaz(b"", properties=resume.request(1, b"farm/chp"))) is None
