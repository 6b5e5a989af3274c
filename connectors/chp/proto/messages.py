"""CHP's messages: the kvmsg family, ICANHAZ?, the Binary Star state and KVBULK, with the
frame constants and the channels that decide what a plain kvmsg means."""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import ClassVar, Iterator, Protocol, Union

import numpy as np

from .properties import parse_properties

HUGZ = b"HUGZ"
KTHXBAI = b"KTHXBAI"
ICANHAZ = b"ICANHAZ?"
UUID_LENGTH = 16
KVMSG_FRAMES = 5
KVBULK = b"KVBULK"
RESERVED_KEYS = frozenset({HUGZ, KTHXBAI, ICANHAZ})
#: A snapshot DEALER whose ZeroMQ routing id starts with this asks for KVBULK answers.
BULK_ROUTING_PREFIX = b"gf-kvbulk/1:"
BULK_VERSION = 1
BULK_FRAMES = 8

_SEQUENCE = struct.Struct(">q")
pack_sequence = _SEQUENCE.pack
_unpack_sequence = _SEQUENCE.unpack
MAX_SEQUENCE = (1 << 63) - 1
MIN_SEQUENCE = -(1 << 63)


class Channel(enum.Enum):
    """Where frames were read, which decides what a plain kvmsg means."""
    COLLECTOR = "collector"                # client PUB -> server SUB: KVSET
    PUBLISHER = "publisher"                # server PUB -> client SUB: KVPUB, HUGZ
    SNAPSHOT_REQUEST = "snapshot-request"  # client DEALER -> server ROUTER: ICANHAZ
    SNAPSHOT_REPLY = "snapshot-reply"      # server ROUTER -> client DEALER: KVSYNC, KTHXBAI
    BSTAR = "bstar"                        # Binary Star state PUB -> peer SUB


class BstarState(enum.IntEnum):
    """The Binary Star states, as sent in state messages (one ASCII digit)."""
    PRIMARY = 1   # primary, waiting for its peer
    BACKUP = 2    # backup, waiting for its peer
    ACTIVE = 3    # serving clients
    PASSIVE = 4   # following the active peer



# --------------------------------------------------------------------------- messages
@dataclass(slots=True)
class _KvMsg:
    """The five-frame kvmsg. `properties` holds the raw frame, byte for byte."""
    key: bytes
    sequence: int = 0
    uuid: bytes = b""
    properties: bytes = b""
    body: bytes = b""
    NAME: ClassVar[str] = ""

    @property
    def deleted(self) -> bool:
        """An empty body deletes the key."""
        return not self.body

    def get_property(self, name: bytes) -> bytes | None:
        """The value of property `name` (the last one when repeated), or None."""
        if not self.properties:
            return None
        return dict(parse_properties(self.properties)).get(name)


@dataclass(slots=True)
class Kvset(_KvMsg):
    """KVSET: a client's update, sent to every server's collector. Sequence is ignored
    (the peers send 0); ttl, when present, is relative seconds."""
    NAME: ClassVar[str] = "KVSET"


@dataclass(slots=True)
class Kvpub(_KvMsg):
    """KVPUB: an update the server publishes, with its sequence. Republished KVSETs
    keep the client's properties verbatim; expiry deletes carry an absolute ttl."""
    NAME: ClassVar[str] = "KVPUB"


@dataclass(slots=True)
class Kvsync(_KvMsg):
    """KVSYNC: one stored entry in a snapshot reply, with the sequence of its last
    update, the client's UUID and the stored properties (absolute ttl)."""
    NAME: ClassVar[str] = "KVSYNC"


@dataclass(slots=True)
class _Command:
    """A kvmsg whose key is the command itself (`KEY`)."""
    NAME: ClassVar[str] = ""
    KEY: ClassVar[bytes] = b""
    sequence: int = 0
    uuid: bytes = b""
    properties: bytes = b""
    body: bytes = b""


