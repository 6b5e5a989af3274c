"""Options of every Dafka node, and the ZPL config files the C tools read.

The option names follow the C implementation's config paths (``beacon/sub_address``,
``producer/head_interval``, ``consumer/offset/reset``, ``store/db``...), so one config
file can drive our nodes and the C ones. Times are seconds here (milliseconds in ZPL,
as in the C code).

A tower is named by its XSUB endpoint (where nodes send beacons, C default port 5556);
its XPUB (where nodes listen, C default 5557) is the next port unless given explicitly.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from connectors.dafka import proto


class DafkaConfigError(ValueError):
    """A bad option value or config file; the message names the option."""


MAX_SECONDS = 86_400.0 * 365      # a timer option longer than a year is a mistake
MAX_COUNT = (1 << 31) - 1         # ZeroMQ's high-water marks are C ints


@dataclass(frozen=True)
class DafkaConfig:
    """Everything a node needs to join a Dafka deployment."""
    tower_sub: tuple[str, ...] = ("tcp://127.0.0.1:5556",)   # beacon/sub_address
    tower_pub: tuple[str, ...] = ("tcp://127.0.0.1:5557",)   # beacon/pub_address
    beacon_interval: float = 1.0       # beacon/interval (ms in ZPL)
    beacon_timeout: float = 4.0        # beacon/timeout: a silent peer is forgotten
    beacon_host: str = ""              # beacon/address: empty = the tower fills it in
    bind: str | None = None            # node/bind: None = loopback if every tower is
                                       # local, else every interface (tcp://*:*)
    high_watermark: int = 1_000_000    # producer|consumer|store/high_watermark
    head_interval: float = 1.0         # producer/head_interval
    max_unacked: int = 1_000_000       # producer/max_unacked: publish blocks past it
    offset_reset: str = "latest"       # consumer/offset/reset: latest | earliest
    store_db: str = "storedb"          # store/db: the store's data directory
    store_fsync: str = "batch"         # store/fsync: always | batch | never
    tower_wait: float = 10.0           # node/tower_wait: start() waits for a welcome
    verbose: bool = False

    def with_towers(self, towers: list[str]) -> "DafkaConfig":
        """The same options with towers named by their XSUB endpoints (XPUB = port+1)."""
        subs, pubs = zip(*(tower_endpoints(t) for t in towers)) if towers else ((), ())
        return replace(self, tower_sub=tuple(subs), tower_pub=tuple(pubs))

    @property
    def bind_endpoint(self) -> str:
        if self.bind:
            return self.bind
        hosts = {urlsplit(e).hostname for e in self.tower_sub + self.tower_pub}
        local = hosts <= {"127.0.0.1", "localhost", "::1"}
        return "tcp://127.0.0.1:*" if local else "tcp://*:*"

    @property
    def reader_bind_endpoint(self) -> str:
        """Where a store's reader binds. A store is two nodes, each with its publisher
        (as in the C store, whose two bind ports of their own): with a fixed port the
        writer takes PORT and the reader PORT+1; with ``*`` both take free ports."""
        endpoint = self.bind_endpoint
        head, _, port = endpoint.rpartition(":")
        if not port.isdigit() or int(port) == 0:
            return endpoint
        if int(port) >= 65535:
            raise DafkaConfigError(f"node/bind (--bind) {endpoint!r}: a store binds PORT and "
                              f"PORT+1; choose a port below 65535")
        return f"{head}:{int(port) + 1}"

    def validate(self) -> "DafkaConfig":
        if not self.tower_sub or not self.tower_pub:
            raise DafkaConfigError("beacon/sub_address and beacon/pub_address (--tower) need "
                              "at least one tower endpoint each")
        for name, option in (("beacon_interval", "beacon/interval (--beacon-interval)"),
                             ("beacon_timeout", "beacon/timeout (--beacon-timeout)"),
                             ("head_interval", "producer/head_interval (--head-interval)"),
                             ("tower_wait", "node/tower_wait")):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
                raise DafkaConfigError(f"{option}: {value!r} is not a number of seconds in "
                                  f"0 < S <= {MAX_SECONDS}")
        for name, option, least in (("max_unacked", "producer/max_unacked (--max-unacked)", 1),
                                    ("high_watermark", "high_watermark", 0)):
            value = getattr(self, name)
            if type(value) is not int or not least <= value <= MAX_COUNT:
                raise DafkaConfigError(f"{option}: {value!r} is not a whole number in "
                                  f"{least}..{MAX_COUNT}")
        if self.beacon_host and not proto.is_host(self.beacon_host):
            raise DafkaConfigError(f"beacon/address (--beacon-address): {self.beacon_host!r} is "
                              "not a host name or address (peers connect to "
                              "tcp://HOST:PORT)")
        if self.offset_reset not in ("latest", "earliest"):
            raise DafkaConfigError(f"consumer/offset/reset must be latest or earliest, got "
                              f"{self.offset_reset!r}")
        if self.store_fsync not in ("always", "batch", "never"):
            raise DafkaConfigError(f"store/fsync must be always, batch or never, got "
                              f"{self.store_fsync!r}")
        return self


def tower_endpoints(spec: str) -> tuple[str, str]:
    """``tcp://host:5556`` -> (XSUB ``tcp://host:5556``, XPUB ``tcp://host:5557``)."""
    match = re.fullmatch(r"(tcp://[^/]+):(\d{1,5})", spec.strip())
    if not match or not 0 < int(match.group(2)) < 65535:
        raise DafkaConfigError(f"--tower {spec!r}: expected tcp://HOST:PORT (the tower's beacon "
                          f"port; its publisher is PORT+1)")
    host, port = match.group(1), int(match.group(2))
    return f"{host}:{port}", f"{host}:{port + 1}"


