"""The farm's management commands: ``garlicfarm status | add-server | remove-server |
transfer-leader | config export | config import``.

`consensus.cli` dispatches here through `command_main(name, argv)`. Every command takes
the same connection options (`connection_parser`): ``--endpoints``, ``--cluster``,
``--user/--password`` or ``--credentials FILE``, TLS (``--tls-ca``, ``--tls-cert``,
``--tls-key``), ``--proxy``, ``--timeout``, and ``--config FILE``, a node's TOML config
file, from which the endpoints (the node's own and its peers'), the cluster name, the
credentials and the TLS files are taken. The command line wins over the file, the file
over the environment (``GARLICFARM_ENDPOINTS``, ``GARLICFARM_PASSWORD``).

Output: readable tables (rich; plain aligned text when stdout is not a terminal), or
JSON with ``--json``. Exit codes: 0 done, 1 the farm refused or did not answer, 2 bad
usage or input (the message names the option or field at fault).

The farm file (``config export`` writes it, ``config import`` reads it) is described
with `FarmFile` and in docs/operations.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

COMMANDS = ("status", "add-server", "remove-server", "transfer-leader", "config")
FARM_FORMAT = "garlicfarm.farm/1"
EXIT_OK, EXIT_FARM, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad options or input; `option` names what to fix."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"{option}: {reason}")
        self.option = option


# --- output --------------------------------------------------------------------------------

def console_for(out: TextIO) -> Console:
    """A rich console on `out`: colours and boxes on a terminal, plain text otherwise."""
    return Console(file=out, highlight=False, soft_wrap=True,
                   width=None if out.isatty() else 200)


# Off a terminal: aligned columns and a rule of dashes under the header, ASCII only
# (rich's SIMPLE_HEAD with "-" for its box-drawing rule).
_PLAIN_BOX = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def print_table(console: Console, title: str | None, columns: Sequence[str],
                rows: Iterable[Sequence[Any]], *, right: Iterable[str] = ()) -> None:
    """A table; numeric columns named in `right` are right-aligned. On a terminal it has
    rounded boxes; otherwise it is plain ASCII (easy to read in logs and to grep)."""
    terminal = console.is_terminal
    table = Table(title=title, title_justify="left", box=box.ROUNDED if terminal else
                  _PLAIN_BOX, show_edge=terminal, pad_edge=False)
    right = set(right)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left",
                         no_wrap=True)
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    console.print(table)


def print_json(out: TextIO, obj: Any) -> None:
    out.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def plain(obj: Any) -> Any:
    """A JSON-ready form of what the client returns (dataclasses, objects with
    `to_dict`, mappings with int keys)."""
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [plain(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    return obj


# --- connection options --------------------------------------------------------------------

@dataclass
class FarmTarget:
    """Which farm an admin command talks to and how to reach it, resolved from options, a
    node config file and the environment."""

    endpoints: list[str]
    cluster: str = "farm"
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    proxy: str | None = None
    timeout: float = 10.0
    tls: bool = False
    insecure_skip_tls_verify: bool = False

    def change_timeouts(self) -> tuple[float, float]:
        """For a membership change: (seconds to reach the leader, seconds the leader
        waits for the change) adding up to `timeout`. The leader's own wait ends with an
        answer that says what happened (e.g. the new node never answered), where a
        client that gave up would only know that nobody answered in time."""
        wait = self.timeout * 0.7
        return self.timeout - wait, wait

    def client(self, **overrides: Any):
        """A `FarmClient` (imported here: `garlicfarm --help` stays light)."""
        from consensus.runtime import FarmClient
        kwargs = dict(cluster=self.cluster, username=self.username, password=self.password,
                      tls_ca=self.tls_ca, tls_cert=self.tls_cert, tls_key=self.tls_key,
                      proxy=self.proxy, timeout=self.timeout, tls=self.tls,
                      insecure_skip_tls_verify=self.insecure_skip_tls_verify)
        kwargs.update(overrides)
        return FarmClient(",".join(self.endpoints), **kwargs)


def connection_parser() -> argparse.ArgumentParser:
    """The options every admin command takes (an argparse parent)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connecting to the farm")
    g.add_argument("--endpoints", metavar="HOST:PORT,...",
                   help="members to ask (any voters or observers); default: from --config, "
                        "else $GARLICFARM_ENDPOINTS")
    g.add_argument("--cluster", help="the farm's cluster name (default: farm)")
    g.add_argument("--user", dest="username", help="user name for the digest handshake")
    g.add_argument("--password", help="its password (default: $GARLICFARM_PASSWORD)")
    g.add_argument("--credentials", metavar="FILE",
                   help="file of username:password lines; the first is used")
    g.add_argument("--tls-ca", metavar="FILE", help="CA the members' certificates chain to "
                                                    "(TLS; host names are not checked)")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate (with --tls-key; "
                                                      "TLS; nodes with a tls-ca require one)")
    g.add_argument("--tls-key", metavar="FILE", help="its private key")
    g.add_argument("--tls", action="store_true",
                   help="TLS even without --tls-ca/--tls-cert: the members' certificates are "
                        "verified against the system trust store and their host names")
    g.add_argument("--insecure-skip-tls-verify", action="store_true",
                   help="TLS WITHOUT verifying the members' certificates (unsafe: anyone in "
                        "between can pose as the farm); prints a warning")
    g.add_argument("--proxy", metavar="http://HOST:PORT", help="HTTP CONNECT proxy")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds per call, retries included (default: 10)")
    g.add_argument("--config", metavar="FILE",
                   help="a node's TOML config: endpoints, cluster, credentials, TLS from it")
    g.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return p


