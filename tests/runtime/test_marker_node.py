"""The marker wire at a real node, against a hand-driven peer speaking TaskFlux's packets:
ConnectRequest checks, a second connection replacing the first, and corrupt packets
retransmitted and delivered intact in both directions."""
from __future__ import annotations

import socket

import pytest

from consensus.torture import LocalCluster
from consensus.wire import marker as mk
from consensus.wire.envelope import encode_journal
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)


class Peer:
    """One marker connection, blocking, with a decoder."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.decoder = mk.MarkerDecoder()
        self.events: list = []

    @classmethod
    def dial(cls, endpoint: str) -> "Peer":
        host, port = endpoint.split(":")
        return cls(socket.create_connection((host, int(port)), timeout=10))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self):
        while not self.events:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.events += self.decoder.feed(data)
        return self.events.pop(0)

    def close(self) -> None:
        self.sock.close()


def flip(packet: bytes, at: int) -> bytes:
    return packet[:at] + bytes([packet[at] ^ 0x10]) + packet[at + 1:]


@pytest.fixture
def lonely():
    """Node 1 of a two-voter marker farm whose node 2 is gone: we play node 2."""
    with LocalCluster(2, wire="marker", status_interval=5.0) as farm:
        farm.kill(2)
        yield farm


def test_connect_requests_are_checked_and_replaced(lonely):
    endpoint = lonely.endpoint_of(1)
    for bad in (1, 99):                         # its own id; an id not in the cluster
        peer = Peer.dial(endpoint)
        peer.send(mk.encode(mk.ConnectRequest(bad)))
        assert peer.next() == mk.ConnectResponse(False)
        assert peer.next() is None              # and the node closes
        peer.close()
    negative = Peer.dial(endpoint)              # an id out of range does not even decode
    negative.send(b"\x43\xff\xff\xff\xff" + bytes(4))
    assert negative.next() is None
    first = Peer.dial(endpoint)
    first.send(mk.encode(mk.ConnectRequest(2)))
    assert first.next() == mk.ConnectResponse(True)
    second = Peer.dial(endpoint)
    second.send(mk.encode(mk.ConnectRequest(2)))
    assert second.next() == mk.ConnectResponse(True)
    assert first.next() is None                 # replaced by the second connection
    log = lambda: open(lonely.log_path(1), "rb").read()  # noqa: E731
    wait_until(lambda: b"it claims our own id 1" in log(), 5)
    wait_until(lambda: b"node 99 is not in the cluster" in log(), 5)
    first.close()
    second.close()


def test_a_corrupt_request_is_asked_for_again_and_applied_intact(lonely):
    peer = Peer.dial(lonely.endpoint_of(1))
    peer.send(mk.encode(mk.ConnectRequest(2)))
    assert peer.next() == mk.ConnectResponse(True)
    data = encode_journal([b"delivered intact"], b"request-1")
    append = mk.encode(mk.AppendEntriesRequest(-1, 50, 1, -1, 2, (mk.LogEntry(50, data),)))
    peer.send(flip(append, len(append) - 20))       # a flipped byte inside the entry
    assert peer.next() == mk.RetransmitRequest()
    peer.send(append)
    assert peer.next() == mk.AppendEntriesResponsePacket(success=True, term=50)
    commit = mk.encode(mk.AppendEntriesRequest(0, 50, 50, 0, 2, ()))
    peer.send(commit)                               # leaderCommit = Lsn 0 = index 1
    assert peer.next() == mk.AppendEntriesResponsePacket(success=True, term=50)
    with lonely.client(endpoints=lonely.endpoint_of(1)) as client:
        record = wait_until(lambda: _read(client, lonely), 10)
    assert record.records == [b"delivered intact"] and record.term == 50
    peer.send(mk.encode(mk.RetransmitRequest()))   # TaskFlux asks for the last answer
    assert peer.next() == mk.AppendEntriesResponsePacket(success=True, term=50)
    peer.close()


def _read(client, farm):
    try:
        return client.read_entries(1, 2, endpoint=farm.endpoint_of(1))[0]
    except Exception:
        return None


def test_the_node_sends_again_what_arrived_corrupt():
    listener = socket.create_server(("127.0.0.1", 0))
    fake = f"127.0.0.1:{listener.getsockname()[1]}"
    route = lambda source, target, endpoint: fake if target == 2 else endpoint  # noqa: E731
    try:
        with LocalCluster(2, wire="marker", status_interval=5.0, peer_address=route) as farm:
            farm.kill(2)
            listener.settimeout(20)
            sock, _ = listener.accept()
            peer = Peer(sock)
            assert peer.next() == mk.ConnectRequest(1)
            peer.send(mk.encode(mk.ConnectResponse(True)))
            vote = peer.next()
            assert isinstance(vote, mk.RequestVoteRequest) and vote.candidate_id == 1
            peer.send(mk.encode(mk.RetransmitRequest()))        # "your V arrived corrupt"
            assert peer.next() == vote                             # sent again, intact
            answer = mk.encode(mk.RequestVoteResponsePacket(current_term=vote.candidate_term,
                                                            vote_granted=True))
            peer.send(flip(answer, 3))                             # our answer corrupt
            assert peer.next() == vote                             # the node asks again
            peer.send(answer)
            append = peer.next()                                   # leader now: its no-op
            assert isinstance(append, mk.AppendEntriesRequest) and append.leader_id == 1
            assert append.entries[0].data == b""
            peer.close()
    finally:
        listener.close()
