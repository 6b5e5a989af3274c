"""The farm file: a farm's configuration as ``garlicfarm config export`` writes it and
``config import`` applies it (the changes planned against the farm's view, made one at a
time), and the node config files ``--node-configs`` writes for new members. Described in
docs/operations.md."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, TextIO

from consensus.admin.admin_output import EXIT_OK, UsageError, print_json
from consensus.admin.farm_target import parse_node_id, resolve_connection, split_endpoints

FARM_FORMAT = "garlicfarm.farm/1"


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
    from consensus.common.errors import FarmError
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
    from consensus.admin.farm_membership import partition_count
    from consensus.admin.progress_bars import track
    with target.client(timeout=reach) as client:
        count = partition_count(client)
        calls = _import_calls(client, plan, wait) if count == 1 else \
            _partitioned_calls(lambda p: target.client(timeout=reach, partition=p), plan,
                               wait, count)
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


def _partitioned_calls(connect: Callable[[int], Any], plan: ImportPlan, wait: float,
                       count: int) -> list[Callable[[], Any]]:
    """A farm of several partitions: each change made in every partition, in
    `farm_membership`'s order (partition 0 first when adding, last when removing); a
    partition that fails stops the import with PartialChange, which a re-run completes."""
    from consensus.admin.farm_membership import add_member, remove_member
    every = range(count)

    def add(node_id: int, endpoint: str, observer: bool) -> Callable[[], Any]:
        return lambda: add_member(connect, node_id, endpoint, observer=observer,
                                  partitions=every, wait=wait).check()

    def remove(node_id: int) -> Callable[[], Any]:
        return lambda: remove_member(connect, node_id, partitions=every, wait=wait).check()

    return [*(add(i, e, False) for i, e in plan.add_voters.items()),
            *(add(i, e, True) for i, e in plan.add_observers.items()),
            *(remove(i) for i in [*plan.remove_observers, *plan.remove_voters])]


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
