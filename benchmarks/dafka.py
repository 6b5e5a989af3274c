"""Dafka throughput, 100-byte records, each node in its own process on 127.0.0.1.

    .venv/bin/python benchmarks/dafka.py [--records 200000] [--repeat 3]

Three measurements in one run (best of --repeat each):
  baseline   raw pyzmq PUB -> SUB, one 100-byte frame per message (the ceiling: no
             codec, no ordering, no acknowledgement)
  store      Producer.publish_many -> Store (group commit, fsync per drain, cumulative
             ACKs) until the producer holds no unacked record (flush)
  consumer   Producer.publish_many -> Consumer.poll, every record delivered in order
  read-plain a store holding the records -> StoreClient.read_range_batches (FETCH, one
             DIRECT-RECORD per record: what a C store offers)
  read-bulk  the same -> StoreClient.read_range_arrays (the bulk read extension: Arrow
             arrays, docs/protocol.md)
Rates are records/s from the first publish to the last receipt (consumer, baseline),
the last ACK (store), or from the read call to its last record (read-*), and ratios
against the baseline of the same run.
"""
from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zmq  # noqa: E402

from connectors.dafka import (Consumer, DafkaConfig, Producer, Store, StoreClient,  # noqa: E402
                              Tower)
from connectors.dafka.node import Node, new_address  # noqa: E402
from connectors.dafka.partitions import PartitionStore  # noqa: E402
from consensus.admin.progress_bars import track  # noqa: E402

SIZE = 100
TOPIC = "bench"
CHUNK = 10_000


PROFILE_DIR = os.environ.get("DAFKA_BENCH_PROFILE")   # set: cProfile every node process


def _profiled(fn):
    """Run `fn` under cProfile, stats into DAFKA_BENCH_PROFILE/NAME-PID.prof."""
    def run(*args):
        if not PROFILE_DIR:
            return fn(*args)
        import cProfile
        profile = cProfile.Profile()
        try:
            return profile.runcall(fn, *args)
        finally:
            name = f"{args[0].ROLE if args else fn.__name__}-{os.getpid()}.prof"
            profile.dump_stats(os.path.join(PROFILE_DIR, name))
    run.__name__ = fn.__name__
    return run


if PROFILE_DIR:   # every node thread of every process (spawned children import this)
    Node._run = _profiled(Node._run)


def _config(sub: str, pub: str, **changes) -> DafkaConfig:
    return DafkaConfig(tower_sub=(sub,), tower_pub=(pub,), bind="tcp://127.0.0.1:*",
                       beacon_interval=0.1, beacon_timeout=2.0, **changes)


# ------------------------------------------------------------------------ baseline
def raw_sender(endpoint_q, go, result_q, n):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    endpoint_q.put(f"tcp://127.0.0.1:{port}")
    while not go.is_set():             # warm-up until the subscriber is connected
        pub.send(b"w")
        go.wait(0.01)
    payload = b"x" * SIZE
    send = pub.send
    result_q.put(("started", time.time()))
    for _ in range(n):
        send(payload)
    pub.close(linger=5000)
    ctx.term()


def raw_receiver(endpoint, go, result_q, n):
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    sub.recv()                         # a warm-up message: connected and subscribed
    go.set()
    recv = sub.recv
    got = 0
    while got < n:
        if len(recv()) == SIZE:
            got += 1
    result_q.put(("finished", time.time()))
    sub.close(0)
    ctx.term()


def run_baseline(n: int) -> float:
    ctx = mp.get_context("spawn")
    endpoint_q, result_q, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    sender = ctx.Process(target=raw_sender, args=(endpoint_q, go, result_q, n))
    sender.start()
    receiver = ctx.Process(target=raw_receiver,
                           args=(endpoint_q.get(timeout=30), go, result_q, n))
    receiver.start()
    times = dict(result_q.get(timeout=300) for _ in range(2))
    for proc in (sender, receiver):
        proc.join(60)
    return n / (times["finished"] - times["started"])


# ------------------------------------------------------------------------ dafka
def dafka_store(sub, pub, stop, ready, data_dir):
    store = Store(_config(sub, pub), data_dir).start()
    ready.set()
    stop.wait(600)
    store.stop()


def dafka_consumer(sub, pub, target, ready, result_q, stop):
    consumer = Consumer(_config(sub, pub, offset_reset="earliest"), [TOPIC]).start()
    expected = 0
    while target.value < 0 or expected <= target.value:
        for record in consumer.poll(timeout=0.5):
            if record.offset != expected:
                raise SystemExit(f"out of order: {record.offset} != {expected}")
            expected += 1
        if expected:
            ready.set()                # a warm-up record arrived
    result_q.put(("finished", time.time()))
    consumer.stop()


