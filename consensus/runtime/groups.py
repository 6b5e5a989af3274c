"""The Raft groups (partitions) a node hosts, and where each keeps its files.

A farm of N partitions runs N independent Raft groups, 0..N-1, on every node; group 0
is the farm of one group that every earlier farm is (its files stay at the top of the
data directory, so an existing farm is its partition 0), the others live under
``DATA_DIR/groups/<g>/``. Partitions are added by starting the nodes again with a
larger --partitions: the new groups start empty, the existing ones keep their data.
"""
from __future__ import annotations

import os

from consensus.common.errors import ErrorCode
from consensus.wire.extensions import Reply, encode

class GroupSet:
    """Groups 0..count-1 (what `in`, `len` and iteration see)."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __contains__(self, group: object) -> bool:
        return isinstance(group, int) and 0 <= group < self.count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return iter(range(self.count))

    def describe(self) -> str:
        return "partition 0 only" if self.count == 1 else f"partitions 0..{self.count - 1}"

    def unhosted(self, group: int, node_id: int) -> str:
        return f"partition {group} is not hosted by node {node_id} (it hosts " \
            f"{self.describe()})"

    def refusal(self, group: int, node_id: int) -> bytes:
        """The Reply (call 0, FAILED) a client gets for a partition not hosted here."""
        return encode(Reply(node_id, 0, 0, 0, int(ErrorCode.FAILED), None,
                            f"{self.unhosted(group, node_id)}; choose a partition below "
                            f"{self.count}", {"partition": group, "partitions": self.count}))


def group_data_dir(data_dir: str, group: int) -> str:
    """Group 0 keeps the data directory's top level (today's layout); the others a
    directory each under groups/."""
    return data_dir if group == 0 else os.path.join(data_dir, "groups", str(group))
