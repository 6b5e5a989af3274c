"""The same CPU quota for each of a few processes, and the CPU each spends, with cgroups.

A benchmark of "nodes that stand for machines" on one machine gives every node process a
cgroup of its own with the same CPU quota, so that no node can use the time another
leaves idle, and reads each node's CPU seconds from its cgroup (all its threads, exactly,
whenever asked). `CpuGroups` makes the groups under a group of this run's own, inside the
cgroup this process is in, and removes them all on exit (the processes still in them go
back to that cgroup first), whatever ends the `with`.

cgroup v1: the `cpu` controller's `cpu.cfs_quota_us` / `cpu.cfs_period_us` and the
`cpuacct` controller's `cpuacct.usage` (one hierarchy, or two as on this machine). cgroup
v2: `cpu.max` and `cpu.stat`'s `usage_usec`, with the cpu controller enabled for our
groups (and, if it was not, in this process's cgroup's `cgroup.subtree_control`, where it
stays: other groups may have come to use it). Needs root; `find_cgroups()` says why not where it cannot.
"""
from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Below this the kernel refuses a quota (1 ms of a 100 ms period).
MIN_FRACTION = 0.01


@dataclass(frozen=True)
class Cgroups:
    """Where this process's cgroups are: v1 `cpu` and `cpuacct` hierarchy folders (the
    same folder when co-mounted), or one v2 folder for both."""
    version: int
    cpu: Path
    acct: Path


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fs type, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as lines:
        for line in lines:
            fields, _, rest = line.partition(" - ")
            parts, extra = fields.split(), rest.split()
            if len(parts) >= 5 and len(extra) >= 3 and extra[0] in ("cgroup", "cgroup2"):
                found.append((parts[3], parts[4], extra[0], set(extra[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller ("" key: the v2 path)."""
    paths = {}
    with open("/proc/self/cgroup", encoding="utf-8") as lines:
        for line in lines:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _folder(root: str, mount_point: str, path: str) -> Path:
    """The folder of cgroup `path` in a hierarchy mounted at `mount_point` from `root`."""
    inside = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return Path(mount_point) / ("" if inside == "." else inside)


def find_cgroups() -> Cgroups | str:
    """This process's CPU cgroups, or the reason they cannot be used (not root, no cpu
    controller, a folder we may not write)."""
    if os.geteuid() != 0:
        return "CPU quotas need root (cgroups are written as root): run as root"
    mounts, own = _mounts(), _own_paths()
    v1 = {}
    for root, point, kind, options in mounts:
        for controller in ("cpu", "cpuacct"):
            if kind == "cgroup" and controller in options and controller in own:
                v1[controller] = _folder(root, point, own[controller])
    if "cpu" in v1 and "cpuacct" in v1:
        found = Cgroups(1, v1["cpu"], v1["cpuacct"])
    else:
        unified = [(r, p) for r, p, kind, _ in mounts if kind == "cgroup2"]
        if not unified or "" not in own:
            return ("no cgroup v1 cpu and cpuacct controllers and no cgroup v2 mount "
                    "(see /proc/self/mountinfo)")
        folder = _folder(*unified[0], own[""])
        controllers = (folder / "cgroup.controllers").read_text().split() \
            if (folder / "cgroup.controllers").exists() else []
        if "cpu" not in controllers:
            return (f"cgroup v2 at {folder} offers no cpu controller (cgroup.controllers: "
                    f"{' '.join(controllers) or 'none'}): it is held by a v1 hierarchy or "
                    "not delegated here")
        found = Cgroups(2, folder, folder)
    for folder in {found.cpu, found.acct}:
        if not os.access(folder, os.W_OK):
            return f"cannot write the cgroup folder {folder}"
    return found


@dataclass
class CpuGroups:
    """One cgroup per member (any hashable name, e.g. a node id) under a group named
    `name`; `quota()` sets the same CPU fraction on each, `usage()` reads their CPU
    seconds. A context manager: `close()` removes every group it made."""
    where: Cgroups
    name: str
    members: list
    _made: list[tuple[Path, Path]] = field(default_factory=list)  # (group, home)

    def _tops(self) -> list[Path]:
        """This process's cgroup folder in each hierarchy, the cpu one first."""
        return [self.where.cpu] + ([self.where.acct] if self.where.acct != self.where.cpu
                                   else [])

    def _dirs(self, member: object | None = None) -> list[Path]:
        """Our group's folder (or a member's) in each hierarchy, the cpu one first."""
        return [top / self.name / ("" if member is None else f"m-{member}")
                for top in self._tops()]

    def __enter__(self) -> "CpuGroups":
        try:
            for top, folder in zip(self._tops(), self._dirs()):
                folder.mkdir()
                self._made.append((folder, top))
                if self.where.version == 2:
                    # our group's children get the cpu controller (our group holds no
                    # process, so v2's no-internal-process rule allows it)
                    _enable_cpu(folder.parent)
                    _enable_cpu(folder)
            for member in self.members:
                for top, folder in zip(self._tops(), self._dirs(member)):
                    folder.mkdir()
                    self._made.append((folder, top))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, member: object, pid: int) -> None:
        """Moves process `pid` (all its threads) into `member`'s group."""
        for folder in self._dirs(member):
            (folder / "cgroup.procs").write_text(str(pid))

    def quota(self, fraction: float | None, period_us: int = 100_000) -> None:
        """Each member may use `fraction` of one CPU (None: no limit), granted per
        `period_us` (the kernel's default 100 ms lets a member run its whole share at
        once and then stall for the rest of the period; a short period spreads it, as a
        slower CPU would)."""
        if fraction is not None and fraction < MIN_FRACTION:
            raise ValueError(f"a CPU quota below {MIN_FRACTION:.0%} of a CPU is refused "
                             f"by the kernel: not {fraction:.2%}")
        if not 1_000 <= period_us <= 1_000_000:
            raise ValueError(f"a CPU quota period must be 1 ms to 1 s, not {period_us} us")
        limit = None if fraction is None else max(1_000, int(period_us * fraction))
        for member in self.members:
            folder = self._dirs(member)[0]
            if self.where.version == 1:
                (folder / "cpu.cfs_quota_us").write_text("-1")   # any period is valid then
                (folder / "cpu.cfs_period_us").write_text(str(period_us))
                (folder / "cpu.cfs_quota_us").write_text(str(limit or -1))
            else:
                (folder / "cpu.max").write_text(f"{limit or 'max'} {period_us}")

    def usage(self) -> dict:
        """CPU seconds each member's group has spent since it was made."""
        spent = {}
        for member in self.members:
            folder = self._dirs(member)[-1]
            if self.where.version == 1:
                spent[member] = int((folder / "cpuacct.usage").read_text()) / 1e9
            else:
                stat = dict(line.split() for line in
                            (folder / "cpu.stat").read_text().splitlines())
                spent[member] = int(stat["usage_usec"]) / 1e6
        return spent

    def close(self, timeout: float = 10.0) -> None:
        """Moves any process left in our groups back to this process's cgroup, then
        removes the groups, deepest first (a process that is exiting may hold a group a
        moment: retried with backoff until `timeout`)."""
        deadline, attempt = time.monotonic() + timeout, 0
        while self._made:
            folder, home = self._made[-1]
            try:
                for pid in (folder / "cgroup.procs").read_text().split():
                    try:
                        (home / "cgroup.procs").write_text(pid)
                    except ProcessLookupError:
                        pass                      # exited meanwhile
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                attempt += 1
                time.sleep(min(0.5, 0.005 * 2 ** attempt))
                continue
            self._made.pop()


def _enable_cpu(folder: Path) -> None:
    control = folder / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")
