"""Each partition's leader, term, commit and lag, from every member's own view (the
`partitions` call): what `garlicfarm status` and the status page show of a farm of
several partitions. Pure functions over the answers, so the view is testable alone."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from consensus.admin.farm_target import FarmTarget


def partition_rows(views: Mapping[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """`views`: node id -> its `partitions` answer's list. One row per partition:
    `leader` (the member that says it leads, in the highest term any member reports;
    None while no one does), `term`, `commit` (the leader's), `lag` (entries the
    furthest-behind member that answered has yet to apply, against the leader's commit),
    `applied` per member, `quiesced`, the members that stopped ticking it (idle,
    docs/runtime.md "Quiescing idle groups"), and `replicas`, its voters (the leader's
    view, else the newest term's; left out from nodes older than it)."""
    by_partition: dict[int, dict[int, dict]] = {}
    for node_id, parts in views.items():
        for part in parts:
            by_partition.setdefault(int(part["partition"]), {})[int(node_id)] = part
    rows = []
    for partition in sorted(by_partition):
        members = by_partition[partition]
        term = max(int(p.get("term") or 0) for p in members.values())
        leaders = [n for n, p in members.items()
                   if p.get("role") == "leader" and int(p.get("term") or 0) == term]
        leader = leaders[0] if len(leaders) == 1 else None
        commit = int(members[leader]["commit"]) if leader is not None else \
            max(int(p.get("commit") or 0) for p in members.values())
        applied = {n: int(p.get("applied") or 0) for n, p in sorted(members.items())}
        newest = members[leader] if leader is not None else \
            max(members.values(), key=lambda p: int(p.get("term") or 0))
        replicas = newest.get("replicas")
        rows.append({"partition": partition,
                     **({"replicas": replicas} if replicas is not None else {}),
                     "leader": leader, "term": term,
                     "commit": commit, "lag": max(0, commit - min(applied.values())),
                     "applied": applied,
                     "quiesced": [n for n, p in sorted(members.items()) if p.get("quiesced")]})
    return rows


def leaders_per_node(rows: list[dict[str, Any]], nodes: list[int]) -> dict[int, int]:
    """How many partitions each node leads (0 for a node leading none)."""
    counts = {node: 0 for node in nodes}
    for row in rows:
        if row["leader"] is not None:
            counts[row["leader"]] = counts.get(row["leader"], 0) + 1
    return counts


def collect_partitions(target: "FarmTarget", endpoints: Mapping[int, str]
                       ) -> dict[int, list[dict[str, Any]]]:
    """Every member's `partitions` answer at once (each bounded by the dial timeout,
    as the health probes are); a member that does not answer is left out."""
    from concurrent.futures import ThreadPoolExecutor

    from consensus.admin.health import ANSWER_SECONDS, MAX_PROBES
    from consensus.common.errors import FarmError
    if not endpoints:
        return {}
    bound = target.dial_timeout

    def ask(item: tuple[int, str]) -> tuple[int, list | None]:
        node_id, endpoint = item
        try:
            with target.client(endpoints=[endpoint], timeout=bound + ANSWER_SECONDS,
                               dial_timeout=bound) as client:
                return node_id, list(client.partitions(endpoint)["partitions"])
        except FarmError:
            return node_id, None

    with ThreadPoolExecutor(max_workers=min(MAX_PROBES, len(endpoints)),
                            thread_name_prefix="partitions") as pool:
        return {node: parts for node, parts in pool.map(ask, sorted(endpoints.items()))
                if parts is not None}


def partitions_document(views: Mapping[int, list[dict[str, Any]]], nodes: list[int]
                        ) -> dict[str, Any] | None:
    """What `status --json` adds for a farm of several partitions (None for one):
    `partitions` (the rows) and `leaders` (partitions led per node)."""
    if not any(len(parts) > 1 for parts in views.values()):
        return None
    rows = partition_rows(views)
    return {"partitions": rows,
            "leaders": {str(n): c for n, c in leaders_per_node(rows, nodes).items()}}
