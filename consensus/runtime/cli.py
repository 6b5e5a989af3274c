"""``garlicfarm node``: run one node of a farm until SIGTERM.

    garlicfarm node --id 1 --listen 127.0.0.1:9001 \\
        --peers 2=127.0.0.1:9002,3=127.0.0.1:9003 --data-dir /var/lib/farm/1 \\
        --credentials /etc/garlicfarm/credentials

Settings may also come from ``--config FILE`` (TOML, the same names; see config.py);
options on the command line win. A node started with ``--join`` has no bootstrap
configuration and waits for a leader to add it (``garlicfarm add-server``).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable

from consensus.common.errors import ConfigError, FarmError
from consensus.common.suggest import SuggestingParser
from consensus.runtime.config import NodeConfig, load_config_file
from consensus.runtime.log_format import LOG_FORMATS, configure_logging


def build_parser() -> argparse.ArgumentParser:
    p = SuggestingParser(prog="garlicfarm node", description="Run one garlicfarm node.",
                                argument_default=argparse.SUPPRESS)
    p.add_argument("--config", help="TOML file with the same settings")
    p.add_argument("--id", type=int, help="this node's id (a positive integer)")
    p.add_argument("--listen", help="HOST:PORT to listen on (clients and peers)")
    p.add_argument("--listen-fd", type=int, help="use this inherited listening socket "
                   "(supervisors, LocalCluster); --listen still names the address")
    p.add_argument("--advertise", help="HOST:PORT peers use to reach this node "
                   "(default: --listen)")
    p.add_argument("--peers", help="the other voters: ID=HOST:PORT,...")
    p.add_argument("--peer-address", action="append", help="ID=HOST:PORT: dial peer ID "
                   "there instead of its configured endpoint (a proxy; repeatable)")
    p.add_argument("--observers", help="observers of the initial configuration: "
                   "ID=HOST:PORT,...")
    p.add_argument("--data-dir", help="where the log, hard state and snapshots live")
    p.add_argument("--cluster", help="cluster (farm) name, default farm")
    p.add_argument("--wire", choices=("garlicfarm", "marker", "jraft"),
                   help="what peers speak to each other (clients always use garlicfarm)")
    p.add_argument("--user", help="username for the digest handshake")
    p.add_argument("--password", help="password for the digest handshake")
    p.add_argument("--credentials", help="file of username:password lines (the first is "
                   "ours)")
    p.add_argument("--tls-cert", help="PEM certificate: accept and dial TLS only")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--tls-ca", help="PEM CA that peers' and clients' certificates must "
                   "chain to (client certificates are then required); peers are verified "
                   "against it (without it: the system trust store and host names)")
    p.add_argument("--tls-client-cert", choices=("required", "optional"),
                   help="with --tls-ca: whether clients must present a certificate "
                   "(default required; a presented one must chain to --tls-ca either way)")
    p.add_argument("--insecure-skip-tls-verify", action="store_true",
                   help="dial peers with TLS WITHOUT verifying their certificates (unsafe: "
                   "anyone in between can pose as a peer); logged as a warning")
    p.add_argument("--proxy", help="http://HOST:PORT: dial peers through HTTP CONNECT")
    p.add_argument("--fsync", choices=("always", "batch", "never"),
                   help="always: every append; batch (default): once per Ready (group "
                   "commit); never: leave it to the OS")
    p.add_argument("--shared-fsync-groups", type=int, metavar="N",
                   help="a sync round of at least N groups (partitions) makes their logs and "
                   "votes durable with one syncfs of the disk instead of fsyncs per group "
                   "(default 8; 0: never; Linux only)")
    p.add_argument("--observer", action="store_true", help="start as an observer")
    p.add_argument("--join", action="store_true", help="no bootstrap configuration: wait "
                   "to be added by the leader")
    p.add_argument("--status-interval", type=float, help="seconds between status entries "
                   "(default 5)")
    p.add_argument("--status-entries", choices=("on", "off"),
                   help="append the node's status JSON to the log every --status-interval "
                   "(default: on, but off with --wire jraft: JRaft applications would take "
                   "it for data)")
    p.add_argument("--tick", type=float, help="seconds per Raft tick (default 0.01)")
    p.add_argument("--election-ticks", type=int, help="election timeout in [n, 2n) ticks "
                   "(default 30: 300-600 ms)")
    p.add_argument("--snapshot-interval", type=int, help="applied entries between "
                   "snapshots (default 100000)")
    p.add_argument("--retain-entries", type=int, help="log entries kept below the latest "
                   "snapshot (default 100000)")
    p.add_argument("--segment-bytes", type=int, help="log segment size; compaction drops "
                   "whole segments (default 64 MiB)")
    p.add_argument("--max-connections", type=int, help="open client connections this "
                   "node accepts; more are refused (503) until some close; peers are "
                   "counted apart and always get in (default 1024)")
    p.add_argument("--client-buffer-budget", type=int, metavar="BYTES",
                   help="bytes all clients together may make the node hold (their partial "
                   "messages and unwritten answers); past it the node stops reading the "
                   "clients that would grow it (default 256 MiB, at least 64 MiB + 128 KiB)")
    p.add_argument("--state-machine", help="module:factory of a pluggable application "
                   "state machine for entries that are not farm commands")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   help="default info (each status interval's full status: debug)")
    p.add_argument("--log-format", choices=LOG_FORMATS, help="text (default), or json: "
                   "one object per line (time, level, logger, node, message)")
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics on "
                   "http://HOST:PORT/metrics (port 0: any free, logged); a non-loopback "
                   "address requires the node's credentials as HTTP Basic authentication")
    p.add_argument("--metrics-tls-cert", metavar="FILE", help="PEM certificate: serve "
                   "--metrics over HTTPS only (it may be the node's --tls-cert)")
    p.add_argument("--metrics-tls-key", metavar="FILE", help="PEM private key of "
                   "--metrics-tls-cert")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="Raft groups (partitions) this node hosts, 0..N-1 (default 1; every "
                   "node of the farm gets the same N; needs --wire garlicfarm)")
    p.add_argument("--prepared-timeout", type=float, metavar="SECONDS",
                   help="with --partitions N > 1: a batch prepared in partitions 1 and up "
                   "that partition 0 has not decided for this long is aborted, which "
                   "releases their readers (default 60, as Kafka's transaction.timeout.ms; "
                   "0.5 to 604800)")
    p.add_argument("--replicas", type=int, metavar="R",
                   help="nodes each partition k >= 1 is placed on, 1 to the farm's nodes "
                   "(default: every node); partition 0 stays on every node. Placement: "
                   "the R node ids from position k mod nodes, in id order, wrapping "
                   "(docs/operations.md); every node gets the same --peers and R")
    p.add_argument("--log-readers", choices=("threads", "process"),
                   help="who builds the pages of read_entries and read_journal off the "
                   "Raft loop: threads (default) of the node, or a reader process of its "
                   "own (no GIL shared with the loop, at a lower priority)")
    p.add_argument("--log-reader-nice", type=int, metavar="N",
                   help="with --log-readers process: the reader process's niceness above "
                   "the node's, 0 to 19 (default 0: the process already waits while a loop "
                   "turn runs; 5 or more starved the reads on a busy machine)")
    p.add_argument("--consumer-expiry", type=float, metavar="SECONDS",
                   help="a consumer (a Spark raft-source query) not heard from for this "
                   "long leaves `status` and the metrics (default 86400: one day)")
    return p


def _factory(spec: str) -> Callable:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError("--state-machine", f"{spec!r} is not module:factory")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("--state-machine", f"cannot load {spec}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    try:
        values = load_config_file(args.pop("config")) if "config" in args else {}
        state_machine = args.pop("state_machine", None) or values.pop("state-machine", None) \
            or values.pop("state_machine", None)
        values.update(args)
        config = NodeConfig.from_mapping(values)
        app = _factory(state_machine) if state_machine else None
        configure_logging(config.log_level, config.log_format, node=str(config.id))
        from consensus.runtime.node import FarmNode
        node = FarmNode(config, app)
        metrics = None
        if config.metrics:
            from consensus.runtime.metrics import serve_node_metrics
            metrics = serve_node_metrics(node, config.metrics, node.security.accepted,
                                         config.metrics_tls())
    except (ConfigError, FarmError) as exc:
        print(f"garlicfarm node: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"garlicfarm node: {exc}", file=sys.stderr)
        return 1
    try:
        node.run()
    finally:
        if metrics is not None:
            metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
