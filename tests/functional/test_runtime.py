"""Run-time activation: every Hub kernel load in a process honours kernels.lock (issue #5).

A module-wide project locks and syncs five kernels from a local Hub, which is then **stopped**. Every load runs
in a fresh Python process (HF_ENDPOINT, HF_HUB_OFFLINE and KERNELS_CACHE are read at import) with an audit hook
that records every socket it connects: a load that needed the network would fail, and the record must be empty.
Each load path proves its identity: the ``KERNEL_IDENTITY`` (repo, version, variant, build id) of the imported
build equals the one at the locked commit in the fixture's git repository, and its commit is the locked one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cli import run_cli
from envs import clean_env, user_env_for
from processes import CHILD_HELPERS, CHILD_PRELUDE, HIDE_SIGSTORE, Child, kernelize_silu_and_mul
from projects import CPU_ENV, LockedProject, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock
from kernlock.runtime.policy import satisfies
from kernlock.sync import cache as caches
from kernlock.testing import CPU_VARIANT, HubServer, build_catalog, create_kernel_repo

pytestmark = pytest.mark.subprocess

FA2 = "kernels-community/flash-attn2"
ACTIVATION = "kernels-community/activation"
LAYER_NORM = "kernels-community/triton-layer-norm"
PAGED = "kernels-community/paged-attention"
FP8 = "kernels-community/finegrained-fp8"  # transformers' lazy_load_kernel("finegrained-fp8") asks version=4
UNLOCKED = "kernels-community/rotary"
#: Unlocked and unsigned: kernels 0.18+ check a signed build's signature over the network, which these tests do not
#: have (that path, with a signed unlocked build: tests/compat/test_load_checks.py); an unsigned one they only warn of.
UNSIGNED = "kernels-community/unsigned-rotary"
OTHER_ENV = "torch212-cxx11-cpu-x86_64-linux"

REQUIREMENTS = f"""\
"{FA2}" = "v2"
"{ACTIVATION}" = "v2"
"{LAYER_NORM}" = "v1"
"{PAGED}" = "v2"
"{FP8}" = "v1"
"""


class Runtime(LockedProject):
    def write_lock(self, path: Path, lock: Lock) -> Path:
        lockfile.write(path, lock)
        return path


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    """A project with five locked kernels, synced from a local Hub that is stopped before any test runs."""
    base = tmp_path_factory.mktemp("runtime")
    root = base / "hub"
    build_catalog(root)
    create_kernel_repo(root, FP8, {"v1": [CPU_VARIANT], "v4": [CPU_VARIANT]}, kind="activation")
    create_kernel_repo(root, UNSIGNED, {"v1": [CPU_VARIANT]}, kind="activation", signed=False)
    project = base / "project"
    project.mkdir()
    write_pyproject(project, REQUIREMENTS, environments=[CPU_ENV])
    env = user_env_for(base)
    with HubServer(root) as server:
        for command in ("lock", "sync"):
            result = run_cli(command, "--project", str(project), env={**env, **server.env()})
            assert result.returncode == 0, result.stderr
        env["HF_ENDPOINT"] = server.url
    yield Runtime(root, project, lockfile.read(project / "kernels.lock"), env)


@pytest.fixture
def online(rt: Runtime, tmp_path: Path) -> Iterator[tuple[HubServer, dict[str, str]]]:
    """The Hub running again, and a user environment pointed at it with an empty cache."""
    with HubServer(rt.root) as server:
        env = user_env_for(tmp_path, server)
        yield server, env


# -- transformers' attention paths, forward and backward, with the Hub stopped --------------------------------


@pytest.mark.slow
def test_attn_implementation_repo_loads_the_locked_build_over_transformers_default(rt: Runtime):
    """transformers asks flash-attn2 ``version=4`` here; the lock pins v2 and wins (logged at info)."""
    child = rt.run(
        """
        import logging
        logging.basicConfig(level=logging.INFO)
        model, result = train_llama("kernels-community/flash-attn2")
        report(**result)
        """
    )
    report = rt.assert_locked(child, FA2)
    assert report["attn"] == FA2
    assert report["q_grad"] > 0
    assert report["loaded"][FA2]["identity"]["version"] == 2
    assert report["loaded"][FA2]["calls"]["flash_attn_func"] == 2  # one call per layer: the kernel ran
    assert "asked for version=4" in child.stderr and "kernels.lock pins v2" in child.stderr


@pytest.mark.slow
@pytest.mark.parametrize("attn", [f"{FA2}@v2", f"{FA2}:flash_attn_func"])
def test_attn_implementation_with_revision_or_function(rt: Runtime, attn: str):
    child = rt.run(f"model, result = train_llama({attn!r})\nreport(**result)")
    report = rt.assert_locked(child, FA2)
    assert report["attn"] == attn
    assert report["q_grad"] > 0 and report["loaded"][FA2]["calls"]["flash_attn_func"] == 2


@pytest.mark.slow
def test_flash_attention_2_fallback_loads_the_locked_build(rt: Runtime):
    """No flash_attn package: transformers silently loads the Hub kernel; it is the locked one."""
    child = rt.run('model, result = train_llama("flash_attention_2")\nreport(**result)')
    report = rt.assert_locked(child, FA2)
    assert report["attn"] == FA2
    assert report["q_grad"] > 0 and report["loaded"][FA2]["calls"]["flash_attn_func"] == 2


@pytest.mark.slow
def test_unsatisfied_revision_is_an_error_in_strict_mode(rt: Runtime):
    child = rt.run(f'train_llama("{FA2}@v3")')
    assert child.returncode != 0
    line = child.error_line()
    assert line.startswith("kernlock: error:"), child.stderr[-2000:]
    assert f"{FA2}@v3 is requested" in line and "pins" in line and f"`kernlock add {FA2}@v3`" in line


@pytest.mark.slow
def test_flash_attention_2_fallback_error_reaches_the_user(rt: Runtime, tmp_path: Path):
    """transformers replaces any fallback failure with "flash_attn is not installed"; kernlock's error wins."""
    lock = rt.write_lock(
        tmp_path / "kernels.lock", replace(rt.lock, kernels=tuple(k for k in rt.lock.kernels if k.repo != FA2))
    )
    child = rt.run('train_llama("flash_attention_2")', env={"KERNLOCK_LOCKFILE": str(lock)})
    line = child.error_line()
    assert child.returncode != 0 and line.startswith("kernlock: error:"), child.stderr[-2000:]
    assert f"{FA2} (version=4) is not in {lock}" in line and f"`kernlock add {FA2}@v4`" in line


