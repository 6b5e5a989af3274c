"""Prometheus metrics of ``garlicfarm chp server`` (``--metrics HOST:PORT``).

Read at scrape time from the server's public state: the map's sequence and size, the
`ServerStats` counters, the open subscriptions of its publisher, its Binary Star state.
A replicated server serves the farm's credentials' rule (``--farm-credentials``); a
plain one has no authentication, so its endpoint must be on loopback.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from connectors.chp.server import CloneServer
from consensus.runtime.http_endpoint import HttpEndpoint, serve_metrics

STATES = ("standalone", "primary", "backup", "active", "passive")
_COUNTERS = (("published", "updates_published", "KVPUBs published (updates, deletes, "
              "expiries)."),
             ("rejected", "messages_rejected", "Malformed or refused messages dropped."),
             ("snapshots", "snapshots_sent", "Snapshot requests (ICANHAZ) answered."),
             ("resyncs", "resyncs", "Snapshots taken from the active while passive."))


class ServerCollector(Collector):
    def __init__(self, server: CloneServer) -> None:
        self.server = server

    def collect(self) -> Iterable[Metric]:
        server = self.server
        stats, cmap = server.stats, server.map
        yield GaugeMetricFamily("garlicfarm_chp_sequence", "The map's sequence number (the "
                                "last update's).", value=cmap.sequence)
        yield GaugeMetricFamily("garlicfarm_chp_keys", "Keys in the map.", value=len(cmap))
        yield GaugeMetricFamily("garlicfarm_chp_subscriptions", "Prefix subscriptions open "
                                "on the publisher (a client with a subtree holds two: the "
                                "subtree and HUGZ).", value=stats.subscriptions)
        for attribute, name, doc in _COUNTERS:
            yield CounterMetricFamily(f"garlicfarm_chp_{name}", doc,
                                      value=getattr(stats, attribute))
        for key, doc in (("subscriptions_refused_long", "Subscriptions refused for a "
                          "prefix over max_subtree_bytes (connection cut)."),
                         ("subscriptions_refused_many", "Subscriptions refused over the "
                          "per-connection count (connection cut)."),
                         ("connections_cut", "Subscriber connections cut.")):
            yield CounterMetricFamily(f"garlicfarm_chp_{key}", doc,
                                      value=stats.refusals.get(key, 0))
        state = server.state
        states = GaugeMetricFamily("garlicfarm_chp_state", "1 for the server's state.",
                                   labels=["state"])
        for known in STATES if state in STATES else (*STATES, state):
            states.add_metric([known], int(known == state))
        yield states
        yield GaugeMetricFamily("garlicfarm_chp_serving", "1 when the server applies "
                                "updates and answers snapshots.", value=int(server.serving))


def serve(server: CloneServer, listen: str,
          credentials: Mapping[str, str] | None = None) -> HttpEndpoint:
    """``--metrics``: serve the server's metrics (Basic authentication with
    `credentials`, required off loopback)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(server))
    return serve_metrics(listen, "--metrics", registry, credentials=credentials,
                         credential_options="--farm-credentials, with --replicated")
