"""The errors the garlicfarm data source raises at users.

Every message names the option, column or setting at fault and what to do about it, so
that it can be read in a Spark stack trace without opening this code.
"""
from __future__ import annotations

from typing import Mapping, Sequence


class GarlicFarmSparkError(Exception):
    """Base of the data source's own errors."""


class OptionError(GarlicFarmSparkError, ValueError):
    """An option is missing or has a value the data source cannot use."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        self.reason = reason
        super().__init__(f"garlicfarm option {option!r}: {reason}")


class SchemaError(GarlicFarmSparkError, ValueError):
    """A DataFrame's columns do not fit what the sink or source needs."""


class DataLossError(GarlicFarmSparkError):
    """Entries a query needs are no longer in the log of any member (compacted into
    snapshots). `requested` is the first entry missing, `first_available` the lowest index
    a member still holds, `firsts` each member's first index when they were asked."""

    def __init__(self, requested: int, first_available: int, *,
                 firsts: Mapping[int, int | None] | None = None,
                 message: str | None = None) -> None:
        self.requested = requested
        self.first_available = first_available
        self.firsts = dict(firsts or {})
        where = (f"no member holds them any more (first indexes: {describe_firsts(self.firsts)})"
                 if self.firsts else f"the log now starts at {first_available}")
        super().__init__(message or (
            f"entries {_span(requested, first_available - 1)} were compacted into a snapshot: "
            f"{where}. Set the option failOnDataLoss to false to skip them and continue from "
            f"index {first_available}, or restart the query with a new checkpoint and "
            "startingOffsets 'earliest'."))

    @classmethod
    def batch(cls, commit_index: int, query_id: str, batch_id: int, staged: Sequence[int],
              firsts: Mapping[int, int | None], *, partial: bool = False) -> "DataLossError":
        """A committed batch whose staged entries no member holds. `partial`: part of the
        batch may have been returned already (by this task, or by the other tasks that
        share the batch), so it can be neither read nor skipped whole here."""
        kept = min((f for f in firsts.values() if f is not None), default=commit_index + 1)
        missing = sorted(s for s in staged if s < kept) or sorted(staged)
        if partial:
            outcome = ("Part of the batch may have been returned already (its entries were "
                       "compacted while the query read it), so this task fails rather than "
                       "return part of a batch: run the query again, and the batch is "
                       "reported (or, with failOnDataLoss false, skipped whole) before any "
                       "of its rows is read.")
        else:
            outcome = ("Its rows cannot be read from this farm; with the option failOnDataLoss "
                       "false, readers skip the whole batch (never a part of it) and go on.")
        return cls(missing[0], kept, firsts=firsts, message=(
            f"the committed batch at index {commit_index} (query {query_id}, batch "
            f"{batch_id}) needs staged entries {_span(missing[0], missing[-1])} "
            f"({len(missing)} of its {len(staged)} payloads) that no member holds any more "
            f"(first indexes: {describe_firsts(firsts)}). {outcome}"))

    @classmethod
    def commit_gone(cls, commit_index: int, firsts: Mapping[int, int]) -> "DataLossError":
        """The commit entry of a batch being read was compacted away at every member."""
        kept = min(firsts.values(), default=commit_index + 1)
        return cls(commit_index, kept, firsts=firsts, message=(
            f"the committed batch at index {commit_index} was compacted away at every member "
            f"while the query read it (first indexes: {describe_firsts(firsts)}). Other tasks "
            "may have returned part of its rows, so this task fails rather than skip its "
            "part: run the query again, and it starts after the batch (failOnDataLoss false) "
            "or reports it before reading."))


def describe_firsts(firsts: Mapping[int, int | None]) -> str:
    """Where each member's log starts: 'n1 1055, n2 609, n3 no answer'."""
    return ", ".join(f"n{node} {'no answer' if first is None else first}"
                     for node, first in sorted(firsts.items()))


def _span(low: int, high: int) -> str:
    return str(low) if high <= low else f"{low}..{high}"


class CommitConflict(GarlicFarmSparkError):
    """The commit messages of one micro-batch contradict each other."""


class EnvironmentSetupError(GarlicFarmSparkError, RuntimeError):
    """The machine is missing something Spark needs (Java, a worker interpreter...)."""


class UnsupportedPySparkError(GarlicFarmSparkError, ImportError):
    """PySpark is missing, or a version garlicfarm does not support: raised on importing
    pyspark_farm, naming the supported versions and how to install one."""
