"""Starting a replicated server from another one's state, when the farm's log no longer
reaches back to what the new server needs (the farm compacts its log below snapshots).

A replicated server's state is its `ReplicatedMap.dump()`: the map, the dedup memory and
the log index it reflects; with it, the log after that index is enough. It travels on
the snapshot socket, in frames CHP already has, to servers of the same map only:

* request: ICANHAZ with the subtree empty and the third frame ``checkpoint=?`` and
  ``map=<identity>`` (garlicfarm's extension frame, see `resume`);
* answer: KVSYNCs whose key is empty (no real entry has one) and whose bodies are the
  dump, 1 MiB each, in order; then KTHXBAI with ``map=<identity>`` and
  ``checkpoint=<log index>``. A server of another map answers with an ordinary snapshot
  (no ``checkpoint``), which the asker refuses.

`reply` and `assemble` are pure; `fetch` is the asker's blocking I/O.
"""
from __future__ import annotations

import logging
from typing import Sequence

import zmq

from consensus.wire.errors import ProtocolError

from . import resume
from .address import ServerAddress
from .proto import (DEFAULT_LIMITS, Channel, Icanhaz, Kthxbai, Kvsync, ChpLimits, decode,
                    encode, format_properties, parse_properties)
from .zmqio import recv_frames, send_frames

log = logging.getLogger("garlicfarm.chp.bootstrap")

CHECKPOINT = b"checkpoint"
CHUNK = 1 << 20


def request(identity: bytes) -> Icanhaz:
    return Icanhaz(b"", properties=format_properties([(CHECKPOINT, b"?"),
                                                      (resume.MAP, identity)]))


def wanted(msg: Icanhaz) -> bytes | None:
    """The map identity an ICANHAZ asks the checkpoint of, or None (an ordinary one)."""
    if not msg.properties or CHECKPOINT + b"=" not in msg.properties:
        return None
    return resume.identity_of(msg.properties)


def reply(dump: bytes, index: int, sequence: int, identity: bytes) -> list[Kvsync | Kthxbai]:
    chunks = [Kvsync(b"", n, b"", b"", dump[at:at + CHUNK])
              for n, at in enumerate(range(0, len(dump), CHUNK))]
    properties = format_properties([(resume.MAP, identity), (CHECKPOINT, b"%d" % index)])
    return [*chunks, Kthxbai(sequence, b"", properties, b"")]


def assemble(messages: Sequence[Kvsync | Kthxbai], identity: bytes) -> tuple[int, bytes] | None:
    """(log index, dump) from a whole answer, or None when it is not a checkpoint of map
    `identity` (another map's server, or a standalone one, answered)."""
    if not messages or not isinstance(messages[-1], Kthxbai):
        return None
    found = dict(parse_properties(messages[-1].properties)) if messages[-1].properties else {}
    index = found.get(CHECKPOINT, b"")
    if found.get(resume.MAP) != identity or not index.isdigit():
        return None
    chunks = messages[:-1]
    if any(m.key or m.sequence != n for n, m in enumerate(chunks)):
        return None
    return int(index), b"".join(m.body for m in chunks)


def fetch(context: zmq.Context, peers: Sequence[ServerAddress], identity: bytes, *,
          timeout: float = 5.0, limits: ChpLimits = DEFAULT_LIMITS) -> tuple[int, bytes] | None:
    """Ask each peer in turn for its checkpoint; the first whole one, or None. A peer
    that sends nothing for `timeout` seconds is given up."""
    for peer in peers:
        sock = context.socket(zmq.DEALER)
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, limits.max_frame_bytes)
        try:
            sock.connect(peer.snapshot)
            send_frames(sock, encode(request(identity)))
            messages: list = []
            while not messages or not isinstance(messages[-1], Kthxbai):
                if not sock.poll(timeout * 1000):
                    raise TimeoutError(f"silent for {timeout}s")
                messages.append(decode(recv_frames(sock), Channel.SNAPSHOT_REPLY, limits))
            found = assemble(messages, identity)
            if found is not None:
                return found
            log.warning("chp bootstrap: %s is not a replicated server of %s",
                        peer, identity.decode(errors="replace"))
        except (TimeoutError, ProtocolError, zmq.ZMQError) as exc:
            log.warning("chp bootstrap: no checkpoint from %s: %s", peer, exc)
        finally:
            sock.close(0)
    return None


__all__ = ["CHECKPOINT", "assemble", "fetch", "reply", "request", "wanted"]
