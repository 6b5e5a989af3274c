"""How Spark processes reach a Dafka deployment: the `tower` option and `dafka.*` settings
become one `DafkaConfig` (a frozen dataclass: safe to pickle into tasks).

`dafka.<path>` options pass the C tools' config paths straight through, with their
units (milliseconds for times), e.g. ``.option("dafka.beacon/interval", "100")``: every
node of a deployment must agree on the beacon interval and timeout, so Spark's nodes
take the deployment's values, as the C tools would from their ZPL file. A tower whose
publisher is not at PORT+1 is named by ``dafka.beacon/pub_address``.
"""
from __future__ import annotations

from typing import Mapping

from connectors.dafka import DafkaConfigError, DafkaConfig, StoreClient
from connectors.dafka.config import config_from_zpl

from ..errors import OptionError

PASSTHROUGH = "dafka."


def towers(value: str) -> tuple[str, ...]:
    """The `tower` option: tcp://HOST:PORT[,tcp://HOST:PORT...] (each tower's beacon
    port; its publisher is PORT+1)."""
    found = tuple(part.strip() for part in value.split(",") if part.strip())
    if not found:
        raise ValueError("expected tcp://HOST:PORT[,tcp://HOST:PORT...]")
    try:
        DafkaConfig().with_towers(list(found))
    except DafkaConfigError as exc:
        raise ValueError(str(exc)) from None
    return found


def passthrough_keys(raw: Mapping[str, str]) -> list[str]:
    """The `dafka.*` option keys given (lower case), for the unknown-option check."""
    return [str(k).lower() for k in raw if str(k).lower().startswith(PASSTHROUGH)]


def dafka_config(tower: tuple[str, ...], raw: Mapping[str, str]) -> DafkaConfig:
    """The node settings of Spark's Dafka nodes."""
    paths = {str(k)[len(PASSTHROUGH):].lower(): str(v) for k, v in raw.items()
             if str(k).lower().startswith(PASSTHROUGH)}
    try:
        return config_from_zpl(paths, DafkaConfig().with_towers(list(tower))).validate()
    except DafkaConfigError as exc:
        raise OptionError(f"{PASSTHROUGH}*", f"{exc}; dafka.* options take the Dafka "
                          "config paths (beacon/interval, beacon/timeout in ms...)") from None


def open_store_client(config: DafkaConfig, timeout: float) -> StoreClient:
    """A store client that has found every live store, not just the first one: heads
    asked of some of the stores only would understate what the deployment holds. Stores
    are found by their beacons (`StoreClient.discovered`: the towers echoed ours, every
    peer answered it, every store reader heard of is ready), a few round trips."""
    client = StoreClient(config)
    try:
        client.wait_for_stores(1, timeout, every=True)
    except BaseException:
        client.stop()
        raise
    return client
