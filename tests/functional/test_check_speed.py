"""`kernlock check --speed` and `kernlock check --upgrade` (issue 33): speed against the path a kernel replaces, a
training step per attention implementation, and checking the builds an upgrade would move to before moving.

Three fixture builds of one attention kernel: v1 is right, v2 is right but does 8 times the work (it computes the
same attention 8 times, exactly), v3's backward is wrong for grouped-query attention (kernels-community#1085 on the
CPU). Speed is never asserted in absolute time: only orderings with a wide margin (8x the work against a factor
of 2.5), the figures being medians of interleaved repeats.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from envs import user_env_for
from projects import CPU_ENV, own_repo, write_pyproject

from kernlock.commands.check import regression
from kernlock.commands.check.report import CheckReport, CheckRow
from kernlock.commands.check.speed import SpeedRow
from kernlock.commands.check.timing import Timing
from kernlock.testing import Catalog, HubServer

pytestmark = pytest.mark.subprocess  # every test here starts kernlock, Python or a server process

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BUILDS = [CPU_ENV, "torch-cpu"]


@pytest.fixture(scope="module")
def repo(catalog: Catalog) -> str:
    """v1 right, v2 right and slow, v3 wrong for GQA gradients."""
    branches = {"v1": BUILDS, "v2": BUILDS, "v3": BUILDS}
    return own_repo(catalog, branches, kind="attention", kinds={"v2": "attention-slow", "v3": "attention-gqa-bug"})


@contextmanager
def _synced(catalog: Catalog, base: Path, repo: str, rev: str) -> Iterator[tuple[HubServer, Path, dict[str, str]]]:
    """A project locking ``repo`` at ``rev``, locked and synced, with the Hub running: (Hub, project, user env)."""
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{repo}" = "{rev}"\n', environments=[CPU_ENV])
    env = user_env_for(base / "home")
    with HubServer(catalog.root) as server:
        _locked(server, project, env)
        yield server, project, env


def _cli(server: HubServer, env: dict[str, str], *args: str) -> Any:
    return run_cli(*args, env={**env, **server.env()})


def _locked(server: HubServer, project: Path, env: dict[str, str]) -> None:
    for command in ("lock", "sync"):
        result = _cli(server, env, command, "--project", str(project))
        assert result.returncode == 0, result.stderr


def _medians(report: dict[str, Any], case_start: str) -> dict[tuple[str, str], float]:
    """(case, path) -> forward+backward (or step) median of the JSON report's speed rows."""
    found = {}
    for row in report["speed"]:
        timing = row["forward-backward"] or row["step"]
        if row["case"].startswith(case_start) and timing is not None:
            found[(row["case"], row["path"])] = timing["median-ms"]
    return found


@pytest.mark.slow
def test_speed_shows_the_slow_build_slower_and_a_regression_against_the_recorded_build(
    catalog: Catalog, repo: str, tmp_path: Path
) -> None:
    with _synced(catalog, tmp_path, repo, "v1") as (server, project, env):
        server.log.clear()
        right = _cli(server, env, "check", "--speed", "--seqlen", "128", "--record", "--project", str(project))
        print(right.stdout)
        assert right.returncode == 0, right.stdout + right.stderr[-3000:]
        assert len(server.log) == 0  # the synced build is checked and timed with no Hub request
        assert "kernel ÷ path" in right.stdout and "not measured" in right.stdout  # no peak memory on the CPU
        steps = right.stdout.split("\ntraining step on cpu: tiny (llama ", 1)[1].splitlines()[2:5]
        assert [line.split()[0].split("@")[0] for line in steps] == ["eager", "sdpa", repo], steps  # one each
        [entry] = tomllib.loads((project / "kernels.check.toml").read_text())["check"]
        assert entry["ref"] == "v1" and re.fullmatch(r"\d{4}-\d\d-\d\d", entry["speed-recorded"])
        paths = {(s["case"].split()[0], s["path"]) for s in entry["speed"]}
        assert paths == {(k, p) for k in ("attention", "training") for p in ("kernel", "sdpa", "eager")}

        write_pyproject(project, f'"{repo}" = "v2"\n', environments=[CPU_ENV])
        _locked(server, project, env)
        server.log.clear()
        slow = _cli(server, env, "check", "--speed", "--seqlen", "128", "--json", "--project", str(project))
        assert slow.returncode == 0, slow.stderr[-3000:]
        assert len(server.log) == 0
    report = json.loads(slow.stdout)
    assert all(row["result"] == "pass" for row in report["rows"])  # slow, and right
    medians = _medians(report, "attention")
    for shape in ("MHA", "GQA"):
        [case] = {c for c, _ in medians if f" {shape} " in c}
        assert medians[(case, "kernel")] > 2.5 * medians[(case, "sdpa")], medians  # 8x the work of sdpa
    steps = _medians(report, "training step")
    assert {path for _, path in steps} == {"kernel", "sdpa", "eager"}
    losses = {row["path"]: row["loss"] for row in report["speed"] if row["case"].startswith("training step")}
    assert abs(losses["kernel"] - losses["sdpa"]) < 1e-3, losses  # the same weights, data and (right) math
    [line] = report["regressions"]  # slower than the right build v1, recorded on this machine
    print(line)
    match = re.fullmatch(
        rf"{re.escape(repo)} v2 \w{{8}} is ([\d.]+)x slower than v1 \w{{8}} on cpu, recorded .+; the kernel's own "
        r"time [\d.]+x, sdpa on the same shapes [\d.]+x\)",
        line,
    )
    # v2 does 8x v1's work. The slowdown is the kernel's ratio against sdpa's between the two runs: on a busy CI host
    # the recorded run was once 5x slower than the new one (sdpa 0.21x), and the kernel's own ratio only 2.21x.
    assert match and float(match.group(1)) > 2.5, line