# ----------------------------------------------------------------------------- ZPL
# ZPL (ZeroMQ RFC 4) is what CZMQ's zconfig reads. No maintained Python reader exists
# on PyPI, so this is a small one: indentation (4 spaces) nests, "name = value" sets,
# "#" starts a comment, values may be quoted.
_ZPL_LINE = re.compile(r"^(?P<indent>(?:    )*)(?P<name>[A-Za-z0-9$\-_@.&+/]+)"
                       r"\s*(?:=\s*(?P<value>\"[^\"]*\"|'[^']*'|[^#\s][^#]*?))?\s*(?:#.*)?$")


def parse_zpl(text: str, source: str = "config") -> dict[str, str]:
    """Flatten a ZPL document to ``{"beacon/sub_address": "tcp://...", ...}``."""
    values: dict[str, str] = {}
    path: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ZPL_LINE.match(line.rstrip())
        if not match:
            raise DafkaConfigError(f"{source}:{number}: not a ZPL line: {line.strip()!r}")
        depth = len(match.group("indent")) // 4
        if depth > len(path):
            raise DafkaConfigError(f"{source}:{number}: indented deeper than its parent")
        path[depth:] = [match.group("name")]
        value = match.group("value")
        if value is not None:
            if value[:1] in "\"'":
                value = value[1:-1]
            values["/".join(path)] = value.strip()
    return values


def _ms(values: dict[str, str], key: str, default: float) -> float:
    return _number(values, key, default * 1000) / 1000


def _number(values: dict[str, str], key: str, default: float) -> float:
    if key not in values:
        return default
    try:
        number = float(values[key])
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise DafkaConfigError(f"{key} = {values[key]!r}: a number is expected") from None
    return number


def _whole(values: dict[str, str], keys: tuple[str, ...], default: int) -> int:
    """The first of `keys` set, as a whole number (``1e6`` counts, ``1.5`` does not)."""
    for key in keys:
        if key in values:
            number = _number(values, key, default)
            if not number.is_integer():
                raise DafkaConfigError(f"{key} = {values[key]!r}: a whole number is expected")
            return int(number)
    return default


def config_from_zpl(values: dict[str, str], base: DafkaConfig = DafkaConfig()) -> DafkaConfig:
    """Apply the C implementation's config paths (and ours) to `base`."""
    def endpoints(key: str, current: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(e.strip() for e in values[key].split(",") if e.strip()) \
            if key in values else current

    return replace(
        base,
        tower_sub=endpoints("beacon/sub_address", base.tower_sub),
        tower_pub=endpoints("beacon/pub_address", base.tower_pub),
        beacon_interval=_ms(values, "beacon/interval", base.beacon_interval),
        beacon_timeout=_ms(values, "beacon/timeout", base.beacon_timeout),
        beacon_host=values.get("beacon/address", base.beacon_host),
        bind=values.get("node/bind", base.bind),
        high_watermark=_whole(values, ("producer/high_watermark", "consumer/high_watermark",
                                       "store/high_watermark"), base.high_watermark),
        head_interval=_ms(values, "producer/head_interval", base.head_interval),
        max_unacked=_whole(values, ("producer/max_unacked",), base.max_unacked),
        offset_reset=values.get("consumer/offset/reset", base.offset_reset),
        store_db=values.get("store/db", base.store_db),
        store_fsync=values.get("store/fsync", base.store_fsync),
        tower_wait=_ms(values, "node/tower_wait", base.tower_wait),
        verbose=any(values.get(f"{k}/verbose", "0") not in ("", "0")
                    for k in ("beacon", "producer", "consumer", "store", "tower")),
    )


def load_config(path: str | Path, base: DafkaConfig = DafkaConfig()) -> DafkaConfig:
    """Read a ZPL config file (the C tools' ``-c FILE``)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise DafkaConfigError(f"-c {path}: cannot read the config file ({exc.strerror})") from None
    return config_from_zpl(parse_zpl(text, str(path)), base)


__all__ = ["DafkaConfigError", "DafkaConfig", "config_from_zpl", "load_config", "parse_zpl",
           "tower_endpoints"]
