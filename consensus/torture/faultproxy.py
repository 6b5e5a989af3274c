"""A fault-injecting TCP proxy for the links between farm nodes, so that partitions in the
torture test are real: node A reaches node B only through the proxy of link (A, B), and
the proxy can drop what flows on it (both ways or one way), delay it, or cut it.

Semantics, chosen to look like a real network to the nodes:
- **drop** discards the bytes of a blocked direction (as a firewall's DROP would). A
  connection that lost bytes can never carry a valid stream again, so it is marked
  *tainted* and reset when its link heals: to the nodes that is a connection that broke
  during the partition. A connection accepted while its forward direction is blocked is
  never connected to the target (the SYN did not get through) and is reset at heal too.
- **delay** holds every chunk for the given time, in order, in both directions, with a
  bounded queue (the sender feels back-pressure instead of the proxy growing).
- **cut** resets every open connection of a link at once (SO_LINGER 0: the peers see
  ECONNRESET, not a clean close).
- A target that refuses the connection (a killed node) makes the proxy reset the
  accepted connection: the connecting node sees the same failure as without a proxy.

One `FaultProxy` serves any number of links from one asyncio loop on one thread; `close`
releases every socket and task and joins the thread, so a test that creates and closes
proxies leaks nothing. `ProxyNetwork` builds the full mesh of links for a set of nodes and
speaks in nodes and groups (partition, one-way drop, isolate, heal) rather than links.

Control methods are synchronous and thread-safe: when `block` returns, the fault is in
force for every byte the proxy has not yet forwarded. Call them from any thread except
the proxy's own.
"""
from __future__ import annotations

import asyncio
import enum
import itertools
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Any, Coroutine, Hashable, Iterable, Mapping, TypeVar

from consensus.net.security import split_endpoint

T = TypeVar("T")

_CHUNK = 64 * 1024          # bytes read per chunk
_QUEUED_CHUNKS = 64         # per direction of a connection before reading pauses
_LINGER_RESET = struct.pack("ii", 1, 0)   # SO_LINGER on, 0 s: close sends RST


class Direction(enum.Enum):
    """FORWARD: from the side that connected (the link's source node) to the target;
    BACKWARD: the target's bytes back to it."""

    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True, slots=True)
class LinkFaults:
    """What a link does to the bytes that cross it."""

    drop_forward: bool = False
    drop_backward: bool = False
    delay: float = 0.0            #: seconds added to every chunk, both directions

    def drops(self, direction: Direction) -> bool:
        return self.drop_forward if direction is Direction.FORWARD else self.drop_backward

    @property
    def healthy(self) -> bool:
        return self == LinkFaults()


@dataclass(slots=True)
class LinkStats:
    """Counters of one link since it was added."""

    accepted: int = 0             #: connections accepted
    refused: int = 0              #: ... whose target refused them
    open: int = 0                 #: connections open now
    reset: int = 0                #: connections the proxy reset (cut, heal of a taint)
    forwarded: dict[Direction, int] = field(default_factory=lambda: dict.fromkeys(Direction, 0))
    dropped: dict[Direction, int] = field(default_factory=lambda: dict.fromkeys(Direction, 0))


class FaultProxyError(RuntimeError):
    """A link that does not exist, or a proxy that is closed."""


class _Connection:
    """One accepted connection and, once made, its connection to the target."""

    def __init__(self, link: "_Link", writer: asyncio.StreamWriter) -> None:
        self.link = link
        self.downstream = writer               # towards the node that connected
        self.upstream: asyncio.StreamWriter | None = None
        self.tainted = False                   # lost bytes to a drop: reset at heal
        self.handler: asyncio.Task | None = None   # the accept callback's task
        self.tasks: set[asyncio.Task] = set()      # the pumps and senders

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.downstream, self.upstream) if w is not None]

    def reset(self) -> None:
        """Close both sides with RST and stop the pumps (the handler then ends on its
        own: cancelling it would make asyncio log the cancellation as an error)."""
        for writer in self.writers():
            sock = writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                except OSError:
                    pass
            writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class _Link:
    def __init__(self, name: Hashable, target: tuple[str, int]) -> None:
        self.name = name
        self.target = target
        self.faults = LinkFaults()
        self.stats = LinkStats()
        self.server: asyncio.AbstractServer | None = None
        self.connections: set[_Connection] = set()


def parse_endpoint(endpoint: "str | tuple[str, int]") -> tuple[str, int]:
    """("127.0.0.1", 9001) from "127.0.0.1:9001" or the tuple itself; a bad endpoint
    raises `ConfigError` (a ValueError)."""
    if isinstance(endpoint, tuple):
        return endpoint
    return split_endpoint(endpoint, "endpoint")