@pytest.mark.slow
def test_check_upgrade_to_the_broken_build_exits_1_naming_the_case_and_changes_nothing(
    catalog: Catalog, repo: str, tmp_path: Path
) -> None:
    with _synced(catalog, tmp_path, repo, "v1") as (server, project, env):
        before = {name: (project / name).read_bytes() for name in ("kernels.lock", "pyproject.toml")}
        result = _cli(server, env, "check", "--upgrade", "--kernel", repo, "--to", "v3", "--project", str(project))
    print(result.stdout)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    verdict = rf"{re.escape(repo)} v1 \w{{8}} -> v3 \w{{8}}: GQA float32 gradients FAIL \(([\d.e+-]+) > ([\d.e+-]+)\)"
    match = re.search(verdict, result.stdout)
    assert match and float(match.group(1)) > 10 * float(match.group(2)), result.stdout
    assert re.search(r"attention GQA float32 gradients\s+pass 0\.00e\+00\s+FAIL", result.stdout)
    assert "1 upgrade would break parity; kernels.lock is unchanged" in result.stdout
    assert {name: (project / name).read_bytes() for name in before} == before


@pytest.mark.slow
def test_check_upgrade_to_the_slow_build_reports_the_slowdown(catalog: Catalog, repo: str, tmp_path: Path) -> None:
    with _synced(catalog, tmp_path, repo, "v1") as (server, project, env):
        before = (project / "kernels.lock").read_bytes()
        args = ("check", "--upgrade", "--kernel", repo, "--to", "v2", "--speed", "--seqlen", "128")
        args += ("--project", str(project))
        result = _cli(server, env, *args)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    # the verdict names the case that slowed most: the attention's forward+backward or the training step around it
    # (on a loaded machine either can come out ahead; both are the slow build's doing)
    slower = r"(?:forward\+backward ([\d.]+)x slower \(attention|training step ([\d.]+)x slower \(llama)"
    match = re.search(rf"{re.escape(repo)} v1 \w{{8}} -> v2 \w{{8}}: pass, {slower}", result.stdout)
    assert match and float(match.group(1) or match.group(2)) > 2.5, result.stdout
    assert "no upgrade breaks parity" in result.stdout
    assert (project / "kernels.lock").read_bytes() == before


