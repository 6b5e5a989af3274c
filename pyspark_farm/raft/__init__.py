"""The `raft` kind: a farm's committed log as a source, and an exactly-once sink into it."""
