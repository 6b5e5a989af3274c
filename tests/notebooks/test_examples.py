"""The examples/ programs run the way their docstrings say: `spark-submit` against a farm."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_farm import LocalFarm

ROOT = Path(__file__).resolve().parents[2]
ORDERS_JOB = ROOT / "examples" / "orders_to_farm.py"
ITEMS = ("book", "pen", "lamp", "mug")

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def spark_submit() -> Path:
    """The venv's spark-submit (pip's pyspark ships it in pyspark/bin as well)."""
    beside = Path(sys.executable).with_name("spark-submit")
    if beside.exists():
        return beside
    import pyspark
    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def write_orders(inbox: Path, number: int, expected: dict, rows: int = 50) -> None:
    """One file of orders (written aside, renamed in); `expected` gets its totals."""
    inbox.mkdir(exist_ok=True)
    lines = []
    for i in range(rows):
        order_id = 1000 * number + i
        item, amount = ITEMS[order_id % 4], 2.5 + order_id % 5
        lines.append(json.dumps({"id": order_id, "customer": f"c{i % 7}", "item": item,
                                 "amount": amount}))
        orders, total = expected.get(item, (0, 0.0))
        expected[item] = (orders + 1, total + amount)
    staging = inbox.parent / f".{number}.json"
    staging.write_text("\n".join(lines) + "\n")
    staging.rename(inbox / f"{number:03d}.json")


def run_job(farm: LocalFarm, inbox: Path, checkpoint: Path, *extra: str) -> str:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", GARLICFARM_PASSWORD=farm.password)
    env.pop("GARLICFARM_ENDPOINTS", None)
    done = subprocess.run(
        [str(spark_submit()), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.log.level=WARN",
         str(ORDERS_JOB), "--input", str(inbox), "--checkpoint", str(checkpoint),
         "--endpoints", farm.endpoints, "--cluster", farm.cluster_name,
         "--username", farm.username, "--max-files", "2", "--totals", *extra],
        capture_output=True, text=True, env=env, timeout=240, cwd=str(inbox.parent))
    # spark-submit merges the Python driver's stderr into its stdout.
    assert done.returncode == 0, \
        f"spark-submit exited with {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.timeout(420)
def test_orders_job_under_spark_submit_writes_each_file_once(tmp_path):
    inbox, checkpoint = tmp_path / "orders", tmp_path / "chk"
    expected: dict = {}
    with LocalFarm(nodes=3) as farm, farm.client() as client:
        for number in range(3):
            write_orders(inbox, number, expected)
        first = json.loads(run_job(farm, inbox, checkpoint, "--json").strip().splitlines()[-1])
        assert first["rows_written"] == 150 and first["batches"] == [0, 1]   # 2 files per batch
        assert first["log_totals"] == {item: {"orders": n, "amount": round(total, 2)}
                                       for item, (n, total) in expected.items()}
        assert client.last_committed_batch(first["query_id"]) == 1

        # The next run takes only the new files, from the same checkpoint (same query).
        for number in range(3, 5):
            write_orders(inbox, number, expected)
        second = run_job(farm, inbox, checkpoint)
        assert f"wrote 100 orders in 1 micro-batch to farm 'farm' (query " \
               f"{first['query_id']})" in second
        for item, (n, total) in expected.items():
            assert f"{item:<12}{n:>8}{total:>12.2f}" in second, second
        assert client.last_committed_batch(first["query_id"]) == 2


def test_orders_job_names_what_is_missing(tmp_path):
    env = dict(os.environ)
    env.pop("GARLICFARM_ENDPOINTS", None)
    done = subprocess.run([sys.executable, str(ORDERS_JOB), "--input", str(tmp_path),
                           "--checkpoint", str(tmp_path / "chk")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "--endpoints" in done.stderr
    assert "GARLICFARM_ENDPOINTS" in done.stderr
