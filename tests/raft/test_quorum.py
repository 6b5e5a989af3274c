"""Quorum tables (etcd's quorum/testdata): the commit index, quorum membership and vote
outcomes of majority and joint configurations, as data in testdata/quorum/*.txt, run
through the `ProgressTracker` the roles use (so the tables test what the core asks).

Steps, each followed by ``----`` and its output:

    committed voters=1,2,3 [outgoing=4,5] match=1:5,2:3,3:1[,...]   (self: node 1)
    active voters=1,2,3 [outgoing=...] recent=2,3                    (self: node 1)
    vote voters=1,2,3 [outgoing=...] granted=1,2 rejected=3

Ids missing from `match` have matched nothing (0). REWRITE=1 writes the actual output
into the files.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from consensus.raft import Configuration
from consensus.raft.progress import Progress
from consensus.raft.tracker import ProgressTracker
from tests.raft.test_interaction import check_script

TABLES = Path(__file__).parent / "testdata" / "quorum"
ME = 1


def _ids(text: str) -> frozenset[int]:
    return frozenset(int(x) for x in text.split(",") if x)


def _tracker(args: dict[str, str]) -> ProgressTracker:
    config = Configuration(_ids(args.get("voters", "")), _ids(args.get("outgoing", "")))
    tracker = ProgressTracker(ME, lambda: config)
    for peer in sorted(config.all_voters - {ME}):
        tracker.progress[peer] = Progress(1, 8)
    return tracker


def run(command: str) -> str:
    verb, *rest = command.split()
    args = dict(word.split("=", 1) for word in rest)
    tracker = _tracker(args)
    if verb == "committed":
        matched = dict(pair.split(":") for pair in args.get("match", "").split(",") if pair)
        for peer, pr in tracker.progress.items():
            pr.match = int(matched.get(str(peer), 0))
        index = tracker.committed(int(matched.get(str(ME), 0)))
        return "unlimited" if index >= 1 << 62 else str(index)
    if verb == "active":
        recent = _ids(args.get("recent", ""))
        for peer, pr in tracker.progress.items():
            pr.recent_active = peer in recent
        active = tracker.quorum_active()
        tracker.forget_activity()
        assert not any(pr.recent_active for pr in tracker.progress.values())
        return str(active).lower()
    if verb == "vote":
        for granted, key in ((True, "granted"), (False, "rejected")):
            for peer in sorted(_ids(args.get(key, ""))):
                assert tracker.record_vote(peer, granted)
                assert not tracker.record_vote(peer, not granted)   # the first answer stands
        return tracker.tally_votes().value
    raise AssertionError(f"unknown step {verb!r}")


@pytest.mark.parametrize("path", sorted(TABLES.glob("*.txt")), ids=lambda p: p.stem)
def test_quorum_table(path: Path):
    check_script(path, run)
