"""The errors the garlicfarm data source raises at users.

Every message names the option, column or setting at fault and what to do about it, so
that it can be read in a Spark stack trace without opening this code.
"""
from __future__ import annotations


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
    """Offsets a query needs are no longer in the log (compacted into a snapshot)."""

    def __init__(self, requested: int, first_available: int) -> None:
        self.requested = requested
        self.first_available = first_available
        super().__init__(
            f"the log no longer holds index {requested}: entries before {first_available} were "
            "compacted into a snapshot. Set the option failOnDataLoss to false to continue from "
            f"index {first_available}, or restart the query with a new checkpoint and "
            "startingOffsets 'earliest'.")


class CommitConflict(GarlicFarmSparkError):
    """The commit messages of one micro-batch contradict each other."""


class EnvironmentSetupError(GarlicFarmSparkError, RuntimeError):
    """The machine is missing something Spark needs (Java, a worker interpreter...)."""
