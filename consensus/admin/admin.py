"""The farm's management commands: ``garlicfarm status | add-server | remove-server |
transfer-leader | config export | config import``.

`consensus.cli` dispatches here through `command_main(name, argv)`. Every command takes
the same connection options (`connection_parser`): ``--endpoints``, ``--cluster``,
``--user/--username`` with ``--password`` or ``--credentials FILE``, TLS (``--tls-ca``,
``--tls-cert``, ``--tls-key``), ``--proxy``, ``--dial-timeout``, ``--command-timeout``
(alias ``--timeout``), and ``--config FILE``, a node's TOML config
file, from which the endpoints (the node's own and its peers'), the cluster name, the
credentials and the TLS files are taken. The command line wins over the file, the file
over the environment (``GARLICFARM_ENDPOINTS``, ``GARLICFARM_PASSWORD``).

Output: readable tables (rich; plain aligned text when stdout is not a terminal), or
JSON with ``--json``. Exit codes: 0 done, 1 the farm refused or did not answer, 2 bad
usage or input (the message names the option or field at fault), 3 (``status``) the farm
answered but a member is unreachable or no leader is known (`health`).

The pieces: `admin_output` (exit codes, tables, JSON), `farm_target` (which farm, from
options, a config file and the environment), `farm_file` (``config export | import``),
`farm_membership` (membership changes and drains over every partition).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, TextIO

from rich.console import Console

from consensus.admin.admin_output import EXIT_FARM, EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE, \
    UsageError, console_for, plain, print_json, print_table
from consensus.admin.farm_file import cmd_config
from consensus.admin.farm_target import FarmTarget, connection_parser, parse_node_id, \
    resolve_connection, split_endpoints
from consensus.admin.health import Health, farm_problems, member_rows, probe_endpoints
from consensus.admin.partition_status import collect_partitions, partitions_document
from consensus.common.suggest import SuggestingParser

if TYPE_CHECKING:
    from consensus.admin.farm_membership import FarmChange

COMMANDS = ("status", "add-server", "remove-server", "transfer-leader", "config")


# --- status ---------------------------------------------------------------------------------

def status_document(view: Mapping[str, Any], now_ms: int,
                    probes: Mapping[int, str | None] | None = None) -> dict[str, Any]:
    """What `status --json` prints: the `FarmStatus`, the derived per-member rows and
    `healthy` with the `problems` that make the farm unhealthy."""
    doc = dict(view)
    rows = member_rows(view, now_ms, probes)
    doc["rows"] = [dataclasses.asdict(r) for r in rows]
    doc["problems"] = farm_problems(view, {r.id: Health(r.reachable, r.problem)
                                           for r in rows})
    doc["healthy"] = not doc["problems"]
    return doc


def render_status(console: Console, view: Mapping[str, Any], now_ms: int,
                  probes: Mapping[int, str | None] | None = None) -> None:
    publisher = view.get("publisher")
    console.print(f"cluster {view.get('cluster', '?')}  leader "
                  f"{_node(view.get('leader_id'))}  term {view.get('term', '?')}  commit "
                  f"{view.get('commit_index', '?')}  publisher {_node(publisher)}",
                  markup=False)
    rows = member_rows(view, now_ms, probes)
    print_table(console, None,
                ["id", "endpoint", "role", "health", "last ack", "match", "lag",
                 "status age", "commit", "last", "uptime", "log size"],
                ([r.id, r.endpoint, r.role + (" *" if r.id == publisher else ""),
                  _health(r.reachable), _seconds(r.ack_age), r.match, r.lag,
                  _seconds(r.status_age), r.commit, r.last, _seconds(r.uptime),
                  _size(r.log_size)] for r in rows),
                right=("id", "last ack", "match", "lag", "status age", "commit", "last",
                       "uptime", "log size"))
    if publisher is not None:
        console.print("* the publisher (the member with the most recent best status)")
    consumers = view.get("consumers") or []
    if consumers:
        print_table(console, "consumers (reported to the leader at each committed batch)",
                    ["consumer", "position", "lag entries", "lag rows", "last seen"],
                    ([c.get("name"), c.get("position"), c.get("lag_entries"),
                      c.get("lag_rows"), _seconds(c.get("seen_age"))] for c in consumers),
                    right=("position", "lag entries", "lag rows", "last seen"))
    for problem in farm_problems(view, {r.id: Health(r.reachable, r.problem) for r in rows}):
        console.print(f"unhealthy: {problem}", markup=False)


def render_partitions(console: Console, rows: list[dict[str, Any]]) -> None:
    print_table(console, "partitions (each member's own view)",
                ["partition", "replicas", "leader", "term", "commit", "lag", "quiesced"],
                ([r["partition"], ",".join(map(str, r.get("replicas") or [])) or None,
                  _node(r["leader"]), r["term"], r["commit"], r["lag"],
                  f"{len(r['quiesced'])}/{len(r['applied'])}" if r["quiesced"] else None]
                 for r in rows), right=("partition", "term", "commit", "lag"))


def _health(reachable: bool | None) -> str | None:
    return None if reachable is None else "ok" if reachable else "UNREACHABLE"


def _node(node_id: Any) -> str:
    return "none" if node_id is None else f"n{node_id}"


def _seconds(value: float | None) -> str | None:
    if value is None:
        return None
    if value < 120:
        return f"{value:.1f}s"
    if value < 7200:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def _size(value: int | None) -> str | None:
    if value is None:
        return None
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return None


def cmd_status(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    """Exit 0 when the farm is healthy, EXIT_UNHEALTHY when it answered with no leader
    or with an unreachable member."""
    with target.client() as client:
        view = plain(client.status())
    endpoints = {int(k): m["endpoint"] for k, m in (view.get("members") or {}).items()
                 if m.get("endpoint") and m.get("role") != "former"}
    probes = probe_endpoints(target, endpoints)
    now_ms = int(time.time() * 1000)
    doc = status_document(view, now_ms, probes)
    partitions = partitions_document(collect_partitions(target, endpoints), sorted(endpoints))
    if partitions is not None:
        from consensus.common.errors import FarmError
        from consensus.admin.farm_membership import drained_nodes
        doc.update(partitions)
        try:
            doc["drained"] = sorted(drained_nodes(lambda p: target.client(partition=p)))
        except FarmError:
            doc["drained"] = None               # unknown: partition 0 did not answer
    if args.json:
        print_json(out, doc)
    else:
        render_status(console_for(out), view, now_ms, probes)
        if partitions is not None:
            render_partitions(console_for(out), partitions["partitions"])
            if doc["drained"]:
                console_for(out).print(
                    "drained (lead no partition until `garlicfarm transfer-leader --release "
                    f"ID`): {', '.join(_node(n) for n in doc['drained'])}", markup=False)
    return EXIT_OK if doc["healthy"] else EXIT_UNHEALTHY

# --- membership -----------------------------------------------------------------------------

def _partitions(target: FarmTarget, args: argparse.Namespace) -> tuple[int, list[int]]:
    """The farm's partition count (the `partitions` call) and the partitions a command
    acts on: every one, or `--partition P` (checked against the count)."""
    from consensus.admin.farm_membership import check_partition_option, partition_count
    if args.partition is not None and not (args.partition.isascii()
                                           and args.partition.isdigit()):
        raise UsageError("--partition", f"must be a whole number from 0 (a partition of the "
                                        f"farm), got {args.partition!r}")
    with target.client() as client:
        count = partition_count(client)
    if args.partition is None:
        return count, list(range(count))
    with _refusals():
        return count, [check_partition_option(args.partition, count)]


@contextmanager
def _refusals() -> Iterator[None]:
    """`farm_membership`'s refusals of bad input (ConfigError naming the option) as the
    usage errors the commands print (exit 2, no exception name)."""
    from consensus.common.errors import ConfigError
    try:
        yield
    except ConfigError as exc:
        raise UsageError(exc.option, str(exc).split(": ", 1)[1]) from None


def _connect(target: FarmTarget, reach: float) -> Callable[[int], Any]:
    return lambda p: target.client(timeout=reach, partition=p)


def cmd_add_server(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    from consensus.admin.farm_membership import add_member
    from consensus.admin.progress_bars import catching_up
    node_id = parse_node_id(args.id, "ID")
    endpoint = split_endpoints(args.endpoint, "ENDPOINT")[0]
    reach, wait = target.change_timeouts()
    count, partitions = _partitions(target, args)
    connect = _connect(target, reach)
    with _refusals():
        change = add_member(connect, node_id, endpoint, observer=args.observer,
                            partitions=partitions, wait=wait,
                            around=lambda p, n: catching_up(lambda: connect(p), n))
    role = "observer" if args.observer else "voter"
    return _report(out, args, change, count,
                   {"added": node_id, "endpoint": endpoint, "as": role},
                   f"n{node_id} ({endpoint}) added as {'an' if args.observer else 'a'} {role}")


def cmd_remove_server(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    from consensus.admin.farm_membership import remove_member
    node_id = parse_node_id(args.id, "ID")
    reach, wait = target.change_timeouts()
    count, partitions = _partitions(target, args)
    with _refusals():
        change = remove_member(_connect(target, reach), node_id, force=args.force,
                               partitions=partitions, wait=wait)
    role = next((c.role for c in change.changes if c.role), "voter")
    return _report(out, args, change, count,
                   {"removed": node_id, "as": role, "forced": args.force},
                   f"n{node_id} removed ({role}{', forced' if args.force else ''})")


def _report(out: TextIO, args: argparse.Namespace, change: FarmChange, count: int,
            doc: dict, text: str) -> int:
    """A farm of one partition prints what it always printed (and raises its error); a
    farm of several prints one line (or JSON row) per partition, and on a partial failure
    the partitions left and how to finish (re-running is safe: partitions done say so)."""
    if count == 1 and args.partition is None:
        failure = next((c.error for c in change.changes if c.error is not None), None)
        if failure is not None:
            raise failure
        _done(out, args, doc, text)
        return EXIT_OK
    if args.json:
        print_json(out, {**doc, **change.to_dict()})
    else:
        for c in change.changes:
            out.write(f"partition {c.partition}: {c.outcome.value}: {c.detail}\n")
    change.check()
    return EXIT_OK


def cmd_transfer_leader(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    """`--to ID` (with `--partition P` on a farm of several), `--from ID` (drain: every
    partition it leads moves away, and the balancers give it none until `--release`)."""
    from consensus.admin import farm_membership as fm
    option = "--to" if args.to is not None else "--from" if args.from_ is not None \
        else "--release"
    node_id = parse_node_id(args.to or args.from_ or args.release, option)
    count, partitions = _partitions(target, args)
    connect = _connect(target, target.timeout)
    if args.to is None:
        if count == 1 or args.partition is not None:
            raise UsageError(option, "draining moves every partition's leadership and needs "
                                     "a farm of several partitions without --partition (one "
                                     "partition: `transfer-leader --to ID`)")
        if args.release is not None:
            left = fm.set_drained(connect, node_id, False)
            _done(out, args, {"released": node_id, "drained": sorted(left)},
                  f"n{node_id} released: the balancer gives it its share of leaderships "
                  "again")
            return EXIT_OK
        with _refusals():
            leaders = fm.drain(connect, node_id, partitions=partitions,
                               timeout=target.timeout)
        if args.json:
            print_json(out, {"drained": node_id,
                             "leaders": {str(p): n for p, n in leaders.items()}})
        else:
            for p, leader in leaders.items():
                out.write(f"partition {p}: leader {_node(leader)}\n")
            out.write(f"n{node_id} drained: it leads no partition and gets none until "
                      f"`garlicfarm transfer-leader --release {node_id}`\n")
        return EXIT_OK
    if count > 1 and args.partition is None:
        raise UsageError("--partition", f"the farm has {count} partitions, each with its own "
                                        "leader: give --partition P to move one (moving "
                                        "them all to one node would be undone by the "
                                        "balancer, which spreads leaderships), or --from ID "
                                        "to move every leadership off a node")
    if count > 1 and node_id in fm.drained_nodes(connect):
        raise UsageError("--to", f"n{node_id} is drained (the balancer would move the "
                                 "leadership away again): `garlicfarm transfer-leader "
                                 f"--release {node_id}` first")
    with target.client(partition=partitions[0]) as client:
        client.transfer_leader(node_id, timeout=target.timeout)
    if args.partition is None:
        _done(out, args, {"leader": node_id}, f"leadership handed to n{node_id}")
    else:
        _done(out, args, {"leader": node_id, "partition": partitions[0]},
              f"partition {partitions[0]}: leadership handed to n{node_id}")
    return EXIT_OK


def _done(out: TextIO, args: argparse.Namespace, doc: dict, text: str) -> None:
    if args.json:
        print_json(out, doc)
    else:
        out.write(text + "\n")

# --- argument parsing and dispatch ----------------------------------------------------------

def build_parser(name: str) -> argparse.ArgumentParser:
    parent = connection_parser()
    prog = f"garlicfarm {name}"
    if name == "status":
        p = SuggestingParser(prog=prog, parents=[parent],
                                    description="Leader, term, publisher and every member: "
                                                "role, match index, lag, last status.")
        p.add_argument("--serve", metavar="HOST:PORT", help="serve a live status page there "
                       "instead (members, health, leader changes; refreshed every second)")
        p.add_argument("--farm", action="append", metavar="NAME=HOST:PORT,...",
                       help="with --serve: a farm (cluster NAME) to show; repeatable")
        p.add_argument("--serve-tls-cert", metavar="FILE", help="with --serve: PEM "
                       "certificate; the page is then served over HTTPS only")
        p.add_argument("--serve-tls-key", metavar="FILE", help="its private key")
    elif name == "add-server":
        p = SuggestingParser(prog=prog, parents=[parent],
                                    description="Add a voter (JRaft's AddServer: the new node "
                                                "catches up, then joins) or an observer.")
        p.add_argument("id", metavar="ID", help="the new member's node id")
        p.add_argument("endpoint", metavar="ENDPOINT", help="its HOST:PORT")
        p.add_argument("--observer", action="store_true",
                       help="add it as an observer (no vote)")
        _partition_option(p, "add it to this partition only (default: to every partition, "
                             "partition 0 first)")
    elif name == "remove-server":
        p = SuggestingParser(prog=prog, parents=[parent],
                                    description="Remove a voter or an observer.")
        p.add_argument("id", metavar="ID", help="the member's node id")
        p.add_argument("--force", action="store_true",
                       help="remove it even if it does not answer or is the leader")
        _partition_option(p, "remove it from this partition only (default: from every "
                             "partition, partition 0 last: leaving it stops the node)")
    elif name == "transfer-leader":
        p = SuggestingParser(prog=prog, parents=[parent],
                                    description="Hand leadership to a node (it catches up "
                                                "first).")
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--to", metavar="ID", help="the new leader's id")
        which.add_argument("--from", dest="from_", metavar="ID",
                           help="drain: move every partition ID leads to other voters "
                                "(balanced) and give it none until --release ID (a farm "
                                "of several partitions; before maintenance)")
        which.add_argument("--release", metavar="ID",
                           help="end a drain: the balancer gives ID its share again")
        _partition_option(p, "the partition whose leadership moves (required when the "
                             "farm has several)")
    elif name == "config":
        p = SuggestingParser(prog=prog, description="Export or import a farm file.")
        sub = p.add_subparsers(dest="action", required=True, metavar="export|import")
        exp = sub.add_parser("export", parents=[parent], prog=f"{prog} export",
                             help="write the running farm's farm file (JSON)")
        exp.add_argument("-o", "--output", metavar="FILE", help="file (default: stdout)")
        imp = sub.add_parser("import", parents=[parent], prog=f"{prog} import",
                             help="make a farm match a farm file (or bootstrap a new one)")
        imp.add_argument("file", metavar="FILE", help="the farm file (farm.json)")
        imp.add_argument("--prune", action="store_true",
                         help="also remove members that the file does not list")
        imp.add_argument("--dry-run", action="store_true",
                         help="print the plan, change nothing")
        imp.add_argument("--node-configs", metavar="DIR",
                         help="write a node config per new member into DIR (for "
                              "`garlicfarm node --config`); when no member answers, "
                              "this bootstraps a new farm")
        imp.add_argument("--data-root", metavar="DIR",
                         help="data directories of the written configs: DIR/node-ID "
                              "(default: the configs' DIR/data)")
    else:
        raise UsageError("command", f"{name!r} is not one of {', '.join(COMMANDS)}")
    return p


def _partition_option(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--partition", metavar="P", help=text + "; 0 to the farm's partitions "
                   "minus 1")


HANDLERS: dict[str, Callable[[FarmTarget, argparse.Namespace, TextIO], int]] = {
    "status": cmd_status, "add-server": cmd_add_server, "remove-server": cmd_remove_server,
    "transfer-leader": cmd_transfer_leader,
}


def command_main(name: str, argv: Sequence[str], out: TextIO | None = None,
                 err: TextIO | None = None) -> int:
    """Run one admin command; print errors as one line naming what to fix."""
    out = out or sys.stdout
    err = err or sys.stderr
    # Warnings of the library (TLS without verification) go to the user, on stderr.
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(f"garlicfarm {name}: %(levelname)s: %(message)s"))
    logger = logging.getLogger("garlicfarm")
    logger.addHandler(handler)
    try:
        return _command(name, argv, out, err)
    finally:
        logger.removeHandler(handler)


def _command(name: str, argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    try:
        parser = build_parser(name)
        try:
            args = parser.parse_args(list(argv))
        except SystemExit as exit_:
            return EXIT_OK if exit_.code in (0, None) else EXIT_USAGE
        if name == "config":
            return cmd_config(args, out)
        if name == "status" and (args.serve or args.farm or args.serve_tls_cert
                                 or args.serve_tls_key):
            from consensus.admin.status_page import serve_status
            return serve_status(args, out)
        return HANDLERS[name](resolve_connection(args), args, out)
    except UsageError as exc:
        err.write(f"garlicfarm {name}: {exc}\n")
        return EXIT_USAGE
    except Exception as exc:   # noqa: BLE001 - a farm error, or a config error
        from consensus.common.errors import FarmError
        if not isinstance(exc, FarmError):
            raise
        option = getattr(exc, "option", None)
        err.write(f"garlicfarm {name}: {type(exc).__name__}: {exc}\n")
        return EXIT_USAGE if option else EXIT_FARM
