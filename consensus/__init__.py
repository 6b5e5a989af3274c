"""The garlicfarm consensus runtime: wire codecs, the pure Raft core, storage, runtime."""
