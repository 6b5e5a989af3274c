"""The pieces of a farm of several partitions that need no process: the option's
validation, the balancer's decisions over stand-in cores, the status rows, the data
directory layout (issue 28)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from consensus.admin.partition_status import leaders_per_node, partition_rows
from consensus.common.errors import ConfigError
from consensus.raft import Configuration, FollowerContact, Role
from consensus.runtime.balancer import Balancer
from consensus.runtime.config import NodeConfig
from consensus.runtime.groups import GroupSet, group_data_dir


def node_config(**kw) -> NodeConfig:
    return NodeConfig(id=1, listen="127.0.0.1:0", data_dir="/tmp/x", username="u",
                      password="p", **kw)


@pytest.mark.parametrize("value", [0, -1, 4097, True, "6", 2.5])
def test_partitions_out_of_range_or_not_whole_are_refused_naming_the_option(value):
    with pytest.raises(ConfigError) as caught:
        node_config(partitions=value)
    assert "--partitions" in str(caught.value) and "1 to 4096" in str(caught.value)


def test_partitions_need_the_garlicfarm_wire():
    assert node_config(partitions=6).partitions == 6
    for wire in ("jraft", "marker"):
        with pytest.raises(ConfigError) as caught:
            node_config(partitions=2, wire=wire)
        assert "--wire garlicfarm" in str(caught.value)


def test_group_zero_keeps_the_data_dirs_top_level():
    assert group_data_dir("/d", 0) == "/d"
    assert group_data_dir("/d", 3) == os.path.join("/d", "groups", "3")
    groups = GroupSet(6)
    assert 5 in groups and 6 not in groups and -1 not in groups and "1" not in groups
    assert groups.describe() == "partitions 0..5" and GroupSet(1).describe() == \
        "partition 0 only"


@dataclass
class _Progress:
    match: int


@dataclass
class FakeCore:
    """A group's core as the balancer reads it."""
    me: int
    leader_id: int | None
    voters: tuple[int, ...] = (1, 2, 3)
    reachable: tuple[int, ...] = (2, 3)
    last_index: int = 10
    transferring_to: int | None = None
    transfers: list[int] = field(default_factory=list)

    @property
    def role(self) -> Role:
        return Role.LEADER if self.leader_id == self.me else Role.FOLLOWER

    @property
    def configuration(self) -> Configuration:
        return Configuration.of(self.voters)

    @property
    def progress(self):
        return {v: _Progress(self.last_index) for v in self.voters if v != self.me} \
            if self.role is Role.LEADER else {}

    def follower_contact(self):
        return {v: FollowerContact(0, v in self.reachable) for v in self.voters
                if v != self.me} if self.role is Role.LEADER else {}

    def transfer_leader(self, target: int) -> None:
        self.transfers.append(target)
        self.transferring_to = target


def test_a_node_above_its_share_hands_leaderships_to_the_least_loaded_live_nodes():
    # node 1 leads 4 of 6, node 2 leads 2, node 3 (back from the dead) leads none
    cores = [FakeCore(1, 1), FakeCore(1, 1), FakeCore(1, 1), FakeCore(1, 1),
             FakeCore(1, 2), FakeCore(1, 2)]
    balancer = Balancer(1, cores)
    assert balancer.tick(0.0) == 2
    assert [c.transfers for c in cores[:4]] == [[3], [3], [], []]
    assert balancer.tick(0.1) == 0          # settling: no second round at once


def test_no_move_within_the_share_nor_to_a_silent_node():
    within = [FakeCore(1, 1), FakeCore(1, 1), FakeCore(1, 2), FakeCore(1, 2),
              FakeCore(1, 3), FakeCore(1, 3)]
    assert Balancer(1, within).tick(0.0) == 0
    # node 3 is down: 6 groups over 2 live nodes, a share of 3; node 1 leads 4 and
    # hands one to node 2, never to silent node 3
    down = [FakeCore(1, 1, reachable=(2,)) for _ in range(4)] + \
        [FakeCore(1, 2, reachable=(2,)) for _ in range(2)]
    assert Balancer(1, down).tick(0.0) == 1
    assert [c.transfers for c in down[:4]] == [[2], [], [], []]


class _Lagging(FakeCore):
    @property
    def progress(self):
        return {2: _Progress(self.last_index), 3: _Progress(4)}


def test_a_follower_that_is_behind_gets_no_leadership():
    """Node 3 is live but 6 entries behind in every group: only node 2 may take one."""
    cores = [_Lagging(1, 1) for _ in range(3)] + [FakeCore(1, 2) for _ in range(3)]
    assert Balancer(1, cores).tick(0.0) == 0     # node 2 is at its share (2 + 1 > 2)
    cores = [_Lagging(1, 1) for _ in range(4)] + [FakeCore(1, 3) for _ in range(2)]
    assert Balancer(1, cores).tick(0.0) == 2
    assert [c.transfers for c in cores[:4]] == [[2], [2], [], []]


def test_partition_rows_take_each_partitions_leader_from_its_own_word():
    views = {
        1: [{"partition": 0, "role": "leader", "term": 3, "commit": 9, "applied": 9},
            {"partition": 1, "role": "follower", "term": 2, "commit": 4, "applied": 4,
             "leader": 2}],
        2: [{"partition": 0, "role": "follower", "term": 3, "commit": 9, "applied": 6},
            {"partition": 1, "role": "leader", "term": 2, "commit": 5, "applied": 5,
             "quiesced": True}],
        3: [{"partition": 0, "role": "leader", "term": 2, "commit": 7, "applied": 7},
            {"partition": 1, "role": "candidate", "term": 2, "commit": 3, "applied": 3}]}
    rows = partition_rows(views)
    assert rows[0] == {"partition": 0, "leader": 1, "term": 3, "commit": 9, "lag": 3,
                       "applied": {1: 9, 2: 6, 3: 7}, "quiesced": []}  # 3's lead is stale
    assert rows[1]["leader"] == 2 and rows[1]["commit"] == 5 and rows[1]["lag"] == 2
    assert rows[1]["quiesced"] == [2]
    assert leaders_per_node(rows, [1, 2, 3]) == {1: 1, 2: 1, 3: 0}
