"""How many partitions (Raft groups) a farm may have and which one a call addresses,
checked at the edge: by a node's settings (`--partitions`), by `LocalCluster` and by the
client, which must not import the server's `groups` to do it."""
from __future__ import annotations

import json
import math
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
#: On partition 0's *abort* of prepared commits left undecided past --prepared-timeout
#: (Kafka's transaction.timeout.ms): {"q": [prepared index, ...]}, and the timeout (s).
#: Partition 0 takes it only while the batch is undecided; those commits never show.
ABORTED_KEY = "garlicfarm.aborted"
PREPARED_TIMEOUT_KEY = "garlicfarm.prepared_timeout"
PREPARED_TIMEOUT_OPTION = "--prepared-timeout"
DEFAULT_PREPARED_TIMEOUT = 60.0     #: seconds, as Kafka's transaction.timeout.ms
MIN_PREPARED_TIMEOUT = 0.5          #: below it a live driver's decision would lose races
MAX_PREPARED_TIMEOUT = 7 * 86400.0


def check_prepared_timeout(value: object, option: str = PREPARED_TIMEOUT_OPTION) -> float:
    """Seconds a prepared commit may wait for partition 0's decision before it is
    aborted, or a ConfigError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) \
            or not MIN_PREPARED_TIMEOUT <= value <= MAX_PREPARED_TIMEOUT:
        raise ConfigError(option, f"must be seconds from {MIN_PREPARED_TIMEOUT:g} to "
                          f"{MAX_PREPARED_TIMEOUT:g} (how long a batch prepared in "
                          f"partitions 1 and up may wait for partition 0's decision before "
                          f"it is aborted), got {value!r}")
    return float(value)


def aborted_prepared(meta: dict) -> dict[str, list[int]] | None:
    """An abort's {"q": [prepared index, ...]} (ABORTED_KEY), None when malformed."""
    named = meta.get(ABORTED_KEY)
    if isinstance(named, dict) and all(
            isinstance(p, str) and isinstance(v, list) and all(type(i) is int for i in v)
            for p, v in named.items()):
        return named
    return None


def aborted_message(query: str, batch: int, timeout: object) -> str:
    """What a driver that decides a batch after its prepared commits were aborted is
    told (never "duplicate": its rows were not written)."""
    seconds = f"{timeout:g}" if isinstance(timeout, (int, float)) else repr(timeout)
    return (f"batch {batch} of query {query!r} was aborted after {PREPARED_TIMEOUT_OPTION} "
            f"{seconds} s undecided; the query must restart and re-run it")


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
