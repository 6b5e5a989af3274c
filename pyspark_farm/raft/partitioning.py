"""Which partition a keyed row belongs to: Kafka's default partitioner for keyed records.

A key goes to `to_positive(murmur2(key_bytes)) % partitions`, exactly as a Kafka producer's
default partitioner places a record with a non-null key (Kafka's `Utils.murmur2`, seed
0x9747b28c, and `Utils.toPositive`, which clears the sign bit), so users reason about our
partitions as Kafka users do: the same key bytes and the same partition count give the
same partition as in a Kafka topic. The mapping is part of the format: it never changes,
or data written by one version would be found in the wrong partition by another.

How a key column's values become bytes (the only type-dependent step):

| Spark type | Arrow type | key bytes |
|---|---|---|
| StringType | string, large_string | the UTF-8 bytes (as Spark's Kafka sink writes a string key) |
| BinaryType | binary, large_binary, fixed_size_binary | as they are |
| ShortType, IntegerType, LongType | int16, int32, int64 | big-endian two's complement of 2, 4, 8 bytes: Kafka's `ShortSerializer`, `IntegerSerializer`, `LongSerializer`, so a Java producer keyed by a number agrees |
| ByteType | int8 | the one byte |
| anything else | | refused (`KeyTypeError`): cast the column to string or binary first |

Other types are refused rather than given an encoding: one float value has several
encodings (0.0 and -0.0, many NaNs), a timestamp or decimal depends on its unit, scale
and time zone, so no Kafka user could name their bytes. A null key has no partition
(`NO_PARTITION`): the caller spreads such rows, as Kafka spreads records without a key.

Hand-written, vectorised with numpy: the PyPI murmur packages are MurmurHash3, or
MurmurHash2 variants one Python call per key (mmh, murmur2: 64-bit or another seed);
none hashes an Arrow column at once. Here a column's Arrow buffers are hashed in place,
one numpy pass per 4-byte block of the longest key over the rows still that long, with
no Python object per row: 0.2-0.6 s per million string keys of 6 to 36 bytes on a busy
2-core machine, 7-20x a plain Python loop over the keys.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import SchemaError

#: Kafka's murmur2 constants (`Utils.murmur2`).
SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], np.uint32)
#: The partition of a null key: none (the caller spreads such rows).
NO_PARTITION = -1
#: Partition counts: at least one; int32's range bounds them, as Kafka's do.
MAX_PARTITIONS = 2**31 - 1
_INT_WIDTHS = {pa.int8(): 1, pa.int16(): 2, pa.int32(): 4, pa.int64(): 8}


class KeyTypeError(SchemaError):
    """A key column of a type with no stable byte encoding."""


def murmur2(key: bytes | bytearray | memoryview) -> int:
    """Kafka's `Utils.murmur2` of `key`: a signed 32-bit int, as Java returns it."""
    return int(_murmur2_column(pa.array([bytes(key)], pa.binary())).view(np.int32)[0])


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: the sign bit cleared (not the absolute value)."""
    return number & 0x7FFFFFFF


def partition_for(key: bytes | str | int, partitions: int, *, width: int = 8) -> int:
    """The partition of one key among `partitions`: a str is UTF-8, bytes as they are, an
    int big-endian in `width` bytes (8: a LongType key; 4: IntegerType)."""
    if isinstance(key, str):
        data = key.encode("utf-8")
    elif isinstance(key, int) and not isinstance(key, bool):
        data = key.to_bytes(width, "big", signed=True)
    elif isinstance(key, (bytes, bytearray, memoryview)):
        data = bytes(key)
    else:
        raise KeyTypeError(f"a partition key must be str, bytes or int, not "
                           f"{type(key).__name__}: encode it first")
    return to_positive(murmur2(data)) % _checked_partitions(partitions)


def key_partitions(column: pa.Array | pa.ChunkedArray, partitions: int, *,
                   name: str = "key") -> np.ndarray:
    """The partition of each row's key (int32; NO_PARTITION where the key is null), by the
    encoding rules of the module's table. `name`: the column, for the error message."""
    count = _checked_partitions(partitions)
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = [np.zeros(0, np.int32)]
    for chunk in chunks:
        hashes = _murmur2_column(_key_bytes(chunk, name))
        found = ((hashes & np.uint32(0x7FFFFFFF)) % np.uint32(count)).astype(np.int32)
        if chunk.null_count:
            found[np.asarray(chunk.is_null())] = NO_PARTITION
        out.append(found)
    return np.concatenate(out)