def _for_environment(lock: Lock, env: str) -> Lock:
    """The same lock, made for another environment only (one variant per entry, named for that environment)."""
    kernels = tuple(
        replace(k, environments=(env,), variants=(replace(k.variants[0], name=env, environments=(env,)),))
        for k in lock.kernels
    )
    return replace(lock, environments=(env,), kernels=kernels)


@pytest.mark.slow
def test_environment_not_in_the_lock_is_named_through_transformers(rt: Runtime, tmp_path: Path):
    """transformers rewraps load errors as ValueError("An error occurred ..."); the ActivationError reaches the user."""
    lock = rt.write_lock(tmp_path / "kernels.lock", _for_environment(rt.lock, OTHER_ENV))
    child = rt.run(f'train_llama("{FA2}")', env={"KERNLOCK_LOCKFILE": str(lock)})
    line = child.error_line()
    assert child.returncode != 0 and line.startswith("kernlock: error:"), child.stderr[-2000:]
    assert f"does not cover this environment, {CPU_ENV}" in line and OTHER_ENV in line and "`kernlock lock`" in line


# -- kernelize, use_kernels, lazy_load_kernel, direct loads, dependencies ------------------------------------


@pytest.mark.slow
def test_use_kernels_and_kernelize_layer_mappings(rt: Runtime):
    """``LayerRepository(version=N)`` mappings (transformers ``use_kernels=True``, ``kernels.kernelize``) load
    the locked builds; the model trains through the locked RMSNorm layer."""
    child = rt.run(
        textwrap.dedent(
            f"""
            import torch
            from kernels import LayerRepository, register_kernel_mapping

            # transformers' use_kernels=True with a mapping for this device (its default mapping has no CPU RMSNorm)
            register_kernel_mapping(
                {{"RMSNorm": {{"cpu": LayerRepository("{LAYER_NORM}", layer_name="LlamaRMSNorm", version=3)}}}}
            )
            model, result = train_llama("sdpa")
            model.set_use_kernels(True)
            model.zero_grad()
            ids = torch.randint(0, 64, (2, 8))
            model(input_ids=ids, labels=ids).loss.backward()
            norm_grad = float(model.model.norm.weight.grad.abs().sum())
            """
        )
        + kernelize_silu_and_mul(ACTIVATION)
        + "layer(torch.randn(3, 8))\nreport(norm_grad=norm_grad)\n"
    )
    report = rt.assert_locked(child, LAYER_NORM, ACTIVATION)
    assert report["loaded"][LAYER_NORM]["calls"]["rms_norm"] > 0 and report["norm_grad"] > 0
    assert report["loaded"][ACTIVATION]["calls"]["silu_and_mul"] == 1
    assert report["loaded"][ACTIVATION]["identity"]["version"] == 2  # asked version=1


