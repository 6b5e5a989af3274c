"""The deterministic fault simulator of the Raft core: ``python -m consensus.sim``.

Modules: `cluster` (one seeded run: the step loop, the calm phase, the final checks),
`server` (one simulated server hosting a replica of every group, crashed and restarted
whole), `group` (one Raft group: its replicas, clients and checks), `host` (one group's
replica: RaftNode + SimDisk + KvMachine, Readys written then fsynced later, so crashes
land in between), `disk` (what survives a crash; the server's disk shared by its
groups), `network` (group-tagged packets between servers: latency, loss, duplication,
delay, partitions), `nemesis` (the fault schedule),
`workload` (clients and their history), `checker` (Raft's safety properties), `kv` (the
application), `local` (a hand-driven, fault-free in-memory cluster for tests and the
benchmark). See docs/raft-core.md.
"""