def _checked_partitions(partitions: int) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer)) \
            or not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be an int from 1 to {MAX_PARTITIONS}, "
                         f"not {partitions!r}")
    return int(partitions)


def _key_bytes(array: pa.Array, name: str) -> pa.Array:
    """`array` as binary, large_binary or fixed_size_binary key bytes (zero-copy for
    strings and binaries)."""
    kind = array.type
    if pa.types.is_string(kind):
        return array.view(pa.binary())
    if pa.types.is_large_string(kind):
        return array.view(pa.large_binary())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) \
            or pa.types.is_fixed_size_binary(kind):
        return array
    width = _INT_WIDTHS.get(kind)
    if width is None:
        raise KeyTypeError(
            f"the key column {name!r} is of type {kind}, which has no stable byte encoding "
            "for partitioning: cast it to string or binary (for example "
            f"col({name!r}).cast('string')), or use a byte, short, int or long column")
    values = array.fill_null(0).to_numpy(zero_copy_only=False)
    big_endian = values.astype(f">i{width}", copy=False).tobytes()
    return pa.Array.from_buffers(pa.binary(width), len(array), [None, pa.py_buffer(big_endian)])


def _murmur2_column(array: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of every value of a binary-like array, as uint32 (nulls hash as
    empty keys: the caller masks them)."""
    rows = len(array)
    buffers = array.buffers()
    data = np.frombuffer(buffers[-1], np.uint8) if buffers[-1] is not None \
        else np.zeros(0, np.uint8)
    if pa.types.is_fixed_size_binary(array.type):
        width = array.type.byte_width
        starts = (np.arange(rows, dtype=np.int64) + array.offset) * width
        lengths = np.full(rows, width, np.int64)
    else:
        offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
        bounds = np.frombuffer(buffers[1], offset_type)[array.offset:array.offset + rows + 1]
        bounds = bounds.astype(np.int64)
        starts, lengths = bounds[:-1], np.diff(bounds)
    return _murmur2_rows(data, starts, lengths)


def _words(data: np.ndarray) -> np.ndarray:
    """The little-endian uint32 starting at every byte of `data` and of 4 zero bytes after
    it (an unaligned view with a stride of one byte: one gather per block instead of four
    byte gathers; the zeros let a key's last 1-3 bytes be read as one word too)."""
    padded = np.concatenate([data, np.zeros(4, np.uint8)])
    return np.ndarray((padded.size - 3,), np.dtype("<u4"), padded, 0, (1,))


def _murmur2_rows(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """murmur2 of each key data[start:start + length]: the 4-byte blocks of all keys at
    once, block by block, over the keys still that long (rows ordered by block count, so
    they are a prefix), then the 1-3 tail bytes and the final mix. uint32 arithmetic wraps
    as Java's int does."""
    words = _words(data)
    with np.errstate(over="ignore"):
        h = np.uint32(SEED) ^ lengths.astype(np.uint32)
        blocks = lengths // 4
        uniform = blocks.size == 0 or blocks.min() == blocks.max()
        order = None if uniform else np.argsort(-blocks, kind="stable")
        hs, block_starts = (h, starts) if order is None else (h[order], starts[order])
        descending = blocks if order is None else blocks[order]
        deepest = int(descending[0]) if descending.size else 0
        for block in range(deepest):
            # rows with more than `block` blocks: a prefix of the descending order
            active = descending.size if uniform else int(
                np.searchsorted(-descending, -block, side="left"))
            k = words[block_starts[:active] + 4 * block].astype(np.uint32, copy=False)
            k *= _M
            k ^= k >> np.uint32(24)
            k *= _M
            part = hs[:active]
            part *= _M
            part ^= k
        if order is not None:
            h = np.empty_like(hs)
            h[order] = hs
        # the 1-3 tail bytes XORed in one by one are their little-endian word
        tail = lengths % 4
        h ^= words[starts + lengths - tail] & _TAIL_MASKS[tail]
        h = np.where(tail > 0, h * _M, h)
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h
