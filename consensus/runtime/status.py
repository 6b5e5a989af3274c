"""Garlic Farm's application layer: each node's status as UTF-8 JSON in the log, and the
deterministic choice of the publisher from it (seed 000, "application layer").

A status entry (an Application entry whose bytes start with ``{``)::

    {"cluster": "farm", "date": 1700000000000, "id": 2,
     "config": {"endpoint": "127.0.0.1:9002", "wire": "garlicfarm", "observer": false,
                "statusInterval": 5.0, "voters": [1, 2, 3], "observers": []},
     "raft":   {"role": "follower", "term": 4, "commit": 1200, "last": 1201,
                "applied": 1200, "logSize": 1048576},
     "router": {"uptime": 123456},
     "meta":   {"publishConfig": "auto", "publishing": false}}

``cluster``, ``date`` (ms since the epoch) and ``id`` are the seed's top level; ``config``
holds configuration parameters, ``router.uptime`` is in milliseconds as the seed says, and
``meta.publishing`` is whether the node believed itself the publisher when it wrote.
Our Raft figures go under ``raft`` (the seed leaves room for more keys).

**The publisher** ("the server with the most recent best status in the log"): take each
node's latest status in log order; keep the *fresh* ones, whose date is within three of
their own status intervals of the newest date in the log; drop those with
``publishConfig: "off"``; the best is the highest ``raft.commit``, then the highest
``raft.last``, then the most recent ``date``, then the lowest id. Everything comes from
the log, so every member that applied the same entries names the same publisher.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import msgpack

FRESHNESS_INTERVALS = 3


def status_json(*, cluster: str, date_ms: int, node_id: int, config: dict[str, Any],
                raft: dict[str, Any], uptime_ms: int, publishing: bool,
                publish_config: str = "auto") -> bytes:
    body = {"cluster": cluster, "date": date_ms, "id": node_id, "config": config,
            "raft": raft, "router": {"uptime": uptime_ms},
            "meta": {"publishConfig": publish_config, "publishing": publishing}}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def parse_status(data: bytes) -> dict[str, Any] | None:
    """The status object, or None when the bytes are not a Garlic Farm status (not JSON,
    nested too deep, no integer ``id`` and ``date``, or holding what a snapshot cannot:
    an integer past 64 bits, a lone surrogate). The machine keeps what this returns in
    its snapshots, so a status it accepts must never make a snapshot fail."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    if type(obj.get("id")) is not int or type(obj.get("date")) is not int:
        return None
    try:
        msgpack.packb(obj, use_bin_type=True)
    except (ValueError, TypeError, OverflowError):   # UnicodeEncodeError is a ValueError
        return None
    return obj


def _number(obj: Mapping[str, Any], *path: str, default: float = 0) -> float:
    for key in path:
        if not isinstance(obj, Mapping):
            return default
        obj = obj.get(key)  # type: ignore[assignment]
    return obj if isinstance(obj, (int, float)) and not isinstance(obj, bool) else default


def choose_publisher(statuses: Mapping[int, Mapping[str, Any]]) -> int | None:
    """The publisher among each node's latest status (see the module docstring)."""
    if not statuses:
        return None
    newest = max(_number(s, "date") for s in statuses.values())
    candidates = []
    for node_id, status in statuses.items():
        interval_ms = 1000 * (_number(status, "config", "statusInterval", default=5.0) or 5.0)
        if _number(status, "date") < newest - FRESHNESS_INTERVALS * interval_ms:
            continue
        meta = status.get("meta")
        if isinstance(meta, Mapping) and meta.get("publishConfig") == "off":
            continue
        candidates.append(((_number(status, "raft", "commit"), _number(status, "raft", "last"),
                            _number(status, "date"), -node_id), node_id))
    return max(candidates)[1] if candidates else None
