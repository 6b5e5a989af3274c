"""Who gets in at a node's listener, and at what cost: the gate's policy, sans-I/O.

The gate (`gate.py`) owns the sockets; this module only decides, from addresses, times
and counts handed in, so every rule is testable without a socket:

* `Pending` - the connections still handshaking, in two pools: *clients* (everything
  not yet known to be a peer) and *peers* (a connection that named a member node:
  the ``X-GarlicFarm-Node`` header a dialing node sends, a marker ConnectRequest). A
  pool that is full, or an address (or claimed node) over its share, makes room by
  evicting its **oldest** incomplete handshake (sshd's MaxStartups, without the coin
  toss): a slow or silent connection loses its place to a fresh one, and an honest
  client, which sends its request at once, is done long before it is the oldest.
  Clients can never take a peer's slot, nor peers a client's.
* deadlines: `handshake_timeout` while the client pool is under half full,
  `pressed_timeout` above (short deadlines under pressure).
* `Tarpit` - a failed login is answered after a delay that doubles with each failure
  of the same (address, user) and is forgotten after a quiet `tarpit_forget`. Only
  the *refusal* waits: the right password is answered at once, so an honest client
  sharing the attacker's address and user name is never slowed. The waiting costs a
  timer entry and a socket, no thread and no CPU; an attacker that waits for answers
  (every client library does) is slowed to one try per delay per connection.
* `Established` - open connections handed to the loop, clients and peers counted
  apart: clients beyond `max_connections` are refused, peers never are.
* `RefusalLog` - what to log: the first refusal per (address, reason) in a window at
  once, the rest as one summary line per window (never a line per refusal).
"""
from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from dataclasses import dataclass, field


class Pool(enum.Enum):
    CLIENTS = "clients"
    PEERS = "peers"


class Reason(enum.Enum):
    """Why a connection was refused: the metric's ``reason`` label."""
    AUTH = "auth"                       #: wrong credentials (digest), replayed nonce
    HANDSHAKE = "handshake"             #: a malformed or wrong handshake request
    TLS = "tls"                         #: TLS required or failed
    WIRE = "wire"                       #: bytes of a wire this node does not speak
    TIMEOUT = "timeout"                 #: no complete handshake before the deadline
    EVICTED = "evicted"                 #: a full pool made room for a newer connection
    MAX_CONNECTIONS = "max_connections"  #: established clients at max-connections
    CLOSED = "closed"                   #: the connection left mid-handshake


@dataclass(frozen=True)
class AdmissionLimits:
    max_connections: int = 1024         #: established client connections
    pending_clients: int = 256          #: client handshakes in progress, all addresses
    pending_per_address: int = 32       #: client handshakes in progress per address
    pending_per_peer: int = 4           #: handshakes in progress per claimed node id
    handshake_timeout: float = 5.0
    pressed_timeout: float = 1.0        #: the deadline once the client pool is half full
    tarpit_first: float = 0.1           #: the first failed login's delay (doubles)
    tarpit_max: float = 4.0
    tarpit_forget: float = 60.0         #: quiet seconds after which failures are forgotten
    tarpit_held: int = 512              #: refusals waiting at once (then sent early)
    tarpit_keys: int = 16384            #: (address, user) pairs remembered
    summary_interval: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "pending_clients", "pending_per_address",
                     "pending_per_peer", "tarpit_held", "tarpit_keys"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


@dataclass
class _Entry:
    pool: Pool
    group: object           #: the address (clients) or the claimed node id (peers)


