"""Each Raft message is defined once, in consensus/raft/messages.py (issue 29.3): no other
record in the code base has its name, or its fields under another name (a wire twin
like the old `extensions.ReadIndexRequestFrame`); the wires encode the core's dataclasses
or records of their own fields. And the wire mappings build core messages by keyword,
so a reordered or added field cannot silently shift the values."""
from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest

from consensus.raft import messages

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("consensus", "connectors", "garlicfarm", "pyspark_farm")
HOME = ROOT / "consensus" / "raft" / "messages.py"
#: the modules that map core messages onto a wire
MAPPINGS = ("consensus/runtime/jraft_mapping.py", "consensus/runtime/marker_wire.py",
            "consensus/runtime/extensions.py", "consensus/runtime/jraft_wire.py")
CORE = {cls.__name__: frozenset(f.name for f in dataclasses.fields(cls))
        for cls in typing.get_args(messages.RaftMessage)}
HEADER = frozenset(f.name for f in dataclasses.fields(messages.Message))


def _sources() -> dict[Path, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != HOME:
                out[path] = ast.parse(path.read_text(encoding="utf-8"))
    return out


SOURCES = _sources()


def _is_dataclass(node: ast.ClassDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _own_fields(node: ast.ClassDef) -> set[str]:
    return {stmt.target.id for stmt in node.body
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            and "ClassVar" not in ast.unparse(stmt.annotation)}


def _dataclass_fields(tree: ast.Module) -> dict[str, set[str]]:
    """Each dataclass of a module -> its field names, with those of its bases defined
    in the same module."""
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}

    def all_fields(node: ast.ClassDef, seen: frozenset[str]) -> set[str]:
        names = _own_fields(node)
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
                names |= all_fields(classes[base.id], seen | {base.id})
        return names

    return {name: all_fields(node, frozenset({name})) for name, node in classes.items()
            if _is_dataclass(node)}


def test_the_scan_sees_the_records_it_must_judge():
    """The scan finds dataclasses, inherited fields included (else it proves nothing)."""
    jraft = _dataclass_fields(SOURCES[ROOT / "consensus/wire/jraft.py"])
    assert jraft["RaftResponse"] == {"message_type", "source", "destination", "term",
                                     "next_index", "accepted"}
    hello = _dataclass_fields(SOURCES[ROOT / "consensus/runtime/extensions.py"])["Hello"]
    assert HEADER <= hello and "client_id" in hello
    assert len(CORE) == 19 and all(HEADER <= names for names in CORE.values())


def test_no_core_message_is_defined_again():
    found = []
    for path, tree in SOURCES.items():
        where = path.relative_to(ROOT)
        found += [f"{where}: {n.name} is defined again" for n in ast.walk(tree)
                  if isinstance(n, ast.ClassDef) and n.name in CORE]
        found += [f"{where}: {name} has the fields of {core}"
                  for name, names in _dataclass_fields(tree).items()
                  for core, core_names in CORE.items()
                  if core_names != HEADER and names == core_names]
    assert not found, "; ".join(sorted(found)) + " (consensus/raft/messages.py defines " \
        "each message: encode the core's dataclass, or a wire record of other fields " \
        "and another name)"


@pytest.mark.parametrize("module", MAPPINGS)
def test_the_wire_mappings_build_core_messages_by_keyword(module):
    positional = sorted(
        f"{ast.unparse(node.func)} at line {node.lineno}"
        for node in ast.walk(SOURCES[ROOT / module]) if isinstance(node, ast.Call)
        and (node.func.attr if isinstance(node.func, ast.Attribute)
             else getattr(node.func, "id", None)) in CORE and node.args)
    assert not positional, f"core messages built positionally: {', '.join(positional)}"
