"""A simulated server: one node hosting a replica of every group over one shared disk
(disk.NodeDisk). It is the unit of crashes and restarts: a crash stops every replica and
tears the shared disk at one point, a restart boots every replica from what it kept."""
from __future__ import annotations

import random

from .disk import NodeDisk
from .host import SimHost


class SimServer:
    def __init__(self, node_id: int, groups: int) -> None:
        self.id = node_id
        self.disk = NodeDisk(range(groups))
        self.replicas: dict[int, SimHost] = {}      # group -> its replica here
        self.up = False

    def start(self) -> None:
        """Boot (or reboot) every replica from what the disk holds."""
        for replica in self.replicas.values():
            replica.start()
        self.up = True

    def crash(self, rng: random.Random) -> str:
        """Every replica stops at once; the disk loses what it had not synced."""
        self.up = False
        for replica in self.replicas.values():
            if replica.up:
                replica.stop()
        return self.disk.crash(rng)

    def running(self) -> list[SimHost]:
        """The replicas that run now (a group may have stopped its replica here)."""
        return [r for r in self.replicas.values() if r.up] if self.up else []
