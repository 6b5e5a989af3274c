"""The reader process's main (`python -m consensus.runtime.page_builder FD NICE`,
started by reader_process.py): builds read_entries and read_journal answer frames, one
job at a time, from the records the node pinned, with the node's verdicts mirrored
(verdict_feed.py). It ends at the end of its channel (the node closed it or died)."""
from __future__ import annotations

import array
import logging
import os
import socket
import sys

import msgpack

from consensus.common.errors import FarmError
from consensus.raft.entry import limit_size
from consensus.runtime.disk_storage import decode_record
from consensus.runtime.log_pages import entries_page, journal_page
from consensus.runtime.reader_process import HEAD, MAX_PIECES
from consensus.runtime.verdict_feed import VerdictMirror
from consensus.runtime.service import error_frame, reply_frame
from consensus.storage.segment import PinnedRecords

log = logging.getLogger("garlicfarm.reads")

#: the largest job body (a full capture of verdicts is a few MiB)
MAX_JOB = 256 << 20


def build(job: dict, fds: list[int], mirror: VerdictMirror) -> bytes:
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
            value = journal_page(read_applied, verdicts, start, stop, max_bytes)
        else:
            value = entries_page(read_applied, verdicts, start, stop, max_bytes,
                                 job["payloads"])
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


def serve(sock: socket.socket) -> None:
    """Jobs until the node closes the channel."""
    mirror = VerdictMirror()
    while True:
        head, fds, _, _ = socket.recv_fds(sock, HEAD.size, MAX_PIECES)
        if not head:
            return
        rest = _exactly(sock, HEAD.size - len(head)) if len(head) < HEAD.size else b""
        body = None if rest is None else _exactly(sock, min(HEAD.unpack(head + rest)[0],
                                                            MAX_JOB))
        if body is None:
            for fd in fds:
                os.close(fd)
            return
        frame = build(msgpack.unpackb(body, raw=False, strict_map_key=False), fds, mirror)
        sock.sendall(HEAD.pack(len(frame)))
        sock.sendall(frame)


def main(argv: list[str]) -> int:
    fd, nice = int(argv[0]), int(argv[1])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s reader process of pid "
                               f"{os.getppid()}: %(message)s")
    os.nice(nice)
    with socket.socket(fileno=fd) as sock:
        try:
            serve(sock)
        except (ConnectionError, BrokenPipeError):
            pass                            # the node went away: nothing to answer
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
