"""Which farm a management command talks to (`FarmTarget`) and how that is resolved: the
connection options every command takes (`connection_parser`), a node's TOML config file
(``--config``) and the environment (``GARLICFARM_ENDPOINTS``, ``GARLICFARM_PASSWORD``).
The command line wins over the file, the file over the environment."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, Mapping

from consensus.admin.admin_output import UsageError


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
    timeout: float = 10.0           #: seconds per command, retries included
    tls: bool = False
    insecure_skip_tls_verify: bool = False
    dial_timeout: float = 2.0       #: seconds to connect to some member before failing

    def change_timeouts(self) -> tuple[float, float]:
        """For a membership change: (seconds to reach the leader, seconds the leader
        waits for the change) adding up to `timeout`. The leader's own wait ends with an
        answer that says what happened (e.g. the new node never answered), where a
        client that gave up would only know that nobody answered in time."""
        wait = self.timeout * 0.7
        return self.timeout - wait, wait

    def client(self, **overrides: Any):
        """A `FarmClient` (imported here: `garlicfarm --help` stays light)."""
        from consensus.client import FarmClient
        kwargs = dict(cluster=self.cluster, username=self.username, password=self.password,
                      tls_ca=self.tls_ca, tls_cert=self.tls_cert, tls_key=self.tls_key,
                      proxy=self.proxy, timeout=self.timeout, tls=self.tls,
                      insecure_skip_tls_verify=self.insecure_skip_tls_verify,
                      dial_timeout=min(self.dial_timeout, self.timeout))
        kwargs.update(overrides)
        endpoints = kwargs.pop("endpoints", self.endpoints)
        return FarmClient(",".join(endpoints), **kwargs)


def connection_parser() -> argparse.ArgumentParser:
    """The options every admin command takes (an argparse parent)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connecting to the farm")
    g.add_argument("--endpoints", metavar="HOST:PORT,...",
                   help="members to ask (any voters or observers); default: from --config, "
                        "else $GARLICFARM_ENDPOINTS")
    g.add_argument("--cluster", help="the farm's cluster name (default: farm)")
    g.add_argument("--user", "--username", dest="username",
                   help="user name for the digest handshake")
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
    g.add_argument("--command-timeout", "--timeout", dest="timeout", type=float,
                   default=None, metavar="SECONDS",
                   help="seconds per command, retries included (default: 10)")
    g.add_argument("--dial-timeout", type=float, default=None, metavar="SECONDS",
                   help="seconds to connect to some member before failing (default: 2)")
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
    timeout = _seconds(pick("timeout"), 10.0, "--command-timeout")
    dial_timeout = _seconds(pick("dial_timeout"), 2.0, "--dial-timeout")
    insecure = bool(args.insecure_skip_tls_verify) or _truthy(
        from_file.get("insecure_skip_tls_verify"),
        f"--config {args.config}: insecure-skip-tls-verify")
    return FarmTarget(endpoints, pick("cluster") or "farm", username, password,
                      pick("tls_ca"), pick("tls_cert"), pick("tls_key"), pick("proxy"),
                      timeout, bool(args.tls), insecure, dial_timeout)


def _seconds(value: Any, default: float, option: str) -> float:
    try:
        seconds = default if value is None else float(value)
    except (TypeError, ValueError):
        raise UsageError(option, f"{value!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise UsageError(option, f"must be positive seconds, got {value}")
    return seconds


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
    from consensus.common.errors import ConfigError
    from consensus.net.security import read_credentials_file

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
    from consensus.common.errors import ConfigError
    from consensus.net.security import split_endpoint

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
