"""Admission control at a real node's listener (the gate, consensus/runtime/gate.py):
hostile clients cost the Raft loop nothing, honest ones still get in, and every door
has a bound. Each flood is made certain first (the node's own refusal counters), and
each runs a few seconds (the issue's 30 s figures: benchmarks/hostile_clients.py)."""
from __future__ import annotations

import os
import threading
import time

import pytest

from consensus.common.errors import Unavailable
from consensus.net.dial import dial
from consensus.net.security import Security
from consensus.torture.flood import Flood, FloodShape
from consensus.torture.local import LocalCluster
from tests.hostile import HonestLogins, honest_login
from tests.operators import logged_url, scrape
from tests.support import wait_until

pytestmark = pytest.mark.timeout(120)
METRICS_LINE = r"metrics on (http://\S+)/metrics"
PASSWORD = "s3cret-pass"
REFUSED = 'garlicfarm_network_connections_refused_total{{reason="{}"}}'


@pytest.fixture(scope="module")
def farm():
    with LocalCluster(3, username="farm", password=PASSWORD, status_interval=5.0,
                      extra_args=["--metrics", "127.0.0.1:0"]) as cluster:
        leader = cluster.wait_for_leader(30)
        cluster.urls = {i: logged_url(cluster.log_path(i), METRICS_LINE) + "/metrics"
                        for i in cluster.node_ids}
        cluster.first_leader = leader
        yield cluster


def bad_logins(farm, endpoint: str, threads: int) -> Flood:
    """Threads logging in with a wrong password, each waiting for its refusal."""
    return Flood(endpoint, cluster=farm.cluster, username="farm", password=PASSWORD,
                 shape=FloodShape(bad_logins=threads, slowloris=0, readers=0))


def slowloris(farm, endpoint: str, count: int) -> Flood:
    """Connections trickling a handshake one byte a second, reopened when closed."""
    return Flood(endpoint, cluster=farm.cluster, username="farm", password=PASSWORD,
                 shape=FloodShape(bad_logins=0, slowloris=count, readers=0))


def terms(farm) -> dict[int, float]:
    return {i: scrape(url)["garlicfarm_server_term"] for i, url in farm.urls.items()}


def test_a_wrong_password_flood_neither_deposes_the_leader_nor_locks_out_honest_logins(farm):
    leader = farm.wait_for_leader(10)
    url, endpoint = farm.urls[leader], farm.endpoint_of(leader)
    before, log_before = terms(farm), os.path.getsize(farm.log_path(leader))
    refused_before = scrape(url).get(REFUSED.format("auth"), 0)
    with bad_logins(farm, endpoint, 50) as flood:
        wait_until(lambda: scrape(url).get(REFUSED.format("auth"), 0) - refused_before
                   >= 100, 10, 0.1, "the node refused 100 wrong passwords")
        with HonestLogins(endpoint, PASSWORD) as logins:
            time.sleep(4.0)
    honest = logins.results
    assert flood.counts.refused_logins >= 100 and not flood.counts.accepted_bad_logins
    assert not flood.counts.login_errors, flood.counts.error_samples[:3]
    refused = scrape(url).get(REFUSED.format("auth"), 0) - refused_before
    assert terms(farm) == before, f"an election during the flood ({refused:.0f} refusals)"
    assert farm.wait_for_leader(5) == leader
    assert len(honest) >= 20, f"only {len(honest)} honest logins were tried"
    assert sum(honest) >= 0.95 * len(honest), \
        f"{sum(honest)} of {len(honest)} honest logins got in ({refused:.0f} refused)"
    with open(farm.log_path(leader), "rb") as f:
        f.seek(log_before)
        grown = f.read()
    refusal_lines = grown.count(b"refused")
    assert len(grown) < 20_000 and refusal_lines <= 4, \
        f"{len(grown)} bytes, {refusal_lines} refusal lines for {refused:.0f} refusals"


