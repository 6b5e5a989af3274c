"""How the core's parts are wired (issue 29, docs/raft-core.md "How the core is laid
out"): the role helpers are given narrow collaborators, never the whole `RaftNode`, so
that each helper's constructor lists what it can touch."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from consensus.raft import Configuration, MemoryStorage, RaftNode

RAFT = Path(__file__).resolve().parents[2] / "consensus" / "raft"
HELPERS = ("elections", "receiver", "replication", "membership", "puller", "reads", "transfer",
           "tenure")


def test_no_helper_holds_the_node():
    node = RaftNode(1, MemoryStorage(), configuration=Configuration.of([1, 2, 3]))
    for name in HELPERS:
        helper = getattr(node, name)
        held = [attr for attr, value in vars(helper).items() if value is node]
        assert not held, f"RaftNode.{name} holds the node as {held}"


#: node.py builds the parts, driver.py drives a node, roles.py binds the node's helpers'
#: methods into the role tables: the three modules that take the node itself
TAKE_THE_NODE = ("node", "driver", "roles", "__init__")


@pytest.mark.parametrize("module", sorted(p.name for p in RAFT.glob("*.py")
                                          if p.stem not in TAKE_THE_NODE))
def test_no_helper_module_imports_the_node(module):
    tree = ast.parse((RAFT / module).read_text(encoding="utf-8"))
    imported = {alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module == "node" and n.level == 1 for alias in n.names}
    assert not imported, f"consensus/raft/{module} imports {sorted(imported)} from node.py"
