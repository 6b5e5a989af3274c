"""The one error a malformed history raises.

A history comes from a file or from a recorder driven by test code; either way a bad
line or a bad call must stop the check with a message naming where and what, never
produce a verdict about a history that is not the one the user meant.
"""
from __future__ import annotations


class HistoryError(ValueError):
    """A history that cannot be checked as given.

    `field` names the part at fault (``"type"``, ``":value"``, ``"process"``...), `line`
    the 1-based line of the file when the history was read from one.
    """

    def __init__(self, field: str, reason: str, *, line: int | None = None,
                 source: str | None = None) -> None:
        self.field = field
        self.reason = reason
        self.line = line
        self.source = source
        where = source or ""
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: {reason}")
