"""Quorum arithmetic over a configuration (etcd's `quorum` package): the index a majority
holds, whether a set of nodes is a quorum, how a vote stands. In a joint configuration
every answer needs a majority of `voters` (C_new) *and* of `outgoing` (C_old); an empty
voter set never limits anything. Observers never count. Pure functions of their inputs,
tested by the tables in tests/raft/testdata/quorum.txt."""
from __future__ import annotations

import enum
from typing import Callable, Collection, Mapping

from .configuration import Configuration

UNLIMITED = 1 << 62         #: the commit index an empty voter set allows


class VoteResult(enum.Enum):
    PENDING = "pending"     #: neither side can be sure yet
    WON = "won"
    LOST = "lost"


def majority_index(group: Collection[int], match: Callable[[int], int]) -> int:
    """The largest index a majority of `group` holds."""
    if not group:
        return UNLIMITED
    indexes = sorted((match(n) for n in group), reverse=True)
    return indexes[len(indexes) // 2]


def is_majority(group: Collection[int], ids: Collection[int]) -> bool:
    if not group:
        return True
    return len(set(group).intersection(ids)) > len(group) // 2


def committed_index(config: Configuration, match: Callable[[int], int]) -> int:
    """The largest index acknowledged by a majority of each voter set."""
    result = majority_index(config.voters, match)
    if config.outgoing:
        result = min(result, majority_index(config.outgoing, match))
    return result


def has_quorum(config: Configuration, ids: Collection[int]) -> bool:
    """Do `ids` hold a majority of each voter set?"""
    return is_majority(config.voters, ids) and is_majority(config.outgoing, ids)


def vote_result(config: Configuration, votes: Mapping[int, bool]) -> VoteResult:
    """WON with a majority of each voter set granting; LOST once a voter set can no
    longer grant a majority; PENDING otherwise."""
    granted = {n for n, ok in votes.items() if ok}
    if has_quorum(config, granted):
        return VoteResult.WON
    rejected = {n for n, ok in votes.items() if not ok}
    for group in (config.voters, config.outgoing):
        if group and len(group) - len(group & rejected) <= len(group) // 2:
            return VoteResult.LOST
    return VoteResult.PENDING
