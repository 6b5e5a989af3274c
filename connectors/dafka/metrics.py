"""Prometheus metrics of ``garlicfarm dafka store`` and ``dafka tower`` (``--metrics``).

Everything is read at scrape time from the nodes' public state: their `stats` counters,
the store's partition heads and the bytes its directory holds. Nothing is added to the
nodes' loops. (ZeroMQ Dafka has no authentication: the endpoint must be on loopback.)
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from connectors.dafka.store import Store
from connectors.dafka.tower import Tower
from consensus.runtime.http_endpoint import HttpEndpoint, serve_metrics

# (stats key, metric name suffix, help) of the store's two nodes
_WRITER = (("stored", "records_stored", "Records written and fsynced."),
           ("commits", "commits", "Group commits (one fsync of every touched partition)."),
           ("duplicates", "duplicates", "Records received again (already stored)."),
           ("fetches", "fetches_sent", "FETCHes sent to producers for missing records."))
_READER = (("fetches", "fetches_answered", "FETCHes answered from the store."),
           ("bulk_fetches", "bulk_fetches_answered", "Bulk fetches answered."),
           ("bulk_records", "bulk_records_sent", "Records sent in bulk answers."))
_TOWER = (("beacons", "beacons_relayed", "Beacons relayed to the nodes."),
          ("dropped_malformed", "beacons_dropped_malformed", "Malformed beacons dropped."),
          ("dropped_unexpected", "beacons_dropped_unexpected", "Other messages dropped."))
# SubscriptionGuard's counters (docs/operations.md, ZeroMQ sockets facing the network)
_GUARD = (("subscriptions_refused_long", "subscriptions_refused_long",
           "Subscriptions refused for a prefix over the limit (connection cut)."),
          ("subscriptions_refused_many", "subscriptions_refused_many",
           "Subscriptions refused over the per-connection count (connection cut)."),
          ("connections_cut", "subscriber_connections_cut",
           "Subscriber connections cut for refused subscriptions."))


def _counters(prefix: str, stats: Counter, table) -> Iterable[Metric]:
    for key, suffix, doc in table:
        yield CounterMetricFamily(f"{prefix}_{suffix}", doc, value=stats.get(key, 0))


def directory_bytes(path: str) -> int:
    """Bytes of the files under `path` (files vanishing meanwhile are skipped)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


class StoreCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterable[Metric]:
        store = self.store
        yield from _counters("garlicfarm_dafka_store", store.writer.stats, _WRITER)
        yield from _counters("garlicfarm_dafka_store", store.reader.stats, _READER)
        yield from _counters("garlicfarm_dafka_store",
                             store.writer.stats + store.reader.stats, _GUARD)
        heads = store.partitions.heads()
        records = GaugeMetricFamily("garlicfarm_dafka_store_records", "Records held, by "
                                    "subject (head + 1 of each producer's partition).",
                                    labels=["subject"])
        by_subject: Counter[str] = Counter()
        for subject, _, head in heads:
            by_subject[subject] += head + 1
        for subject, count in sorted(by_subject.items()):
            records.add_metric([subject], count)
        yield records
        yield GaugeMetricFamily("garlicfarm_dafka_store_partitions", "Partitions (subject, "
                                "producer) with records.", value=len(heads))
        yield GaugeMetricFamily("garlicfarm_dafka_store_bytes", "Bytes of the store's "
                                "directory.", value=directory_bytes(store.data_dir))


class TowerCollector(Collector):
    def __init__(self, tower: Tower) -> None:
        self.tower = tower

    def collect(self) -> Iterable[Metric]:
        yield from _counters("garlicfarm_dafka_tower", self.tower.stats, _TOWER + _GUARD)


def serve(collector: Collector, listen: str) -> HttpEndpoint:
    """``--metrics``: serve `collector` (no credentials: loopback only)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return serve_metrics(listen, "--metrics", registry, credential_options=None)
