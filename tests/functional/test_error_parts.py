"""The errors built from parts (kernlock.errors) at the sites that start a process: the fix is a part of its own
(``.fix``), and the line reads as before. The others are in tests/unit/test_errors.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernlock.errors import LaunchError

pytestmark = pytest.mark.subprocess  # each test tries to start a program that is not there


def test_a_command_run_cannot_start_names_its_fix(tmp_path: Path) -> None:
    from kernlock.commands.supervise import supervise

    missing = str(tmp_path / "no-such-command")
    with pytest.raises(LaunchError) as err:
        supervise([missing], dict(os.environ), None)
    assert str(err.value) == f"cannot run {missing!r}: No such file or directory; check the command and PATH."
    assert (err.value.why, err.value.fix) == ("No such file or directory", "check the command and PATH")


def test_a_hook_interpreter_that_cannot_start_names_its_fix(tmp_path: Path) -> None:
    from kernlock.commands.hook import site_packages

    missing = str(tmp_path / "python")
    with pytest.raises(LaunchError) as err:
        site_packages(missing)
    assert str(err.value) == f"cannot run {missing!r}: No such file or directory; pass the interpreter's path."
    assert err.value.fix == "pass the interpreter's path"
