"""The `garlicfarm` command: the runtime's subcommands (`consensus.cli`) and those of the
layers above it, each imported only when used (`garlicfarm node` starts without
importing Spark or ZeroMQ)."""
from __future__ import annotations

import sys

from consensus.cli import SUBCOMMANDS as RUNTIME_SUBCOMMANDS
from consensus.cli import dispatch
from garlicfarm import __version__

# name -> (module, one-line help). Modules own their argument parsing.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    **RUNTIME_SUBCOMMANDS,
    "decode": ("garlicfarm.inspect", "decode wire bytes (hex) to JSON"),
    "encode": ("garlicfarm.inspect", "encode a JSON message to wire bytes (hex)"),
    "dafka": ("connectors.dafka.cli", "Dafka tower, store, produce, consume"),
    "chp": ("connectors.chp.cli", "CHP server, get, set, watch"),
    "demo": ("pyspark_farm.demo", "stream through an embedded local farm with Spark"),
    "jar": ("garlicfarm.jar", "print the JVM reader's jar path (spark-submit --jars)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-V"]):
        print(f"garlicfarm {__version__}")
        return 0
    return dispatch("garlicfarm", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