@pytest.mark.slow
def test_lazy_load_kernel_direct_get_kernel_and_kernel_dependencies(rt: Runtime, tmp_path: Path):
    fa2 = rt.entry(FA2).commit
    child = rt.run(
        f"""
        from pathlib import Path
        import kernels
        from transformers.integrations.hub_kernels import lazy_load_kernel

        fp8 = lazy_load_kernel("finegrained-fp8")                         # transformers asks version=4
        by_version = kernels.get_kernel("{FA2}", version=5)                # the newest version: no CPU build
        fa2 = "{fa2}"
        by_commit = kernels.get_kernel("{FA2}", revision=fa2[:7])          # a commit prefix the lock satisfies
        paged = kernels.get_kernel("{PAGED}", version=1)                  # kernel-depends on {ACTIVATION}
        theirs = Path(sys.argv[1])                                         # kernels' own lock format
        their_entry = {{"dependency": {{"repo-id": "{FA2}", "version": 2}}, "lock": {{"commit": fa2}}}}
        theirs.write_text(json.dumps([their_entry]))
        by_their_lock = kernels.get_locked_kernel("{FA2}", lockfile=theirs)
        report(
            same=by_version is by_commit is by_their_lock,
            dependency=paged.DEPENDENCY_IDENTITIES,
            fp8=fp8.KERNEL_IDENTITY,
        )
        """,
        args=[str(tmp_path / "kernels-own.lock")],
    )
    report = rt.assert_locked(child, FP8, FA2, PAGED, ACTIVATION)
    assert report["same"] is True
    assert report["fp8"] == rt.identity(FP8) and report["fp8"]["version"] == 1
    assert report["dependency"] == {ACTIVATION: rt.identity(ACTIVATION)}


@pytest.mark.slow
def test_activation_after_transformers_and_kernels_were_imported(rt: Runtime):
    child = rt.run(
        f"""
        import kernels, transformers
        from transformers import LlamaForCausalLM  # imports transformers.modeling_utils
        import kernlock
        kernlock.activate(lockfile={str(rt.project / "kernels.lock")!r})
        model, result = train_llama("{FA2}")
        report(**result)
        """,
        activate=False,
        cwd=rt.root,  # no kernels.lock here: the explicit path is used
    )
    report = rt.assert_locked(child, FA2)
    assert report["q_grad"] > 0


# -- policy: unlocked repos, warn mode --------------------------------------------------------------------------


def test_unlocked_repo_is_an_error_in_strict_mode_without_any_request(rt: Runtime):
    child = rt.run(
        f"""
        import kernels
        from kernels import LayerRepository
        errors = []
        for load in (
            lambda: kernels.get_kernel("{UNLOCKED}", version=1),
            lambda: LayerRepository("{UNLOCKED}", layer_name="X", version=1).load(),
        ):
            try:
                load()
            except Exception as err:
                errors.append([type(err).__name__, str(err)])
        report(errors=errors)
        """
    )
    report = child.report
    assert report["connects"] == [] and report["loaded"] == {}
    assert [name for name, _ in report["errors"]] == ["ActivationError", "ActivationError"]
    for _, message in report["errors"]:
        assert f"{UNLOCKED} (version=1) is not in" in message and f"`kernlock add {UNLOCKED}@v1`" in message
        assert "KERNLOCK_MODE=warn" in message


