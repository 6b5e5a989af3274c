"""Elections of real node processes: the election storm of docs/runtime-requests.md R8.

Root cause (found and fixed in the transport): a node owes every paired JRaft request an
answer, in order, and answers with a refusal what the Raft core dropped. With group
commit the core's answer to a vote waits for the fsync of the vote on the sync thread,
turns later; the transport used to take "no answer by the end of this turn" for
"dropped" and refused the vote - at the voter's new term, so the candidate counted a
rejection in its own term and stepped down 5-10 ms after it started. Every election
failed that way while fsyncs were slower than a loop turn (always, on a loaded disk).
The transport now refuses only requests that a Ready handed out after them did not
answer (answers are claimed when their Ready is handed out).
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from datetime import datetime

import pytest

from consensus.net.dial import dial
from consensus.net.security import Security
from consensus.torture import LocalCluster
from consensus.wire.extensions import GARLICFARM_REGISTRY, ExtType
from consensus.wire.jraft import JRaftDecoder, MessageType, RaftRequest, RaftResponse, encode
from tests.support import wait_until

pytestmark = pytest.mark.timeout(240)


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def _answer(sock: socket.socket, decoder: JRaftDecoder, deadline: float) -> RaftResponse:
    """The next paired vote answer on a peer connection we dialed."""
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(65536)
        assert data, "the node closed the connection instead of answering the vote"
        for frame in decoder.feed(data):
            if frame.message_type == MessageType.REQUEST_VOTE_RESPONSE:
                return frame


@pytest.mark.timeout(60)
def test_a_vote_waiting_for_its_fsync_is_granted_not_refused(tmp_path):
    """A node (fsync=batch) grants a vote; the answer waits for the vote's fsync and
    must then be the grant, not a refusal sent meanwhile."""
    own, peer1, peer2 = _listener(), _listener(), _listener()   # peers never accept
    endpoint = "127.0.0.1:%d" % own.getsockname()[1]
    peers = ",".join(f"{i}=127.0.0.1:{s.getsockname()[1]}" for i, s in ((1, peer1), (2, peer2)))
    log = open(tmp_path / "node-3.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "consensus.cli", "node", "--id", "3", "--listen", endpoint,
         "--listen-fd", str(own.fileno()), "--peers", peers, "--data-dir",
         str(tmp_path / "node-3"), "--user", "farm", "--password", "pw", "--fsync", "batch"],
        pass_fds=(own.fileno(),), stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)
    try:
        security = Security(cluster="farm", username="farm", password="pw")
        dialed = dial(endpoint, security, wire="garlicfarm", timeout=30)
        sock, decoder = dialed.sock, JRaftDecoder(registry=GARLICFARM_REGISTRY)
        decoder.feed(dialed.initial)
        # node 2 asks for node 3's vote in term 1 after a leader transfer (so the
        # restarted node's boot lease does not refuse it): the vote must be persisted
        sock.sendall(encode(RaftRequest(ExtType.TRANSFER_VOTE_REQUEST, 2, 3, 1, 0, 0),
                            GARLICFARM_REGISTRY))
        answer = _answer(sock, decoder, time.monotonic() + 20)
        assert (answer.source, answer.destination, answer.term) == (3, 2, 1)
        assert answer.accepted, "the node refused a vote it granted (its answer waited " \
                                "for the fsync)"
        # and the same candidate asking again in the same term gets the same vote
        sock.sendall(encode(RaftRequest(MessageType.REQUEST_VOTE_REQUEST, 2, 3, 1, 0, 0),
                            GARLICFARM_REGISTRY))
        assert _answer(sock, decoder, time.monotonic() + 20).accepted
        sock.close()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        for s in (own, peer1, peer2):
            s.close()


_STAMP = re.compile(r"^(\S+ \S+) ")


def _when(line: str) -> float:
    return datetime.strptime(_STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _election_delay(farm: LocalCluster) -> tuple[float, int]:
    """Seconds from the moment the last node listened to the first leader, and the
    leader's term (from the node logs). Two nodes elect without the third, which may
    still be starting: its log is waited for."""
    def read() -> tuple[list, list] | None:
        started, elected = [], []
        for node_id in farm.node_ids:
            with open(farm.log_path(node_id), encoding="utf-8") as f:
                for line in f:
                    if " listening on " in line:
                        started.append(_when(line))
                    match = re.search(r"-> leader \(term (\d+)", line)
                    if match:
                        elected.append((_when(line), int(match.group(1))))
        return (started, elected) if len(started) == len(farm.node_ids) else None

    started, elected = wait_until(read, timeout=60, interval=0.1,
                                  message="every node to log that it listens")
    assert elected
    when, term = min(elected)
    return when - max(started), term


@pytest.mark.slow
def test_fresh_farms_elect_a_leader_under_cpu_load(tmp_path):
    """Fresh farms with group commit, every core busy with a spinning process: each
    elects a leader soon after its last node is up (the storm elected none in 30 s)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 2)]
    delays = []
    try:
        for attempt in range(2):
            data_dir = str(tmp_path / f"farm-{attempt}")      # pytest keeps the logs
            with LocalCluster(3, data_dir=data_dir, fsync="batch") as farm:
                farm.wait_for_leader(timeout=60)    # includes starting Python thrice
                delay, term = _election_delay(farm)
                delays.append((round(delay, 2), term))
                # The storm showed as elections without end (terms climbing, no leader
                # for 30 s); count elections, not seconds: the lowest voter campaigns in
                # term 1 as it starts, and pre-votes keep a node that finds no majority
                # from raising the term.
                assert term <= 3, f"a leader only in term {term} ({delay:.1f}s after " \
                                  f"the last node started); logs in {data_dir}"
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print("election delays (s, term):", delays)
