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
MAPPINGS = ("consensus/wire/jraft_mapping.py", "consensus/runtime/marker_wire.py",
            "consensus/wire/extensions.py", "consensus/runtime/jraft_wire.py")
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
    hello = _dataclass_fields(SOURCES[ROOT / "consensus/wire/extensions.py"])["Hello"]
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


def _pull_frame(status, entries, configuration=None) -> bytes:
    """A PullEntriesResponse (or, with `configuration`, a PullSnapshotResponse) frame
    built by hand: header, then the msgpack body in the table's order."""
    import msgpack

    from consensus.wire.extensions import ExtType
    body = [10, 3, configuration, 0, b"s", True] if configuration is not None \
        else [status, 11, entries, 1, 12]
    kind = ExtType.PULL_SNAPSHOT_RESPONSE if configuration is not None \
        else ExtType.PULL_ENTRIES_RESPONSE
    packed = msgpack.packb(body, use_bin_type=True)
    return bytes([kind]) + (1).to_bytes(4, "big") + (4).to_bytes(4, "big") + \
        (3).to_bytes(8, "big") + len(packed).to_bytes(4, "big") + packed


@pytest.mark.parametrize("frame, field", [
    (_pull_frame(7, []), "status"),
    (_pull_frame(0, [[3, 99, b"x"]]), "entries[0]"),
    (_pull_frame(0, [[3, 1]]), "entries[0]"),
    (_pull_frame(0, None, configuration=b"not json"), "configuration"),
], ids=["status", "entry type", "entry shape", "configuration"])
def test_a_core_message_s_frame_with_a_bad_wire_form_names_the_field(frame, field):
    from consensus.wire.errors import InvalidField
    from consensus.wire.extensions import GARLICFARM_REGISTRY
    from consensus.wire.jraft import JRaftDecoder
    with pytest.raises(InvalidField) as info:
        JRaftDecoder(registry=GARLICFARM_REGISTRY).feed(frame)
    assert info.value.field == field


def test_a_frame_decodes_to_the_core_message_itself():
    from consensus.raft import Entry, EntryType, PullStatus
    from consensus.wire.extensions import GARLICFARM_REGISTRY
    from consensus.wire.jraft import JRaftDecoder
    [message] = JRaftDecoder(registry=GARLICFARM_REGISTRY).feed(_pull_frame(2, [[3, 6, b""]]))
    assert message == messages.PullEntriesResponse(
        term=3, source=1, destination=4, status=PullStatus.INDEX_UNDERFLOW, index=11,
        entries=[Entry(3, 11, EntryType.NOOP, b"")], min_index=1, commit=12)


def test_a_wire_body_must_place_every_field_of_the_message_once():
    """A field added to a core message without a place on the wire fails at import."""
    from consensus.wire.extensions import ExtensionCodec, ExtType
    for body in ((("ctx", bytes),), (("ctx", bytes), ("lease", bool), ("ctx", bytes)),
                 (("ctx", bytes), ("lease", bool), ("index", int))):
        with pytest.raises(ValueError, match="ReadIndexRequest's wire body"):
            ExtensionCodec(messages.ReadIndexRequest, ExtType.READ_INDEX_REQUEST, "R", body)
