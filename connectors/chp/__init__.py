"""CHP, the Clustered Hashmap Protocol (ZeroMQ RFC 12, the zguide clone pattern), as the
zguide's Python and C clonesrv6 really speak it (SPECS §3), and beyond them: durable
servers, gap and restart detection in clients, a safer Binary Star pending list.

The library API:

* `CloneClient(servers, subtree)`: `get`, `entry`, `items`, `snapshot` (entries with
  the sequence they are consistent with), `set` (caller-chosen UUID, properties, ttl,
  optional confirmation with the sequence), `delete`, `watch` (iterator or callback);
  see `client`.
* `CloneServer(ServerConfig(...)).run()`: a standalone server or one of a Binary Star
  pair (`BstarRole`), with `data_dir` for persistence; see `server`.
* `ReplicatedServer(ServerConfig(...), FarmOptions(endpoints, ...)).run()`: a server of a
  map kept in a garlicfarm Raft log; any number of them serve one map with one sequence
  numbering, and clients resume across them without a gap; see `replicated_server`.
* The pure parts, for other drivers: `kvmap.CloneMap` (apply / follow / expire /
  snapshot_reply / dump / load), `map_machine.ReplicatedMap` (the map applied from
  committed log entries), `mirror.Mirror` (snapshot then updates, or resume),
  `bstar.BinaryStar`, `pending.PendingUpdates`, `resume`, and the codec `proto`.
"""
from __future__ import annotations

import importlib
from typing import Any

# Imported on first use, so that `connectors.chp.proto` (the inspector's codec) does not
# pull in pyzmq and the storage engine.
_EXPORTS = {
    "CloneClient": "client", "MapSnapshot": "client", "SetReceipt": "client", "Watch": "client",
    "ChpError": "errors", "ChpTimeout": "errors", "ClientFailed": "errors",
    "ChpConfigError": "errors", "DataDirError": "errors", "CloneMap": "kvmap", "Entry": "kvmap",
    "CloneServer": "server", "BstarRole": "server", "ServerConfig": "server",
    "FarmOptions": "replicated_server", "ReplicatedServer": "replicated_server",
    "ReplicatedMap": "map_machine",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'connectors.chp' has no attribute {name!r}")
    return getattr(importlib.import_module(f"connectors.chp.{_EXPORTS[name]}"), name)
