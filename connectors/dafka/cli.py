"""`garlicfarm dafka tower | store | produce | consume`: the C tools' command lines.

Every command takes the towers as ``--tower tcp://HOST:PORT`` (the tower's beacon port;
its publisher is PORT+1; repeat or comma-separate for several towers), or the C tools'
``--sub`` / ``--pub`` pair, and ``-c FILE`` (a ZPL config file as the C tools read,
e.g. ``beacon/interval = 1000``). Command-line options win over the file.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace

from connectors.dafka.config import (MAX_COUNT, MAX_SECONDS, DafkaConfigError, DafkaConfig,
                                     load_config, parse_zpl, tower_endpoints)
from connectors.dafka.consumer import Consumer, ConsumerRecord
from connectors.dafka.node import NodeFailed, TowerUnreachable
from connectors.dafka.producer import BackpressureTimeout, Producer
from connectors.dafka.proto import MAX_SEQUENCE
from connectors.dafka.store import Store
from connectors.dafka.tower import Tower
from consensus.storage import StorageError

COMMANDS = ("tower", "store", "produce", "consume")


def _seconds(text: str) -> float:
    """A number of seconds >= 0 (0 turns the wait off where the option says so)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in "
                                         f"0..{MAX_SECONDS:g}")
    return value


def _whole(least: int, most: int):
    def parse(text: str) -> int:
        if not text.isdigit() or not least <= int(text) <= most:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in "
                                             f"{least}..{most}")
        return int(text)
    return parse


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", metavar="FILE", help="ZPL config file")
    parser.add_argument("--tower", action="append", default=[], metavar="ENDPOINT",
                        help="tower beacon endpoint tcp://HOST:PORT (publisher = PORT+1); "
                             "repeatable, or comma-separated")
    parser.add_argument("--sub", metavar="ENDPOINTS",
                        help="tower XSUB endpoint(s), as the C tools (beacon/sub_address)")
    parser.add_argument("--pub", metavar="ENDPOINTS",
                        help="tower XPUB endpoint(s), as the C tools (beacon/pub_address)")
    parser.add_argument("--bind", metavar="ENDPOINT",
                        help="this node's publisher (default: loopback when every tower "
                             "is local, else tcp://*:*); a store binds its writer there "
                             "and its reader at PORT+1")
    parser.add_argument("--beacon-address", metavar="HOST",
                        help="host this node announces (beacon/address; default: the "
                             "tower uses the address it sees the node connect from)")
    parser.add_argument("--beacon-interval", type=_seconds, metavar="SECONDS")
    parser.add_argument("--beacon-timeout", type=_seconds, metavar="SECONDS")
    parser.add_argument("--verbose", action="store_true")


def _metrics_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics "
                        "on http://HOST:PORT/metrics (loopback only; port 0: any free)")


def _serve_metrics(args: argparse.Namespace, collector):
    """The --metrics endpoint (connectors/dafka/metrics.py), or None."""
    if not args.metrics:
        return None
    from connectors.dafka.metrics import serve
    endpoint = serve(collector, args.metrics)
    _say(f"dafka {args.command}: metrics on {endpoint.url}/metrics")
    return endpoint


