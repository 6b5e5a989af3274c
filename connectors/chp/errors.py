"""What a CHP client or server tells its user when it cannot do what was asked.

Wire-level problems are `consensus.wire.errors.ProtocolError`s (see `proto`); these are
the user-facing ones: bad options, and operations that ran out of time.
"""
from __future__ import annotations


class ChpError(Exception):
    """A CHP client or server could not do what was asked."""


class ChpConfigError(ChpError, ValueError):
    """An option or argument is wrong; the message names it and says what to do."""


class ChpTimeout(ChpError, TimeoutError):
    """No server answered in time."""


class ClientFailed(ChpError):
    """A client's background thread died: its replica no longer follows the server."""


class DataDirError(ChpError):
    """The server's --data-dir cannot be used: in use by another server, or damaged."""


__all__ = ["ChpError", "ChpTimeout", "ClientFailed", "ChpConfigError", "DataDirError"]
