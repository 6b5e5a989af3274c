"""Every notebook in notebooks/ runs top to bottom on a fresh Jupyter kernel, and the
spark-submit example runs under `spark-submit`.

The notebooks are discovered (`notebooks/*.ipynb`), so a new one is tested as soon as it
is committed. Each runs with nbclient on a real ipykernel whose kernel spec this module
writes into a temporary directory, pointing at this interpreter (the venv's python): a
clean clone under `make test` needs no `jupyter kernelspec install`, and no other
`python3` kernel on the machine can be picked by mistake. After its last cell, a check
cell asserts that the notebook stopped what it started (farm processes, Spark), and
every process left in the kernel's session is killed once the kernel is gone.
"""
from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "garlicfarm-test-python"
CELL_TIMEOUT = 180        # seconds per cell; a notebook takes < 60 s on an idle machine
NOTEBOOK_TIMEOUT = 420    # the whole notebook, kernel start and teardown included

# Appended to every notebook run: a notebook's last cell must stop what it started.
STOPPED_CHECK = '''
import os as _os, sys as _sys

def _children_of(root):
    parents = {}
    for entry in _os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [root]
    while todo:
        parent = todo.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                todo.append(pid)
    return found

def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""

_left = [c for c in map(_cmdline, _children_of(_os.getpid())) if "-m consensus.cli" in c or "-m garlicfarm" in c]
assert not _left, f"the notebook left farm or connector processes running: {_left}"
if "pyspark" in _sys.modules:
    from pyspark import SparkContext as _SparkContext
    assert _SparkContext._active_spark_context is None, \\
        "the notebook left Spark running: its last cell must call spark.stop()"
'''


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_JAVA_FRAME = re.compile(r"^\s+at [\w$.]+\(.*\)$|^\s+\.\.\. \d+ more$", re.M)


def readable(error: str) -> str:
    """A cell's error without terminal colours and Java stack frames (the messages stay)."""
    text = _JAVA_FRAME.sub("", _ANSI.sub("", error))
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text)


class NotebookFailed(AssertionError):
    """A notebook cell raised, timed out, or the kernel died; says which cell and why."""


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory) -> KernelSpecManager:
    """A kernel spec, in a temporary directory, that runs this interpreter."""
    spec_dir = tmp_path_factory.mktemp("kernels") / KERNEL
    spec_dir.mkdir()
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "garlicfarm tests", "language": "python",
        "env": {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": "127.0.0.1"},   # Spark binds to loopback only
    }))
    return KernelSpecManager(kernel_dirs=[str(spec_dir.parent)])


def _session_members(session: int) -> list[int]:
    """Processes whose session id is `session` (the kernel runs in a session of its own)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == session and fields[0] != "Z":
                members.append(int(entry))
    return members


def _sweep(session: int | None, grace: float = 20.0) -> list[int]:
    """Wait for the kernel's session to empty (Spark's JVM exits when its kernel is gone);
    SIGKILL what is still there at the deadline and return those pids."""
    if session is None:
        return []
    deadline = time.monotonic() + grace
    while _session_members(session) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session_members(session)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def run_notebook(notebook: nbformat.NotebookNode, name: str, cwd: Path,
                 specs: KernelSpecManager, *, keep: Path | None = None
                 ) -> nbformat.NotebookNode:
    """Execute `notebook` top to bottom on a fresh kernel, then the stopped-check cell.
    Raises NotebookFailed naming the cell and its error; `keep` gets the executed copy."""
    notebook.cells.append(nbformat.v4.new_code_cell(STOPPED_CHECK))
    manager = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    client = NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(cwd)}})
    state: dict = {"cell": None, "session": None}

    def started(**_):
        state["session"] = manager.provisioner.pid if manager.provisioner else None

    def cell_started(cell, cell_index, **_):
        state["cell"] = cell_index

    client.on_notebook_start = started
    client.on_cell_start = cell_started
    failure: str | None = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        index = state["cell"]
        where = "the stopped-check after the last cell" if index == len(notebook.cells) - 1 \
            else f"cell {index + 1 if index is not None else '?'} of {len(notebook.cells) - 1}"
        failure = f"{name}: {where} failed: {type(exc).__name__}: {readable(str(exc))}"
    finally:
        if manager.has_kernel:          # a kernel we handed in is ours to shut down
            manager.shutdown_kernel()
        left = _sweep(state["session"])
        if keep is not None:
            nbformat.write(notebook, keep)
        # The kernel client's ZeroMQ objects go now: collected later, their __del__ ran
        # inside pytest's ast.parse of a failure's source and crashed the whole session
        # (CPython 3.11: "AST constructor recursion depth mismatch", an INTERNALERROR).
        client.kc = None
        del client, manager
        gc.collect()
    if failure is None and left:
        failure = f"{name}: processes outlived the kernel (killed): {left}"
    if failure is not None:
        raise NotebookFailed(failure + (f"\n(executed copy: {keep})" if keep else ""))
    return notebook


def test_spark_finds_the_format_outside_the_checkout(tmp_path):
    """Spark looks the `garlicfarm` format up with pkgutil.iter_modules() in a worker whose
    working directory is the notebook's (or the spark-submit job's); a strict editable
    install hides pyspark_farm from it there (DATA_SOURCE_NOT_FOUND)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import pkgutil; print(sorted(m.name for m in "
         "pkgutil.iter_modules() if m.name.startswith('pyspark_')))"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    assert "pyspark_farm" in probe.stdout, (
        "pyspark_farm is not visible to pkgutil outside the checkout, so Spark cannot find "
        "the garlicfarm format from notebooks/ or spark-submit; reinstall with "
        "`.venv/bin/pip install -e . --config-settings editable_mode=compat` (what the "
        "Makefile does) or a regular `pip install .`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = [i + 1 for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"
    assert notebook.cells and notebook.cells[0].cell_type == "markdown", \
        f"{path.name} should open with a markdown cell saying what it shows"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, kernel_specs, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    executed = run_notebook(notebook, path.name, path.parent, kernel_specs,
                            keep=tmp_path / path.name)
    errors = [o for cell in executed.cells if cell.cell_type == "code"
              for o in cell.outputs if o.output_type == "error"]
    assert not errors
    assert all(cell.execution_count is not None for cell in executed.cells
               if cell.cell_type == "code"), "every cell ran"


@pytest.mark.timeout(120)
def test_a_failing_cell_fails_the_run_with_its_error(kernel_specs, tmp_path):
    """The harness itself: a notebook whose claim stops being true fails, naming the cell
    and the assertion's message."""
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("a claim"),
        nbformat.v4.new_code_cell("answer = 41"),
        nbformat.v4.new_code_cell("assert answer == 42, 'the narrative says 42'"),
        nbformat.v4.new_code_cell("raise SystemExit('never reached')"),
    ])
    with pytest.raises(NotebookFailed) as failed:
        run_notebook(notebook, "claim.ipynb", tmp_path, kernel_specs)
    message = str(failed.value)
    assert "cell 3 of 4" in message and "the narrative says 42" in message
    assert "never reached" not in message