def _check_metrics(args: argparse.Namespace) -> None:
    """Refuse a bad --metrics before anything starts."""
    if args.metrics:
        from consensus.runtime.http_endpoint import parse_listen
        parse_listen(args.metrics, "--metrics", None, None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="garlicfarm dafka",
                                     description="Dafka nodes, wire-compatible with zeromq/dafka")
    commands = parser.add_subparsers(dest="command", required=True)

    tower = commands.add_parser("tower", help="run a beacon tower (dafka_towerd)")
    tower.add_argument("-c", "--config", metavar="FILE", help="ZPL config file")
    tower.add_argument("--tower", metavar="ENDPOINT",
                       help="bind the beacon XSUB here and the XPUB at PORT+1")
    tower.add_argument("--sub", metavar="ENDPOINT", help="XSUB bind (default tcp://*:5556)")
    tower.add_argument("--pub", metavar="ENDPOINT", help="XPUB bind (default tcp://*:5557)")
    tower.add_argument("--advertise-host", metavar="HOST",
                       help="announce nodes that beacon from 127.0.0.1 with this host")
    tower.add_argument("--verbose", action="store_true")
    _metrics_option(tower)

    store = commands.add_parser("store", help="run a store (dafka_stored)")
    _common(store)
    _metrics_option(store)
    store.add_argument("--data-dir", metavar="DIR", help="data directory (store/db)")
    store.add_argument("--fsync", choices=("always", "batch", "never"),
                       help="store/fsync (default batch: one fsync per drain, then ACK)")
    store.add_argument("--exit-with-parent", type=_whole(1, 1 << 22), metavar="PID",
                       help="stop (cleanly) once the parent process PID is gone, e.g. "
                            "a program that started this store and died")
    store.add_argument("--no-bulk", action="store_true",
                       help="leave out garlicfarm's bulk read and heads extensions (answer "
                            "like the C store: FETCH and GET-HEADS only), e.g. to test "
                            "clients' fallback")

    produce = commands.add_parser("produce", help="publish one record per stdin line")
    _common(produce)
    produce.add_argument("topic")
    produce.add_argument("--address", metavar="UUID",
                         help="partition address (32 uppercase hex), default random")
    produce.add_argument("--start-sequence", type=_whole(0, MAX_SEQUENCE), default=0,
                         metavar="N")
    produce.add_argument("--ack-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                         help="at end of input wait this long for store ACKs (0: don't)")
    produce.add_argument("--head-interval", type=_seconds, metavar="SECONDS")
    produce.add_argument("--max-unacked", type=_whole(1, MAX_COUNT), metavar="N")

    consume = commands.add_parser("consume", help="print one record per line")
    _common(consume)
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at offset 0 of every partition (offset reset earliest)")
    consume.add_argument("--json", action="store_true",
                         help="one JSON object per line: topic, partition, offset, value")
    consume.add_argument("--count", type=_whole(1, MAX_COUNT), metavar="N",
                         help="exit after N records")
    consume.add_argument("--idle-timeout", type=_seconds, metavar="SECONDS",
                         help="exit when no record arrived for this long")
    return parser


def _config(args: argparse.Namespace) -> DafkaConfig:
    config = load_config(args.config) if args.config else DafkaConfig()
    towers = [t for spec in args.tower for t in spec.split(",") if t.strip()]
    if towers:
        config = config.with_towers(towers)
    if args.sub:
        config = replace(config, tower_sub=tuple(e.strip() for e in args.sub.split(",")))
    if args.pub:
        config = replace(config, tower_pub=tuple(e.strip() for e in args.pub.split(",")))
    overrides = {"bind": args.bind, "beacon_interval": args.beacon_interval,
                 "beacon_host": args.beacon_address,
                 "beacon_timeout": args.beacon_timeout,
                 "head_interval": getattr(args, "head_interval", None),
                 "max_unacked": getattr(args, "max_unacked", None),
                 "store_db": getattr(args, "data_dir", None),
                 "store_fsync": getattr(args, "fsync", None)}
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    if args.verbose:
        config = replace(config, verbose=True)
    if getattr(args, "from_beginning", False):
        config = replace(config, offset_reset="earliest")
    return config.validate()


def _until_signal() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


PARENT_CHECK = 0.5   # seconds between checks of --exit-with-parent and of the nodes


def _wait(stop: threading.Event, parent: int | None, store: Store) -> None:
    """Until a signal, or until `parent` is no longer our parent process (it died and
    we were re-parented): polling getppid works for any parent, where Linux's
    PR_SET_PDEATHSIG fires when the *thread* that started us exits. A node of the
    store whose thread died raises `NodeFailed`: the process exits rather than linger."""
    while not stop.wait(PARENT_CHECK):
        store.writer.check()
        store.reader.check()
        if parent is not None and os.getppid() != parent:
            _say(f"dafka store: parent process {parent} is gone (--exit-with-parent); "
                 f"stopping")
            return


def _say(text: str) -> None:
    print(text, flush=True)


def run_tower(args: argparse.Namespace) -> int:
    values = parse_zpl(open(args.config).read(), args.config) if args.config else {}
    sub = values.get("tower/sub_address", "tcp://*:5556")
    pub = values.get("tower/pub_address", "tcp://*:5557")
    if args.tower:
        sub, pub = tower_endpoints(args.tower)
    sub, pub = args.sub or sub, args.pub or pub
    _check_metrics(args)
    stop = _until_signal()
    tower = Tower(sub, pub, advertise_host=args.advertise_host).start()
    _say(f"dafka tower: beacons on {tower.sub_endpoint}, announcements on "
         f"{tower.pub_endpoint}")
    from connectors.dafka.metrics import TowerCollector
    metrics = _serve_metrics(args, TowerCollector(tower))
    stop.wait()
    if metrics is not None:
        metrics.close()
    tower.stop()
    return 0


def run_store(args: argparse.Namespace) -> int:
    config = _config(args)
    _check_metrics(args)
    stop = _until_signal()
    store = Store(config, bulk=not args.no_bulk).start()
    _say(f"dafka store: writer {store.writer.address} at {store.writer.endpoint}, reader "
         f"{store.reader.address} at {store.reader.endpoint}, data in {store.data_dir}")
    from connectors.dafka.metrics import StoreCollector
    metrics = _serve_metrics(args, StoreCollector(store))
    try:
        _wait(stop, args.exit_with_parent, store)
    finally:
        if metrics is not None:
            metrics.close()
        store.stop()
    if config.verbose:
        print(json.dumps(store.stats), file=sys.stderr)
    return 0


def run_produce(args: argparse.Namespace) -> int:
    config = _config(args)
    producer = Producer(config, args.topic, address=args.address,
                        start_sequence=args.start_sequence).start()
    if config.verbose:
        print(f"dafka produce: partition {producer.address}", file=sys.stderr)
    try:
        for line in sys.stdin.buffer:
            producer.publish(line.rstrip(b"\r\n"))
        if args.ack_timeout > 0 and not producer.flush(args.ack_timeout):
            print(f"dafka produce: {len(producer.unacked)} record(s) of {args.topic} "
                  f"(partition {producer.address}) not acknowledged by a store within "
                  f"{args.ack_timeout:g} s (--ack-timeout)", file=sys.stderr)
            return 1
    except BackpressureTimeout as exc:
        print(f"dafka produce: {exc}", file=sys.stderr)
        return 1
    finally:
        producer.stop()
    return 0


def _line(record: ConsumerRecord, as_json: bool) -> bytes:
    if not as_json:
        return record.value + b"\n"
    out = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
    try:
        out["value"] = record.value.decode()
    except UnicodeDecodeError:
        out["value_hex"] = record.value.hex()
    return json.dumps(out).encode() + b"\n"


def run_consume(args: argparse.Namespace) -> int:
    config = _config(args)
    stop = _until_signal()
    consumer = Consumer(config, [args.topic]).start()
    out = sys.stdout.buffer
    printed = 0
    last = time.monotonic()
    try:
        while not stop.is_set():
            batch = consumer.poll(timeout=0.2, max_records=(args.count - printed)
                                  if args.count else 100_000)
            if not batch:
                if (args.idle_timeout is not None
                        and time.monotonic() - last >= args.idle_timeout):
                    break
                continue
            last = time.monotonic()
            out.write(b"".join(_line(r, args.json) for r in batch))
            out.flush()
            printed += len(batch)
            if args.count and printed >= args.count:
                break
    except BrokenPipeError:
        pass
    finally:
        consumer.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    runner = {"tower": run_tower, "store": run_store, "produce": run_produce,
              "consume": run_consume}[args.command]
    try:
        return runner(args)
    except (DafkaConfigError, TowerUnreachable, OSError, ValueError, StorageError) as exc:
        print(f"garlicfarm dafka {args.command}: {exc}", file=sys.stderr)
        return 2
    except NodeFailed as exc:
        print(f"garlicfarm dafka {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