@pytest.mark.slow
def test_check_upgrade_follows_lock_upgrade_and_outdated_shows_the_recorded_verdict(
    catalog: Catalog, tmp_path: Path
) -> None:
    """kernels-community#1085 as it happened: the locked branch is re-uploaded with a broken GQA backward."""
    moving = own_repo(catalog, {"v1": BUILDS}, kind="attention")
    with _synced(catalog, tmp_path, moving, "v1") as (server, project, env):
        lock = (project / "kernels.lock").read_bytes()
        head = catalog.repo(moving).move_branch("v1", kind="attention-gqa-bug")
        result = _cli(server, env, "check", "--upgrade", "--record", "--project", str(project))
        print(result.stdout)
        assert result.returncode == 1, result.stdout + result.stderr[-3000:]
        assert f"-> v1 {head[:8]}: GQA float32 gradients FAIL" in result.stdout
        assert (project / "kernels.lock").read_bytes() == lock
        outdated = _cli(server, env, "outdated", "--project", str(project))
    print(outdated.stdout)
    assert outdated.returncode == 0, outdated.stderr
    assert f"checked {moving} {head[:12]} on cpu ({CPU_ENV}): FAIL: attention GQA float32 gradients" in outdated.stdout


def test_check_speed_and_upgrade_usage(catalog: Catalog, repo: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, f'"{repo}" = "v1"\n', environments=[CPU_ENV])
    env = user_env_for(tmp_path / "home")
    with HubServer(catalog.root) as server:
        for args, needle in (
            (("--to", "v2"), "--to goes with --upgrade"),
            (("--seqlen", "128"), "--seqlen goes with --speed"),
        ):
            result = _cli(server, env, "check", *args, "--project", str(project))
            assert result.returncode == 2 and needle in result.stderr, result.stderr
        _locked(server, project, env)
        result = _cli(server, env, "check", "--upgrade", "--to", "v2", "--project", str(project))
    assert result.returncode == 1 and "--to REV goes with exactly one --kernel NAME" in result.stderr
    assert "Traceback" not in result.stderr


def _report(speed: list[SpeedRow], commit: str = "b" * 40) -> CheckReport:
    row = CheckRow(
        kernel="o/k", ref="v2", commit=commit, variant=CPU_ENV, case="c", error=0.0, tolerance=1.0, verdict="pass"
    )
    return CheckReport(environment=CPU_ENV, device="cpu", rows=(row,), speed=tuple(speed))


def _timed(path: str, median: float, case: str = "attention GQA float32 b2 s256 h8/2 d64") -> SpeedRow:
    timing = Timing(median=median, q1=median, q3=median, repeats=7)
    return SpeedRow(kernel="o/k", commit="b" * 40, variant=CPU_ENV, case=case, path=path, total=timing)


def test_a_regression_is_a_ratio_of_the_same_case_and_machine_from_the_threshold_on() -> None:
    assert Timing.of([3.0, 1.0, 2.0, 100.0, 2.0]).median == 2.0  # the median: one outlier does not move it
    recorded = [
        {
            "repo": "o/k",
            "ref": "v1",
            "commit": "a" * 40,
            "environment": CPU_ENV,
            "device": "cpu",
            "result": "pass",
            "speed-recorded": "2026-12-01",
            "speed": [
                {"case": "attention GQA float32 b2 s256 h8/2 d64", "path": "kernel", "forward-backward-ms": 10.0},
                {"case": "attention GQA float32 b2 s256 h8/2 d64", "path": "sdpa", "forward-backward-ms": 10.0},
            ],
        }
    ]
    slower = _report([_timed("kernel", 18.0), _timed("sdpa", 10.1)])
    [line] = regression.regressions(recorded, slower)
    assert line.startswith("o/k v2 bbbbbbbb is 1.78x slower than v1 aaaaaaaa on cpu, recorded 2026-12-01")
    assert "the kernel's own time 1.80x, sdpa on the same shapes 1.01x" in line
    # the machine 5x faster than when v1 was recorded (sdpa 0.2x): the kernel's 0.4x is 2x slower against it
    [faster_host] = regression.regressions(recorded, _report([_timed("kernel", 4.0), _timed("sdpa", 2.0)]))
    assert " is 2.00x slower than v1 " in faster_host, faster_host
    # the machine 2x slower: the kernel 2x slower too is no regression
    assert regression.regressions(recorded, _report([_timed("kernel", 20.0), _timed("sdpa", 20.0)])) == []
    assert regression.regressions(recorded, _report([_timed("kernel", 11.0)])) == []  # under the threshold
    other_shape = _report([_timed("kernel", 50.0, case="attention GQA float32 b2 s512 h8/2 d64")])
    assert regression.regressions(recorded, other_shape) == []  # another shape is not comparable
    other_machine = [{**recorded[0], "device": "NVIDIA H200"}]
    assert regression.regressions(other_machine, slower) == []