def resolve_connection(args: argparse.Namespace,
                       environ: Mapping[str, str] = os.environ) -> FarmTarget:
    """Options > the node config file > the environment > defaults."""
    from_file: dict[str, Any] = {}
    if args.config:
        from consensus.runtime.config import load_config_file
        from_file = {k.replace("-", "_"): v for k, v in load_config_file(args.config).items()}
        if "user" in from_file:
            from_file["username"] = from_file.pop("user")

    def pick(name: str, env: str | None = None) -> Any:
        value = getattr(args, name, None)
        if value is None:
            value = from_file.get(name)
        if value is None and env:
            value = environ.get(env)
        return value

    endpoints_text = args.endpoints or _config_endpoints(from_file) or \
        environ.get("GARLICFARM_ENDPOINTS")
    if not endpoints_text:
        raise UsageError("--endpoints", "no members to ask: give --endpoints HOST:PORT,..., "
                                        "--config NODE.toml or $GARLICFARM_ENDPOINTS")
    endpoints = split_endpoints(endpoints_text, "--endpoints")
    username, password = _credentials(args, from_file, environ)
    timeout = pick("timeout")
    timeout = 10.0 if timeout is None else float(timeout)
    if timeout <= 0:
        raise UsageError("--timeout", f"must be positive seconds, got {timeout}")
    insecure = bool(args.insecure_skip_tls_verify) or _truthy(
        from_file.get("insecure_skip_tls_verify"),
        f"--config {args.config}: insecure-skip-tls-verify")
    return FarmTarget(endpoints, pick("cluster") or "farm", username, password,
                      pick("tls_ca"), pick("tls_cert"), pick("tls_key"), pick("proxy"),
                      timeout, bool(args.tls), insecure)


