"""The simulator's application: a key-value register map (the model the linearizability
checker knows) beside the farm's sink ledger (`consensus.runtime.machines.Ledger`: staged
entries, batch commits, aborts), with snapshots, so that compaction, two-step reads and
the retention of staged entries below a snapshot (raft/retention.py) get exercised.

Entries are ``key=value`` puts, ``stage/<batch>/<n>``, ``commit/<batch>/<i,j,...>`` and
``abort/<batch>``; all batches belong to one query.
"""
from __future__ import annotations

from typing import Any

import msgpack

from consensus.raft import Entry
from consensus.runtime.machines import CommandError, Ledger

QUERY = "sim"


def encode_put(key: str, value: str) -> bytes:
    return f"{key}={value}".encode()


def encode_stage(batch: int, n: int) -> bytes:
    return f"stage/{batch}/{n}".encode()


def encode_commit(batch: int, staged: list[int]) -> bytes:
    return f"commit/{batch}/{','.join(map(str, staged))}".encode()


def encode_abort(batch: int) -> bytes:
    return f"abort/{batch}".encode()


class KvMachine:
    """`raft.StateMachine` over a dict of strings and a sink ledger."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.ledger = Ledger()

    def apply(self, entry: Entry) -> Any:
        text = entry.data.decode()
        if "=" in text:
            key, _, value = text.partition("=")
            self.data[key] = value
            return value
        op, _, rest = text.partition("/")
        batch, _, tail = rest.partition("/")
        try:
            if op == "stage":
                return self.ledger.stage(entry.index, QUERY, int(batch), 0, 0, "bytes")
            if op == "commit":
                staged = [int(s) for s in tail.split(",") if s]
                return self.ledger.commit(entry.index, QUERY, int(batch), staged, {})
            if op == "abort":
                return self.ledger.abort(QUERY, int(batch))
        except CommandError:
            return None     # refused the same way on every member (e.g. a lost staged entry)
        raise ValueError(f"not a simulator entry: {text!r}")

    def needed_from(self, keep_from: int) -> int:
        """The first log index still needed (Ledger.referenced_floor, as the runtime)."""
        return self.ledger.referenced_floor(keep_from)

    def snapshot(self) -> bytes:
        return msgpack.packb({"kv": self.data, "ledger": self.ledger.dump()}, use_bin_type=True)

    def restore(self, data: bytes) -> None:
        self.data, self.ledger = {}, Ledger()
        if data:
            state = msgpack.unpackb(data, raw=False, strict_map_key=False)
            self.data = dict(state["kv"])
            self.ledger.load(state["ledger"])

    def query(self, key: Any) -> Any:
        return self.data.get(key)
