"""Local commands import no network stack, no loader and no torch (issue 12): what they import is their cost.

Each command runs in a fresh process (as a user runs it); the test reads the modules it had imported at exit.
The Hub is unreachable while they run (``HF_ENDPOINT`` points at a closed port), so none of them may need it.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_cli, run_cli_imports
from projects import CPU_ENV, write_pyproject

from kernlock import api
from kernlock.environments.environment import detect
from kernlock.environments.gpus import nvml_capabilities
from kernlock.testing import HubServer

pytestmark = pytest.mark.subprocess

CUDA_ENV = "torch212-cxx11-cu128-x86_64-linux"
#: kernlock's modules of the kernel cache, from the cheapest (layout) to the download and orchestration.
CACHE_MODULES = (
    "kernlock.sync.cache",
    "kernlock.sync.integrity",
    "kernlock.sync.verify",
    "kernlock.sync.fetch",
    "kernlock.sync.engine",
)
#: What a command that makes no request and loads nothing must not import (each costs tens to hundreds of ms).
HEAVY = ("kernels", "huggingface_hub", "httpx", "httpx2", "httpcore", "httpcore2", "torch", "transformers", "filelock")
#: A thread pool's imports (concurrent.futures imports logging) and a file write's: what a command pays that has
#: nothing to fetch, only a little to hash and no receipt to rewrite.
FAN_OUT_AND_WRITE = ("concurrent.futures", "logging", "tempfile")
#: hashlib loads OpenSSL (~5 ms): a command that hashes no file takes its few digests (the lock's content-hash,
#: pyproject's requires-hash, cache keys) from the interpreter's own SHA-256 (kernlock.util.digest).
OPENSSL = ("hashlib", "_hashlib")
#: logging and what it imports (~10 ms): sigstore's, imported with it (a remembered signature needs neither).
LOGGING = ("logging", "traceback", "textwrap")
#: importlib.metadata and what it imports (~15 ms): only `kernlock env` reads installed versions (its job).
METADATA = ("importlib.metadata", "email", "zipfile", "csv")


#: huggingface_hub's constants (the Hub cache, the offline switch: kernlock.util.hfenv) import only these two modules.
CONSTANTS = ("huggingface_hub", "huggingface_hub.constants")


def _anew(project: Path) -> None:
    """Touch pyproject.toml: the everyday commands no longer answer from memory (kernlock.commands.unchanged) and
    derive their answer again, which is the path the import tests below pin."""
    os.utime(project / "pyproject.toml")


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY and m not in CONSTANTS)


@pytest.fixture
def synced(user_env: dict[str, str], hub: HubServer, project: Path) -> dict[str, str]:
    """A project locked for this machine and a CUDA machine, synced here; the environment with the Hub gone."""
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', [CPU_ENV, CUDA_ENV])
    api.lock(project)
    api.sync(project, progress=False)
    gone = {**user_env, "HF_ENDPOINT": "http://127.0.0.1:9"}
    # The first command after an install reads the installed transformers/kernels versions once, for the gate's
    # one-line warning (kernlock.environments.gatewarning remembers the verdict): the tests below see every later one.
    assert run_cli("show", env=gone, cwd=project).returncode == 0
    return gone


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_only_click(flag: str, tmp_path: Path, user_env: dict[str, str]):
    """`--help` and `--version` cost what click costs: not even the lock model or kernlock's API is imported."""
    done, modules = run_cli_imports(flag, env=user_env, cwd=tmp_path, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert "kernlock" in done.stdout
    ours = sorted(m for m in modules if m.startswith("kernlock"))
    assert ours == [
        "kernlock",
        "kernlock._version",
        "kernlock.cli",
        "kernlock.cli.airgap",  # `bundle` and `serve` (click only)
        "kernlock.cli.app",
        "kernlock.cli.check",  # `check` (click only)
        "kernlock.cli.common",
        "kernlock.cli.console",
        "kernlock.cli.environments",  # `environments` (click only)
        "kernlock.cli.hook",  # the `kernlock hook` group's commands (click only)
        "kernlock.cli.interop",  # `import` and `export` (click only)
        "kernlock.cli.ray_env",  # `ray-env` (click only)
        "kernlock.cli.run",
        "kernlock.errors",
        "kernlock.util",
        "kernlock.util.interrupt",  # the console's Ctrl-C handler, installed before the command is imported
        "kernlock.util.wording",
    ]
    assert _heavy(modules) == []
    assert "tomlkit" not in modules and "packaging" not in modules


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["lock", "--check"], "kernels.lock is up to date"),
        (["sync"], "(0 downloaded, 1 already verified)"),
        (["sync", "--frozen"], "(0 downloaded, 1 already verified)"),
        (["sync", "--locked"], "(0 downloaded, 1 already verified)"),
        (["show"], "kernels-community/activation"),
        (["verify"], "all match kernels.lock"),
        (["env"], f"environment: {CPU_ENV}"),
        (["env", "--json"], '"generation"'),
    ],
)
def test_local_commands_import_no_network_loader_or_torch(
    args: list[str], says: str, synced: dict[str, str], project: Path, tmp_path: Path
):
    """A command that needs no request imports neither huggingface_hub/httpx, nor kernels, nor torch; it works
    with the Hub unreachable, and its output is what it always was. It writes no pyproject.toml either, so it
    reads it without tomlkit (the standard library's parser). Installed versions (`env`, the facts of this
    machine) are read through importlib.metadata by `env` alone: the others never import it. `lock --check`, `show`
    and a no-op `sync` hash no file, so they load no OpenSSL (hashlib); `verify` no logging. No command here imports
    sigstore: `verify` checks each signed digest again, and the bundle that `sync` had sigstore verify is
    remembered (`verify --full` verifies it again: tests/functional/test_signatures.py)."""
    _anew(project)
    done, modules = run_cli_imports(*args, env=synced, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert says in done.stdout
    assert _heavy(modules) == []
    assert "tomlkit" not in modules
    if args == ["verify"]:
        assert sorted(m for m in LOGGING if m in modules) == []
        assert "sigstore" not in modules and "2 signatures verified offline" not in done.stdout
        assert "1 signature verified offline" in done.stdout
        return
    assert "sigstore" not in modules and "kernlock.signing.bundle" not in modules
    if args[0] in ("lock", "sync", "show"):  # no file to hash (`verify` re-hashes them)
        assert sorted(m for m in OPENSSL if m in modules) == []
    if args[0] != "env":
        assert sorted(m for m in METADATA if m in modules) == []


#: What an everyday command derives its answer with, and needs no longer when it answers from memory: the lock
#: model and TOML, the project's reader, this machine's detection (packaging), the cache checks.
DERIVING = (
    *("kernlock.lock.model", "kernlock.lock.file", "tomllib", "kernlock.project.inputs", "packaging"),
    *("kernlock.environments.environment", *CACHE_MODULES),
)


@pytest.mark.parametrize("args", [["lock", "--check"], ["sync"], ["sync", "--frozen"], ["sync", "--locked"], ["show"]])
def test_an_unchanged_project_is_answered_without_deriving(
    args: list[str], synced: dict[str, str], project: Path, tmp_path: Path
):
    """The second of two identical everyday commands, nothing changed between them, answers from what the first
    remembered (kernlock.commands.unchanged): the same output, without importing what derives it."""
    _anew(project)
    first, derived = run_cli_imports(*args, env=synced, cwd=project, out=tmp_path / "first.txt")
    again, modules = run_cli_imports(*args, env=synced, cwd=project, out=tmp_path / "again.txt")
    assert first.returncode == again.returncode == 0, (first.stderr, again.stderr)
    assert (again.stdout, again.stderr) == (first.stdout, first.stderr)
    assert "tomllib" in derived and "kernlock.lock.model" in derived  # the first one derived its answer
    assert sorted(m for m in modules if m.startswith(DERIVING)) == []


def test_a_second_verify_rehashes_without_deriving_what_it_checks_against(
    synced: dict[str, str], project: Path, tmp_path: Path
):
    """`verify` re-hashes every file each time, but what it checks against (the lock's entries, this machine) is
    remembered: the second one reads neither TOML nor the project, nor detects the machine, and prints the same.
    The fixture's files are small: the interpreter's own SHA modules hash them, no OpenSSL (hashlib) is loaded."""
    _anew(project)
    first, derived = run_cli_imports("verify", env=synced, cwd=project, out=tmp_path / "first.txt")
    again, modules = run_cli_imports("verify", env=synced, cwd=project, out=tmp_path / "again.txt")
    assert first.returncode == again.returncode == 0, (first.stderr, again.stderr)
    assert (again.stdout, again.stderr) == (first.stdout, first.stderr)
    assert "tomllib" in derived and "kernlock.environments.environment" in derived
    lock_reading = ("kernlock.lock.file", "tomllib", "kernlock.project.inputs", "kernlock.environments.environment")
    assert sorted(m for m in modules if m.startswith(lock_reading)) == []
    assert "kernlock.sync.integrity" in modules  # the files are hashed again
    assert sorted(m for m in OPENSSL if m in modules) == []


@pytest.mark.parametrize("args", [["lock", "--check"], ["env"]])
def test_commands_that_never_touch_the_cache_skip_the_cache_modules(
    args: list[str], synced: dict[str, str], project: Path, tmp_path: Path
):
    """`lock --check` and `env` read no cache state, so they import none of kernlock's cache modules."""
    _anew(project)
    done, modules = run_cli_imports(*args, env=synced, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert {m for m in modules if m.startswith("kernlock.")} & set(CACHE_MODULES) == set()


@pytest.mark.parametrize(
    ("args", "needs"),
    [
        (["show"], {"kernlock.sync.cache", "kernlock.sync.integrity"}),
        (["verify"], {"kernlock.sync.cache", "kernlock.sync.integrity", "kernlock.sync.verify"}),
        (["sync", "--frozen"], set(CACHE_MODULES)),
    ],
)
def test_commands_import_only_the_cache_modules_they_use(
    args: list[str], needs: set[str], synced: dict[str, str], project: Path, tmp_path: Path
):
    """`show` says whether each kernel is synced and `verify` re-hashes: both import the cache check, never the
    download or sync modules; a no-op `sync` imports them all (and still no network stack, tested above)."""
    _anew(project)
    done, modules = run_cli_imports(*args, env=synced, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert {m for m in modules if m.startswith("kernlock.")} & set(CACHE_MODULES) == needs


@pytest.mark.parametrize("args", [["sync"], ["sync", "--frozen"], ["sync", "--locked"]])
def test_commands_with_nothing_to_fetch_start_no_thread_pool(
    args: list[str], synced: dict[str, str], project: Path, tmp_path: Path
):
    """A no-op `sync` checks every variant before it would build a thread pool: none imports concurrent.futures
    (and its logging), nor tempfile (no file is written), nor sigstore (nothing was installed, so there is no
    signature to verify again). (`verify` imports sigstore, which imports logging and tempfile itself.)"""
    _anew(project)
    done, modules = run_cli_imports(*args, env=synced, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert "kernlock.sync.integrity" in modules  # it did check the cache
    assert sorted(m for m in FAN_OUT_AND_WRITE if m in modules) == []
    assert "sigstore" not in modules


def test_activation_and_lock_check_import_no_sigstore(synced: dict[str, str], project: Path, tmp_path: Path):
    """Run-time loads need no signature (the lock's hashes bind the bytes): `import kernlock.activate` and a
    kernel load through it, and `lock --check`, import neither sigstore nor kernlock's verifier."""
    done, modules = run_cli_imports("lock", "--check", env=synced, cwd=project, out=tmp_path / "check.txt")
    assert done.returncode == 0, done.stderr
    assert not {"sigstore", "kernlock.signing.bundle", "kernlock.signing.locktime"} & modules
    loaded = _modules_of_a_load(synced, project, tmp_path / "activate.txt")
    assert (
        "kernlock.activate" in loaded
        and not {"sigstore", "kernlock.signing.bundle", "kernlock.sync.signatures"} & loaded
    )


def _modules_of_a_load(env: dict[str, str], project: Path, out: Path) -> set[str]:
    """The modules a process holds after ``import kernlock.activate`` and one kernel load through it."""
    code = (
        "import sys, kernlock.activate, kernels\n"
        "kernels.get_kernel('kernels-community/activation', version=1)\n"
        f"open({str(out)!r}, 'w').write('\\n'.join(sys.modules))\n"
    )
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", code], env=env, cwd=project, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-3000:]
    return set(out.read_text().split("\n"))


def test_a_load_after_sync_imports_neither_the_lock_reader_nor_the_variant_grammar(
    synced: dict[str, str], project: Path, tmp_path: Path
):
    """After `kernlock sync` (which indexes the lock), a load reads its entries from the index: the TOML reader,
    the variant grammar and the environment parser (checked when the lock was read) are not imported (~5 ms)."""
    loaded = _modules_of_a_load(synced, project, tmp_path / "activate.txt")
    assert "kernlock.lock.index" in loaded and "kernlock.sync.integrity" in loaded  # it did read and check
    heavy = {
        "kernlock.lock.file",
        "kernlock.lock.document",
        "kernlock.variants.grammar",
        "kernlock.variants.types",
        "kernlock.environments.environment",
        "kernlock.environments.facts",
    }
    assert sorted(heavy & loaded) == []


def test_a_sync_with_something_to_fetch_fans_out(user_env: dict[str, str], project: Path, tmp_path: Path):
    """The other side: a sync with a file to fetch does build its thread pools (so the test above would notice a
    probe that saw nothing)."""
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', [CPU_ENV])
    lock = api.lock(project).lock
    done, modules = run_cli_imports("sync", env=user_env, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert f"downloaded {lock.kernels[0].repo}" in done.stdout
    assert {"concurrent.futures", "logging"} <= modules


def test_env_names_the_loader_generation_without_importing_it(synced: dict[str, str], project: Path, tmp_path: Path):
    """`kernlock env` reads the installed loader's version and generation from its files: the same answer the
    import-time probe gives (the one activation uses)."""
    from kernlock.runtime import loaders

    done, modules = run_cli_imports("env", env=synced, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    probe = loaders.probe()
    assert f"loader: kernels {probe.kernels} ({probe.generation} generation)" in done.stdout
    assert "kernels" not in modules


def test_a_command_that_edits_pyproject_imports_tomlkit(synced: dict[str, str], project: Path, tmp_path: Path):
    """The other side of the tomlkit check: `remove` edits pyproject.toml, keeping its formatting, through tomlkit
    (so the check above would notice a probe that saw nothing); the file keeps its other lines."""
    before = (project / "pyproject.toml").read_text()
    done, modules = run_cli_imports(
        "remove", "kernels-community/activation", env=synced, cwd=project, out=tmp_path / "modules.txt"
    )
    assert done.returncode == 0, done.stderr
    assert "tomlkit" in modules
    after = (project / "pyproject.toml").read_text()
    assert "kernels-community/activation" in before and "kernels-community/activation" not in after
    assert "[tool.kernlock]" in after


def test_a_command_that_fetches_imports_the_network_stack(user_env: dict[str, str], project: Path, tmp_path: Path):
    """The other side: `lock` with a stale lock asks the Hub, so it does import huggingface_hub (the test above
    would pass trivially if the import probe saw nothing)."""
    write_pyproject(project, '"kernels-community/activation" = "v1"\n', [CPU_ENV])
    done, modules = run_cli_imports("lock", env=user_env, cwd=project, out=tmp_path / "modules.txt")
    assert done.returncode == 0, done.stderr
    assert "huggingface_hub.file_download" in modules
    assert "torch" not in modules


@pytest.mark.slow
@pytest.mark.subprocess
def test_detection_without_importing_torch_agrees_with_torch_itself() -> None:
    """The CLI reads torch/version.py instead of importing torch, run-time activation asks the imported torch
    without the variant grammar (kernlock.environments.machine); every path must name the same environment."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kernlock.environments.environment import _detect_from_version_file\n"
        "from kernlock.environments.machine import torch_environment\n"
        "fast = _detect_from_version_file()\n"
        "assert 'torch' not in sys.modules, 'the fast path imported torch'\n"
        "print(fast, torch_environment())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == out[1] == str(detect())


@pytest.mark.subprocess
def test_local_commands_do_not_import_kernels() -> None:
    code = (
        "import kernlock.environments.environment, sys\n"
        "from kernlock.environments.environment import Environment\n"
        "Environment.parse('torch213-cxx11-cpu-x86_64-linux').select_variant(['torch-cpu'])\n"
        "assert 'kernels' not in sys.modules\n"
        "import kernlock.variants.grammar\n"
        "assert not {'kernels', 'huggingface_hub', 'torch'} & set(sys.modules), sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.subprocess
@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_without_the_driver_nvml_gives_no_answer_and_imports_nothing_heavy(monkeypatch: pytest.MonkeyPatch):
    """No libnvidia-ml (this CPU machine): None, so `kernlock env` falls back to torch's answer as before; the
    probe itself imports only ctypes."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_capabilities() is None
    code = "import sys; from kernlock.environments.gpus import nvml_capabilities; "
    code += "nvml_capabilities(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
