"""`garlicfarm snapshot save | status | restore` on a farm with a big log: time, throughput
and the peak RSS of each command's process (it must not grow with the log), then the time
for the restored node to serve the last entry.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/backup.py --entries 200000 --size 100
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from consensus.torture import LocalCluster


_MEASURED = ("import resource, sys\n"
             "from consensus.cli import main\n"
             "code = main(sys.argv[1:])\n"
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
             "sys.exit(code)")


def _command(args: list[str]) -> tuple[float, int]:
    """Run `garlicfarm ARGS` in a process of its own; (seconds, its peak RSS in MB)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURED, *args], capture_output=True,
                          text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{args[:2]} failed: {done.stderr}")
    return seconds, int(done.stderr.strip().splitlines()[-1]) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    options = parser.parse_args()
    work = tempfile.mkdtemp(prefix="backup-bench-")
    backup = os.path.join(work, "farm.gfb")
    record = b"x" * options.size
    with LocalCluster(1, fsync="never", status_interval=5.0,
                      extra_args=["--snapshot-interval", "50000"]) as farm:
        farm.wait_for_leader(30)
        with farm.client(timeout=60) as client:
            for start in range(0, options.entries, 1000):
                client.append_many([[record]] * min(1000, options.entries - start))
            first, applied, snapshot = client.log_bounds()
        print(f"farm: log {first}..{applied}, latest snapshot {snapshot}")
        seconds, rss = _command(["snapshot", "save", backup, "--endpoints", farm.endpoints,
                                 "--user", farm.username, "--password", farm.password,
                                 "--timeout", "60"])
    size = os.path.getsize(backup)
    print(f"save:    {seconds:6.2f} s  {size / seconds / 1e6:6.1f} MB/s  "
          f"{applied / seconds:9.0f} entries/s  peak RSS {rss} MB  ({size / 1e6:.1f} MB file)")
    seconds, rss = _command(["snapshot", "status", backup])
    print(f"status:  {seconds:6.2f} s  {size / seconds / 1e6:6.1f} MB/s  peak RSS {rss} MB")
    restored = LocalCluster(1, data_dir=os.path.join(work, "new"), cluster="farm-restored",
                            fsync="never", status_interval=5.0)
    seconds, rss = _command(["snapshot", "restore", backup, "--data-dir",
                             restored.node_dir(1), "--endpoint", restored.endpoint_of(1)])
    print(f"restore: {seconds:6.2f} s  {size / seconds / 1e6:6.1f} MB/s  peak RSS {rss} MB")
    started = time.perf_counter()
    with restored:
        restored.wait_for_leader(120)
        with restored.client(timeout=60) as client:
            while client.log_bounds()[1] < applied:
                time.sleep(0.05)
            assert client.read_entries(applied, applied + 1)[0].index == applied
        print(f"restored node serving entry {applied}: {time.perf_counter() - started:.2f} s "
              f"after its start")


if __name__ == "__main__":
    main()