def test_warn_mode_loads_unlocked_repos_and_keeps_locked_ones_locked(rt: Runtime, online):
    """warn: an unlocked repo loads normally (from the Hub) with a warning; an explicit revision the lock does
    not satisfy still gets the locked build (never code the lock does not vouch for), with a warning."""
    server, env = online
    env = {**env, "HF_HUB_CACHE": rt.env["HF_HUB_CACHE"], "KERNLOCK_MODE": "warn"}
    child = rt.run(
        f"""
        import kernels
        unlocked = kernels.get_kernel("{UNSIGNED}", version=1)
        locked = kernels.get_kernel("{FA2}", revision="v3")
        report(unlocked=unlocked.KERNEL_IDENTITY)
        """,
        env=env,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = child.report
    assert report["unlocked"]["repo"] == UNSIGNED and report["unlocked"]["version"] == 1
    assert report["loaded"][FA2]["identity"] == rt.identity(FA2)
    assert f"{UNSIGNED} (version=1) is not in" in child.stderr and "Loading it unlocked and unverified" in child.stderr
    assert f"{FA2}@v3 is requested" in child.stderr and "Loading the locked build" in child.stderr
    assert server.log.count(contains=f"/{FA2}/") == 0  # the locked repo never asked the Hub


def test_kernel_loaded_before_activation_must_be_the_locked_build(rt: Runtime, online):
    _server, env = online
    # Plain kernels 0.18+ would stop first, on its own check of the signed build against sigstore's trust root over
    # the network (tests/compat/test_load_checks.py): sigstore is hidden, as on a machine where that check can run.
    body = f'import kernels, kernlock\nkernels.get_kernel("{FA2}", version=3)\nkernlock.activate()\n'
    child = rt.run(HIDE_SIGSTORE + body, env=env, activate=False)
    line = child.error_line()
    assert child.returncode != 0 and line.startswith("kernlock: error:"), child.stderr[-2000:]
    assert "was loaded before kernlock was activated" in line and "import kernlock.activate" in line


# -- not synced, verification ----------------------------------------------------------------------------------


def test_not_synced_and_online_fetches_exactly_the_locked_files(rt: Runtime, online):
    server, env = online
    body = f'import kernels, sys\nkernels.get_kernel("{FA2}", version=4)\n'
    body += 'report(fetch="kernlock.sync.fetch" in sys.modules)'
    child = rt.run(body, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    report = child.report
    assert report["fetch"] is True  # the download module is imported on this path (see the synced load below)
    assert report["loaded"][FA2]["identity"] == rt.identity(FA2)
    entry = rt.entry(FA2)
    variant = entry.variant_for(CPU_ENV)
    assert variant is not None
    requests = [r for r in server.log.entries if "agent-harnesses" not in r.path]
    prefix = f"/kernels/{FA2}/resolve/{entry.commit}/build/{variant.name}/"
    assert sorted(r.path.removeprefix(prefix) for r in requests) == sorted(f.path for f in variant.files)
    assert all(r.method == "GET" for r in requests)


@pytest.mark.slow
def test_not_synced_and_offline_names_kernlock_sync(rt: Runtime, tmp_path: Path):
    empty = {"HF_HUB_CACHE": str(tmp_path / "empty")}
    for extra in ({"HF_HUB_OFFLINE": "1"}, {}):  # offline; online but the Hub is unreachable
        child = rt.run(f'import kernels\nkernels.get_kernel("{FA2}", version=4)', env={**empty, **extra})
        line = child.error_line()
        assert child.returncode != 0 and line.startswith("kernlock: error:"), child.stderr[-2000:]
        assert FA2 in line and "`kernlock sync`" in line


def _tampered_cache(rt: Runtime, tmp_path: Path, keep_size: bool) -> tuple[dict[str, str], Path]:
    """A copy of the synced cache whose flash-attn2 ``__init__.py`` writes a marker file when imported."""
    cache = tmp_path / "cache"
    shutil.copytree(rt.env["HF_HUB_CACHE"], cache, symlinks=True)
    entry = rt.entry(FA2)
    variant = entry.variant_for(CPU_ENV)
    assert variant is not None
    blob = (caches.variant_path(entry, variant, cache) / "__init__.py").resolve()
    marker = tmp_path / "imported"
    text = blob.read_text()
    first = text.splitlines()[0]  # the module docstring
    evil = 'import os; open(os.environ["KL_MARKER"], "w")#'
    assert len(evil) <= len(first)
    tampered = text.replace(first, evil.ljust(len(first), "#"), 1) if keep_size else evil + "\n" + text
    stat = blob.stat()
    with open(blob, "r+") as handle:  # in place: same inode
        handle.write(tampered)
        handle.truncate()
    if keep_size:  # same size, same mtime, same inode: only a re-hash can tell
        os.utime(blob, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return {"HF_HUB_CACHE": str(cache), "KL_MARKER": str(marker)}, marker


@pytest.mark.parametrize(("keep_size", "verify"), [(False, "receipt"), (True, "full")])
def test_a_file_that_fails_verification_is_never_imported(rt: Runtime, tmp_path: Path, keep_size: bool, verify: str):
    env, marker = _tampered_cache(rt, tmp_path, keep_size)
    child = rt.run(f'import kernels\nkernels.get_kernel("{FA2}", version=4)', env={**env, "KERNLOCK_VERIFY": verify})
    line = child.error_line()
    assert child.returncode != 0 and line.startswith("kernlock: error:"), child.stderr[-2000:]
    assert "__init__.py" in line and "`kernlock sync`" in line
    assert not marker.exists()


# -- kernlock run -------------------------------------------------------------------------------------------------


@pytest.mark.binds
@pytest.mark.slow
def test_kernlock_run_activates_every_python_process_and_passes_the_exit_code(rt: Runtime, tmp_path: Path):
    """No kernlock import in the program: `kernlock run` activates it, and the Python processes it starts."""
    script = tmp_path / "train.py"
    script.write_text(
        CHILD_PRELUDE
        + CHILD_HELPERS
        + textwrap.dedent(
            f"""
            import subprocess
            model, result = train_llama("{FA2}")
            code = "import json, kernels; " + (
                "print(json.dumps(kernels.get_kernel('{ACTIVATION}', version=1).KERNEL_IDENTITY))"
            )
            grandchild = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            report(grandchild=grandchild.stdout.strip(), grandchild_err=grandchild.stderr[-2000:], **result)
            sys.exit(7)
            """
        )
    )
    child = rt.run_argv([sys.executable, "-m", "kernlock", "run", "--", sys.executable, str(script)])
    assert child.returncode == 7, child.stderr[-3000:]
    report = child.report
    assert report["loaded"][FA2]["identity"] == rt.identity(FA2) and report["q_grad"] > 0
    assert json.loads(report["grandchild"]) == rt.identity(ACTIVATION), report["grandchild_err"]


@pytest.mark.binds
def test_kernlock_run_checks_the_lock_before_starting(rt: Runtime, tmp_path: Path):
    child = rt.run_argv(
        [sys.executable, "-m", "kernlock", "run", "--", sys.executable, "-c", "print('ran')"], cwd=tmp_path
    )
    assert child.returncode == 1 and "ran" not in child.stdout
    assert "no kernels.lock found; looked upward from the current folder" in child.stderr
    assert "`kernlock lock`" in child.stderr


@pytest.mark.binds
def test_kernlock_run_refuses_a_cache_others_can_write(rt: Runtime, tmp_path: Path):
    """`kernlock run` puts a sitecustomize.py on the program's path: beside the lock when that folder is the user's
    alone, else in kernlock's cache. Where both can be written by others, someone else could swap it for their code,
    so the program is not started and the error names the fix."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    project = shared / "project"
    project.mkdir()
    shutil.copy(rt.project / "kernels.lock", project / "kernels.lock")
    child = rt.run_argv(
        [sys.executable, "-m", "kernlock", "run", "--", sys.executable, "-c", "print('ran')"],
        env={"KERNLOCK_CACHE": str(shared / "kernlock")},
        cwd=project,
    )
    assert child.returncode == 1 and "ran" not in child.stdout
    assert "are not this user's alone" in child.stderr and "KERNLOCK_CACHE" in child.stderr
    assert not list(shared.rglob("*.py"))


@pytest.mark.binds
def test_kernlock_run_never_runs_a_sitecustomize_the_group_could_write(rt: Runtime):
    """A sitecustomize.py that `kernlock run` wrote beside the lock, in a folder a umask of 002 left group-writable
    (an earlier kernlock) and rewritten there as a group member could: the next `kernlock run` does not run it,
    and the one it runs instead is the user's alone (0600, in a folder that is 0700)."""
    show = "import os; print('ran', os.environ['PYTHONPATH'].split(os.pathsep)[0])"  # where its sitecustomize is
    argv = [sys.executable, "-m", "kernlock", "run", "--", sys.executable, "-c", show]
    first = rt.run_argv(argv)
    assert first.returncode == 0 and "ran" in first.stdout, first.stderr
    (planted,) = (rt.project / ".kernlock" / "run").glob("*/sitecustomize.py")
    planted.parent.chmod(0o775)
    planted.chmod(0o664)
    planted.write_text("print('PWNED')\n")
    again = rt.run_argv(argv)
    assert again.returncode == 0 and "ran" in again.stdout and "PWNED" not in again.stdout, again.stderr
    used = Path(again.stdout.split("ran ", 1)[1].strip()) / "sitecustomize.py"
    assert used != planted and used.read_text() != "print('PWNED')\n"
    assert (used.stat().st_mode & 0o777, used.parent.stat().st_mode & 0o777) == (0o600, 0o700)


# -- activation itself -------------------------------------------------------------------------------------------


def test_import_kernlock_activate_imports_no_ml_library(rt: Runtime):
    child = rt.run_argv(
        [
            sys.executable,
            "-c",
            "import sys, kernlock.activate; "
            "print(sorted(m for m in ('torch', 'transformers', 'kernels') if m in sys.modules))",
        ]
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[]"


def test_a_synced_load_imports_no_download_module(rt: Runtime):
    """The run-time path of a synced kernel checks it with the cache modules only: kernlock's download, sync,
    verify and Hub client modules stay unimported (the not-synced load above does import kernlock.sync.fetch)."""
    child = rt.run(
        f"""
        import sys, kernels
        kernels.get_kernel("{FA2}", version=4)
        report(kernlock=sorted(m for m in sys.modules if m.startswith("kernlock.")))
        """
    )
    report = rt.assert_locked(child, FA2)
    assert "kernlock.sync.integrity" in report["kernlock"] and "kernlock.sync.cache" in report["kernlock"]
    unexpected = {"kernlock.sync.fetch", "kernlock.sync.engine", "kernlock.sync.verify", "kernlock.hub.client"} & set(
        report["kernlock"]
    )
    assert unexpected == set()


def _settings(rt: Runtime, cwd: Path, env: dict[str, str] | None = None, call: str = "") -> Child:
    activation = call or "import kernlock.activate"
    code = (
        f"import kernlock\nfrom kernlock.runtime import activation as runtime\n{activation}\nprint(runtime.settings())"
    )
    return rt.run_argv([sys.executable, "-c", code], env=env, cwd=cwd)


def test_a_script_started_from_another_folder_finds_the_lock_above_it(rt: Runtime, tmp_path: Path):
    """`python proj/train.py` from the folder above the project: the lock is looked for upward from the current
    folder, then upward from the main script's folder; the error lists every folder looked in."""
    program = (
        "import kernlock.activate\nfrom kernlock.runtime import activation as runtime\nprint(runtime.settings())\n"
    )
    script = rt.project / "first-hour" / "train.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(program)
    found = rt.run_argv([sys.executable, str(script.relative_to(rt.project.parent))], cwd=rt.project.parent)
    assert f"lockfile='{rt.project / 'kernels.lock'}'" in found.stdout, found.stderr

    lone = tmp_path / "elsewhere" / "train.py"
    lone.parent.mkdir()
    lone.write_text(program)
    here = tmp_path / "here"
    here.mkdir()
    none = rt.run_argv([sys.executable, str(lone)], cwd=here)
    line = none.error_line()
    assert none.returncode != 0 and line.startswith("kernlock: error: no kernels.lock found"), line
    assert f"looked upward from the current folder and upward from the folder of the main script {lone}" in line
    looked = line.split(", in ", 1)[1].split(". Run", 1)[0].split(", ")
    assert looked[:2] == [str(here), str(tmp_path)] and str(lone.parent) in looked and "/" in looked
    assert len(looked) == len(set(looked))  # a folder above both is named once


def test_lock_discovery_and_settings(rt: Runtime, tmp_path: Path):
    deep = rt.project / "src" / "pkg"
    deep.mkdir(parents=True, exist_ok=True)
    found = _settings(rt, deep)
    assert f"lockfile='{rt.project / 'kernels.lock'}'" in found.stdout, found.stderr
    assert "mode='strict'" in found.stdout and "verify='receipt'" in found.stdout

    other = rt.write_lock(tmp_path / "other.lock", rt.lock)
    explicit = _settings(rt, deep, {"KERNLOCK_LOCKFILE": str(other), "KERNLOCK_VERIFY": "full"})
    assert f"lockfile='{other}'" in explicit.stdout and "verify='full'" in explicit.stdout, explicit.stderr

    override = _settings(rt, deep, {"KERNLOCK_MODE": "warn"}, call="kernlock.activate(mode='strict')")
    assert "mode='strict'" in override.stdout, override.stderr

    none = _settings(rt, tmp_path)
    assert none.returncode != 0 and none.error_line().startswith("kernlock: error: no kernels.lock")
    assert "`kernlock lock`" in none.error_line() and "KERNLOCK_LOCKFILE" in none.error_line()

    missing = _settings(rt, deep, {"KERNLOCK_LOCKFILE": str(tmp_path / "nope.lock")})
    assert "no lock file at" in missing.error_line() and "KERNLOCK_LOCKFILE" in missing.error_line()

    bad = _settings(rt, deep, {"KERNLOCK_MODE": "lenient"})
    assert "invalid mode (KERNLOCK_MODE) 'lenient'; use one of: strict, warn." in bad.error_line()


def test_revisions_that_satisfy_a_lock_entry(rt: Runtime):
    entry = rt.entry(FA2)
    for revision in ("v2", "refs/heads/v2", entry.commit, entry.commit[:7], entry.commit[:12].upper()):
        assert satisfies(entry, revision), revision
    for revision in ("v3", "main", entry.commit[:6], "0" * 40):
        assert not satisfies(entry, revision), revision


def test_a_kernels_version_without_a_hooked_attribute_falls_back(rt: Runtime):
    """A loader that lacks a seam kernlock hooks does not break the program: the locked build is pinned through
    LOCAL_KERNELS, and one line says so (tests/functional/test_loaders.py covers this with a really edited kernels)."""
    child = rt.run(
        f"""
        from kernlock.runtime import loaders
        for adapter in loaders.adapters():
            adapter.SEAMS += (("kernels.resolver", "HubResolver.resolve_v2", ()),)
        import kernels
        module = kernels.get_kernel("{FA2}", version=4)
        report(identity=module.KERNEL_IDENTITY)
        """
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.report["identity"] == rt.identity(FA2) and child.report["connects"] == []
    lines = [line for line in child.stderr.splitlines() if "kernlock" in line]
    assert len(lines) == 1 and "is a loader kernlock does not know" in lines[0], child.stderr[-2000:]
    assert "HubResolver.resolve_v2" in lines[0] and "pip install 'transformers==5.25.0' 'kernels==0.19.1'" in lines[0]
    assert "pip install -U kernlock" not in lines[0]


def test_kernlock_activate_stays_callable_after_import_kernlock_activate(tmp_path: Path) -> None:
    """`import kernlock.activate` binds the module to `kernlock.activate`; the documented call must still work."""
    empty = Lock(requires_hash="sha256:" + "0" * 64, environments=(CPU_ENV,), kernels=())
    (tmp_path / "kernels.lock").write_text(lockfile.dumps(empty))
    code = (
        "import kernlock.activate\n"
        "import kernlock\n"
        "print(kernlock.activate(mode='warn').mode, kernlock.activate().mode)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["warn", "strict"]
