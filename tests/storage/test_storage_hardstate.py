"""The hard state file: atomic replacement, leftovers of crashes, corruption."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from consensus.storage import CorruptLogError, HardState, HardStateFile
from consensus.storage.hardstate import FILE_SIZE
from storage_testkit import flip_byte


def test_nothing_saved_reads_as_the_initial_state(tmp_path):
    assert HardStateFile(tmp_path / "hs").load() == HardState(0, None, 0)


@pytest.mark.parametrize("state", [HardState(1, None, 0), HardState(7, 3, 42),
                                   HardState(2**64 - 1, 0, 2**64 - 1)])
def test_saved_state_reads_back(tmp_path, state):
    path = tmp_path / "deep" / "dir" / "hs"
    HardStateFile(path).save(state)
    assert HardStateFile(path).load() == state
    assert os.path.getsize(path) == FILE_SIZE


def test_each_save_replaces_the_whole_state(tmp_path):
    hs = HardStateFile(tmp_path / "hs")
    hs.save(HardState(1, 5, 3))
    hs.save(HardState(2, None, 4))
    assert hs.load() == HardState(2, None, 4)
    assert sorted(os.listdir(tmp_path)) == ["hs"]  # the temp file was renamed away


def test_a_temp_file_left_by_a_crash_is_ignored_then_overwritten(tmp_path):
    hs = HardStateFile(tmp_path / "hs")
    hs.save(HardState(3, 1, 9))
    with open(str(tmp_path / "hs") + ".tmp", "wb") as file:
        file.write(b"half a state")  # the crash hit between writing the temp and renaming
    assert hs.load() == HardState(3, 1, 9)
    hs.save(HardState(4, 2, 10))
    assert hs.load() == HardState(4, 2, 10)
    assert sorted(os.listdir(tmp_path)) == ["hs"]


@pytest.mark.parametrize("damage, message", [
    (lambda p: flip_byte(p, 20), "hard state CRC mismatch"),
    (lambda p: flip_byte(p, 0), "bad magic"),
    (lambda p: os.truncate(p, 30), "found 30"),
    (lambda p: open(p, "ab").write(b"x"), "found more"),
])
def test_a_damaged_file_is_reported_not_reset(tmp_path, damage, message):
    path = str(tmp_path / "hs")
    HardStateFile(path).save(HardState(5, 1, 5))
    damage(path)
    with pytest.raises(CorruptLogError, match=message) as caught:
        HardStateFile(path).load()
    assert caught.value.file == path


@pytest.mark.parametrize("fields, message", [
    ((-1, None, 0), "HardState.term=-1"), ((1, -2, 0), "HardState.vote=-2"),
    ((1, None, 2**64), "HardState.commit="), ((1, "n1", 0), "HardState.vote='n1'"),
])
def test_invalid_fields_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        HardState(*fields)


SAVER = textwrap.dedent("""
    from consensus.storage import HardState, HardStateFile
    hs = HardStateFile({path!r})
    term = 0
    while True:
        term += 1
        hs.save(HardState(term, term % 5, term * 2))
        print(term, flush=True)
""")


@pytest.mark.timeout(60)
def test_a_saver_killed_at_any_moment_leaves_a_whole_state(tmp_path):
    path = str(tmp_path / "hs")
    child = subprocess.Popen([sys.executable, "-c", SAVER.format(path=path)],
                             stdout=subprocess.PIPE, text=True)
    reported = 0
    try:
        for line in child.stdout:
            reported = int(line)
            if reported >= 60:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    state = HardStateFile(path).load()
    assert state.term >= reported
    assert state == HardState(state.term, state.term % 5, state.term * 2)
