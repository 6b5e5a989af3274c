"""Helpers shared by the storage tests: deterministic payloads and on-disk surgery."""
from __future__ import annotations

import hashlib
import os

from consensus.storage.segment import parse_segment_name


def payload(index: int, size: int = 40) -> bytes:
    """Deterministic, index-specific bytes (so a misplaced record is caught)."""
    seed = hashlib.sha256(b"record %d" % index).digest()
    return (seed * (size // len(seed) + 1))[:size]


def segment_paths(directory: str) -> list[str]:
    """The segment files of a log directory, oldest first."""
    names = sorted(n for n in os.listdir(directory) if parse_segment_name(n) is not None)
    return [os.path.join(directory, n) for n in names]


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x5A]))


def overwrite(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def append_bytes(path: str, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


def all_records(log) -> list[bytes]:
    return log.read(log.first_index, log.last_index + 1)


def expected_heads(records: list[bytes], size: int, first_index: int
                   ) -> tuple[bytes, tuple[int, ...]]:
    """What `RecordHeads` of `records` (from `first_index`) hold, joined: each record's
    first `size` bytes, zero-padded, and the indexes of the records shorter than that."""
    return (b"".join(r[:size].ljust(size, b"\0") for r in records),
            tuple(i for i, r in enumerate(records, first_index) if len(r) < size))


def joined_heads(heads) -> tuple[bytes, tuple[int, ...]]:
    return b"".join(heads.chunks), heads.short