def _truthy(value: Any, where: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    raise UsageError(where, f"{value!r} is not true or false")


def _credentials(args: argparse.Namespace, from_file: Mapping[str, Any],
                 environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The (username, password) pair to present. A pair is never mixed from two places:

    1. ``--credentials FILE`` (its first line), or ``--user U`` with ``--password P`` or
       else ``$GARLICFARM_PASSWORD``: the command line wins over everything;
    2. ``--password P`` alone: the config file's user (its ``user`` key, or the first
       line of its ``credentials`` file) with that password;
    3. the config file's ``credentials`` file, or its ``user`` and ``password`` (or
       ``$GARLICFARM_PASSWORD``).
    """
    from consensus.runtime.errors import ConfigError
    from consensus.runtime.security import read_credentials_file

    def first_pair(path: str, option: str) -> tuple[str, str]:
        try:
            return read_credentials_file(os.path.expanduser(str(path)))[0]
        except ConfigError as exc:
            raise UsageError(option, str(exc).split(": ", 1)[1]) from None

    env_password = environ.get("GARLICFARM_PASSWORD")
    if args.credentials:
        if args.username is not None or args.password is not None:
            raise UsageError("--credentials", "give either --credentials FILE or "
                                              "--user/--password, not both")
        return first_pair(args.credentials, "--credentials")
    if args.username is not None:
        password = args.password if args.password is not None else env_password
        if password is None:
            raise UsageError("--password", f"user {args.username!r} needs a password "
                                           "(--password, $GARLICFARM_PASSWORD or "
                                           "--credentials FILE)")
        return args.username, password
    file_user, file_password = from_file.get("username"), from_file.get("password")
    if from_file.get("credentials"):
        file_user, file_password = first_pair(
            from_file["credentials"], f"--config {args.config}: credentials")
    if args.password is not None:
        if file_user is None:
            raise UsageError("--user", "--password needs a user: give --user U (or a "
                                       "--config file that names one)")
        return str(file_user), args.password
    if file_user is not None:
        password = file_password if file_password is not None else env_password
        if password is None:
            raise UsageError("--password", f"user {file_user!r} of --config "
                                           f"{args.config} needs a password (--password, "
                                           "$GARLICFARM_PASSWORD, or password or "
                                           "credentials in the file)")
        return str(file_user), str(password)
    return None, None


def _config_endpoints(conf: Mapping[str, Any]) -> str | None:
    """A node config's own endpoint (advertise, else listen) and its peers'."""
    own = conf.get("advertise") or conf.get("listen")
    endpoints = [own] if own and not str(own).endswith(":0") else []
    for group in ("peers", "observers"):
        members = conf.get(group)
        if isinstance(members, Mapping):
            endpoints += [str(v) for v in members.values()]
        elif isinstance(members, str):
            endpoints += [part.partition("=")[2] for part in members.split(",") if "=" in part]
    return ",".join(endpoints) or None


def split_endpoints(text: str, option: str) -> list[str]:
    """``host:port,host:port`` -> the list, each checked (by the node's own rule)."""
    from consensus.runtime.errors import ConfigError
    from consensus.runtime.security import split_endpoint

    endpoints = [e.strip() for e in text.split(",") if e.strip()]
    if not endpoints:
        raise UsageError(option, "no HOST:PORT given")
    try:
        for e in endpoints:
            split_endpoint(e, option)
        return endpoints
    except ConfigError as exc:
        raise UsageError(option, str(exc).split(": ", 1)[1]) from None


def parse_node_id(text: str, option: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(option, f"{text!r} is not a node id (a positive integer)") from None
    if value <= 0:
        raise UsageError(option, f"node ids are positive integers, got {value}")
    return value


# --- status ---------------------------------------------------------------------------------

@dataclass
class MemberRow:
    id: int
    endpoint: str
    role: str
    voter: bool
    match: int | None
    lag: int | None                # entries behind the commit index
    status_age: float | None       # seconds since the member's last status entry
    commit: int | None             # from its last status
    last: int | None
    uptime: float | None           # seconds
    log_size: int | None


def member_rows(view: Mapping[str, Any], now_ms: int) -> list[MemberRow]:
    """One row per member of a `FarmStatus` (as `plain` gives it)."""
    members = view.get("members") or {}
    lag = view.get("lag") or {}
    rows = []
    for key, m in sorted(members.items(), key=lambda kv: int(kv[0])):
        status = m.get("status") or {}
        raft = status.get("raft") or {}
        date = status.get("date")
        uptime = (status.get("router") or {}).get("uptime")
        rows.append(MemberRow(
            int(key), m.get("endpoint") or "", m.get("role") or "?", bool(m.get("voter")),
            m.get("match_index"), lag.get(str(key)),
            (now_ms - date) / 1e3 if isinstance(date, int) else None,
            raft.get("commit"), raft.get("last"),
            uptime / 1e3 if isinstance(uptime, (int, float)) else None, raft.get("logSize")))
    return rows


def status_document(view: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """What `status --json` prints: the `FarmStatus` plus the derived per-member rows."""
    doc = dict(view)
    doc["rows"] = [dataclasses.asdict(r) for r in member_rows(view, now_ms)]
    return doc


def render_status(console: Console, view: Mapping[str, Any], now_ms: int) -> None:
    publisher = view.get("publisher")
    console.print(f"cluster {view.get('cluster', '?')}  leader "
                  f"{_node(view.get('leader_id'))}  term {view.get('term', '?')}  commit "
                  f"{view.get('commit_index', '?')}  publisher {_node(publisher)}",
                  markup=False)
    rows = member_rows(view, now_ms)
    print_table(console, None,
                ["id", "endpoint", "role", "match", "lag", "status age", "commit", "last",
                 "uptime", "log size"],
                ([r.id, r.endpoint, r.role + (" *" if r.id == publisher else ""), r.match,
                  r.lag, _seconds(r.status_age), r.commit, r.last, _seconds(r.uptime),
                  _size(r.log_size)] for r in rows),
                right=("id", "match", "lag", "status age", "commit", "last", "uptime",
                       "log size"))
    if publisher is not None:
        console.print("* the publisher (the member with the most recent best status)")


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
    with target.client() as client:
        view = plain(client.status())
    now_ms = int(time.time() * 1000)
    if args.json:
        print_json(out, status_document(view, now_ms))
    else:
        render_status(console_for(out), view, now_ms)
    return EXIT_OK


# --- membership -----------------------------------------------------------------------------

def cmd_add_server(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    node_id = parse_node_id(args.id, "ID")
    endpoint = split_endpoints(args.endpoint, "ENDPOINT")[0]
    reach, wait = target.change_timeouts()
    with target.client(timeout=reach) as client:
        view = client.get_servers()
        members = {**view.observers, **view.outgoing, **view.voters}
        if node_id in members and members[node_id] != endpoint:
            kind = "voter" if node_id in view.voters else "observer" \
                if node_id in view.observers else "leaving voter"
            raise UsageError("ENDPOINT", f"n{node_id} is already a {kind} at "
                                         f"{members[node_id]}, not {endpoint}: to move it, "
                                         f"`garlicfarm remove-server {node_id}` first, then "
                                         f"add it again (or give the new node another ID)")
        if args.observer and node_id in view.voters:
            raise UsageError("--observer", f"n{node_id} is a voter: `garlicfarm remove-server "
                                           f"{node_id}` first to make it an observer")
        if args.observer:
            client.update_observers(add={node_id: endpoint}, timeout=wait)
        else:
            from consensus.runtime.progress import catching_up
            with catching_up(lambda: target.client(timeout=reach), node_id):
                client.add_server(node_id, endpoint, timeout=wait)
    _done(out, args, {"added": node_id, "endpoint": endpoint,
                      "as": "observer" if args.observer else "voter"},
          f"n{node_id} ({endpoint}) added as {'an observer' if args.observer else 'a voter'}")
    return EXIT_OK


def cmd_remove_server(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    node_id = parse_node_id(args.id, "ID")
    reach, wait = target.change_timeouts()
    with target.client(timeout=reach) as client:
        view = client.get_servers()
        if node_id in view.observers:
            client.update_observers(remove=[node_id], timeout=wait)
            kind = "observer"
        elif node_id in view.voters or node_id in view.outgoing:
            client.remove_server(node_id, force=args.force, timeout=wait)
            kind = "voter"
        else:
            raise UsageError("ID", f"n{node_id} is not a member of the farm (voters "
                                   f"{sorted(view.voters)}, observers {sorted(view.observers)})"
                                   ": nothing to remove (check the id with `garlicfarm "
                                   "status`)")
    _done(out, args, {"removed": node_id, "as": kind, "forced": args.force},
          f"n{node_id} removed ({kind}{', forced' if args.force else ''})")
    return EXIT_OK


def cmd_transfer_leader(target: FarmTarget, args: argparse.Namespace, out: TextIO) -> int:
    node_id = parse_node_id(args.to, "--to")
    with target.client() as client:
        client.transfer_leader(node_id, timeout=target.timeout)
    _done(out, args, {"leader": node_id}, f"leadership handed to n{node_id}")
    return EXIT_OK


def _done(out: TextIO, args: argparse.Namespace, doc: dict, text: str) -> None:
    if args.json:
        print_json(out, doc)
    else:
        out.write(text + "\n")


# --- farm files -----------------------------------------------------------------------------

@dataclass
class FarmFile:
    """A farm's configuration as `config export` writes it and `config import` reads it.

    ``{"format": "garlicfarm.farm/1", "cluster": "farm", "wire": "garlicfarm",
    "voters": {"1": "10.0.0.1:9001", ...}, "observers": {"4": "10.0.0.4:9001"},
    "options": {"fsync": "batch", "status-interval": 5.0, ...}}``; `options` holds node
    settings (the keys of a node's config file) applied to every member that `config
    import --node-configs` writes a config for. Other top-level keys (``exported``) are
    information and ignored on import.
    """

    cluster: str
    voters: dict[int, str]
    observers: dict[int, str] = field(default_factory=dict)
    wire: str = "garlicfarm"
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self, exported: Mapping[str, Any] | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": FARM_FORMAT, "cluster": self.cluster, "wire": self.wire,
            "voters": {str(k): v for k, v in sorted(self.voters.items())},
            "observers": {str(k): v for k, v in sorted(self.observers.items())},
            "options": dict(sorted(self.options.items()))}
        if exported:
            doc["exported"] = dict(exported)
        return doc

    @classmethod
    def from_json(cls, doc: Any, source: str = "farm file") -> "FarmFile":
        """Validate a parsed farm file; errors name the field."""
        if not isinstance(doc, Mapping):
            raise UsageError(source, "is not a JSON object")
        if doc.get("format") != FARM_FORMAT:
            raise UsageError(f"{source}: format", f"expected {FARM_FORMAT!r}, got "
                                                  f"{doc.get('format')!r}")
        cluster = doc.get("cluster")
        if not isinstance(cluster, str) or not cluster:
            raise UsageError(f"{source}: cluster", "must be a non-empty string")
        wire = doc.get("wire", "garlicfarm")
        if wire not in ("garlicfarm", "marker", "jraft"):
            raise UsageError(f"{source}: wire", f"{wire!r} is not garlicfarm, marker or jraft")
        voters = _members(doc.get("voters"), f"{source}: voters")
        observers = _members(doc.get("observers", {}), f"{source}: observers")
        if not voters:
            raise UsageError(f"{source}: voters", "a farm needs at least one voter")
        both = set(voters) & set(observers)
        if both:
            raise UsageError(f"{source}: observers", f"{sorted(both)} are voters too")
        endpoints = list(voters.values()) + list(observers.values())
        duplicate = {e for e in endpoints if endpoints.count(e) > 1}
        if duplicate:
            raise UsageError(f"{source}: voters", f"endpoints used twice: {sorted(duplicate)}")
        options = doc.get("options", {})
        if not isinstance(options, Mapping):
            raise UsageError(f"{source}: options", "must be an object of node settings")
        return cls(cluster, voters, observers, wire, dict(options))

    @classmethod
    def read(cls, path: str) -> "FarmFile":
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as exc:
            raise UsageError("FILE", f"cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise UsageError("FILE", f"{path} is not JSON: {exc}") from None
        return cls.from_json(doc, path)


def _members(value: Any, where: str) -> dict[int, str]:
    if not isinstance(value, Mapping):
        raise UsageError(where, "must be an object {\"ID\": \"HOST:PORT\"}")
    members = {}
    for key, endpoint in value.items():
        node_id = parse_node_id(str(key), where)
        if not isinstance(endpoint, str):
            raise UsageError(where, f"node {node_id}: {endpoint!r} is not HOST:PORT")
        members[node_id] = split_endpoints(endpoint, f"{where}: {node_id}")[0]
    return members


def farm_from_view(cluster: str, servers: Any) -> FarmFile:
    """The farm file of a running farm, from its cluster name and `get_servers()` view.
    Options come from the leader's (else any member's) last status: its wire and its
    status interval."""
    members = servers.members
    own = members.get(servers.leader_id)
    statuses = [m.status for m in ([own] if own else []) + list(members.values()) if m.status]
    config = (statuses[0].get("config") if statuses else None) or {}
    options = {}
    if "statusInterval" in config:
        options["status-interval"] = config["statusInterval"]
    return FarmFile(cluster, dict(servers.voters), dict(servers.observers),
                    str(config.get("wire") or "garlicfarm"), options)


def read_farm(client: Any) -> tuple[FarmFile, Any]:
    """The running farm as a farm file, and its `get_servers()` view."""
    servers = client.get_servers()
    return farm_from_view(client.status().cluster, servers), servers


@dataclass
class ImportPlan:
    """The changes that make a running farm match a farm file, in the order applied."""

    add_voters: dict[int, str] = field(default_factory=dict)
    add_observers: dict[int, str] = field(default_factory=dict)
    remove_voters: list[int] = field(default_factory=list)
    remove_observers: list[int] = field(default_factory=list)
    kept_extra: list[int] = field(default_factory=list)   # not in the file, no --prune

    @property
    def empty(self) -> bool:
        return not (self.add_voters or self.add_observers or self.remove_voters
                    or self.remove_observers)

    def steps(self) -> list[str]:
        return ([f"add voter n{i} {e}" for i, e in sorted(self.add_voters.items())]
                + [f"add observer n{i} {e}" for i, e in sorted(self.add_observers.items())]
                + [f"remove observer n{i}" for i in self.remove_observers]
                + [f"remove voter n{i}" for i in self.remove_voters])


def plan_import(current: FarmFile, wanted: FarmFile, *, prune: bool) -> ImportPlan:
    """What to change; refuses what cannot be done by adding and removing members (a
    different cluster, a member moved to another endpoint, a voter turned observer)."""
    if current.cluster != wanted.cluster:
        raise UsageError("cluster", f"the file is for farm {wanted.cluster!r}, the endpoints "
                                    f"reach farm {current.cluster!r}")
    now = {**current.voters, **current.observers}
    for node_id, endpoint in {**wanted.voters, **wanted.observers}.items():
        if node_id in now and now[node_id] != endpoint:
            raise UsageError("voters" if node_id in wanted.voters else "observers",
                             f"n{node_id} runs at {now[node_id]}, the file says {endpoint}: "
                             "remove it and add it again under its new endpoint")
        if node_id in current.voters and node_id in wanted.observers:
            raise UsageError("observers", f"n{node_id} is a voter; remove it first to make "
                                          "it an observer")
    plan = ImportPlan()
    for node_id, endpoint in sorted(wanted.voters.items()):
        if node_id not in current.voters:
            plan.add_voters[node_id] = endpoint     # an observer is promoted likewise
    for node_id, endpoint in sorted(wanted.observers.items()):
        if node_id not in current.observers:
            plan.add_observers[node_id] = endpoint
    extra = sorted(set(now) - set(wanted.voters) - set(wanted.observers))
    if prune:
        plan.remove_observers = [i for i in extra if i in current.observers]
        plan.remove_voters = [i for i in extra if i in current.voters]
    else:
        plan.kept_extra = extra
    return plan


def node_configs(farm: FarmFile, *, data_root: str, credentials: str | None,
                 join: Iterable[int] = ()) -> dict[int, str]:
    """One TOML node config per member of `farm` (for ``garlicfarm node --config``).
    Members in `join` start without bootstrapping and wait to be added to a running
    farm; the others bootstrap the farm together."""
    join = set(join)
    configs = {}
    for node_id, endpoint in sorted({**farm.voters, **farm.observers}.items()):
        peers = {i: e for i, e in farm.voters.items() if i != node_id}
        observers = {i: e for i, e in farm.observers.items() if i != node_id}
        settings: dict[str, Any] = {
            "id": node_id, "listen": endpoint, "cluster": farm.cluster, "wire": farm.wire,
            "data-dir": os.path.join(data_root, f"node-{node_id}"),
            "peers": _member_list(peers), "observers": _member_list(observers),
            "observer": node_id in farm.observers, "join": node_id in join}
        if credentials:
            settings["credentials"] = credentials
        for key, value in farm.options.items():
            settings.setdefault(key, value)
        configs[node_id] = "".join(f"{k} = {_toml(v)}\n" for k, v in settings.items())
    return configs


def _member_list(members: Mapping[int, str]) -> str:
    return ",".join(f"{i}={e}" for i, e in sorted(members.items()))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)          # TOML basic strings escape like JSON
    raise UsageError("options", f"{value!r}: node settings are strings, numbers or booleans")


def cmd_config(conn_args: argparse.Namespace, out: TextIO) -> int:
    if conn_args.action == "export":
        target = resolve_connection(conn_args)
        with target.client() as client:
            farm, servers = read_farm(client)
        doc = farm.to_json({"date": int(time.time() * 1000), "leader": servers.leader_id,
                            "term": servers.term, "commit": servers.commit_index})
        text = json.dumps(doc, indent=2) + "\n"
        if conn_args.output and conn_args.output != "-":
            _write_atomically(conn_args.output, text)
        else:
            out.write(text)
        return EXIT_OK
    return _config_import(conn_args, out)


def _config_import(args: argparse.Namespace, out: TextIO) -> int:
    wanted = FarmFile.read(args.file)
    if args.endpoints is None and args.config is None and \
            "GARLICFARM_ENDPOINTS" not in os.environ:
        args.endpoints = ",".join([*wanted.voters.values(), *wanted.observers.values()])
    if args.cluster is None:
        args.cluster = wanted.cluster
    target = resolve_connection(args)
    from consensus.runtime import FarmError
    try:
        with target.client() as client:
            current, _ = read_farm(client)
    except FarmError as exc:
        if not args.node_configs:
            raise
        current = None
        reason = str(exc)
    if current is None:
        return _bootstrap(wanted, args, out, reason)
    plan = plan_import(current, wanted, prune=args.prune)
    if args.node_configs:
        _write_node_configs(wanted, args, join=[*plan.add_voters, *plan.add_observers],
                            only=[*plan.add_voters, *plan.add_observers])
    lines = plan.steps() or ["nothing to change"]
    if plan.kept_extra:
        lines.append(f"kept (not in the file; --prune removes them): "
                     f"{', '.join(f'n{i}' for i in plan.kept_extra)}")
    if args.dry_run or plan.empty:
        _report_plan(out, args, plan, lines, applied=False)
        return EXIT_OK
    reach, wait = target.change_timeouts()
    from consensus.runtime.progress import track
    with target.client(timeout=reach) as client:
        calls = _import_calls(client, plan, wait)
        for call in track(calls, "config import", len(calls)):
            call()
    _report_plan(out, args, plan, lines, applied=True)
    return EXIT_OK


def _import_calls(client: Any, plan: ImportPlan, wait: float) -> list[Callable[[], Any]]:
    """The plan's changes as the calls that make them, in order (a progress step each):
    a voter at a time, the observers together."""
    calls: list[Callable[[], Any]] = [
        lambda i=node_id, e=endpoint: client.add_server(i, e, timeout=wait)
        for node_id, endpoint in plan.add_voters.items()]
    if plan.add_observers:
        calls.append(lambda: client.update_observers(add=plan.add_observers, timeout=wait))
    if plan.remove_observers:
        calls.append(lambda: client.update_observers(remove=plan.remove_observers,
                                                     timeout=wait))
    calls += [lambda i=node_id: client.remove_server(i, timeout=wait)
              for node_id in plan.remove_voters]
    return calls


def _report_plan(out: TextIO, args: argparse.Namespace, plan: ImportPlan, lines: list[str],
                 applied: bool) -> None:
    if args.json:
        print_json(out, {"applied": applied, **dataclasses.asdict(plan)})
        return
    head = "applied:" if applied else ("plan (dry run):" if not plan.empty else "")
    out.write((head + "\n" if head else "") + "".join(f"  {line}\n" for line in lines))


def _bootstrap(wanted: FarmFile, args: argparse.Namespace, out: TextIO, reason: str) -> int:
    paths = _write_node_configs(wanted, args, join=(), only=None)
    if args.json:
        print_json(out, {"bootstrap": True, "reason": reason, "configs": paths})
        return EXIT_OK
    out.write(f"no member of farm {wanted.cluster!r} answered ({reason});\n"
              f"wrote the node configs of a new farm. Start every member:\n")
    out.write("".join(f"  garlicfarm node --config {p}\n" for p in paths.values()))
    return EXIT_OK


def _write_node_configs(wanted: FarmFile, args: argparse.Namespace, *, join: Iterable[int],
                        only: Iterable[int] | None) -> dict[int, str]:
    # Paths go into the configs absolute (resolved against the directory import runs
    # in): a node started from another directory finds the same files.
    configs = node_configs(wanted, data_root=os.path.abspath(args.data_root or os.path.join(
        args.node_configs, "data")), credentials=os.path.abspath(os.path.expanduser(
            args.credentials)) if args.credentials else None, join=join)
    if only is not None:
        keep = set(only)
        configs = {i: c for i, c in configs.items() if i in keep}
    if args.dry_run:
        return {i: os.path.join(os.path.abspath(args.node_configs), f"node-{i}.toml")
                for i in configs}
    os.makedirs(args.node_configs, exist_ok=True)
    paths = {}
    for node_id, text in configs.items():
        paths[node_id] = os.path.join(os.path.abspath(args.node_configs),
                                      f"node-{node_id}.toml")
        _write_atomically(paths[node_id], text)
    return paths


def _write_atomically(path: str, text: str) -> None:
    """Write, fsync, rename: a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- argument parsing and dispatch ----------------------------------------------------------

def build_parser(name: str) -> argparse.ArgumentParser:
    parent = connection_parser()
    prog = f"garlicfarm {name}"
    if name == "status":
        p = argparse.ArgumentParser(prog=prog, parents=[parent],
                                    description="Leader, term, publisher and every member: "
                                                "role, match index, lag, last status.")
        p.add_argument("--serve", metavar="HOST:PORT", help="serve a live status page there "
                       "instead (consensus/runtime/status_page.py)")
        p.add_argument("--farm", action="append", metavar="NAME=HOST:PORT,...",
                       help="with --serve: a farm (cluster NAME) to show; repeatable")
    elif name == "add-server":
        p = argparse.ArgumentParser(prog=prog, parents=[parent],
                                    description="Add a voter (JRaft's AddServer: the new node "
                                                "catches up, then joins) or an observer.")
        p.add_argument("id", metavar="ID", help="the new member's node id")
        p.add_argument("endpoint", metavar="ENDPOINT", help="its HOST:PORT")
        p.add_argument("--observer", action="store_true",
                       help="add it as an observer (no vote)")
    elif name == "remove-server":
        p = argparse.ArgumentParser(prog=prog, parents=[parent],
                                    description="Remove a voter or an observer.")
        p.add_argument("id", metavar="ID", help="the member's node id")
        p.add_argument("--force", action="store_true",
                       help="remove it even if it does not answer or is the leader")
    elif name == "transfer-leader":
        p = argparse.ArgumentParser(prog=prog, parents=[parent],
                                    description="Hand leadership to a node (it catches up "
                                                "first).")
        p.add_argument("--to", required=True, metavar="ID", help="the new leader's id")
    elif name == "config":
        p = argparse.ArgumentParser(prog=prog, description="Export or import a farm file.")
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
        if name == "status" and (args.serve or args.farm):
            from consensus.runtime.status_page import serve_status
            return serve_status(args, out)
        return HANDLERS[name](resolve_connection(args), args, out)
    except UsageError as exc:
        err.write(f"garlicfarm {name}: {exc}\n")
        return EXIT_USAGE
    except Exception as exc:   # noqa: BLE001 - a farm error, or a config error
        from consensus.runtime import FarmError
        if not isinstance(exc, FarmError):
            raise
        option = getattr(exc, "option", None)
        err.write(f"garlicfarm {name}: {type(exc).__name__}: {exc}\n")
        return EXIT_USAGE if option else EXIT_FARM
