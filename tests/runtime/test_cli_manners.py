"""The `garlicfarm` command's manners (issue 30): a mistyped command or option gets a
"did you mean" naming the nearest one instead of the whole usage, and no help text
shows a source path."""
from __future__ import annotations

import re

import pytest

from garlicfarm.cli import SUBCOMMANDS, main

pytestmark = pytest.mark.timeout(60)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:             # argparse's --help and usage errors
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_mistyped_command_suggests_the_nearest(capsys):
    code, out, err = run(capsys, "stauts")
    assert code == 2 and not out
    assert "unknown command 'stauts'; did you mean status?" in err
    assert "commands:" not in err                       # one line, not the whole usage
    code, _, err = run(capsys, "tranfser-leader")
    assert code == 2 and "did you mean transfer-leader?" in err
    code, _, err = run(capsys, "xyzzy")                 # nothing close: the usage
    assert code == 2 and "did you mean" not in err and "commands:" in err


def test_a_mistyped_option_suggests_the_nearest(capsys):
    code, _, err = run(capsys, "status", "--endpoints", "127.0.0.1:1", "--usre", "ops")
    assert code == 2 and "unrecognized arguments: --usre ops (did you mean --user?)" in err
    code, _, err = run(capsys, "node", "--id", "1", "--data-dri", "/tmp/x")
    assert code == 2 and "(did you mean --data-dir?)" in err
    code, _, err = run(capsys, "remove-server", "2", "--forse")
    assert code == 2 and "(did you mean --force?)" in err


@pytest.mark.parametrize("command", ["node", "status", "add-server", "remove-server",
                                     "transfer-leader", "config", "torture"])
def test_help_shows_no_source_paths(capsys, command):
    assert command in SUBCOMMANDS
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and "usage: garlicfarm" in out
    assert not re.search(r"\w+/\w+\.py|consensus/|pyspark_farm/", out), out


def test_status_takes_username_and_both_timeouts(capsys):
    from consensus.admin.admin import build_parser
    args = build_parser("status").parse_args(
        ["--username", "ops", "--dial-timeout", "0.5", "--timeout", "7"])
    assert (args.username, args.dial_timeout, args.timeout) == ("ops", 0.5, 7.0)
    args = build_parser("status").parse_args(["--user", "ops", "--command-timeout", "3"])
    assert (args.username, args.timeout) == ("ops", 3.0)
