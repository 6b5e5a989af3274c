"""Aborts relayed to partition 0's leader by a node that does not lead it.

With `--replicas`, partition 0's leader may not host partition q, so it never sees q's
prepared commits age (prepared_aborts.py). The leader of q then proposes the abort in
partition 0 as a client of its own farm, as Kafka brokers forward requests to the
controller (KIP-590): the command is the same one the leader of 0 would propose, taken
by partition 0's state machine only while the batch is undecided, so a relayed abort,
a local one and the driver's decision race safely. One thread, one client; the
PreparedAborts backoff (1 s doubling to 60 s) paces the retries, and an abort that finds
the queue full is dropped until then.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from consensus.client import FarmClient
from consensus.common.errors import ConfigError, FarmError
from consensus.net.security import Security
from consensus.runtime.prepared_aborts import AbortOrder

log = logging.getLogger("garlicfarm.node")
QUEUED = 64         #: aborts waiting to be relayed; more wait for their next retry


class AbortRelay:
    """Relays partition 0's aborts to its members at `endpoints()`, as the node dials
    its peers (`security`: the cluster, the node's credentials, its TLS settings)."""

    def __init__(self, security: Security, endpoints: Callable[[], list[str]],
                 timeout: float) -> None:
        self._security, self._endpoints = security, endpoints
        self._timeout = timeout
        self._orders: queue.Queue[AbortOrder | None] = queue.Queue(QUEUED)
        self._next_warning = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True, name="abort-relay")
        self._thread.start()

    def submit(self, order: AbortOrder) -> None:
        """Relay `order` soon (never blocks: a full queue drops it until its retry)."""
        try:
            self._orders.put_nowait(order)
        except queue.Full:
            pass

    def _run(self) -> None:
        client: FarmClient | None = None
        while True:
            order = self._orders.get()
            if order is None:
                break
            try:
                client = client or self._connect()
                client.commit_batch(order.query, order.batch, [],
                                    metadata=order.metadata(self._timeout))
            except (FarmError, ConfigError, OSError) as exc:     # retried by the aborts' backoff
                self._warn(order, exc)
                if client is not None:
                    client.close()
                client = None
            except Exception:               # noqa: BLE001 - a bug: said, the thread lives
                log.exception("relaying the abort of batch %d of query %r failed",
                              order.batch, order.query)
        if client is not None:
            client.close()

    def _connect(self) -> FarmClient:
        sec = self._security
        return FarmClient(self._endpoints(), cluster=sec.cluster, username=sec.username,
                          password=sec.password, tls_ca=sec.tls_ca, tls_cert=sec.tls_cert,
                          tls_key=sec.tls_key, proxy=sec.proxy, tls=sec.use_tls,
                          insecure_skip_tls_verify=sec.insecure_skip_tls_verify,
                          timeout=5.0, partition=0)

    def _warn(self, order: AbortOrder, exc: BaseException) -> None:
        now = time.monotonic()
        if now >= self._next_warning:       # at most one line every 10 s
            self._next_warning = now + 10.0
            log.warning("relaying the abort of batch %d of query %r to partition 0's leader "
                        "failed (%s); it is retried", order.batch, order.query, exc)

    def close(self) -> None:
        while True:
            try:
                self._orders.put_nowait(None)
                break
            except queue.Full:
                try:
                    self._orders.get_nowait()
                except queue.Empty:
                    pass
        self._thread.join(timeout=10)