class Pending:
    """Handshakes in progress, keyed by anything hashable (the gate's socket)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._entries: OrderedDict[object, _Entry] = OrderedDict()     # oldest first
        self._groups: dict[tuple[Pool, object], OrderedDict[object, None]] = {}
        self.count = {Pool.CLIENTS: 0, Pool.PEERS: 0}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def deadline(self, now: float) -> float:
        """The deadline of a handshake starting now (shorter under pressure)."""
        pressed = self.count[Pool.CLIENTS] * 2 >= self.limits.pending_clients
        return now + (self.limits.pressed_timeout if pressed else self.limits.handshake_timeout)

    def add(self, key: object, address: str) -> list[object]:
        """A new connection from `address`, in the client pool; the keys evicted to
        make room for it (oldest first)."""
        return self._place(key, Pool.CLIENTS, address)

    def claim_peer(self, key: object, node_id: int) -> list[object]:
        """The connection named member `node_id`: it moves to the peer pool; evicted
        keys as for `add`."""
        self.remove(key)
        return self._place(key, Pool.PEERS, node_id)

    def pool_of(self, key: object) -> Pool | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.pool

    def remove(self, key: object) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self.count[entry.pool] -= 1
        group_key = (entry.pool, entry.group)
        group = self._groups[group_key]
        del group[key]
        if not group:
            del self._groups[group_key]

    def _place(self, key: object, pool: Pool, group: object) -> list[object]:
        limits = self.limits
        share = limits.pending_per_address if pool is Pool.CLIENTS else limits.pending_per_peer
        evicted = []
        members = self._groups.get((pool, group))
        while members is not None and len(members) >= share:
            oldest = next(iter(members))
            self.remove(oldest)
            evicted.append(oldest)
            members = self._groups.get((pool, group))
        if pool is Pool.CLIENTS:
            while self.count[Pool.CLIENTS] >= limits.pending_clients:
                oldest = next(k for k, e in self._entries.items() if e.pool is Pool.CLIENTS)
                self.remove(oldest)
                evicted.append(oldest)
        self._entries[key] = _Entry(pool, group)
        self._groups.setdefault((pool, group), OrderedDict())[key] = None
        self.count[pool] += 1
        return evicted


@dataclass
class _Failures:
    count: int
    last: float


class Tarpit:
    """Delays for failed logins per (address, user); see the module docstring."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._failures: OrderedDict[tuple[str, str], _Failures] = OrderedDict()

    def failed(self, address: str, user: str, now: float) -> float:
        """Count a failed login; the seconds its refusal waits."""
        key = (address, user)
        record = self._failures.pop(key, None)
        if record is None or now - record.last >= self.limits.tarpit_forget:
            record = _Failures(0, now)
        record.count += 1
        record.last = now
        self._failures[key] = record            # most recent last
        while len(self._failures) > self.limits.tarpit_keys:
            self._failures.popitem(last=False)
        return min(self.limits.tarpit_max,
                   self.limits.tarpit_first * 2 ** min(record.count - 1, 30))


class Established:
    """Connections handed to the loop: counted by the gate, released by the loop
    (two threads: a lock)."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self.clients = 0
        self.peers = 0

    def open(self, peer: bool) -> bool:
        """Take a place; False when a client would pass max-connections."""
        with self._lock:
            if peer:
                self.peers += 1
                return True
            if self.clients >= self.max_connections:
                return False
            self.clients += 1
            return True

    def release(self, peer: bool) -> None:
        with self._lock:
            if peer:
                self.peers -= 1
            else:
                self.clients -= 1


@dataclass
class _Tally:
    count: int = 0
    first: float = 0.0
    noun: str = "connections"


@dataclass
class RefusalLog:
    """Rate-limited refusal lines: the first of each (address, reason) per window at
    once, the others summed into one line when the window ends. At most `keys` distinct
    (address, reason) pairs per window; the rest are summed as "other addresses"."""
    interval: float = 10.0
    keys: int = 256
    _tallies: dict[tuple[str, str], _Tally] = field(default_factory=dict)
    _window_end: float | None = None

    def refused(self, address: str, port: int, reason: str, now: float,
                noun: str = "connections") -> str | None:
        """Note a refusal; a line to log now, or None (it will be in a summary)."""
        if self._window_end is None:
            self._window_end = now + self.interval
        key = (address, reason)
        tally = self._tallies.get(key)
        if tally is None:
            if len(self._tallies) >= self.keys:
                key = ("other addresses", "various reasons")
                tally = self._tallies.setdefault(key, _Tally(0, now, noun))
                tally.count += 1
                return None
            self._tallies[key] = _Tally(0, now, noun)
            return f"refused connection from {address}:{port}: {reason}"
        tally.count += 1
        return None

    def due(self, now: float) -> list[str]:
        """The summary lines of a window that has ended (empty before)."""
        if self._window_end is None or now < self._window_end:
            return []
        lines = [f"refused {tally.count:,} more {tally.noun} from {address} in "
                 f"{now - tally.first:.0f} s: {reason}"
                 for (address, reason), tally in self._tallies.items() if tally.count]
        self._tallies.clear()
        self._window_end = None
        return lines

    @property
    def next_due(self) -> float | None:
        return self._window_end
