"""The import rules of docs/development.md's layout table, checked on the source: every
first-party import (at module level or inside a function, and module paths named in
strings, as the command tables use) goes to a package its layer may import."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("consensus", "connectors", "pyspark_farm", "garlicfarm")
#: package -> the first-party packages it may import (itself always); the most specific
#: package of a module decides. Mirrors the table in docs/development.md.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # plain values every side shares (errors, client results, partition checks)
    "consensus.common": (),
    "consensus.storage": (),
    # the hard state record: one definition for the core and the file that keeps it
    "consensus.raft": ("consensus.storage.hardstate",),
    # codecs: bytes to the core's messages and entries, errors and results
    "consensus.wire": ("consensus.common", "consensus.raft"),
    # reaching a node: security settings, dialing through the wire's handshake, backoff
    "consensus.net": ("consensus.common", "consensus.wire"),
    "consensus.client": ("consensus.common", "consensus.wire", "consensus.net", "consensus.raft"),
    # the server
    "consensus.runtime": ("consensus.common", "consensus.wire", "consensus.net",
                          "consensus.raft", "consensus.storage"),
    # a placed farm's node relays an abort to partition 0's leader as a client of its
    # own farm (as Kafka brokers forward to the controller)
    "consensus.runtime.abort_relay": ("consensus.common", "consensus.wire", "consensus.net",
                                      "consensus.raft", "consensus.storage",
                                      "consensus.client", "consensus.runtime"),
    # the operators' commands: a client, plus a node's config file (--config), the disk
    # format a restore writes, and the bounded HTTP endpoint of the status page
    "consensus.admin": ("consensus.common", "consensus.wire", "consensus.net", "consensus.raft",
                        "consensus.storage", "consensus.client", "consensus.runtime.config",
                        "consensus.runtime.disk_storage", "consensus.runtime.http_endpoint"),
    # the harness: node processes started as `python -m consensus.cli node`, clients, the
    # admin's output, the checker
    "consensus.torture": ("consensus.common", "consensus.wire", "consensus.net",
                          "consensus.client", "consensus.admin", "consensus.linearizability",
                          "consensus.cli"),
    "consensus.linearizability": (),
    # the simulator's application includes the farm's sink ledger (sim/kv.py), and it
    # quiesces by the runtime's rule (sim/quiet.py)
    "consensus.sim": ("consensus.raft", "consensus.linearizability", "consensus.storage",
                      "consensus.runtime.machines", "consensus.runtime.quiesce"),
    "consensus": ("consensus",),
    "connectors": (),
    "connectors.subscriptions": (),
    # the shared HTTP endpoint of --metrics (its bounded server, no Raft behind it)
    "connectors.dafka": ("connectors.subscriptions", "consensus.wire.errors",
                         "consensus.storage", "consensus.runtime.http_endpoint"),
    # the replicated server is a farm client; its command logs and serves metrics as a
    # node does
    "connectors.chp": ("connectors.subscriptions", "consensus.wire", "consensus.storage",
                       "consensus.client", "consensus.net", "consensus.runtime.log_format",
                       "consensus.runtime.http_endpoint", "consensus.raft"),
    "pyspark_farm": ("consensus", "connectors"),
    "garlicfarm": ("consensus", "connectors", "pyspark_farm"),
}
_MODULE_PATH = re.compile(r"(?:%s)(?:\.\w+)+" % "|".join(TOPS))


def _modules() -> dict[str, Path]:
    found = {}
    for top in TOPS:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[tuple[str, int]]:
    """(first-party module, line) of every import in the module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {(a.name, node.lineno) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out |= {(f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module,
                     node.lineno) for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                _MODULE_PATH.fullmatch(node.value) and node.value in MODULES:
            out.add((node.value, node.lineno))     # importlib.import_module("...") tables
    return {(m, line) for m, line in out if m.split(".")[0] in TOPS}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_follow_the_layers(name):
    layer = max((p for p in MAY_IMPORT if _within(name, p)), key=len)
    allowed = (layer, *MAY_IMPORT[layer])
    wrong = sorted((module, line) for module, line in _imports(name, MODULES[name])
                   if not any(_within(module, a) for a in allowed))
    assert not wrong, f"{name} ({layer}) may not import: {wrong}"


def test_the_scan_sees_string_and_function_level_imports():
    """The scanner itself: the command table's string paths and a lazy import count."""
    assert any(m == "consensus.admin.admin" for m, _ in
               _imports("consensus.cli", MODULES["consensus.cli"]))
    assert any(m == "pyspark_farm.demo" for m, _ in
               _imports("garlicfarm.cli", MODULES["garlicfarm.cli"]))
    assert any(m == "consensus.runtime.node" for m, _ in       # inside main()
               _imports("consensus.runtime.cli", MODULES["consensus.runtime.cli"]))
