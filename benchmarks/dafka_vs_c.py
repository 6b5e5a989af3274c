"""Dafka against the C dafka tools, side by side in one run (issue 15 item 3).

    PYTHONPATH=. .venv/bin/python benchmarks/dafka_vs_c.py [--records 100000] [--size 100]
        [--rounds 3] [--fsync never]

The C tools come from ``<repo>/../shared/peers/dafka`` (or --peers). Each round runs
the set-ups (--setups), each on a fresh tower and an empty store directory, one after
the other:

  C      dafka_towerd, dafka_stored, dafka_perf_store, then dafka_perf_consumer
  ours   `garlicfarm dafka tower`, `garlicfarm dafka store`, then this script's
         perf-store and perf-consumer (the C tools' loops over our Producer / Consumer)
  mixed  dafka_towerd, *our* store, dafka_perf_store, then dafka_perf_consumer: the C
         producer and consumer against our store, to show which side is slow
  tools  dafka_towerd, dafka_stored, then our perf-store and perf-consumer: our
         producer and consumer against the C store (our consumer by plain FETCH)

Both measures are what the C tools print ("mean throughput"):
  producer -> store   count / time from the first send until the store ACKed every
                      record (dafka_perf_store: publish, then zactor_destroy waits for
                      the last ACK)
  store -> consumer   count / time from the first record received until the last
                      (dafka_perf_consumer: topic $STORE_PERF, consumer/offset/reset =
                      earliest, every record from the store by FETCH: the producer is gone)

Durability: the C store writes a LevelDB batch per drain with default write options
(sync = false: written to the OS, no fsync), so ours runs with store/fsync = never
(one write per drain, no fsync) unless --fsync says otherwise. Round 0 is a warm-up and
not counted; the table shows medians of the rounds' rates and of per-round ratios.

DAFKA_BENCH_PROFILE=DIR: cProfile every node thread of our processes into DIR.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from connectors.dafka.proto import FETCH_BLOCK  # noqa: E402
from raft_throughput import free_ports  # noqa: E402

TOPIC = "$STORE_PERF"           # the C perf tools' topic
PUBLISH_CHUNK = 10_000
TOOL_TIMEOUT = 120              # seconds one perf tool may run
RATE = re.compile(rb"mean throughput: (\d+) \[msg/s\]")
FETCHES = re.compile(rb"fetches: (\d+) bulk, (\d+) plain")


# --------------------------------------------------------------------- our perf tools
def _profile_nodes() -> None:
    """With DAFKA_BENCH_PROFILE set, every node thread of this process writes a cProfile."""
    directory = os.environ.get("DAFKA_BENCH_PROFILE")
    if not directory:
        return
    import cProfile
    from connectors.dafka.node import Node
    run = Node._run

    def profiled(node):
        profile = cProfile.Profile()
        try:
            return profile.runcall(run, node)
        finally:
            profile.dump_stats(os.path.join(directory, f"{node.ROLE}-{os.getpid()}.prof"))
    Node._run = profiled


def perf_store(config_file: str, count: int, size: int) -> None:
    """dafka_perf_store over our Producer: publish `count` records, wait for every ACK."""
    from connectors.dafka import Producer, load_config
    producer = Producer(load_config(config_file), TOPIC).start()   # welcome + settle
    payload = b"x" * size
    began = time.perf_counter()
    for first in range(0, count, PUBLISH_CHUNK):
        producer.publish_many([payload] * min(PUBLISH_CHUNK, count - first), timeout=300)
    if not producer.flush(300):
        raise SystemExit("perf-store: not every record was ACKed within 300 s")
    elapsed = time.perf_counter() - began
    producer.stop()
    print(f"mean throughput: {int(count / elapsed)} [msg/s]", flush=True)


def perf_consumer(config_file: str, count: int, size: int) -> None:
    """dafka_perf_consumer over our Consumer, timed conservatively: from our consumer's
    first FETCH or BULK-FETCH (the C tool starts later, at the first record it receives)
    to the moment the consumer delivers the last record. (The first record's delivery
    would be too late a start: a drain delivers all it took at its end, up to 100,000
    records.)"""
    import threading
    from dataclasses import replace

    from connectors.dafka import Consumer, load_config, proto
    delivered = 0
    asked: list[float] = []
    done = threading.Event()

    def on_record(record) -> None:
        nonlocal delivered
        delivered += 1
        if delivered == count:
            done.set()

    config = replace(load_config(config_file), offset_reset="earliest")
    consumer = Consumer(config, [TOPIC], on_record=on_record)
    send = consumer.send

    def timed_send(msg: proto.Message) -> None:
        if not asked and (type(msg) is proto.Fetch
                          or type(msg) is proto.BulkFetch and msg.count):   # not a probe
            asked.append(time.perf_counter())
        send(msg)
    consumer.send = timed_send
    consumer.start()
    if not done.wait(TOOL_TIMEOUT / 2):
        raise SystemExit(f"perf-consumer: {delivered} of {count} records in "
                         f"{TOOL_TIMEOUT / 2:g} s")
    elapsed = time.perf_counter() - asked[0]
    consumer.stop()
    print(f"mean throughput: {int(count / elapsed)} [msg/s]", flush=True)
    print(f"fetches: {consumer.stats['bulk_fetches']} bulk, {consumer.stats['fetches']} "
          f"plain", flush=True)


def run_store(argv: list[str]) -> int:
    """`garlicfarm dafka store`, profiled when asked."""
    _profile_nodes()
    from connectors.dafka.cli import main
    return main(["store", *argv])


# --------------------------------------------------------------------- the harness
def _python(*args: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), *args]


class Setup:
    """Processes of one set-up; every one is ended by PID when the set-up closes."""

    def __init__(self, peers: str, directory: str) -> None:
        self.peers = peers
        self.directory = directory
        self.procs: list[subprocess.Popen] = []
        self.note = ""          # how our consumer fetched
        self.env = dict(os.environ, PYTHONPATH=ROOT)

    def spawn(self, argv: list[str], name: str) -> subprocess.Popen:
        log = open(os.path.join(self.directory, f"{name}.log"), "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                cwd=self.directory)
        self.procs.append(proc)
        return proc

    def tower(self, ours: bool) -> str:
        """Start a tower; write and return the node config file (mkcfg.sh)."""
        sub, pub = free_ports(2)
        endpoints = ["--sub", f"tcp://127.0.0.1:{sub}", "--pub", f"tcp://127.0.0.1:{pub}"]
        if ours:
            self.spawn([sys.executable, "-m", "connectors.dafka.cli", "tower", *endpoints],
                       "tower")
        else:
            self.spawn([os.path.join(self.peers, "bin", "dafka_towerd"), *endpoints],
                       "tower")
        config = subprocess.run(
            ["sh", os.path.join(self.peers, "mkcfg.sh"), str(sub), str(pub),
             os.path.join(self.directory, "store.db")],
            check=True, capture_output=True).stdout.decode()
        path = os.path.join(self.directory, "node.cfg")
        with open(path, "w") as out:
            out.write(config + "consumer\n    offset\n        reset = earliest\n")
        return path

    def store(self, ours: bool, config: str, fsync: str) -> None:
        if ours:
            self.spawn(_python("store", "-c", config, "--fsync", fsync,
                               "--exit-with-parent", str(os.getpid())), "store")
        else:
            self.spawn([os.path.join(self.peers, "bin", "dafka_stored"), "-c", config],
                       "store")
        time.sleep(2.0)    # beacons (1 s interval) reach the tower and its subscribers

    def measure(self, ours: bool, tool: str, config: str, count: int, size: int) -> float:
        if ours:
            argv = _python(tool, "-c", config, str(count), str(size))
        else:
            argv = [os.path.join(self.peers, "bin", f"dafka_{tool.replace('-', '_')}"),
                    "-c", config, str(count), str(size)]
        proc = self.spawn(argv, tool)
        try:
            proc.wait(TOOL_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{tool} ({'ours' if ours else 'C'}) ran for {TOOL_TIMEOUT} s"
                             ) from None
        with open(os.path.join(self.directory, f"{tool}.log"), "rb") as log:
            output = log.read()
        found = RATE.search(output)
        if proc.returncode != 0 or not found:
            raise SystemExit(f"{tool} ({'ours' if ours else 'C'}) failed:\n"
                             f"{output.decode(errors='replace')}")
        fetched = FETCHES.search(output)
        if fetched:
            self.note = f"  ({int(fetched[1])} BULK-FETCH, {int(fetched[2])} FETCH)"
        return float(found.group(1))

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# (tower, store, producer and consumer tools) ours?
SETUPS = {"C": (False, False, False), "ours": (True, True, True),
          "mixed": (False, True, False), "tools": (False, False, True)}


def run_setup(kind: str, peers: str, count: int, size: int, fsync: str
              ) -> tuple[float, float, str]:
    tower_ours, store_ours, tools_ours = SETUPS[kind]
    with tempfile.TemporaryDirectory(prefix=f"dafka-vs-c-{kind}-") as directory:
        setup = Setup(peers, directory)
        try:
            config = setup.tower(tower_ours)
            setup.store(store_ours, config, fsync)
            produced = setup.measure(tools_ours, "perf-store", config, count, size)
            consumed = setup.measure(tools_ours, "perf-consumer", config, count, size)
        finally:
            setup.close()
    return produced, consumed, setup.note


def main() -> int:
    commands = {"perf-store": perf_store, "perf-consumer": perf_consumer}
    if len(sys.argv) > 1 and sys.argv[1] in commands:
        tool = argparse.ArgumentParser(prog=sys.argv[1])
        tool.add_argument("-c", dest="config", required=True)
        tool.add_argument("count", type=int)
        tool.add_argument("size", type=int)
        args = tool.parse_args(sys.argv[2:])
        _profile_nodes()
        directory = os.environ.get("DAFKA_BENCH_PROFILE")
        if not directory:
            commands[sys.argv[1]](args.config, args.count, args.size)
            return 0
        import cProfile            # the tool's own thread too (publish, poll)
        profile = cProfile.Profile()
        profile.runcall(commands[sys.argv[1]], args.config, args.count, args.size)
        profile.dump_stats(os.path.join(directory, f"{sys.argv[1]}-{os.getpid()}.prof"))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "store":
        return run_store(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="counted rounds (after "
                        "one warm-up round)")
    parser.add_argument("--fsync", choices=("always", "batch", "never"), default="never",
                        help="our store's store/fsync (never matches LevelDB's default)")
    parser.add_argument("--setups", default="C,ours,mixed,tools")
    parser.add_argument("--peers", default=os.path.join(ROOT, "..", "shared", "peers",
                                                        "dafka"))
    args = parser.parse_args()
    if not 1 <= args.records <= FETCH_BLOCK:
        parser.error(f"--records: 1..{FETCH_BLOCK} (dafka_perf_consumer stalls past the "
                     f"first FETCH window: its next FETCH needs a HEAD, and the producer "
                     f"is gone)")
    peers = os.path.abspath(args.peers)
    if not os.path.exists(os.path.join(peers, "bin", "dafka_perf_store")):
        raise SystemExit(f"no C dafka tools in {peers} (--peers)")
    kinds = [k for k in args.setups.split(",") if k]
    rates: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for round_ in range(args.rounds + 1):
        for kind in kinds:         # alternating, so machine noise hits all alike
            produced, consumed, note = run_setup(kind, peers, args.records, args.size,
                                                 args.fsync)
            print(f"round {round_}{' (warm-up)' if round_ == 0 else ''} {kind:<6} "
                  f"producer->store {produced:>9,.0f}  store->consumer {consumed:>9,.0f}  "
                  f"load {os.getloadavg()[0]:.2f}{note}", flush=True)
            if round_:
                rates[kind].append((produced, consumed))
    if not args.rounds:
        return 0
    print(f"\n{args.records} records of {args.size} B, median of {args.rounds} rounds, "
          f"our store/fsync = {args.fsync}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'set-up':<8}{'producer->store':>17}{'store->consumer':>17}"
          f"{'ratio p->s':>12}{'ratio s->c':>12}")
    for kind in kinds:
        row = rates[kind]
        cells = [statistics.median(r[0] for r in row), statistics.median(r[1] for r in row)]
        ratios = ["", ""]
        if "C" in rates and kind != "C":   # medians of the per-round ratios
            pairs = list(zip(row, rates["C"]))
            ratios = [f"{statistics.median(r[i] / c[i] for r, c in pairs):.2f}x"
                      for i in (0, 1)]
        print(f"{kind:<8}{cells[0]:>17,.0f}{cells[1]:>17,.0f}"
              f"{ratios[0]:>12}{ratios[1]:>12}")
    print("all rounds:", {kind: [(round(p), round(c)) for p, c in row]
                          for kind, row in rates.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
