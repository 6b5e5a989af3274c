"""The checker agrees with the known verdict of every history in
tests/vectors/linearizability (jepsen etcd register runs, Porcupine's kv histories)."""
from __future__ import annotations

import json

import pytest

from consensus.linearizability import KVModel, RegisterModel, Verdict, check, read_history
from tests.conftest import VECTORS

HISTORIES = VECTORS / "linearizability"
VERDICTS: dict[str, bool] = json.loads((HISTORIES / "verdicts.json").read_text())["linearizable"]


def test_every_history_file_has_a_verdict() -> None:
    files = {str(p.relative_to(HISTORIES)) for d in ("jepsen", "kv")
             for p in (HISTORIES / d).iterdir()}
    assert files == set(VERDICTS)
    assert len(VERDICTS) == 108


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_verdict(name: str) -> None:
    model = KVModel() if name.startswith("kv/") else RegisterModel()
    result = check(read_history(HISTORIES / name), model, timeout=30.0)
    assert result.verdict is not Verdict.UNKNOWN, f"{name}: out of time"
    assert (result.verdict is Verdict.LINEARIZABLE) == VERDICTS[name], result.explain(model)
    if not VERDICTS[name]:
        violation = result.violations[0]
        # The explanation names an operation that was not placed, and a prefix of others.
        assert violation.blocked not in violation.prefix
        assert len({op.id for op in violation.prefix}) == len(violation.prefix)
