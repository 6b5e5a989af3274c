"""The errors a farm's clients and operators see. Every message says what to do.

`FarmError` is the base. The service answers a failed call with an error code and a
message (`docs/protocol.md`, Reply); the client turns the code back into one of these.
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Error codes on the wire (Reply and WriteResult frames)."""
    FAILED = 1              #: the request is wrong (bad argument, unknown query...)
    NOT_LEADER = 2          #: retry at the leader named in the reply
    UNAVAILABLE = 3         #: no quorum, no leader, dropped proposal: retry later
    INDEX_OVERFLOW = 4      #: the index is beyond what this member has applied
    INDEX_UNDERFLOW = 5     #: the index was compacted away
    RETRY = 6               #: the write was lost (leader change): send it again
    AUTHENTICATION = 7
    PROTOCOL = 8
    INCOMPLETE = 9          #: a membership change or transfer did not finish in time


class FarmError(Exception):
    """Base of every error of the farm's client API.

    `maybe_applied` (R4): False when the operation certainly did not take effect - no
    copy of the request reached a member that could have applied it without a definite
    answer (connection refused, authentication refused, NOT_LEADER on every attempt, a
    refusal by the state machine). True when it may have (a request went unanswered: a
    timeout, a lost connection, a leader that died or stalled). The client sets it on
    every error a call raises; it defaults to True (unknown)."""
    code = ErrorCode.FAILED
    maybe_applied: bool = True


class NotLeaderError(FarmError):
    """The member is not the leader. `leader_id` / `leader_endpoint` say where to go
    (None when no leader is known yet); `members` is the configuration as the member
    knows it ({id: endpoint}), so a client can look for a leader it did not know."""
    code = ErrorCode.NOT_LEADER

    def __init__(self, message: str, leader_id: int | None = None,
                 leader_endpoint: str | None = None,
                 members: dict[int, str] | None = None) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_endpoint = leader_endpoint
        self.members = dict(members or {})


class Unavailable(FarmError):
    """No member answered within the timeout (or none could serve the request): check
    that the endpoints are right and that a majority of the voters runs."""
    code = ErrorCode.UNAVAILABLE


class RetryableWrite(FarmError):
    """The leader lost the write (its entry was replaced after a leader change); the
    client sends it again with the same request id (internal to FarmClient)."""
    code = ErrorCode.RETRY


class IndexOverflow(FarmError):
    """The index is beyond what the member has committed and applied: wait, or ask
    another member. `last_available` is the highest index it can serve now."""
    code = ErrorCode.INDEX_OVERFLOW

    def __init__(self, message: str, last_available: int = 0) -> None:
        super().__init__(message)
        self.last_available = last_available


class IndexUnderflow(FarmError):
    """The index was compacted away; `first_available` is the oldest index still kept."""
    code = ErrorCode.INDEX_UNDERFLOW

    def __init__(self, message: str, first_available: int = 0) -> None:
        super().__init__(message)
        self.first_available = first_available


class Incomplete(FarmError):
    """A membership change or leader transfer was started but did not finish within the
    call's timeout; it may still finish (check get_servers before trying again)."""
    code = ErrorCode.INCOMPLETE


class AuthenticationError(FarmError):
    """The member refused the credentials (check the username and password options)."""
    code = ErrorCode.AUTHENTICATION


class ProtocolMismatch(FarmError):
    """The peer does not speak what we expected (wrong cluster name, wrong wire, not a
    garlicfarm node at that endpoint, or a corrupt stream)."""
    code = ErrorCode.PROTOCOL


class NotAFarm(ProtocolMismatch):
    """The endpoint answered, but not as a member of this farm (another web server, or
    a farm of another cluster name): no retry changes that."""


class ConfigError(FarmError, ValueError):
    """A node or client setting is wrong; `option` names it (e.g. ``--peers``)."""
    maybe_applied = False           # refused before anything was sent

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"{option}: {reason}")
        self.option = option


_BY_CODE: dict[int, type[FarmError]] = {
    ErrorCode.FAILED: FarmError, ErrorCode.NOT_LEADER: NotLeaderError,
    ErrorCode.UNAVAILABLE: Unavailable, ErrorCode.INDEX_OVERFLOW: IndexOverflow,
    ErrorCode.INDEX_UNDERFLOW: IndexUnderflow, ErrorCode.RETRY: RetryableWrite,
    ErrorCode.AUTHENTICATION: AuthenticationError, ErrorCode.PROTOCOL: ProtocolMismatch,
    ErrorCode.INCOMPLETE: Incomplete,
}


def error_from_wire(code: int, message: str, detail: dict | None = None) -> FarmError:
    """Rebuild the error a member reported (code, message and the code's details)."""
    detail = detail or {}
    cls = _BY_CODE.get(code, FarmError)
    if cls is NotLeaderError:
        members = detail.get("members") or {}
        return NotLeaderError(message, detail.get("leader"), detail.get("endpoint"),
                              {int(k): v for k, v in members.items()})
    if cls is IndexOverflow:
        return IndexOverflow(message, int(detail.get("last", 0)))
    if cls is IndexUnderflow:
        return IndexUnderflow(message, int(detail.get("first", 0)))
    return cls(message)


def error_detail(exc: FarmError) -> dict:
    """The details `error_from_wire` reads back."""
    if isinstance(exc, NotLeaderError):
        return {"leader": exc.leader_id, "endpoint": exc.leader_endpoint,
                "members": exc.members}
    if isinstance(exc, IndexOverflow):
        return {"last": exc.last_available}
    if isinstance(exc, IndexUnderflow):
        return {"first": exc.first_available}
    return {}
