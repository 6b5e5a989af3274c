"""The reader process's main (`python -m consensus.runtime.page_builder FD NICE`,
started by reader_process.py): builds read_entries and read_journal answer frames, one
job at a time, from the records the node pinned, with the node's verdicts mirrored
(verdict_feed.py). It ends at the end of its channel (the node closed it or died)."""
from __future__ import annotations

import array
import logging
import mmap
import os
import signal
import socket
import sys
import time
from typing import Callable

import msgpack

from consensus.common.errors import FarmError
from consensus.raft.entry import limit_size
from consensus.runtime.disk_storage import decode_record
from consensus.runtime.log_pages import entries_page, journal_page
from consensus.runtime.reader_process import HEAD, MAX_PIECES, TURN, TURN_WAIT
from consensus.runtime.verdict_feed import VerdictMirror
from consensus.runtime.service import error_frame, reply_frame
from consensus.storage.segment import PinnedRecords

log = logging.getLogger("garlicfarm.reads")

#: the largest job body (a full capture of verdicts is a few MiB)
MAX_JOB = 256 << 20


class LoopTurns:
    """The node loop's turns (reader_process.TURN, shared memory): `pause()` waits for
    the turn that runs, if one does, to end (the loop goes first, as with reader
    threads), for TURN_WAIT at most."""

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, TURN.size, access=mmap.ACCESS_READ)

    def pause(self) -> None:
        turns, running = TURN.unpack_from(self._map)
        if not running:
            return
        deadline = time.monotonic() + TURN_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.0002)
            now, running = TURN.unpack_from(self._map)
            if not running or now != turns:
                return


def _no_turns() -> None:
    return None


def build(job: dict, fds: list[int], mirror: VerdictMirror,
          pause: Callable[[], None] = _no_turns) -> bytes:
    """The answer frame of `job` (the error frame when the records cannot be read)."""
    head, call = job["head"], job["call"]
    pieces = [PinnedRecords(path, fd, array.array("Q", starts), array.array("Q", ends), True)
              for (path, starts, ends), fd in zip(job["pieces"], fds)]
    try:
        for delta in job["deltas"]:
            mirror.apply(delta)
        if len(fds) != len(job["pieces"]):
            raise ValueError(f"{len(fds)} descriptors came with {len(job['pieces'])} "
                             f"pieces of segments")
        start, stop, max_bytes = job["start"], job["stop"], job["max_bytes"]
        payloads: list[bytes] = []
        for piece in pieces:
            payloads += piece.read()
        entries = [decode_record(start + i, p) for i, p in enumerate(payloads)]

        def read_applied(lo: int, hi: int, limit: int | None) -> list:
            return limit_size(entries[lo - start:hi - start], limit)

        def verdicts():
            return mirror.verdicts(job["g"])
        if job["kind"] == "journal":
            value = journal_page(read_applied, verdicts, start, stop, max_bytes, pause)
        else:
            value = entries_page(read_applied, verdicts, start, stop, max_bytes,
                                 job["payloads"], pause)
        return reply_frame(head, call, value)
    except Exception as exc:    # noqa: BLE001 - answered, logged: the process goes on
        log.exception("a log read failed in the reader process")
        error = FarmError(f"the member failed to read the log ({type(exc).__name__}: "
                          f"{exc}); its log says more")
        return error_frame(head, call, error)
    finally:
        for piece in pieces:
            piece.close()
        for fd in fds[len(pieces):]:
            os.close(fd)


def _exactly(sock: socket.socket, size: int) -> bytes | None:
    parts, got = [], 0
    while got < size:
        part = sock.recv(min(size - got, 4 << 20))
        if not part:
            return None
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def serve(sock: socket.socket, turns: LoopTurns) -> None:
    """Jobs until the node closes the channel."""
    mirror = VerdictMirror()
    while True:
        head, fds, _, _ = socket.recv_fds(sock, HEAD.size, MAX_PIECES)
        if not head:
            return
        rest = _exactly(sock, HEAD.size - len(head)) if len(head) < HEAD.size else b""
        size = None if rest is None else HEAD.unpack(head + rest)[0]
        if size is not None and size > MAX_JOB:
            log.error("a job of %d bytes announced (at most %d): ending", size, MAX_JOB)
            size = None                     # the node restarts the process
        body = None if size is None else _exactly(sock, size)
        if body is None:
            for fd in fds:
                os.close(fd)
            return
        frame = build(msgpack.unpackb(body, raw=False, strict_map_key=False), fds, mirror,
                      turns.pause)
        sock.sendall(HEAD.pack(len(frame)))
        sock.sendall(frame)


def main(argv: list[str]) -> int:
    fd, nice, turns = int(argv[0]), int(argv[1]), LoopTurns(int(argv[2]))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s reader process of pid "
                               f"{os.getppid()}: %(message)s")
    os.nice(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # a terminal's ^C is for the node: it
                                                    # stops, and this ends with its channel
    with socket.socket(fileno=fd) as sock:
        try:
            serve(sock, turns)
        except (ConnectionError, BrokenPipeError):
            pass                            # the node went away: nothing to answer
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
