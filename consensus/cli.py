"""The runtime's commands (`python -m consensus.cli node ...`): nodes, administration,
torture. The `garlicfarm` command (garlicfarm/cli.py) adds the connectors', the
inspector and the demo to these; this one imports nothing above consensus, so a node
process never loads ZeroMQ or Spark.

Each subcommand lives beside the code it drives and exposes ``main(argv) -> int`` (or
``command_main(name, argv)`` when one module serves several commands); it is imported
only when used.
"""
from __future__ import annotations

import importlib
import sys

# name -> (module, one-line help). Modules own their argument parsing.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "node": ("consensus.runtime.cli", "run one Raft node of a farm"),
    "status": ("consensus.admin.admin", "show leader, term, publisher and members of a farm"),
    "add-server": ("consensus.admin.admin", "add a voter to a farm"),
    "remove-server": ("consensus.admin.admin", "remove a member from a farm (--force too)"),
    "transfer-leader": ("consensus.admin.admin", "hand leadership to a named node"),
    "config": ("consensus.admin.admin", "export or import a farm's configuration"),
    "snapshot": ("consensus.admin.backup", "save a running farm to a file, restore it "
                 "into a new farm's first member, check a file"),
    "torture": ("consensus.torture.run", "fault-inject a real cluster and check linearizability"),
}


def _usage(prog: str, table: dict[str, tuple[str, str]]) -> str:
    width = max(map(len, table))
    lines = [f"usage: {prog} COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in table.items()]
    lines += ["", f"`{prog} COMMAND --help` describes one command."]
    return "\n".join(lines)


def dispatch(prog: str, table: dict[str, tuple[str, str]], argv: list[str]) -> int:
    """Run the subcommand `argv[0]` of `table` with the rest of `argv`."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage(prog, table))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in table:
        from consensus.common.suggest import nearest
        guess = nearest(name, table)
        print(f"{prog}: unknown command {name!r}; did you mean {guess}? (`{prog} --help` "
              f"lists the commands)" if guess else
              f"{prog}: unknown command {name!r}\n\n{_usage(prog, table)}", file=sys.stderr)
        return 2
    module = importlib.import_module(table[name][0])
    # A module that serves several commands exposes command_main(name, argv).
    if hasattr(module, "command_main"):
        return int(module.command_main(name, rest) or 0)
    return int(module.main(rest) or 0)


def main(argv: list[str] | None = None) -> int:
    return dispatch("garlicfarm", SUBCOMMANDS, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
