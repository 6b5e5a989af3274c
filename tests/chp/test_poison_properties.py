"""Hostile numbers and random or mutated committed entries against the CHP state
machines (issue 13 item 3): the replicated map applies anything without raising and
replicas agree; the map, a server's apply paths (collector, pending list, following an
active) and a client's replica refuse bad values with a `ProtocolError` and nothing
else; the ttl and resume parsers never raise anything but `ProtocolError`; server
options out of range are refused naming them."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from connectors.chp import proto, resume
from connectors.chp.errors import ChpConfigError
from connectors.chp.kvmap import CloneMap, Entry, check_update
from connectors.chp.map_machine import (RECORD_MAGIC, ReplicatedMap, encode_kvset,
                                        encode_tick)
from connectors.chp.mirror import Mirror
from connectors.chp.pending import PendingUpdates
from connectors.chp.proto import Channel, Kthxbai, Kvpub, Kvset, Kvsync
from connectors.chp.replicated_server import FarmOptions
from connectors.chp.server import ServerConfig
from consensus.wire.errors import ProtocolError

PROPERTIES = settings(max_examples=300, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])

# Numbers as text that broke the parsers, and their neighbours.
HOSTILE = [b"2e305", b"-2e305", b"1e308", b"1e+308", b"-1e+308", b"1e12", b"1e400",
           b"9" * 400, b"1" + b"0" * 300, b"1e-400", b"0.0000001", b"+5", b"-0", b"0",
           b"nan", b"inf", b"-inf", b"1_000", b"0x10", b"", b"1e", b".", b"--1", b"1e+",
           b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809",
           b"1000000000000", b"1000000000001", b"1700000000000", b"1700000000.25"]
numbers = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).encode()),
    st.integers(min_value=-(10 ** 40), max_value=10 ** 40).map(lambda i: b"%d" % i),
    st.binary(max_size=12))
properties = st.one_of(
    numbers.map(lambda v: b"ttl=" + v + b"\n"),
    st.lists(st.tuples(st.sampled_from([b"ttl", b"a", b"since", b"map", b"resumed"]),
                       numbers), max_size=4).map(
        lambda pairs: b"".join(n + b"=" + v + b"\n" for n, v in pairs)),
    st.binary(max_size=40))
keys = st.one_of(st.sampled_from([b"/a", b"/b", b"/a/b", b"", b"HUGZ", b"KTHXBAI"]),
                 st.binary(max_size=8))
uuids = st.one_of(st.just(b""), st.binary(min_size=16, max_size=16))
kvsets = st.builds(Kvset, keys, st.just(0), uuids, properties,
                   st.one_of(st.just(b""), st.binary(min_size=1, max_size=8)))
clocks = st.one_of(st.integers(min_value=0, max_value=(1 << 64) - 1),
                   st.sampled_from([0, 1_800_000_000_000, (1 << 63) - 1, (1 << 64) - 1]))


@PROPERTIES
@given(numbers)
@example(b"1e12")          # an absolute "1e12" was int()ed: ValueError
@example(b"1e+308")        # what a zguide server stores for ttl=1e308
@example(b"2e305")         # * 1000 overflowed: OverflowError
def test_ttl_parsers_refuse_with_a_protocol_error_only(value):
    for parse in (proto.parse_relative_ttl, proto.parse_absolute_ttl):
        try:
            parsed = parse(value)
        except ProtocolError as exc:
            assert exc.field == "properties.ttl"
            continue
        assert parsed is None or abs(parsed) <= proto.MAX_EPOCH_MS


@PROPERTIES
@given(properties)
@example(b"since=--1\nmap=farm/chp\n")     # int(b"--1"): a replicated server died
@example(b"resumed=--1\nmap=farm/chp\n")   # ... and a client's thread
def test_resume_properties_never_raise(raw):
    request = resume.parse_request(raw)
    assert request is None or request.since >= 0
    resume.resumed_from(raw)
    resume.identity_of(raw)


@PROPERTIES
@given(st.lists(st.tuples(kvsets, st.floats(min_value=0, max_value=4e9)), max_size=12))
def test_the_map_refuses_bad_kvsets_with_a_protocol_error_and_changes_nothing(updates):
    """The standalone server's and a new active's apply path: refused or applied."""
    clone = CloneMap(track_changes=True)
    for update, now in updates:
        before = (clone.sequence, clone.dump())
        try:
            clone.apply(update, now)
        except ProtocolError:
            assert (clone.sequence, clone.dump()) == before
            with pytest.raises(ProtocolError):
                check_update(update)
            continue
        check_update(update)   # what the map takes, a replicated server proposes
        clone.expire(now + 1e6)
        clone.next_expiry()
    CloneMap.load(clone.dump())


@PROPERTIES
@given(st.lists(kvsets, max_size=12), st.integers(min_value=0, max_value=3))
def test_a_binary_star_backup_takes_over_whatever_it_holds(held, published):
    """The pending list of a passive server, applied when it takes over."""
    pending = PendingUpdates()
    for n, update in enumerate(held):
        pending.client_update(update, float(n))
    for update in held[:published]:
        pending.published(Kvpub(update.key, 1, update.uuid, update.properties, update.body),
                          0.0)
    clone = CloneMap()
    for update in pending.take(1.0):
        before = (clone.sequence, clone.dump())
        try:
            clone.apply(update, 1.8e9)
        except ProtocolError:
            # refused whole, and only what a server would refuse from a client
            assert (clone.sequence, clone.dump()) == before
            with pytest.raises(ProtocolError):
                check_update(update)


@PROPERTIES
@given(st.lists(st.tuples(keys, st.integers(min_value=proto.MIN_SEQUENCE,
                                            max_value=proto.MAX_SEQUENCE),
                          uuids, properties, st.binary(max_size=4)), max_size=12),
       st.integers(min_value=proto.MIN_SEQUENCE, max_value=proto.MAX_SEQUENCE))
def test_a_replica_follows_anything_a_server_may_send(updates, snapshot_at):
    """A client's replica and a passive server: snapshots and updates as decoded from
    the wire (any sequence, any properties) never raise; a map at the largest sequence
    refuses to number more."""
    replica = Mirror()
    replica.on_hugz(proto.Hugz(0))
    replica.snapshot_request()
    for key, sequence, uuid, props, body in updates:
        if key and key not in proto.RESERVED_KEYS:
            replica.on_snapshot(Kvsync(key, sequence, uuid, props, body), 1.8e9)
    replica.on_snapshot(Kthxbai(snapshot_at, b"", b"", b""), 1.8e9)
    for key, sequence, uuid, props, body in updates:
        replica.on_update(Kvpub(key, sequence, uuid, props, body), 1.8e9)
        replica.on_hugz(proto.Hugz(sequence))
    clone = replica.map
    list(clone.entries())
    clone.expire(1.9e9)
    try:
        clone.apply(Kvset(b"/next", 0, b"", b"", b"v"), 1.8e9)
    except ProtocolError as exc:
        assert exc.field == "sequence" and clone.sequence == proto.MAX_SEQUENCE


def record_strategy():
    kvset_records = st.builds(lambda u, origin: encode_kvset("chp", u, origin), kvsets,
                              st.binary(max_size=40))
    raw = st.one_of(
        kvset_records, st.just(encode_tick("chp")),
        st.binary(max_size=40).map(lambda b: RECORD_MAGIC + b),
        st.lists(st.one_of(st.binary(max_size=10),
                           st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
                           st.text(max_size=4),
                           st.none(), st.booleans(), st.floats()), max_size=8).map(
            lambda items: RECORD_MAGIC + msgpack.packb(items, use_bin_type=True)),
        st.binary(max_size=20))
    mutated = st.tuples(kvset_records, st.integers(min_value=0, max_value=200),
                        st.integers(min_value=0, max_value=255)).map(
        lambda t: t[0][:t[1]] + bytes([t[2]]) + t[0][t[1] + 1:])
    return st.one_of(raw, mutated)


entries = st.lists(st.tuples(clocks, st.lists(record_strategy(), max_size=5)), max_size=10)


@PROPERTIES
@given(entries)
@example([(1_800_000_000_000,
           [encode_kvset("chp", Kvset(b"/k", 0, bytes(16), b"ttl=2e305\n", b"v"))])])
@example([(0, [encode_kvset("chp", Kvset(b"/a", 0, b"", b"ttl=0.0001\n", b"v"))]),
          (0, [encode_tick("chp")])])   # an expiry at 0 ms read back as none
@example([((1 << 64) - 1,
           [encode_kvset("chp", Kvset(b"/k", 0, bytes(16), b"ttl=1e12\n", b"v"))])])
def test_replicated_maps_apply_any_committed_entries_and_agree(log):
    """Random and mutated committed entries: applying never raises, two replicas fed
    the same log have the same checkpoint bytes and published the same KVPUBs, and a
    replica restored from a checkpoint replays the rest of the log to the same state."""
    first, second = ReplicatedMap("chp"), ReplicatedMap("chp")
    streams: list[list] = [[], []]
    middle = len(log) // 2
    for index, (clock, records) in enumerate(log, 1):
        for replica, stream in zip((first, second), streams):
            stream += replica.apply_entry(index, clock, records)
        if index == middle:
            checkpoint = first.dump()
    assert first.dump() == second.dump()
    assert [proto.encode(k) for k in streams[0]] == [proto.encode(k) for k in streams[1]]
    if log:
        restarted = ReplicatedMap("chp")
        restarted.restore(checkpoint if middle else ReplicatedMap("chp").dump())
        for index, (clock, records) in enumerate(log, 1):
            restarted.apply_entry(index, clock, records)   # replay from the start
        assert restarted.dump() == first.dump()


@PROPERTIES
@given(entries, st.integers(min_value=0, max_value=300), st.integers(min_value=0,
                                                                      max_value=255))
def test_a_mutated_checkpoint_is_refused_with_a_protocol_error(log, at, byte):
    """A checkpoint comes from disk or, bootstrapping, from another server."""
    replica = ReplicatedMap("chp")
    for index, (clock, records) in enumerate(log, 1):
        replica.apply_entry(index, clock, records)
    dump = replica.dump()
    mutated = dump[:at] + bytes([byte]) + dump[at + 1:]
    fresh = ReplicatedMap("chp")
    try:
        fresh.restore(mutated)
    except ProtocolError:
        return
    fresh.apply_entry(fresh.applied_index + 1, 1_900_000_000_000,
                      [encode_kvset("chp", Kvset(b"/after", 0, bytes(16), b"ttl=5\n", b"v"))])
    fresh.snapshot_reply()


@PROPERTIES
@given(st.one_of(
    st.lists(st.binary(max_size=20), min_size=5, max_size=5),
    st.tuples(keys, st.binary(min_size=7, max_size=9), uuids, properties,
              st.binary(max_size=3)).map(list)))
@example(proto.encode(Kvset(b"/k", 0, b"", b"ttl=2e305\n", b"v")))
def test_any_five_frames_on_a_collector_are_applied_or_refused(frames):
    """The collector path of every server: decode, then apply, raise nothing else."""
    try:
        update = proto.decode(frames, Channel.COLLECTOR)
        CloneMap().apply(update, 1.8e9)
    except ProtocolError:
        pass


def test_entries_from_a_log_or_checkpoint_are_checked():
    for record in ([b"k", -1, b"", b"", b"v"], [b"k", 1, b"", b"", 5], "x",
                   [b"k", 1 << 63, b"", b"", b"v"], [b"k", 1, b"", b""]):
        with pytest.raises(ProtocolError):
            Entry.from_record(record)


@pytest.mark.parametrize("options, named", [
    (dict(hugz_interval=float("inf")), "--hugz-interval"),
    (dict(peer_timeout=float("nan")), "--peer-timeout"),
    (dict(max_batch=0), "max_batch"), (dict(publisher_hwm=1 << 40), "publisher_hwm"),
])
def test_server_options_out_of_range_are_refused_naming_them(options, named):
    with pytest.raises(ChpConfigError, match=named):
        ServerConfig(**options).validate()
    with pytest.raises(ValueError, match="ChpLimits.max_body_bytes"):
        proto.ChpLimits(max_body_bytes=1 << 40)
    with pytest.raises(ChpConfigError, match="--farm-timeout"):
        FarmOptions("127.0.0.1:9", farm_timeout=float("inf")).validate()
