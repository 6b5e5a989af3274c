"""The three kinds through a real Spark cluster: a standalone master and two workers as
separate processes (pyspark's `spark-class`), executors in JVMs of their own, a stock
session in a driver process of its own (tests/cluster/cluster_job.py). In each kind's
stream, the first attempt of the task that meets a poison row SIGKILLs its executor's JVM
mid-batch; the output is still exactly the input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_farm import LocalFarm
from tests.cluster.standalone import StandaloneCluster
from tests.spark.helpers import write_files

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

JOB = Path(__file__).with_name("cluster_job.py")
ROWS = 40


def chunks(tag: str) -> list[list[str]]:
    return [[f"{tag}-{f}-{i:03d}" for i in range(ROWS)] for f in range(3)]


def run_job(spec: dict, folder: Path, cluster: StandaloneCluster,
            prefix: tuple[str, ...] = (), timeout: float = 600) -> dict:
    """Runs cluster_job.py with `spec` (under `prefix`, e.g. `ip netns exec NS`); its
    result, or a failure that shows the job's and the cluster's logs."""
    spec = {**spec, "result": str(folder / "result.json"), "kill_dir": str(folder / "kills")}
    (folder / "kills").mkdir()
    (folder / "spec.json").write_text(json.dumps(spec))
    log = folder / "job.log"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    with open(log, "wb") as out:
        job = subprocess.run([*prefix, sys.executable, str(JOB), str(folder / "spec.json")],
                             stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                             cwd=str(JOB.parents[2]))
    if job.returncode != 0 or not (folder / "result.json").exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        raise AssertionError(f"the cluster job exited with {job.returncode}:\n{tail}\n"
                             f"{cluster.describe()}")
    return json.loads((folder / "result.json").read_text())


def assert_killed(folder: Path, kind: str, driver_pid: int) -> dict:
    """The marker of `kind`'s killed executor: a JVM that is gone and was not the driver's."""
    marker = folder / "kills" / kind
    assert marker.exists(), f"no executor was killed in the {kind} stream"
    killed = json.loads(marker.read_text())
    assert killed["pid"] != driver_pid
    assert not Path(f"/proc/{killed['pid']}").exists() or \
        Path(f"/proc/{killed['pid']}/stat").read_text().split(")")[1].split()[0] == "Z", \
        f"the {kind} stream's killed executor {killed['pid']} still runs"
    return killed


def test_three_kinds_through_two_workers_with_an_executor_killed_mid_batch(tmp_path):
    from pyspark_farm.dafka.local import LocalDafka
    from tests.chp.support import ServerProcess
    raft_rows, dafka_rows = chunks("raft"), chunks("dafka")
    write_files(tmp_path / "raft-in", raft_rows)
    write_files(tmp_path / "dafka-in", dafka_rows)
    chp_rows = [[(f"/c/{f}/{i:03d}", f"v{f}-{i}") for i in range(ROWS)] for f in range(3)]
    write_files(tmp_path / "chp-in", [[{"key": k, "value": v} for k, v in chunk]
                                      for chunk in chp_rows])
    chp = ServerProcess(tmp_path, "chp", "--hugz-interval", "0.2").start()
    try:
        with LocalFarm(nodes=3) as farm, \
                LocalDafka(stores=2, data_dir=tmp_path / "dafka") as dafka, \
                StandaloneCluster(tmp_path / "spark", workers=2) as cluster:
            spec = {"master": cluster.url, "driver_host": "127.0.0.1", "farm": farm.options,
                    "kinds": {
                        "raft": {"inbox": str(tmp_path / "raft-in"), "poison": "raft-1-020",
                                 "checkpoint": str(tmp_path / "chk-raft")},
                        "dafka": {"inbox": str(tmp_path / "dafka-in"),
                                  "poison": "dafka-1-020", "options": dafka.options,
                                  "topic": f"cluster-{os.getpid()}",
                                  "checkpoint": str(tmp_path / "chk-dafka")},
                        "chp": {"inbox": str(tmp_path / "chp-in"), "poison": "/c/1/020",
                                "endpoint": chp.address,
                                "checkpoint": str(tmp_path / "chk-chp")}}}
            result = run_job(spec, tmp_path, cluster)
            executors = cluster.executor_logs()
    finally:
        chp.kill()

    for kind in ("raft", "dafka", "chp"):
        assert_killed(tmp_path, kind, result["driver_pid"])
    # 2 executors at the start, and one more for each killed (the workers start them)
    assert len(executors) >= 2 + 3, executors

    assert result["raft"]["values"] == sorted(sum(raft_rows, []))
    assert result["raft"]["batch"] == 2
    assert result["dafka"]["values"] == sorted(sum(dafka_rows, []))
    by_partition: dict[int, list[int]] = {}
    for partition, offset in result["dafka"]["offsets"]:
        by_partition.setdefault(partition, []).append(offset)
    for partition, offsets in by_partition.items():    # no hole, no repeat
        assert offsets == list(range(len(offsets))), partition
    found = dict(result["chp"]["map"])
    marker = [k for k in found if not k.startswith("/c/")]
    assert len(marker) == 1 and json.loads(found.pop(marker[0]))["batch"] == 2, marker
    assert found == {k: v for chunk in chp_rows for k, v in chunk}


def test_executors_on_another_machine_use_the_drivers_embedded_farm(tmp_path, reader_jar):
    """The driver, its embedded LocalFarm and the master in one network namespace, the
    worker (and so the executors) in another, linked by a veth pair: the farm listens on
    the driver machine's address with TLS (its CA travels in the options) and a password;
    the raft stream writes through it with an executor killed, and reads back, with the
    Python source and with the JVM reader (its jar shipped by spark.jars)."""
    from tests.cluster.netns import (DRIVER_ADDRESS, WORKER_ADDRESS, NamespacePair,
                                     NamespacesUnavailable)
    rows = chunks("far")
    write_files(tmp_path / "in", rows)
    try:
        namespaces = NamespacePair().__enter__()
    except NamespacesUnavailable as why:
        pytest.skip(f"cannot make network namespaces here: {why}")
    try:
        with StandaloneCluster(tmp_path / "spark", workers=1, cores=2,
                               master_host=DRIVER_ADDRESS, worker_host=WORKER_ADDRESS,
                               master_netns=namespaces.driver,
                               worker_netns=namespaces.worker) as cluster:
            spec = {"master": cluster.url, "driver_host": DRIVER_ADDRESS,
                    "embedded_farm": {"host": DRIVER_ADDRESS, "tls": None},
                    "kinds": {"raft": {"inbox": str(tmp_path / "in"), "poison": "far-1-020",
                                       "checkpoint": str(tmp_path / "chk"), "columnar": True}}}
            result = run_job(spec, tmp_path, cluster, prefix=namespaces.exec(namespaces.driver))
    finally:
        namespaces.close()
    assert result["farm"]["tls"], "a farm listening off loopback turns TLS on by default"
    assert all(e.startswith(f"{DRIVER_ADDRESS}:") for e in result["farm"]["endpoints"].split(","))
    killed = assert_killed(tmp_path, "raft", result["driver_pid"])
    assert killed["netns"] != result["driver_netns"], "the executor ran in the driver's namespace"
    assert killed["netns"] != os.readlink("/proc/self/ns/net")
    assert result["raft"]["values"] == sorted(sum(rows, []))
    assert result["raft"]["columnar values"] == sorted(sum(rows, []))
    assert result["raft"]["batch"] == 2
