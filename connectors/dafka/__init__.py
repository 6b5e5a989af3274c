"""Dafka (ZeroMQ RFC 46 as zeromq/dafka really speaks it): codec, tower, producer,
consumer, store, and a store client for ranges and heads. See SPECS §4.

The library API the Spark source and sink program against:

* `DafkaConfig` (options, `with_towers`), `load_config` (the C tools' ZPL files);
* `Producer(config, topic, address=..., start_sequence=...)` with `publish`,
  `publish_many`, `flush`; `deterministic_address(*parts)` names a partition;
* `Consumer(config, topics)` with `poll`, iteration or `on_record`;
* `StoreClient(config)` with `heads(topic)`, `read_range(topic, partition, a, b)` and
  `read_range_arrays` (Arrow arrays by garlicfarm's bulk read extension, falling back
  to plain FETCH: docs/protocol.md);
* `Store(config, data_dir)` and `Tower(sub_bind, pub_bind)` to run a deployment.

Mixed with the C implementation (zeromq/dafka c2dc88d, built by hand, all on 127.0.0.1)
these worked: C tower + C producer -> our store (the C producer got our ACKs and exited),
our consumer and the C console consumer reading it back from our store; our tower + our
producer -> C store (ACKed), C and our consumers reading from the C store, a live C
consumer following our producer; our consumer repairing from a C producer by FETCH.
"""
from connectors.dafka.config import DafkaConfigError, DafkaConfig, load_config, tower_endpoints
from connectors.dafka.consumer import Consumer, ConsumerRecord
from connectors.dafka.node import (NodeFailed, TowerUnreachable, deterministic_address,
                                   new_address)
from connectors.dafka.producer import BackpressureTimeout, Producer
from connectors.dafka.reader import NoStoreError, StoreClient
from connectors.dafka.store import Store
from connectors.dafka.tower import Tower

__all__ = [
    "BackpressureTimeout", "DafkaConfigError", "Consumer", "ConsumerRecord", "DafkaConfig",
    "NoStoreError", "NodeFailed", "Producer", "Store", "StoreClient", "Tower",
    "TowerUnreachable", "deterministic_address", "load_config", "new_address", "tower_endpoints",
]
