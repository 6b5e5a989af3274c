"""The `chp` kind: CHP maps (ZeroMQ RFC 12 clone servers) as a replayable changelog
source, a batch source of the current map, and an idempotent KVSET sink."""
