"""`garlicfarm chp ...`: run a CHP server, read, write and watch keys.

    garlicfarm chp server [--port 5556] [--data-dir DIR] [--primary PEER | --backup PEER]
    garlicfarm chp server --port P --replicated HOST:PORT,... --farm-user U [--map NAME]
    garlicfarm chp get KEY [--server HOST:PORT ...]
    garlicfarm chp set KEY VALUE [--ttl SECONDS] [--no-wait]
    garlicfarm chp delete KEY
    garlicfarm chp watch [--subtree /a/] [--snapshot] [--json] [--count N]
    garlicfarm chp items [--subtree /a/] [--json]

A server named P uses ports P, P+1, P+2. A Binary Star pair is two servers that name
each other: ``server --port 5556 --primary 127.0.0.1:5566`` and ``server --port 5566
--backup 127.0.0.1:5556`` (the zguide layout; state ports 5003/5004 by default). A
replicated server keeps its map in a garlicfarm Raft log (``--replicated`` names the
farm's members, the local node first); any number of them serve one map. Client
commands take ``--server`` once per server, in failover order. Exit status: 0 done,
1 not found or timed out, 2 bad arguments, 3 the Binary Star pair split, 4 a replicated
server cannot go on with its farm (credentials refused, log compacted past it).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from typing import Sequence

from .address import parse_address
from .client import check_ttl
from .errors import ChpError, ChpConfigError
from .kvmap import Entry
from .proto import parse_properties

DEFAULT_SERVER = "127.0.0.1:5556"
EXIT_NOT_FOUND, EXIT_USAGE, EXIT_SPLIT_BRAIN, EXIT_FARM = 1, 2, 3, 4


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _ttl(text: str) -> float:
    try:
        return check_ttl(_positive(text))
    except ChpConfigError as exc:   # its message names --ttl already
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="garlicfarm chp", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    server = commands.add_parser("server", help="run a clone server")
    server.add_argument("--port", type=int, default=5556,
                        help="snapshot port P; the server also uses P+1 and P+2 (5556)")
    server.add_argument("--bind", default="127.0.0.1",
                        help="address to listen on (127.0.0.1; 0.0.0.0 for every interface)")
    server.add_argument("--data-dir", help="keep the map and its sequence here across "
                        "restarts (default: memory only, as the reference servers)")
    server.add_argument("--fsync", choices=("always", "batch", "never"), default="batch",
                        help="when updates reach the disk before they are published")
    pair = server.add_mutually_exclusive_group()
    pair.add_argument("--primary", metavar="PEER",
                      help="be the primary of a Binary Star pair whose backup is PEER")
    pair.add_argument("--backup", metavar="PEER",
                      help="be the backup of a Binary Star pair whose primary is PEER")
    pair.add_argument("--replicated", metavar="HOST:PORT,...",
                      help="keep the map in the Raft log of the farm with these members "
                           "(the local node first); --data-dir then holds checkpoints")
    farm = server.add_argument_group("replicated mode")
    farm.add_argument("--map", default="chp",
                      help="the map's name in the farm's log; servers of one map share "
                           "sequences (chp)")
    farm.add_argument("--farm-cluster", default="farm", help="the farm's cluster name (farm)")
    farm.add_argument("--farm-user", help="user name for the farm's digest handshake")
    farm.add_argument("--farm-password",
                      help="its password (default: $GARLICFARM_PASSWORD)")
    farm.add_argument("--farm-credentials", metavar="FILE",
                      help="file of user:password lines; the first is used")
    farm.add_argument("--farm-tls-ca", metavar="FILE",
                      help="CA the farm nodes' certificates chain to (TLS to the farm)")
    farm.add_argument("--farm-tls-cert", metavar="FILE",
                      help="client certificate for the farm (with --farm-tls-key)")
    farm.add_argument("--farm-tls-key", metavar="FILE", help="its private key")
    farm.add_argument("--farm-timeout", type=_positive, default=3.0, metavar="S",
                      help="stop sending HUGZ after this long without an answer from the "
                           "farm, so clients fail over (3)")
    farm.add_argument("--bootstrap", metavar="HOST:PORT,...",
                      help="other replicated servers of the map: when the farm has compacted "
                           "its log past what this server has, start from their state")
    farm.add_argument("--history", type=int, default=100_000, metavar="N",
                      help="updates kept for clients resuming after a failover (100000)")
    farm.add_argument("--checkpoint-every", type=int, default=10_000, metavar="N",
                      help="log entries between two checkpoints in --data-dir (10000)")
    server.add_argument("--bstar-port", type=int,
                        help="our Binary Star state port (5003 primary, 5004 backup)")
    server.add_argument("--peer-bstar-port", type=int,
                        help="the peer's Binary Star state port (the other of 5003/5004)")
    server.add_argument("--hugz-interval", type=_positive, default=1.0, metavar="S")
    server.add_argument("--no-bulk", dest="bulk", action="store_false",
                        help="answer every snapshot with KVSYNCs only, as a zguide server "
                             "does (default: KVBULK to garlicfarm clients that ask)")
    server.add_argument("--bstar-heartbeat", type=_positive, default=1.0, metavar="S")
    server.add_argument("--peer-timeout", type=_positive, default=2.0, metavar="S",
                        help="the peer is dead after this much silence (2)")
    server.add_argument("--log-level", default="INFO")
    server.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="json: one object per line (time, level, logger, node, message)")
    server.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics on "
                        "http://HOST:PORT/metrics (port 0: any free); off loopback only "
                        "with --replicated, whose --farm-credentials it then requires as "
                        "HTTP Basic authentication")

    def client_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--server", action="append", metavar="HOST:PORT",
                         help=f"a server's snapshot port, once per server ({DEFAULT_SERVER})")
        sub.add_argument("--server-timeout", type=_positive, default=5.0, metavar="S",
                         help="fail over after this much silence from a server (5)")
        sub.add_argument("--timeout", type=_positive, default=10.0, metavar="S",
                         help="give up after this long (10)")

    get = commands.add_parser("get", help="print the value of a key")
    get.add_argument("key")
    client_options(get)

    set_ = commands.add_parser("set", help="set a key")
    set_.add_argument("key")
    set_.add_argument("value")
    set_.add_argument("--ttl", type=_ttl, metavar="S", help="delete it after S seconds")
    set_.add_argument("--no-wait", action="store_true",
                      help="do not wait for the server to publish the update")
    client_options(set_)

    delete = commands.add_parser("delete", help="delete a key")
    delete.add_argument("key")
    delete.add_argument("--no-wait", action="store_true")
    client_options(delete)

    for name, text in (("watch", "print updates as they come"),
                       ("items", "print the keys and values under a subtree")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--subtree", default="", help="only keys starting with this")
        sub.add_argument("--json", action="store_true", help="one JSON object per line")
        client_options(sub)
    watch = commands.choices["watch"]
    watch.add_argument("--snapshot", action="store_true",
                       help="print the current entries first")
    watch.add_argument("--count", type=_count, help="exit after this many updates")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "server":
            return _server(args)
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        return _client_command(args)
    except ChpConfigError as exc:
        print(f"garlicfarm chp {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ChpError as exc:
        print(f"garlicfarm chp {args.command}: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except KeyboardInterrupt:
        return 0


def _server(args: argparse.Namespace) -> int:
    from .server import CloneServer, BstarRole, ServerConfig, serve
    from consensus.runtime.log_format import configure_logging
    configure_logging(args.log_level, args.log_format, node=f"chp:{args.port}",
                      text_format="%(asctime)s %(message)s")
    if args.replicated is None:
        for option in ("farm_user", "farm_password", "farm_credentials", "farm_tls_ca",
                       "farm_tls_cert", "farm_tls_key", "bootstrap"):
            if getattr(args, option) is not None:
                raise ChpConfigError(f"--{option.replace('_', '-')} is for replicated mode: "
                                  "add --replicated HOST:PORT,...")
    role = peer = None
    if args.primary or args.backup:
        role = BstarRole.PRIMARY if args.primary else BstarRole.BACKUP
        peer = parse_address(args.primary or args.backup, f"--{role.value}")
    config = ServerConfig(port=args.port, bind=args.bind, data_dir=args.data_dir,
                          fsync=args.fsync, role=role, peer=peer, bstar_port=args.bstar_port,
                          peer_bstar_port=args.peer_bstar_port,
                          hugz_interval=args.hugz_interval,
                          bstar_heartbeat=args.bstar_heartbeat,
                          peer_timeout=args.peer_timeout, bulk=args.bulk)
    farm = _farm_options(args) if args.replicated is not None else None
    credentials = {farm.username: farm.password} if farm is not None else None
    if args.metrics:
        from consensus.runtime.http_endpoint import parse_listen
        try:
            parse_listen(args.metrics, "--metrics", credentials,
                         "--farm-credentials, with --replicated")
        except ValueError as exc:   # the runtime's ConfigError, naming the option
            raise ChpConfigError(str(exc)) from None
    if farm is not None:
        from .replicated_server import ReplicatedServer
        server = ReplicatedServer(config, farm)
    else:
        server = CloneServer(config)
    metrics = None
    if args.metrics:
        from .metrics import serve as serve_metrics
        try:
            metrics = serve_metrics(server, args.metrics, credentials)
        except ValueError as exc:   # cannot listen there
            raise ChpConfigError(str(exc)) from None
        print(f"chp server: metrics on {metrics.url}/metrics", flush=True)
    try:
        serve(server)
    finally:
        if metrics is not None:
            metrics.close()
    if server.exit_reason:
        print(f"garlicfarm chp server: {server.exit_reason}", file=sys.stderr)
        return EXIT_FARM if args.replicated is not None else EXIT_SPLIT_BRAIN
    return 0


def _farm_options(args: argparse.Namespace):
    """The farm side of a replicated server, credentials from options, a file or the
    environment."""
    from .replicated_server import FarmOptions
    user, password = args.farm_user, args.farm_password or os.environ.get("GARLICFARM_PASSWORD")
    if args.farm_credentials:
        from consensus.net.security import read_credentials_file
        try:
            pairs = read_credentials_file(args.farm_credentials)
        except ValueError as exc:   # the runtime's ConfigError, naming its own option
            raise ChpConfigError(f"--farm-credentials: {str(exc).partition(': ')[2]}") from None
        if not pairs:
            raise ChpConfigError(f"--farm-credentials: {args.farm_credentials} holds no "
                              "user:password line")
        user, password = pairs[0]
    if user is None:
        raise ChpConfigError("--farm-user: the farm authenticates its clients: name the user "
                          "(or give --farm-credentials FILE)")
    if password is None:
        raise ChpConfigError(f"--farm-password: user {user!r} needs a password (the option, "
                          "$GARLICFARM_PASSWORD or --farm-credentials FILE)")
    return FarmOptions(args.replicated, cluster=args.farm_cluster, username=user,
                       password=password, map_name=args.map, history=args.history,
                       checkpoint_every=args.checkpoint_every, farm_timeout=args.farm_timeout,
                       tls_ca=args.farm_tls_ca, tls_cert=args.farm_tls_cert,
                       tls_key=args.farm_tls_key,
                       bootstrap=[p for p in (args.bootstrap or "").split(",") if p])


def _client_command(args: argparse.Namespace) -> int:
    from .client import CloneClient
    servers = args.server or [DEFAULT_SERVER]
    subtree = getattr(args, "subtree", None)
    if subtree is None:
        subtree = args.key   # get/set/delete: replicate just that key's prefix
    with CloneClient(servers, subtree, server_timeout=args.server_timeout) as client:
        client.wait_synced(args.timeout)
        if args.command == "get":
            value = client.get(args.key)
            if value is None:
                print(f"garlicfarm chp get: {args.key!r} not found", file=sys.stderr)
                return EXIT_NOT_FOUND
            sys.stdout.buffer.write(value + b"\n")
            return 0
        if args.command in ("set", "delete"):
            value = args.value if args.command == "set" else b""
            receipt = client.set(args.key, value, ttl=getattr(args, "ttl", None),
                                 confirm=not args.no_wait, timeout=args.timeout)
            if receipt.sequence is not None:
                print(f"sequence {receipt.sequence}")
            return 0
        if args.command == "items":
            for entry in client.snapshot(subtree).entries.values():
                _print_entry(entry, args.json)
            return 0
        watch = client.watch(include_snapshot=args.snapshot)
        for seen, entry in enumerate(watch, 1):
            _print_entry(entry, args.json)
            if args.count is not None and seen >= args.count:
                break
        return 0


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def _print_entry(entry: Entry, as_json: bool) -> None:
    if as_json:
        line = json.dumps({
            "sequence": entry.sequence, "key": _text(entry.key),
            "value": None if entry.deleted else _text(entry.body), "deleted": entry.deleted,
            "uuid": entry.uuid.hex(),
            "properties": {_text(n): _text(v) for n, v in parse_properties(entry.properties)},
        })
    else:
        value = "(deleted)" if entry.deleted else _text(entry.body)
        line = f"{entry.sequence}\t{_text(entry.key)}\t{value}"
    print(line, flush=True)


__all__ = ["main"]