class FaultProxy:
    """Any number of proxied links, each listening on its own ephemeral port of `host`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._links: dict[Hashable, _Link] = {}
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="faultproxy", daemon=True)
        self._thread.start()

    # --- control (any thread but the proxy's) ---------------------------------------------

    def add_link(self, name: Hashable, target: "str | tuple[str, int]") -> str:
        """Start proxying to `target`; return the proxy's "host:port" to connect to."""
        return self._call(self._add_link(name, parse_endpoint(target)))

    def remove_link(self, name: Hashable) -> None:
        """Stop listening for `name` and reset its connections."""
        self._call(self._remove_link(name))

    def links(self) -> list[Hashable]:
        return list(self._links)

    def faults(self, name: Hashable) -> LinkFaults:
        return self._link(name).faults

    def set_faults(self, name: Hashable, faults: LinkFaults) -> None:
        """Put `faults` in force on link `name`. Lifting a drop resets the connections
        that lost bytes to it."""
        self._call(self._set_faults(name, faults))

    def block(self, name: Hashable, *, forward: bool = True, backward: bool = True) -> None:
        """Drop the given directions of link `name` (adds to what is dropped already)."""
        old = self.faults(name)
        self.set_faults(name, LinkFaults(old.drop_forward or forward,
                                         old.drop_backward or backward, old.delay))

    def delay(self, name: Hashable, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {seconds}")
        old = self.faults(name)
        self.set_faults(name, LinkFaults(old.drop_forward, old.drop_backward, seconds))

    def heal(self, name: Hashable | None = None) -> None:
        """Clear every fault of link `name`, or of all links."""
        for link in [name] if name is not None else self.links():
            self.set_faults(link, LinkFaults())

    def cut(self, name: Hashable) -> int:
        """Reset every open connection of link `name`; return how many."""
        return self._call(self._cut(name))

    def stats(self, name: Hashable) -> LinkStats:
        return self._call(self._stats(name))

    def close(self) -> None:
        """Reset every connection, close every listener, stop and join the thread."""
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- inside the loop -------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise FaultProxyError("the fault proxy is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _link(self, name: Hashable) -> _Link:
        try:
            return self._links[name]
        except KeyError:
            raise FaultProxyError(f"no link named {name!r}; links: {list(self._links)}") from None

    async def _add_link(self, name: Hashable, target: tuple[str, int]) -> str:
        if name in self._links:
            raise FaultProxyError(f"link {name!r} exists already")
        link = _Link(name, target)
        link.server = await asyncio.start_server(
            lambda r, w: self._accept(link, r, w), self.host, 0)
        self._links[name] = link
        port = link.server.sockets[0].getsockname()[1]
        return f"{self.host}:{port}"

    async def _remove_link(self, name: Hashable) -> None:
        link = self._link(name)
        del self._links[name]
        await self._close_link(link)

    async def _close_link(self, link: _Link) -> None:
        assert link.server is not None
        link.server.close()
        for conn in list(link.connections):
            conn.reset()
        tasks = [t for conn in link.connections for t in (conn.handler, *conn.tasks) if t]
        await asyncio.gather(*tasks, return_exceptions=True)
        await link.server.wait_closed()

    async def _set_faults(self, name: Hashable, faults: LinkFaults) -> None:
        link = self._link(name)
        old, link.faults = link.faults, faults
        lifted = ((old.drop_forward and not faults.drop_forward)
                  or (old.drop_backward and not faults.drop_backward))
        if lifted:
            for conn in [c for c in link.connections if c.tainted]:
                self._reset(conn)

    async def _cut(self, name: Hashable) -> int:
        link = self._link(name)
        conns = list(link.connections)
        for conn in conns:
            self._reset(conn)
        return len(conns)

    async def _stats(self, name: Hashable) -> LinkStats:
        s = self._link(name).stats
        return LinkStats(s.accepted, s.refused, s.open, s.reset, dict(s.forwarded),
                         dict(s.dropped))

    async def _shutdown(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await self._close_link(link)

    def _reset(self, conn: _Connection) -> None:
        conn.link.stats.reset += 1
        conn.reset()

    async def _accept(self, link: _Link, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        conn = _Connection(link, writer)
        link.connections.add(conn)
        link.stats.accepted += 1
        link.stats.open += 1
        conn.handler = asyncio.current_task()
        try:
            await self._serve(conn, reader)
        except (asyncio.CancelledError, ConnectionError, OSError):
            pass
        finally:
            link.connections.discard(conn)
            link.stats.open -= 1
            for w in conn.writers():
                w.transport.abort()

    async def _serve(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        link = conn.link
        if link.faults.drop_forward:
            # The SYN is lost: no connection to the target; what comes is dropped, and the
            # connection is reset when the link heals.
            conn.tainted = True
            while data := await reader.read(_CHUNK):
                link.stats.dropped[Direction.FORWARD] += len(data)
            return
        try:
            up_reader, conn.upstream = await asyncio.open_connection(*link.target)
        except OSError:
            link.stats.refused += 1
            self._reset(conn)
            return
        pumps = [asyncio.create_task(self._pump(conn, Direction.FORWARD, reader, conn.upstream)),
                 asyncio.create_task(self._pump(conn, Direction.BACKWARD, up_reader,
                                                conn.downstream))]
        conn.tasks.update(pumps)
        try:
            await asyncio.gather(*pumps)
        finally:
            for task in pumps:
                task.cancel()

    async def _pump(self, conn: _Connection, direction: Direction,
                    reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read chunks into a bounded queue with their due times; a writer task sends
        them in order when due. EOF is passed on as a half-close."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUED_CHUNKS)
        sender = asyncio.create_task(self._send(queue, writer))
        conn.tasks.add(sender)
        stats = conn.link.stats
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(_CHUNK):
                faults = conn.link.faults
                if faults.drops(direction):
                    conn.tainted = True
                    stats.dropped[direction] += len(data)
                    continue
                await queue.put((loop.time() + faults.delay, data))
                stats.forwarded[direction] += len(data)
            await queue.put((0.0, b""))          # EOF marker
            await sender
        finally:
            sender.cancel()

    @staticmethod
    async def _send(queue: "asyncio.Queue[tuple[float, bytes]]",
                    writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()


class ProxyNetwork:
    """The full mesh of proxied links between nodes: link (a, b) carries every connection
    node `a` opens to node `b`. A message from a to b travels either forward on (a, b) or
    backward on (b, a) (an answer on b's connection), so a one-way fault drops both.

    Links are made by `link(a, b, endpoint_of_b)` (idempotent: a cluster that restarts a
    node asks again), or all at once by `ProxyNetwork.full(targets)`. Give node `a` the
    addresses `peer_addresses(a)` instead of the real ones.
    """

    def __init__(self, nodes: Iterable[int], proxy: FaultProxy | None = None) -> None:
        self._own = proxy is None
        self.proxy = proxy or FaultProxy()
        self.nodes = sorted(nodes)
        self._addresses: dict[tuple[int, int], str] = {}
        self._targets: dict[tuple[int, int], tuple[str, int]] = {}
        self._lock = threading.Lock()

    @classmethod
    def full(cls, targets: Mapping[int, str], proxy: FaultProxy | None = None) -> "ProxyNetwork":
        """Every link between the nodes of `targets` (node id -> its peer endpoint)."""
        net = cls(targets, proxy)
        try:
            for a, b in itertools.permutations(net.nodes, 2):
                net.link(a, b, targets[b])
        except BaseException:
            net.close()
            raise
        return net

    def link(self, source: int, target: int, endpoint: str) -> str:
        """The proxy address `source` must use to reach `target` at `endpoint`."""
        if source not in self.nodes or target not in self.nodes or source == target:
            raise ValueError(f"no link ({source}, {target}) between the nodes {self.nodes}")
        with self._lock:
            where = parse_endpoint(endpoint)
            known = self._targets.get((source, target))
            if known is not None and known != where:
                raise FaultProxyError(f"link ({source}, {target}) already leads to "
                                      f"{known[0]}:{known[1]}, not {endpoint}")
            if known is None:
                self._addresses[source, target] = self.proxy.add_link((source, target), where)
                self._targets[source, target] = where
            return self._addresses[source, target]

    def address(self, source: int, target: int) -> str:
        """Where `source` must connect to reach `target`."""
        return self._addresses[source, target]

    def peer_addresses(self, source: int) -> dict[int, str]:
        return {b: addr for (a, b), addr in self._addresses.items() if a == source}

    def drop(self, source: int, target: int) -> None:
        """From now on nothing `source` sends reaches `target` (the other way still works)."""
        self.proxy.block((source, target), forward=True, backward=False)
        self.proxy.block((target, source), forward=False, backward=True)

    def partition(self, *groups: Iterable[int]) -> None:
        """Nodes in different groups cannot exchange anything; a node named in no group
        is alone in its own."""
        side: dict[int, int] = {}
        for i, group in enumerate(groups):
            for node in group:
                if node not in self.nodes:
                    raise ValueError(f"node {node} is not in this network {self.nodes}")
                side[node] = i
        for a, b in itertools.permutations(self.nodes, 2):
            if side.get(a, -1 - a) != side.get(b, -1 - b):
                self.proxy.block((a, b))

    def isolate(self, node: int) -> None:
        """`node` can neither send nor receive."""
        self.partition([n for n in self.nodes if n != node])

    def delay(self, seconds: float, nodes: Iterable[int] | None = None) -> None:
        """Every link touching one of `nodes` (default: all) holds bytes `seconds` long."""
        chosen = set(self.nodes if nodes is None else nodes)
        for a, b in self._addresses:
            if a in chosen or b in chosen:
                self.proxy.delay((a, b), seconds)

    def cut(self, node: int | None = None) -> int:
        """Reset the open connections touching `node` (default: all); return how many."""
        return sum(self.proxy.cut(link) for link in self._addresses
                   if node is None or node in link)

    def heal(self) -> None:
        for link in list(self._addresses):
            self.proxy.heal(link)

    def faulty_links(self) -> dict[tuple[int, int], LinkFaults]:
        return {link: f for link in self._addresses
                if not (f := self.proxy.faults(link)).healthy}

    def close(self) -> None:
        if self._own:
            self.proxy.close()
        else:
            for link in list(self._addresses):
                self.proxy.remove_link(link)

    def __enter__(self) -> "ProxyNetwork":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
