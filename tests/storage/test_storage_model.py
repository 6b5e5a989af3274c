"""Model-based test: random appends, reads, truncations, compactions, resets and reopens
against a plain list, with segments small enough that every operation crosses them."""
from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from consensus.storage import CompactedIndexError, SegmentedLog

SEGMENT_BYTES = 128  # a 20-byte header and a few small records


class LogAgainstAList(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="garlicfarm-log-model-")
        self.first = 1
        self.records: list[bytes] = []  # records[k] has index first + k
        self.log: SegmentedLog | None = None

    @initialize(policy=st.sampled_from(["never", "batch", "always"]))
    def open_log(self, policy: str) -> None:
        self.policy = policy
        self.log = SegmentedLog.open(self.directory, fsync=policy, segment_bytes=SEGMENT_BYTES)

    @property
    def last(self) -> int:
        return self.first + len(self.records) - 1

    @rule(payloads=st.lists(st.binary(max_size=90), min_size=1, max_size=5))
    def append(self, payloads: list[bytes]) -> None:
        if len(payloads) == 1:
            assert self.log.append(payloads[0]) == self.last + 1
        else:
            assert self.log.append_many(payloads) == self.last + len(payloads)
        self.records += payloads

    @rule(data=st.data())
    def read(self, data) -> None:
        start = data.draw(st.integers(self.first, self.last + 1))
        stop = data.draw(st.integers(start, self.last + 1))
        max_bytes = data.draw(st.none() | st.integers(0, 200))
        got = self.log.read(start, stop, max_bytes=max_bytes)
        wanted = self.records[start - self.first:stop - self.first]
        if max_bytes is not None and wanted:
            fits, total = 1, len(wanted[0])
            while fits < len(wanted) and total + len(wanted[fits]) <= max_bytes:
                total += len(wanted[fits])
                fits += 1
            wanted = wanted[:fits]
        assert got == wanted

    @rule(data=st.data())
    def truncate_after(self, data) -> None:
        index = data.draw(st.integers(self.first - 1, self.last + 2))
        self.log.truncate_after(index)
        if index < self.last:  # a cut is durable on return
            del self.records[index + 1 - self.first:]
            assert self.log.durable_index == self.last

    @rule(data=st.data())
    def truncate_below_the_first_index(self, data) -> None:
        index = data.draw(st.integers(self.first - 5, self.first - 2))
        with pytest.raises(CompactedIndexError):
            self.log.truncate_after(index)

    @rule(data=st.data())
    def compact_before(self, data) -> None:
        index = data.draw(st.integers(self.first - 1, self.last + 2))
        self.log.compact_before(index)
        new_first = self.log.first_index
        assert self.first <= new_first <= max(self.first, index)  # only whole segments < index
        self.records = self.records[new_first - self.first:]
        self.first = new_first

    @rule(first=st.integers(0, 60))
    def reset(self, first: int) -> None:
        self.log.reset(first)
        self.first, self.records = first, []

    @rule()
    def sync(self) -> None:
        self.log.sync()
        assert self.log.durable_index == self.last

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = SegmentedLog.open(self.directory, fsync=self.policy,
                                     segment_bytes=SEGMENT_BYTES, first_index=999)
        assert self.log.recovery.cut_bytes == 0 and self.log.recovery.removed_files == ()

    @precondition(lambda self: self.log is not None)
    @invariant()
    def same_records(self) -> None:
        assert (self.log.first_index, self.log.last_index) == (self.first, self.last)
        assert self.log.read(self.first, self.last + 1) == self.records

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


LogAgainstAList.TestCase.settings = settings(max_examples=40, stateful_step_count=30,
                                             deadline=None)
test_log_against_a_list = pytest.mark.timeout(120)(LogAgainstAList.TestCase)
