"""The simulator's application: a key-value register map (the model the linearizability
checker knows), with snapshots so that compaction and two-step reads get exercised."""
from __future__ import annotations

import json
from typing import Any

from consensus.raft import Entry


def encode_put(key: str, value: str) -> bytes:
    return f"{key}={value}".encode()


class KvMachine:
    """`raft.StateMachine` over a dict of strings. Entries are `key=value` puts."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def apply(self, entry: Entry) -> Any:
        key, _, value = entry.data.decode().partition("=")
        self.data[key] = value
        return value

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        self.data = json.loads(data.decode()) if data else {}

    def query(self, key: Any) -> Any:
        return self.data.get(key)
