"""The deterministic fault simulator of the Raft core (`python -m consensus.sim`)."""
