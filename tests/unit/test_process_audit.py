"""The check behind the ``subprocess`` marker (tests/processes.ProcessLog) sees every way a test can start a
process: a plain subprocess, os.system, os.posix_spawn, a fork, and multiprocessing's spawn and forkserver children
(Python 3.14's default on Linux is forkserver), its forkserver and its resource tracker. Each case tries to start
one while the log refuses (ProcessLog.refusing: it notes the start, then raises instead), so no process starts and
this stays a unit test; a test without the marker that started it would fail at teardown, naming it."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
from collections.abc import Callable, Iterator
from multiprocessing import forkserver, resource_tracker
from pathlib import Path

import pytest
from processes import ProcessLog, ProcessRefused


@pytest.fixture
def tracker_running(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """multiprocessing's resource tracker as if it ran already (its pipe a fresh one): a Process start then starts
    the child alone (else its first start is the tracker's, a case of its own below)."""
    read, write = os.pipe()
    monkeypatch.setattr(resource_tracker._resource_tracker, "ensure_running", lambda: None)
    monkeypatch.setattr(resource_tracker._resource_tracker, "_fd", write)
    yield
    os.close(read)
    os.close(write)


def _process(method: str) -> Callable[[], None]:
    return lambda: multiprocessing.get_context(method).Process(target=os.getpid).start()


PLAIN: dict[str, tuple[Callable[[], object], str]] = {
    "subprocess": (lambda: subprocess.run(["true"], check=False), "true"),
    "os.system": (lambda: os.system("true"), "true"),
    "os.posix_spawn": (lambda: os.posix_spawn("/bin/true", ["true"], dict(os.environ)), "true"),
    "os.fork": (os.fork, "a fork of the test process"),
    "resource tracker": (
        lambda: resource_tracker.ResourceTracker().ensure_running(),
        "the multiprocessing resource tracker",
    ),
}


@pytest.mark.parametrize("case", PLAIN)
def test_the_log_sees_a_process_start(process_log: ProcessLog, case: str) -> None:
    start, name = PLAIN[case]
    with process_log.refusing() as refused, pytest.raises(ProcessRefused):
        start()
    assert refused == [name]


@pytest.mark.usefixtures("tracker_running")
def test_the_log_sees_a_multiprocessing_spawn_child(process_log: ProcessLog) -> None:
    with process_log.refusing() as refused, pytest.raises(ProcessRefused):
        _process("spawn")()
    assert refused == ["a multiprocessing spawn child"]


@pytest.mark.usefixtures("tracker_running")
def test_the_log_sees_the_forkserver_start(process_log: ProcessLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkserver._forkserver, "_forkserver_pid", None)  # none runs yet in this process
    with process_log.refusing() as refused, pytest.raises(ProcessRefused):
        _process("forkserver")()
    assert refused == ["the multiprocessing forkserver"]


@pytest.mark.usefixtures("tracker_running")
def test_the_log_sees_a_child_of_a_running_forkserver(
    process_log: ProcessLog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A forkserver started before (by an earlier test, marked) starts the next child on a request alone: the
    test process starts nothing itself, it connects to the server's address (here one nothing listens on)."""
    monkeypatch.setattr(forkserver._forkserver, "ensure_running", lambda: None)
    monkeypatch.setattr(forkserver._forkserver, "_forkserver_address", str(tmp_path / "listener"))
    with process_log.refusing() as refused, pytest.raises(ProcessRefused):
        _process("forkserver")()
    assert refused == ["a multiprocessing forkserver child"]


def test_other_connections_are_no_start(process_log: ProcessLog, tmp_path: Path) -> None:
    import socket

    with process_log.refusing() as refused, socket.socket(socket.AF_UNIX) as client, pytest.raises(OSError):
        client.connect(str(tmp_path / "nobody"))
    assert refused == []
