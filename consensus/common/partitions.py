"""How many partitions (Raft groups) a farm may have and which one a call addresses,
checked at the edge: by a node's settings (`--partitions`), by `LocalCluster` and by the
client, which must not import the server's `groups` to do it."""
from __future__ import annotations

import json
from typing import Iterable

from consensus.common.errors import ConfigError

MAX_PARTITIONS = 4096      #: per node: each group costs a log, a state machine, threads
#: A COMMIT's metadata keys of a batch decided across partitions (docs/exactly-once.md,
#: "Partitions"): a *prepared* commit in partition q > 0 (its rows wait for partition 0's
#: decision), partition 0's decision naming each partition's prepared commit
#: ({"q": index}), and the marker that rolls the decision forward into partition q.
PREPARED_KEY = "garlicfarm.prepared"
MARKERS_KEY = "garlicfarm.markers"
RESOLVES_KEY = "garlicfarm.resolves"
DECIDED_AT_KEY = "garlicfarm.decided_at"    #: on a marker: the decision's index in partition 0
#: how partition q refuses a prepared commit while an older batch of the query waits for
#: its marker (the driver rolls that decision forward, then prepares again)
WAITING_FOR_MARKERS = "older prepared commits wait for their markers"


def check_partitions(value: object, option: str = "--partitions") -> int:
    """A partition count from the CLI, a config file or code, or a ConfigError naming
    the option."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_PARTITIONS:
        raise ConfigError(option, f"must be a whole number from 1 to {MAX_PARTITIONS} "
                          f"(Raft groups per node), got {value!r}")
    return value


def check_partition(value: object, partitions: int | None = None,
                    option: str = "partition") -> int:
    """A partition a client addresses (below `partitions` when known)."""
    limit = partitions if partitions is not None else MAX_PARTITIONS
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise ConfigError(option, f"must be a whole number from 0 to {limit - 1}, "
                          f"got {value!r}")
    return value


DRAINED_KEY = "garlicfarm.drained"    #: partition 0's kv: JSON list of drained node ids


def parse_drained(text: str | None) -> frozenset[int]:
    """The drained ids of `DRAINED_KEY`'s value (an unreadable value drains nobody: the
    key is written by `farm_membership`, a stray write must not stop the balancer)."""
    try:
        ids = json.loads(text) if text else []
    except ValueError:
        return frozenset()
    if not isinstance(ids, list):
        return frozenset()
    return frozenset(i for i in ids if isinstance(i, int) and not isinstance(i, bool))


def check_replicas(value: object, nodes: int, option: str = "--replicas") -> int:
    """A replication factor from the CLI, a config file or code: 1 to the farm's nodes
    (the voters of the bootstrap), or a ConfigError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= nodes:
        raise ConfigError(option, f"must be a whole number from 1 to the farm's {nodes} "
                          f"node{'s' * (nodes != 1)} (each partition's replicas), got "
                          f"{value!r}")
    return value


def placed_members(partition: int, nodes: Iterable[int], replicas: int | None) -> list[int]:
    """The nodes that host `partition` (its voters at bootstrap): every node for
    partition 0 (the farm's membership and status group) and when `replicas` is None or
    covers them all; else `replicas` consecutive node ids (in id order, wrapping) from
    the one at position `partition mod nodes`. Every node computes it alone from the same
    --peers and --replicas, so the farm agrees without a word (docs/operations.md)."""
    ids = sorted(nodes)
    if partition == 0 or replicas is None or replicas >= len(ids):
        return ids
    start = partition % len(ids)
    return sorted(ids[(start + j) % len(ids)] for j in range(replicas))


def placed_leader(partition: int, nodes: Iterable[int]) -> int:
    """The node that campaigns first for `partition` in a new farm: the one at position
    `partition mod nodes`, so that partitions 0..P-1's first leaders go round the
    nodes (no node leads more than ceil(P / nodes)); always a member of it."""
    ids = sorted(nodes)
    return ids[partition % len(ids)]
