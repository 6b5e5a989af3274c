"""Cluster membership: voters, the outgoing voters of a joint configuration, observers.

A node's configuration is always the last CONFIGURATION entry in its log, committed or
not (JournalKeeper, Raft dissertation §4); truncating that entry rolls the configuration
back to the previous one. During a joint configuration (C_old,new) every decision -
electing a leader, committing an entry - needs a majority of `voters` (C_new) *and* a
majority of `outgoing` (C_old) (quorum.py). Observers never count.

Configuration entries are encoded as UTF-8 JSON (stdlib only, readable in a log dump);
the runtime translates to JRaft's ClusterConfiguration where it talks to JRaft peers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Collection, Mapping

from .errors import ConfigurationError


@dataclass(frozen=True)
class Configuration:
    """Who votes and who observes. Ids are positive ints (JRaft server ids)."""

    voters: frozenset[int]
    outgoing: frozenset[int] = frozenset()      #: C_old while joint, else empty
    observers: frozenset[int] = frozenset()
    addresses: Mapping[int, str] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, voters: Collection[int], observers: Collection[int] = (),
           addresses: Mapping[int, str] | None = None) -> "Configuration":
        """A simple (non-joint) configuration."""
        return cls(frozenset(voters), frozenset(), frozenset(observers), dict(addresses or {}))

    @property
    def is_joint(self) -> bool:
        return bool(self.outgoing)

    @property
    def all_voters(self) -> frozenset[int]:
        """Everyone whose vote or acknowledgement counts: C_new and C_old."""
        return self.voters | self.outgoing

    @property
    def members(self) -> frozenset[int]:
        return self.voters | self.outgoing | self.observers

    def is_voter(self, node_id: int) -> bool:
        return node_id in self.voters or node_id in self.outgoing

    def is_empty(self) -> bool:
        return not self.voters and not self.outgoing

    # -- changes ----------------------------------------------------------------------
    def enter_joint(self, new_voters: Collection[int],
                    addresses: Mapping[int, str] | None = None) -> "Configuration":
        """C_old,new: the voters become `new_voters`, the current ones go to `outgoing`."""
        if self.is_joint:
            raise ConfigurationError("voters", "already in a joint configuration; "
                                     "wait for C_new before the next change")
        new = frozenset(new_voters)
        return Configuration(new, self.voters, self.observers - new,
                             _merged(self.addresses, addresses))

    def leave_joint(self) -> "Configuration":
        """C_new: drop the outgoing voters."""
        return Configuration(self.voters, frozenset(), self.observers, dict(self.addresses))

    def with_voters(self, voters: Collection[int],
                    addresses: Mapping[int, str] | None = None) -> "Configuration":
        """A simple (single-step) change, as JRaft's AddServer/RemoveServer make."""
        new = frozenset(voters)
        return Configuration(new, frozenset(), self.observers - new, _merged(self.addresses, addresses))

    def with_observers(self, add: Collection[int] = (), remove: Collection[int] = (),
                       addresses: Mapping[int, str] | None = None) -> "Configuration":
        clash = set(add) & self.all_voters
        if clash:
            raise ConfigurationError("observers", f"{sorted(clash)} are voters; remove them "
                                     "from the voters first")
        observers = (self.observers | frozenset(add)) - frozenset(remove)
        return Configuration(self.voters, self.outgoing, observers, _merged(self.addresses, addresses))

    # -- encoding ---------------------------------------------------------------------
    def encode(self) -> bytes:
        return json.dumps({
            "voters": sorted(self.voters), "outgoing": sorted(self.outgoing),
            "observers": sorted(self.observers),
            "addresses": {str(k): v for k, v in sorted(self.addresses.items())},
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Configuration":
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigurationError("configuration", f"not UTF-8 JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ConfigurationError("configuration", "must be a JSON object")
        sets = [frozenset(_ids(obj, key)) for key in ("voters", "outgoing", "observers")]
        raw = obj.get("addresses", {})
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise ConfigurationError("addresses", "must map ids to strings")
        try:
            addresses = {int(k): v for k, v in raw.items()}
        except ValueError:
            raise ConfigurationError("addresses", "keys must be integer ids") from None
        return cls(sets[0], sets[1], sets[2], addresses)

    def __str__(self) -> str:
        text = f"voters={sorted(self.voters)}"
        if self.outgoing:
            text += f" outgoing={sorted(self.outgoing)}"
        if self.observers:
            text += f" observers={sorted(self.observers)}"
        return text


EMPTY = Configuration(frozenset())


def _merged(old: Mapping[int, str], new: Mapping[int, str] | None) -> dict[int, str]:
    merged = dict(old)
    merged.update(new or {})
    return merged


def _ids(obj: dict, key: str) -> list[int]:
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                              and v > 0 for v in value):
        raise ConfigurationError(key, "must be a list of positive integer ids")
    return value
