"""The Raft groups (partitions) a node hosts, and where each keeps its files.

A farm of N partitions runs N independent Raft groups, 0..N-1, on every node (or, with
--replicas R, each group k >= 1 on the R nodes placed for it: config.members_of); group 0
is the farm of one group that every earlier farm is (its files stay at the top of the
data directory, so an existing farm is its partition 0), the others live under
``DATA_DIR/groups/<g>/``. Partitions are added by starting the nodes again with a
larger --partitions: the new groups start empty, the existing ones keep their data.
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

from consensus.common.errors import ErrorCode
from consensus.wire.extensions import Reply, encode

class GroupSet:
    """The groups this node hosts (what `in`, `len` and iteration see) of the farm's
    0..count-1: all of them, or with --replicas those placed on it (`members_of`)."""

    __slots__ = ("count", "hosted", "members_of")

    def __init__(self, count: int, hosted: Iterable[int] | None = None,
                 members_of: Callable[[int], list[int]] | None = None) -> None:
        self.count = count
        self.hosted = sorted(range(count) if hosted is None else hosted)
        self.members_of = members_of    #: partition -> its nodes (None: every node)

    def __contains__(self, group: object) -> bool:
        return isinstance(group, int) and group in self.hosted

    def __len__(self) -> int:
        return len(self.hosted)

    def __iter__(self) -> Iterator[int]:
        return iter(self.hosted)

    def describe(self) -> str:
        if len(self.hosted) != self.count:
            return f"partitions {', '.join(map(str, self.hosted))} of 0..{self.count - 1}"
        return "partition 0 only" if self.count == 1 else f"partitions 0..{self.count - 1}"

    def unhosted(self, group: int, node_id: int) -> str:
        return f"partition {group} is not hosted by node {node_id} (it hosts " \
            f"{self.describe()})"

    def refusal(self, group: int, node_id: int,
                endpoint_of: Callable[[int], str | None] = lambda node: None) -> bytes:
        """The Reply (call 0) a client gets for a partition not hosted here: NOT_LEADER
        naming the partition's members (the client goes there, as after any NOT_LEADER)
        when the farm has it elsewhere, else FAILED (no such partition)."""
        if self.members_of is not None and 0 <= group < self.count:
            members = self.members_of(group)
            return encode(Reply(node_id, 0, 0, 0, int(ErrorCode.NOT_LEADER), None,
                                f"{self.unhosted(group, node_id)}; its replicas are nodes "
                                f"{', '.join(map(str, members))}",
                                {"partition": group, "leader": None, "endpoint": None,
                                 "members": {n: endpoint_of(n) for n in members}}))
        return encode(Reply(node_id, 0, 0, 0, int(ErrorCode.FAILED), None,
                            f"{self.unhosted(group, node_id)}; choose a partition below "
                            f"{self.count}", {"partition": group, "partitions": self.count}))


def group_data_dir(data_dir: str, group: int) -> str:
    """Group 0 keeps the data directory's top level (today's layout); the others a
    directory each under groups/."""
    return data_dir if group == 0 else os.path.join(data_dir, "groups", str(group))
