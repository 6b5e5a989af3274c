"""How the farm's management commands answer: exit codes, usage errors naming the option
at fault, readable tables (rich; plain aligned text when stdout is not a terminal) and
JSON (``--json``)."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping, Sequence, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

#: 0 done (status: healthy); 1 the farm refused or did not answer; 2 bad usage or input;
#: 3 (status) the farm answered but has no leader or an unreachable member
EXIT_OK, EXIT_FARM, EXIT_USAGE, EXIT_UNHEALTHY = 0, 1, 2, 3


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
