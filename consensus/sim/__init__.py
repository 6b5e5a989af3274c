"""The deterministic fault simulator of the Raft core: ``python -m consensus.sim``.

Modules: `cluster` (one seeded run: the step loop, the calm phase, the final checks),
`host` (one simulated server: RaftNode + SimDisk + KvMachine, Readys written then
fsynced later, so crashes land in between), `disk` (what survives a crash), `network`
(latency, loss, duplication, delay, partitions), `nemesis` (the fault schedule),
`workload` (clients and their history), `checker` (Raft's safety properties), `kv` (the
application), `local` (a hand-driven, fault-free in-memory cluster for tests and the
benchmark). See docs/raft-core.md.
"""
