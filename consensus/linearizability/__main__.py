"""``python -m consensus.linearizability FILE [--model kv|register] [--timeout S]``

Prints the verdict (and, for a violation, why); exits 0 when the history is
linearizable, 1 when it is not, 2 when the time budget ran out first, 3 when the
history or the arguments cannot be used.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .checker import Verdict, check
from .errors import HistoryError
from .formats import read_events
from .history import Event, pair_events
from .models import MODELS, Model

EXIT = {Verdict.LINEARIZABLE: 0, Verdict.NOT_LINEARIZABLE: 1, Verdict.UNKNOWN: 2}
EXIT_UNUSABLE = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:       # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_UNUSABLE, f"{self.prog}: error: {message}\n")


def guess_model(events: Sequence[Event]) -> type[Model]:
    """The model whose functions cover the history's: kv for get/put/append, register for
    read/write (cas belongs to both)."""
    used = {e.f for e in events}
    for model in MODELS.values():
        if used and used <= set(model.functions):     # type: ignore[attr-defined]
            return model
    raise HistoryError("f", f"no model knows all of {', '.join(sorted(used)) or 'nothing'}; "
                            "choose one with --model")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="python -m consensus.linearizability",
                     description="Check a history (jepsen log or EDN lines) for "
                                 "linearizability. Exit 0 linearizable, 1 not, 2 unknown "
                                 "(time ran out), 3 unusable input.")
    parser.add_argument("file", help="history file: jepsen log lines or EDN lines")
    parser.add_argument("--model", choices=sorted(MODELS),
                        help="sequential model (default: guessed from the functions used)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="time budget in seconds before answering unknown (default 60)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be a positive number of seconds")
    try:
        events, lines = read_events(args.file)
        model = (MODELS[args.model] if args.model else guess_model(events))()
        result = check(pair_events(events, lines=lines, source=args.file), model,
                       timeout=args.timeout)
    except HistoryError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    except OSError as e:
        print(f"error: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.json:
        print(json.dumps({
            "file": args.file, "model": model.name, "verdict": result.verdict.value,
            "operations": result.operations, "elapsed": round(result.elapsed, 6),
            "keys": [{"key": p.key if isinstance(p.key, (str, int, type(None))) else repr(p.key),
                      "verdict": p.verdict.value, "operations": p.operations,
                      "steps": p.steps} for p in result.partitions]}))
    else:
        print(f"{args.file}: " + result.explain(model))
    return EXIT[result.verdict]


if __name__ == "__main__":
    sys.exit(main())