def dafka_producer(sub, pub, n, ready, result_q, stop, target, with_acks):
    producer = Producer(_config(sub, pub), TOPIC).start()
    payload = b"x" * SIZE
    while not ready.is_set():          # warm-up until the peer is connected
        producer.publish(payload)
        if with_acks and producer.flush(0.2):
            break
        ready.wait(0.2)
    target.value = producer.next_sequence + n - 1
    started = time.time()
    for _ in range(0, n, CHUNK):
        producer.publish_many([payload] * CHUNK, timeout=120)
    result_q.put(("started", started))
    if with_acks:
        if not producer.flush(300):
            raise SystemExit("not everything was ACKed")
        result_q.put(("finished", time.time()))
    stop.wait(600)                     # stay up: the consumer may FETCH
    producer.stop()


def run_dafka(n: int, kind: str) -> float:
    ctx = mp.get_context("spawn")
    tower = Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*").start()
    sub, pub = tower.sub_endpoint, tower.pub_endpoint
    result_q, ready, stop = ctx.Queue(), ctx.Event(), ctx.Event()
    target = ctx.Value("q", -1)
    procs = []
    try:
        with tempfile.TemporaryDirectory(prefix="dafka-bench-") as data:
            if kind == "store":
                procs.append(ctx.Process(target=dafka_store, args=(sub, pub, stop, ready,
                                                                   data)))
                procs[-1].start()
                ready.wait(60)
                ready.clear()
            else:
                procs.append(ctx.Process(target=dafka_consumer,
                                         args=(sub, pub, target, ready, result_q, stop)))
                procs[-1].start()
            procs.append(ctx.Process(target=dafka_producer, args=(
                sub, pub, n, ready, result_q, stop, target, kind == "store")))
            procs[-1].start()
            times = dict(result_q.get(timeout=600) for _ in range(2))
            return n / (times["finished"] - times["started"])
    finally:
        stop.set()
        for proc in procs:
            proc.join(60)
            if proc.is_alive():
                proc.kill()
        tower.stop()


def run_read(n: int, kind: str) -> float:
    """A store process over a directory holding `n` records of one partition; this
    process reads them all (after one warm-up read of 1,000) with a StoreClient."""
    ctx = mp.get_context("spawn")
    tower = Tower("tcp://127.0.0.1:*", "tcp://127.0.0.1:*").start()
    sub, pub = tower.sub_endpoint, tower.pub_endpoint
    ready, stop = ctx.Event(), ctx.Event()
    proc = None
    try:
        with tempfile.TemporaryDirectory(prefix="dafka-bench-") as data:
            partition = new_address()
            store = PartitionStore(data, fsync="never")
            payload = b"x" * SIZE
            for first in range(0, n, CHUNK):
                for seq in range(first, min(n, first + CHUNK)):
                    store.stage((TOPIC, partition), seq, payload)
                store.commit()
            store.close()
            proc = ctx.Process(target=dafka_store, args=(sub, pub, stop, ready, data))
            proc.start()
            ready.wait(60)
            with StoreClient(_config(sub, pub)) as client:
                client.wait_for_stores(1, 30)
                read = client.read_range_arrays if kind == "read-bulk" else \
                    client.read_range_batches
                sum(len(piece if kind == "read-plain" else piece[1])
                    for piece in read(TOPIC, partition, 0, min(n, 1000)))
                began = time.time()
                got = sum(len(piece if kind == "read-plain" else piece[1])
                          for piece in read(TOPIC, partition, 0, n))
                elapsed = time.time() - began
            if got != n:
                raise SystemExit(f"{kind}: read {got} of {n} records")
            return n / elapsed
    finally:
        stop.set()
        if proc is not None:
            proc.join(60)
            if proc.is_alive():
                proc.kill()
        tower.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="baseline,store,consumer,read-plain,read-bulk",
                        help="comma-separated; baseline is always run")
    args = parser.parse_args()
    cases = ["baseline"] + [c for c in args.cases.split(",") if c and c != "baseline"]
    rates: dict[str, list[float]] = {c: [] for c in cases}
    # interleaved, so machine noise hits all alike
    for _, case in track(itertools.product(range(args.repeat), cases), "dafka",
                         args.repeat * len(cases)):
        if case == "baseline":
            rates[case].append(run_baseline(args.records))
        elif case in ("store", "consumer"):
            rates[case].append(run_dafka(args.records, case))
        else:
            rates[case].append(run_read(args.records, case))
    best = {k: max(v) for k, v in rates.items()}
    print(f"{args.records} records of {SIZE} bytes, best of {args.repeat}, "
          f"{os.cpu_count()} cores")
    print(f"{'run':<34}{'records/s':>12}{'vs baseline':>13}")
    labels = {"baseline": "raw pyzmq PUB/SUB (baseline)",
              "store": "producer -> store, with ACKs",
              "consumer": "producer -> consumer, in order",
              "read-plain": "store -> StoreClient, FETCH",
              "read-bulk": "store -> StoreClient, bulk (Arrow)"}
    for key, label in labels.items():
        if key not in best:
            continue
        print(f"{label:<34}{best[key]:>12,.0f}{best[key] / best['baseline']:>12.2f}x")
    print("all runs:", {k: [round(r) for r in v] for k, v in rates.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
