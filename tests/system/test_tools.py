"""kernlock in the tools people already run (issue #14): pre-commit, `uv tool install` / `uvx`, a GitHub Actions
workflow. pre-commit and uv are the real packages; they install kernlock from this checkout and its dependencies
from the package index (once per test session for pre-commit), and nothing else touches the network.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cli import kernlock_usage_problem, run_cli
from envs import clean_env
from projects import CPU_ENV, write_pyproject

from kernlock.testing import Catalog, HubServer

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def source_repo(dest: Path) -> str:
    """This checkout's files (committed or not, without ignored ones) as a one-commit git repo; its commit sha."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(source.read_bytes())
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "kernlock"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=dest, capture_output=True, text=True).stdout.strip()


def tool_env(tmp: Path) -> dict[str, str]:
    """A user's shell without this test's virtual environment: no kernlock, no kernels on PATH."""
    env = {k: v for k, v in clean_env(HOME=str(tmp / "home")).items() if not k.startswith("VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != BIN)
    return env


# -- pre-commit ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def hook_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """(a git repo of this checkout, its commit, a PRE_COMMIT_HOME shared by the session: one hook install)."""
    src = tmp_path_factory.mktemp("kernlock-src")
    return src, source_repo(src), tmp_path_factory.mktemp("pre-commit-home")


@pytest.mark.slow
@pytest.mark.subprocess
def test_pre_commit_hook_passes_on_a_fresh_lock_and_fails_naming_the_fix(
    hook_source: tuple[Path, str, Path], catalog: Catalog, hub: HubServer, user_env: dict[str, str], tmp_path: Path
):
    src, rev, home = hook_source
    repo = tmp_path / "user-repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    write_pyproject(repo, f'"{catalog.activation}" = "v1"\n', [CPU_ENV])
    assert run_cli("lock", env=user_env, cwd=repo).returncode == 0
    (repo / ".pre-commit-config.yaml").write_text(
        yaml.safe_dump({"repos": [{"repo": str(src), "rev": rev, "hooks": [{"id": "kernlock-check"}]}]})
    )
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    env = {**tool_env(tmp_path), "PRE_COMMIT_HOME": str(home), **hub.env(), "HF_HUB_OFFLINE": "1"}
    run = [str(BIN / "pre-commit"), "run", "kernlock-check", "--all-files"]

    hub.log.clear()
    fresh = subprocess.run(run, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "kernels.lock is up to date with pyproject.toml" in fresh.stdout and "Passed" in fresh.stdout

    write_pyproject(repo, f'"{catalog.activation}" = "v2"\n', [CPU_ENV])
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    stale = subprocess.run(run, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert stale.returncode == 1 and "Failed" in stale.stdout
    assert "kernels.lock is stale" in stale.stdout and "run `kernlock lock`" in stale.stdout
    assert len(hub.log) == 0  # the hook asks no Hub


def test_pre_commit_hooks_file_runs_the_check():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "kernlock-check"]
    words = shlex.split(hook["entry"])
    assert words[0] == "kernlock" and kernlock_usage_problem(words[1:]) is None
    assert words[1:] == ["lock", "--check"] and hook["pass_filenames"] is False


# -- uv --------------------------------------------------------------------------------------------------------


@pytest.fixture
def uv_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A clean uv: its own tool folder, bin folder and cache; this Python, never a downloaded one."""
    env = tool_env(tmp_path)
    env.update(
        {
            "UV_TOOL_DIR": str(tmp_path / "uv-tools"),
            "UV_TOOL_BIN_DIR": str(tmp_path / "uv-bin"),
            "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_NO_CONFIG": "1",
        }
    )
    yield env


@pytest.mark.slow
@pytest.mark.subprocess
def test_uv_tool_install_and_uvx_lock_a_project_without_kernels(
    uv_env: dict[str, str], catalog: Catalog, hub: HubServer, tmp_path: Path
):
    uv = str(BIN / "uv")
    installed = subprocess.run(
        [uv, "tool", "install", "--python", sys.executable, str(ROOT)],
        env=uv_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stderr
    tool_python = Path(uv_env["UV_TOOL_DIR"]) / "kernlock" / "bin" / "python"
    listed = subprocess.run(
        [uv, "pip", "list", "--python", str(tool_python)], env=uv_env, capture_output=True, text=True
    ).stdout
    names = {line.split()[0].lower() for line in listed.splitlines()[2:] if line.strip()}
    assert "kernlock" in names and "kernels" in names
    assert "torch" not in names and "transformers" not in names  # kernlock never pulls torch

    project = tmp_path / "project"  # a user's project: no virtual environment, no kernels installed
    project.mkdir()
    write_pyproject(project, f'"{catalog.activation}" = "v1"\n', [CPU_ENV])
    env = {
        **uv_env,
        **hub.env(),
        "HF_HOME": str(tmp_path / "hf-home"),
        "KERNLOCK_CACHE": str(tmp_path / "kernlock-cache"),
    }
    kernlock = str(Path(uv_env["UV_TOOL_BIN_DIR"]) / "kernlock")
    locked = subprocess.run([kernlock, "lock"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert locked.returncode == 0, locked.stderr
    assert "wrote kernels.lock" in locked.stdout and catalog.activation in locked.stdout
    uvx = subprocess.run(
        [uv, "tool", "run", "--python", sys.executable, "--from", str(ROOT), "kernlock", "lock", "--check"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert uvx.returncode == 0 and "kernels.lock is up to date" in uvx.stdout, uvx.stderr


# -- the GitHub Actions example ------------------------------------------------------------------------------


def test_github_actions_example_parses_and_runs_only_real_kernlock_commands():
    workflow = yaml.safe_load((ROOT / "examples" / "github-actions" / "kernels.yml").read_text())
    commands = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            assert "uses" in step or "run" in step, step
            for line in step.get("run", "").splitlines():
                words = shlex.split(line)
                while words and words[0] in ("uvx", "uv", "tool", "run"):
                    words.pop(0)
                if words and words[0] == "kernlock":
                    commands.append(words[1:])
    for words in commands:
        assert kernlock_usage_problem(words) is None
    assert [w[:2] for w in commands] == [["lock", "--check"], ["sync", "--locked"], ["verify"]]
    test_job = workflow["jobs"]["test"]
    assert "KERNELS_CACHE" in test_job["env"]
    cached = [s for s in test_job["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert cached and cached[0]["with"]["path"] in test_job["env"]["KERNELS_CACHE"]
    assert any(s.get("env", {}).get("HF_HUB_OFFLINE") == "1" for s in test_job["steps"])
