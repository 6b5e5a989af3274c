"""The `garlicfarm` command: a thin dispatcher to the subcommands.

Each subcommand lives beside the code it drives and exposes ``main(argv) -> int`` (or
``command_main(name, argv)`` when one module serves several commands); it is
imported only when used, so `garlicfarm node` starts without importing Spark.
"""
from __future__ import annotations

import importlib
import sys

# name -> (module, one-line help). Modules own their argument parsing.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "node": ("consensus.runtime.cli", "run one Raft node of a farm"),
    "status": ("consensus.runtime.admin", "show leader, term, publisher and members of a farm"),
    "add-server": ("consensus.runtime.admin", "add a voter to a farm"),
    "remove-server": ("consensus.runtime.admin", "remove a member from a farm (--force too)"),
    "transfer-leader": ("consensus.runtime.admin", "hand leadership to a named node"),
    "config": ("consensus.runtime.admin", "export or import a farm's configuration"),
    "torture": ("consensus.runtime.torture", "fault-inject a real cluster and check linearizability"),
    "decode": ("consensus.wire.inspect", "decode wire bytes (hex) to JSON"),
    "encode": ("consensus.wire.inspect", "encode a JSON message to wire bytes (hex)"),
    "dafka": ("connectors.dafka.cli", "Dafka tower, store, produce, consume"),
    "chp": ("connectors.chp.cli", "CHP server, get, set, watch"),
    "demo": ("pyspark_farm.demo", "stream through an embedded local farm with Spark"),
}


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: garlicfarm COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "`garlicfarm COMMAND --help` describes one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"garlicfarm: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    # A module that serves several commands exposes command_main(name, argv).
    if hasattr(module, "command_main"):
        return int(module.command_main(name, rest) or 0)
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