@dataclass(slots=True)
class Hugz(_Command):
    """HUGZ: the server's heartbeat on the publisher, with its current sequence (never
    an update). The Python peer fills the UUID with random bytes."""
    NAME: ClassVar[str] = "HUGZ"
    KEY: ClassVar[bytes] = HUGZ


@dataclass(slots=True)
class Kthxbai(_Command):
    """KTHXBAI: the end of a snapshot, with the server's current sequence; the body is
    the subtree asked for (RFC, Python peer) or empty (C peer)."""
    NAME: ClassVar[str] = "KTHXBAI"
    KEY: ClassVar[bytes] = KTHXBAI

    @property
    def subtree(self) -> bytes:
        return self.body


@dataclass(slots=True)
class Icanhaz:
    """ICANHAZ?: ask for a snapshot of the keys starting with `subtree`.
    `subtree_frame` False is the one-frame form some senders emit. `properties`, when
    not empty, is a third frame of ``name=value`` lines: garlicfarm's resume request
    (`resume`), sent only to servers that announce they understand it."""
    NAME: ClassVar[str] = "ICANHAZ"
    subtree: bytes = b""
    subtree_frame: bool = True
    properties: bytes = b""


@dataclass(slots=True)
class BstarStatus:
    """A Binary Star state message, sent by each server to its peer every heartbeat."""
    NAME: ClassVar[str] = "BSTAR"
    state: BstarState


class EntryLike(Protocol):
    """What a KVBULK is encoded from: `kvmap.Entry`, `Kvsync`."""
    key: bytes
    sequence: int
    uuid: bytes
    properties: bytes
    body: bytes


@dataclass(slots=True, eq=False)
class KvBulk:
    """KVBULK: `count` snapshot entries as columns (garlicfarm's bulk snapshot; never
    sent to or by zguide peers). Each entry is what a KVSYNC would carry. Variable
    columns are Arrow-style: ``keys[key_offsets[i]:key_offsets[i + 1]]`` is key i
    (offsets int32, count + 1 of them, starting at 0); `sequences` is int64. Compare
    with `same` (numpy fields). In JSON (`to_json`) it is the list of its KVSYNCs."""
    NAME: ClassVar[str] = "KVBULK"
    sequences: np.ndarray
    key_offsets: np.ndarray
    keys: bytes
    uuid_offsets: np.ndarray
    uuids: bytes
    property_offsets: np.ndarray
    properties: bytes
    value_offsets: np.ndarray
    values: bytes

    @property
    def count(self) -> int:
        return len(self.sequences)

    def __len__(self) -> int:
        return len(self.sequences)

    def rows(self) -> Iterator[tuple[bytes, int, bytes, bytes, bytes]]:
        """(key, sequence, uuid, properties, body) per entry, in order."""
        ko, uo = self.key_offsets.tolist(), self.uuid_offsets.tolist()
        po, vo = self.property_offsets.tolist(), self.value_offsets.tolist()
        keys, uuids, props, values = self.keys, self.uuids, self.properties, self.values
        for i, sequence in enumerate(self.sequences.tolist()):
            j = i + 1
            yield (keys[ko[i]:ko[j]], sequence, uuids[uo[i]:uo[j]], props[po[i]:po[j]],
                   values[vo[i]:vo[j]])

    def entries(self) -> list["Kvsync"]:
        """The entries as the KVSYNCs a classic snapshot would have sent."""
        return [Kvsync(*row) for row in self.rows()]

    def same(self, other: "KvBulk") -> bool:
        """Whether both hold the same entries (the numpy fields defeat ``==``)."""
        return list(self.rows()) == list(other.rows())


KvMsg = Union[Kvset, Kvpub, Kvsync]
Message = Union[Kvset, Kvpub, Kvsync, Hugz, Kthxbai, Icanhaz, BstarStatus, KvBulk]
MESSAGE_TYPES: tuple[type, ...] = (Kvset, Kvpub, Kvsync, Hugz, Kthxbai, Icanhaz, BstarStatus)