def test_slowloris_holds_no_slot_an_honest_client_or_a_peer_needs(farm):
    leader = farm.wait_for_leader(10)
    url, endpoint = farm.urls[leader], farm.endpoint_of(leader)
    before = terms(farm)
    evicted_before = scrape(url).get(REFUSED.format("evicted"), 0)
    with slowloris(farm, endpoint, 200) as loris:
        wait_until(lambda: loris.counts.slow_opened >= 200, 10, 0.05, "200 slow connections")
        wait_until(lambda: scrape(url).get(REFUSED.format("evicted"), 0) - evicted_before
                   >= 100, 10, 0.1, "the node evicted slow handshakes (the pool was full)")
        with HonestLogins(endpoint, PASSWORD) as logins:
            time.sleep(4.0)
        honest = logins.results
        peer = next(i for i in farm.node_ids if i != leader)
        for _ in range(5):                          # a peer (re)dialing gets in at once
            started = time.monotonic()
            dial(endpoint, Security(username="farm", password=PASSWORD), node_id=peer,
                 timeout=2).sock.close()
            assert time.monotonic() - started < 1.0
        pending = scrape(url)['garlicfarm_network_pending_handshakes{pool="clients"}']
    assert pending >= 16, f"only {pending} slow handshakes pending: no pressure"
    assert terms(farm) == before, "an election during the slowloris"
    assert len(honest) >= 20 and sum(honest) >= 0.95 * len(honest), \
        f"{sum(honest)} of {len(honest)} honest logins got in"


def node_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def node_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS:"))


def test_max_connections_bounds_what_5000_attempts_hold():
    limit, attempts = 64, 5000
    with LocalCluster(2, username="farm", password=PASSWORD, status_interval=5.0,
                      extra_args=["--metrics", "127.0.0.1:0", "--max-connections",
                                  str(limit)]) as farm:
        leader = farm.wait_for_leader(30)
        url = logged_url(farm.log_path(leader), METRICS_LINE) + "/metrics"
        pid, endpoint = farm.pid(leader), farm.endpoint_of(leader)
        peer = next(i for i in farm.node_ids if i != leader)
        fds_before, rss_before = node_fds(pid), node_rss(pid)
        held, busy, peaks, lock = [], [0], [0, 0], threading.Lock()
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                peaks[0] = max(peaks[0], node_fds(pid))
                peaks[1] = max(peaks[1], scrape(url)['garlicfarm_network_connections'
                                                     '{kind="client"}'])
                done.wait(0.05)

        def attack(count: int) -> None:
            security = Security(username="farm", password=PASSWORD)   # cached challenge
            for _ in range(count):
                try:
                    dialed = dial(endpoint, security, timeout=10)
                except Unavailable:
                    with lock:
                        busy[0] += 1
                    continue
                with lock:
                    held.append(dialed.sock)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        workers = [threading.Thread(target=attack, args=(attempts // 8,)) for _ in range(8)]
        try:
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(60)
            samples = scrape(url)
            # full for clients, never for peers: a member's connection still gets in
            peers_before = samples['garlicfarm_network_connections{kind="peer"}']
            held.append(dial(endpoint, Security(username="farm", password=PASSWORD),
                             node_id=peer, timeout=5).sock)
            wait_until(lambda: scrape(url)['garlicfarm_network_connections{kind="peer"}']
                       == peers_before + 1, 5, 0.05, "the peer counted apart")
        finally:
            done.set()
            watcher.join(5)
            rss_after = node_rss(pid)
            for sock in held:
                sock.close()
        assert len(held) - 1 + busy[0] == attempts
        assert len(held) - 1 == limit, f"{len(held) - 1} clients let in, the limit is {limit}"
        assert samples[REFUSED.format("max_connections")] >= attempts - limit
        assert peaks[1] <= limit
        # fds: the connections held, plus at most the handshakes in progress (8 dialers)
        # and the peer
        assert peaks[0] - fds_before <= limit + 17, (peaks[0], fds_before)
        assert rss_after - rss_before < 100 << 20
        # closing them gives the places back
        wait_until(lambda: scrape(url)['garlicfarm_network_connections{kind="client"}']
                   == 0, 10, 0.05, "the closed connections released")
        assert honest_login(endpoint, PASSWORD)
