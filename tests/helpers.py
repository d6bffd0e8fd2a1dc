"""Helpers for tests: write a project's pyproject.toml, run the kernlock CLI or a user's program in a fresh
process, generate variant-rule cases. One helper each: look here before writing one in a test."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from os import chown, environ, geteuid
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kernlock.hub.client import Hub
from kernlock.lock.model import Lock, LockedKernel
from kernlock.testing import Catalog, HubServer, create_kernel_repo, read_identity
from kernlock.variants import grammar as variants
from kernlock.variants import types as variant_types

CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"
# Variables that change what huggingface_hub/kernels do and must come from the test alone.
SCRUBBED = (
    "HF_HUB_OFFLINE",
    "HF_TOKEN",
    "HF_HUB_CACHE",
    "HF_HOME",
    "KERNELS_CACHE",
    "KERNLOCK_CACHE",
    "KERNLOCK_LOCKFILE",
    "KERNLOCK_MODE",
    "KERNLOCK_VERIFY",
    "LOCAL_KERNELS",
    "HF_HUB_DISABLE_TELEMETRY",
    "DO_NOT_TRACK",
    "DISABLE_TELEMETRY",
)


def write_pyproject(project: Path, kernels: str, environments: list[str] | None = None, head: str = "") -> Path:
    """Write pyproject.toml with a [tool.kernlock] table (``kernels`` is the body of [tool.kernlock.kernels])."""
    text = head or '[project]\nname = "demo"\nversion = "0.1.0"\n'
    text += "\n[tool.kernlock]\n"
    if environments is not None:
        text += "environments = [" + ", ".join(f'"{e}"' for e in environments) + "]\n"
    text += "\n[tool.kernlock.kernels]\n" + kernels
    path = project / "pyproject.toml"
    path.write_text(text)
    return path


def fresh_hub(server: HubServer) -> Hub:
    """A new Hub client (empty caches) for the test server, retrying quickly."""
    return Hub(endpoint=server.url, backoff=0.01)


def own_repo(catalog: Catalog, branches: dict[str, list[str]], **kwargs: object) -> str:
    """A repo of this test alone (the catalog is shared and read-only)."""
    repo_id = f"kernels-community/t-{uuid.uuid4().hex[:8]}"
    create_kernel_repo(catalog.root, repo_id, branches, **kwargs)
    return repo_id


def run_cli(
    *args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``kernlock ARGS`` in a fresh process, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "kernlock", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_clean_error(result: subprocess.CompletedProcess, *needles: str, code: int = 1) -> None:
    """A command failed as the user should see it: exit ``code``, one message naming each of ``needles``."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") or "Error:" in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def kernlock_usage_problem(words: list[str]) -> str | None:
    """Why ``kernlock WORDS...`` names a command or flag the CLI does not have (click introspection), or None."""
    import click

    from kernlock.cli.app import main

    if words and words[0].startswith("-"):  # `kernlock --version`: an option of kernlock itself
        ours = {opt for p in main.params if isinstance(p, click.Option) for opt in p.opts} | {"-h", "--help"}
        return None if words[0] in ours else f"`kernlock {' '.join(words)}`: kernlock has no {words[0]}"
    command = main.commands.get(words[0]) if words else None
    if command is None:
        return f"`kernlock {' '.join(words)}`: {words[0] if words else 'nothing'} is not a command"
    if isinstance(command, click.Group):  # `kernlock hook install ...`: the subcommand's options
        sub = command.commands.get(words[1]) if len(words) > 1 else None
        if sub is None:
            return f"`kernlock {' '.join(words)}`: {' '.join(words[:2])} is not a command"
        command, words = sub, words[1:]
    options = {opt for p in command.params if isinstance(p, click.Option) for opt in [*p.opts, *p.secondary_opts]}
    for word in words[1 : words.index("--")] if "--" in words else words[1:]:
        if word.startswith("-") and word.split("=")[0] not in options:
            return f"`kernlock {' '.join(words)}`: no {word}"
    return None


_IMPORTS_PROBE = """
import atexit, os, runpy, sys

def _write():
    with open(os.environ["KERNLOCK_TEST_MODULES"], "w") as out:
        out.write("\\n".join(sorted(sys.modules)))

atexit.register(_write)
sys.argv = ["kernlock", *sys.argv[1:]]
runpy.run_module("kernlock", run_name="__main__", alter_sys=True)
"""


def run_cli_imports(
    *args: str, env: dict[str, str], cwd: Path, out: Path
) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``kernlock ARGS`` in a fresh process, as :func:`run_cli` does; also return the names of every module
    it had imported when it exited (``sys.modules``, written to ``out`` at exit)."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_PROBE, *args],
        env={**env, "KERNLOCK_TEST_MODULES": str(out)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, set(out.read_text().split("\n")) if out.exists() else set()


class ProcessLog:
    """The processes this (the pytest) process starts, git left out, noted while ``names`` is a list: the check
    behind the ``subprocess`` marker (tests/conftest.py). An audit hook, so it sees every way to start one
    (subprocess, os.posix_spawn, os.system, a fork), from C too; git does not count, as the test Hub and the fixture
    repositories run it all the time."""

    STARTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.system", "os.fork", "os.forkpty"})

    def __init__(self) -> None:
        self.names: list[str] | None = None
        sys.addaudithook(self._audit)  # for the rest of the process: audit hooks cannot be removed

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.names is None or event not in self.STARTS:
            return
        from os import fsdecode
        from os.path import basename

        if event == "subprocess.Popen":  # (executable, args, cwd, env)
            argv = args[1]
            program = args[0] or (
                argv if isinstance(argv, (str, bytes)) or not hasattr(argv, "__getitem__") else argv[0]
            )
        elif event == "os.posix_spawn":  # (path, argv, env)
            program = args[0]
        elif event == "os.system":  # (command,)
            program = fsdecode(args[0]).split()[0]
        else:
            program = "a fork of the test process"
        name = basename(fsdecode(program))
        if name != "git":
            self.names.append(name)


# -- generated (variant set x system) cases for the differential tests of kernlock's variant rule ------------

DIFF_TORCHES = ["28", "29", "210", "211", "212", "213"]
DIFF_BACKENDS = [
    *["cpu", "metal", "neuron", "tpu"],
    *["cu118", "cu120", "cu126", "cu128", "cu129", "cu130", "cu132"],
    *["rocm63", "rocm64", "rocm71", "xpu20253", "xpu20260", "cann80", "cann81"],
]
DIFF_PLATFORMS = [("x86_64", "linux"), ("aarch64", "linux"), ("aarch64", "darwin"), ("x86_64", "windows")]
DIFF_NOARCH = [f"torch-{b}" for b in variants.NOARCH_BACKENDS]


def diff_pool() -> dict[tuple[str, str], list[str]]:
    """Every arch name form (torch tagged and tagless, stable ABI, tvm-ffi) per (cpu, os)."""
    pool: dict[tuple[str, str], list[str]] = {}
    for cpu, os in DIFF_PLATFORMS:
        arch = [f"{b}-{cpu}-{os}" for b in DIFF_BACKENDS]
        names = [f"torch{t}{abi}-{a}" for t in DIFF_TORCHES for abi in ("-cxx11", "-cxx98", "") for a in arch]
        names += [f"torch-stable-abi{t}-{a}" for t in DIFF_TORCHES for a in arch]
        names += [f"tvm-ffi{v}-{a}" for v in ("01", "02", "10") for a in arch]
        pool[(cpu, os)] = names
    return pool


def random_system(rng: random.Random) -> dict:
    cpu, os = rng.choice(DIFF_PLATFORMS)
    # The loader passes no ABI off Linux; once in a while the facts are odd anyway.
    abi = rng.choice([True, True, False]) if os == "linux" else rng.choice([None] * 9 + [True])
    return {
        "backend": rng.choice(
            ["metal", "metal", "cpu", *DIFF_BACKENDS]
            if os == "darwin"
            else [*DIFF_BACKENDS, "cu129", "cu129", "cu130", "cpu", "cann80"]
        ),
        "cpu": cpu,
        "os": os,
        "torch_version": rng.choice([*(Version(f"{t[0]}.{t[1:]}") for t in DIFF_TORCHES), None]),
        "torch_cxx11_abi": abi,
        "tvm_ffi_version": rng.choice([None, None, Version("0.1"), Version("0.2"), Version("1.0")]),
        "macos_version": rng.choice([None, Version("15.5"), Version("26.0"), Version("26.1")]),
        "free_threaded": rng.random() < 0.08,
    }


# -- child processes that load kernels as a user's program would ------------------------------------------------


def test_trusted_root() -> str:
    """The trusted root of kernlock.testing's sigstore instance, which signs every fixture build (the same seed for
    every test Hub, so one file serves them all): the test machines trust it, as a CI that verifies a private
    instance's signatures names its root in ``KERNLOCK_SIGSTORE_TRUSTED_ROOT``."""
    import tempfile

    from kernlock.testing.fixtures import write_trusted_root

    folder = Path(tempfile.gettempdir()) / f"kernlock-tests-{geteuid()}"
    return str(write_trusted_root(folder))


test_trusted_root.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the variables a test must set itself (SCRUBBED, and every ``HF_``,
    ``KERNELS_`` and ``KERNLOCK_`` variable), plus ``KERNLOCK_SIGSTORE_TRUSTED_ROOT`` (:func:`test_trusted_root`)
    and ``extra``."""
    env = {k: v for k, v in environ.items() if k not in SCRUBBED and not k.startswith(("HF_", "KERNELS_", "KERNLOCK_"))}
    env["KERNLOCK_SIGSTORE_TRUSTED_ROOT"] = test_trusted_root()
    env.update(extra)
    return env


def user_env_for(base: Path) -> dict[str, str]:
    """A user's environment with fresh Hub and kernlock caches under ``base`` (no Hub endpoint)."""
    return clean_env(
        HF_HOME=str(base / "hf-home"),
        HF_HUB_CACHE=str(base / "hf-cache"),
        KERNLOCK_CACHE=str(base / "kernlock-cache"),
        HF_HUB_DISABLE_XET="1",
    )


# First, before anything else in a child: record every socket the process connects.
CHILD_PRELUDE = """\
import json, sys
CONNECTS = []
sys.addaudithook(lambda event, args: CONNECTS.append(repr(args[1])) if event == "socket.connect" else None)
"""
# Functions every child may call: what kernels loaded (by the identity each build exports), a tiny Llama trained
# one step, and the closing REPORT line that Child.report reads.
CHILD_HELPERS = """\
def loaded():
    import kernels
    found = {}
    for k in kernels.get_loaded_kernels():
        identity = getattr(k.module, "KERNEL_IDENTITY", None)
        if identity is not None:
            commit = k.repo_info.revision if k.repo_info is not None else None
            found[identity["repo"]] = {"commit": commit, "identity": identity, "calls": dict(k.module.CALL_COUNTS)}
    return found


def train_llama(attn, **kwargs):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, **kwargs)
    model.train()
    ids = torch.randint(0, 64, (2, 8))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    return model, {"attn": model.config._attn_implementation, "loss": float(loss), "q_grad": float(grad.abs().sum())}


def report(**extra):
    print("REPORT " + json.dumps({"loaded": loaded(), "connects": CONNECTS, **extra}), flush=True)
"""


# The start of a rank's script in the cluster tests (tests/test_hook.py, tests/test_run_bind.py): it says it started
# (a rank that stops at its first kernel import printed only this), imports kernels and reads the activation.
RANK_PRELUDE = (
    CHILD_PRELUDE
    + CHILD_HELPERS
    + """
import os
print("started", flush=True)
import kernels
from kernlock.runtime import state as activated
"""
)


def kernelize_silu_and_mul(repo: str) -> str:
    """Child code: a ``SiluAndMul`` layer kernelized from ``repo``'s layer (asked as version 1) into ``layer``."""
    return textwrap.dedent(
        f"""
        import torch
        from torch import nn
        from kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

        @use_kernel_forward_from_hub("SiluAndMul")
        class SiluAndMul(nn.Module):
            def forward(self, x):
                d = x.shape[-1] // 2
                return nn.functional.silu(x[..., :d]) * x[..., d:]

        layer = nn.Sequential(SiluAndMul())
        mapping = {{"SiluAndMul": {{"cpu": LayerRepository("{repo}", layer_name="SiluAndMul", version=1)}}}}
        with use_kernel_mapping(mapping):
            kernelize(layer, mode=Mode.INFERENCE, device="cpu")
        """
    )


@dataclass
class Child:
    """What a child process left: its exit code, output, and the REPORT line it printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        for line in self.stdout.splitlines():
            if line.startswith("REPORT "):
                return json.loads(line[len("REPORT ") :])
        raise AssertionError(f"no report (exit {self.returncode}):\n{self.stdout}\n{self.stderr[-4000:]}")

    def error_line(self) -> str:
        """The last line of stderr: what the user sees of an uncaught exception."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


@dataclass
class LockedProject:
    """A locked and synced project, its Hub's repositories, and a user's environment to run children in."""

    root: Path  # the Hub's repositories
    project: Path
    lock: Lock
    env: dict[str, str]  # a user's environment: synced cache, HF_ENDPOINT of the (usually stopped) Hub
    environment: str = CPU_ENV

    def entry(self, repo: str) -> LockedKernel:
        entry = self.lock.entry_for(repo, self.environment)
        assert entry is not None, repo
        return entry

    def identity(self, repo: str) -> dict[str, Any]:
        """KERNEL_IDENTITY of the locked build, read from git at the locked commit."""
        entry = self.entry(repo)
        variant = entry.variant_for(self.environment)
        assert variant is not None
        return read_identity(self.root, repo, entry.commit, variant.name)

    def run(
        self,
        body: str,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        activate: bool = True,
        args: list[str] | None = None,
    ) -> Child:
        """Run CHILD_PRELUDE, ``import kernlock.activate`` (unless not ``activate``), CHILD_HELPERS and ``body``."""
        activation = "import kernlock.activate\n" if activate else ""
        code = CHILD_PRELUDE + activation + CHILD_HELPERS + textwrap.dedent(body)
        return self.run_argv([sys.executable, "-c", code, *(args or [])], env=env, cwd=cwd)

    def run_argv(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Child:
        result = subprocess.run(
            argv, env={**self.env, **(env or {})}, cwd=cwd or self.project, capture_output=True, text=True, timeout=300
        )
        return Child(result.returncode, result.stdout, result.stderr)

    def assert_locked(self, child: Child, *repos: str) -> dict[str, Any]:
        """Each of ``repos`` was loaded at its locked commit, as the locked build; no socket was connected."""
        assert child.returncode == 0, child.stderr[-4000:]
        report = child.report
        for repo in repos:
            assert repo in report["loaded"], (repo, list(report["loaded"]), child.stderr[-2000:])
            assert report["loaded"][repo]["commit"] == self.entry(repo).commit
            assert report["loaded"][repo]["identity"] == self.identity(repo)
        assert report["connects"] == []
        return report


#: Declared facts the generated environments draw from (kernlock.environments.facts): interpreters (t: free-threaded;
#: 3.15t loads arch builds), loader versions around real kernels-minver values, GPU capabilities.
DIFF_PYTHONS = ["3.11", "3.12", "3.13", "3.13t", "3.14t", "3.15t"]
DIFF_LOADERS = ["0.12.0", "0.15.2", "0.16.2", "0.17.2", "0.18.0rc1", "0.18.1"]
DIFF_CAPABILITIES = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"]
#: metadata.json `backend.archs` lists: real ones, architecture- (a) and family-specific (f), PTX, unknown forms.
DIFF_ARCHS = [
    ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0+PTX"],
    ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
    ["8.0", "8.6"],
    ["9.0a"],
    ["9.0a", "10.0a"],
    ["10.0f", "12.0f"],
    ["8.0+PTX"],
    ["sm_90", "gfx942"],
    ["8.0", "sm_90"],
    ["12.0", "10.0a+PTX"],
    [],
]
DIFF_MINVERS = [None, None, "0.12.0", "0.16.0", "0.17.2", "0.17.3", "0.18.0"]


def random_declaration(rng: random.Random, system: dict) -> dict | None:
    """An environment table (``{name, <facts>}``) for ``system``, drawing its optional facts at random; None when
    the system is not a machine an environment string can name (no torch, an ABI off Linux, a backend with no
    arch-build machine form). ``system`` is updated to the facts the loader sees on that machine."""
    if system["torch_version"] is None or (system["torch_cxx11_abi"] is None) != (system["os"] != "linux"):
        return None
    abi = {True: "-cxx11", False: "-cxx98", None: ""}[system["torch_cxx11_abi"]]
    torch = system["torch_version"]
    table: dict = {"name": f"torch{torch.major}{torch.minor}{abi}-{system['backend']}-{system['cpu']}-{system['os']}"}
    if rng.random() < 0.5:
        table["python"] = rng.choice(DIFF_PYTHONS)
    if system["tvm_ffi_version"] is not None:
        table["tvm-ffi"] = f"{system['tvm_ffi_version']}.{rng.randint(0, 3)}"
    if rng.random() < 0.5:
        table["kernels"] = rng.choice(DIFF_LOADERS)
    if system["backend"].startswith("cu") and rng.random() < 0.7:
        table["cuda-capabilities"] = sorted(
            set(rng.sample(DIFF_CAPABILITIES, rng.randint(1, 2))), key=lambda c: tuple(map(int, c.split(".")))
        )
    if system["os"] == "darwin" and system["macos_version"] is not None:
        table["macos"] = str(system["macos_version"])
    elif system["os"] == "darwin":
        system["macos_version"] = variants.METAL_MIN_MACOS  # an undeclared macOS runs the Metal builds it names
    else:
        system["macos_version"] = None
    python = table.get("python", "3.11")
    system["free_threaded"] = python.endswith("t") and Version(python[:-1]) < Version("3.15")
    return table


def random_metadata(rng: random.Random, variant: variant_types.Variant) -> dict:
    """A metadata.json for a build: its backend type, CUDA archs drawn from DIFF_ARCHS, maybe a kernels-minver."""
    backend = (
        {"npu": "cann", "universal": "cuda"}.get(variant.backend_name, variant.backend_name)
        if isinstance(variant, variant_types.NoarchVariant)
        else variant.backend.name
    )
    metadata: dict = {
        "name": "my-kernel",
        "id": "_my_kernel_0",
        "version": 1,
        "license": "MIT",
        "python-depends": [],
        "backend": {"type": backend},
    }
    archs = rng.choice(DIFF_ARCHS)
    if backend == "cuda" and archs:
        metadata["backend"]["archs"] = archs
    if minver := rng.choice(DIFF_MINVERS):
        metadata["kernels-minver"] = minver
    return metadata


def give_away(path: Path) -> None:
    """Make ``path`` another user's (uid 4242); skips the test where only root could do that."""
    if geteuid() != 0:
        pytest.skip("only root can hand a folder to another user")
    chown(path, 4242, -1)


def receipt_file(entry: LockedKernel, variant: Any, cache: Path | None = None) -> Path:
    """Where the receipt of ``variant`` is kept (kernlock's cache in the tests is the user's alone)."""
    from kernlock.sync import cache as caches

    path = caches.receipt_path(entry, variant, cache)
    assert path is not None, "kernlock's cache is not private"
    return path


def has_receipt(entry: LockedKernel, variant: Any, cache: Path | None = None) -> bool:
    """Whether a receipt vouches for ``variant`` (none before a sync, none after a failed one)."""
    from kernlock.sync import cache as caches

    path = caches.receipt_path(entry, variant, cache)
    return path is not None and path.exists()


# -- a small locked project for cluster tests (launchers, hooks, spawned children) ---------------------------------

TINY_ATTENTION = "kernels-community/flash-attn2"
TINY_ACTIVATION = "kernels-community/activation"


def tiny_locked_project(base: Path) -> LockedProject:
    """Two kernels (attention v2, activation v1; CPU builds only) locked and synced from a local Hub, which is
    stopped on return: ``env`` still points HF_ENDPOINT at it, so any request would fail."""
    from kernlock.lock import file as lockfile
    from kernlock.testing import CPU_VARIANT

    root = base / "hub"
    create_kernel_repo(root, TINY_ATTENTION, {"v2": [CPU_VARIANT], "v4": [CPU_VARIANT]}, kind="attention")
    create_kernel_repo(root, TINY_ACTIVATION, {"v1": [CPU_VARIANT]}, kind="activation")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{TINY_ATTENTION}" = "v2"\n"{TINY_ACTIVATION}" = "v1"\n', environments=[CPU_ENV])
    env = user_env_for(base)
    with HubServer(root) as server:
        for command in ("lock", "sync"):
            result = run_cli(command, "--project", str(project), env={**env, **server.env()})
            assert result.returncode == 0, result.stderr
        env.update(server.env())
    return LockedProject(root, project, lockfile.read(project / "kernels.lock"), env)


def overlay_venv(folder: Path) -> Path:
    """A new virtual environment at ``folder`` that sees this one's packages (kernlock, kernels, torch...) through
    a ``.pth`` line, so a test can change its site-packages (``kernlock hook install``) without touching this one.
    Returns its interpreter."""
    import site
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    assert ours in site.getsitepackages() or ours in sys.path, ours
    (Path(purelib) / "_overlay.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


# -- kernlock as a user installs it: the wheel, in a fresh environment of each Python ---------------------------

ROOT = Path(__file__).resolve().parent.parent


def _uv() -> str:
    """The uv of this environment (the [test] extra installs it), else the one on PATH."""
    uv = Path(sys.executable).with_name("uv")
    return str(uv) if uv.exists() else "uv"


def build_wheel(out: Path) -> Path:
    """The kernlock wheel of this checkout, built with `uv build` as the README says; returns its path."""
    done = subprocess.run(
        [_uv(), "build", "--wheel", "-q", "-o", str(out), str(ROOT)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, "uv build failed:\n" + done.stderr[-3000:]
    [wheel] = out.glob("kernlock-*.whl")
    return wheel


def wheel_venv(folder: Path, python: str, wheel: Path) -> Path:
    """A fresh environment of ``python`` (a path, or a version for uv to find) at ``folder`` with ``wheel`` installed
    as a user installs it (`uv pip install`, dependencies from the index), and no torch: a constraint no torch
    version meets makes a dependency that wanted torch fail here rather than pull a multi-GB build. Returns its bin
    folder (kernlock and python)."""
    uv = _uv()
    subprocess.run([uv, "venv", "-q", "-p", python, str(folder)], check=True, capture_output=True, timeout=120)
    never = folder.parent / f"{folder.name}-no-torch.txt"
    never.write_text("torch<0\n")
    done = subprocess.run(
        [uv, "pip", "install", "-q", "-p", str(folder / "bin" / "python"), "-c", str(never), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"installing {wheel.name} for Python {python} failed:\n{done.stderr[-3000:]}"
    return folder / "bin"


def venv_env(bin_folder: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``bin_folder`` first on PATH (its `kernlock` and `python` are the ones a shell finds), as an
    activated environment or a tool install puts them."""
    rest = [p for p in env.get("PATH", "").split(":") if p and p != str(Path(sys.executable).parent)]
    clean = {k: v for k, v in env.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    return {**clean, "PATH": ":".join([str(bin_folder), *rest])}


# -- an interpreter the other users of the machine can run (tests/test_shared_cache.py) ------------------------------

#: What the other users' processes import: kernlock and what it needs, torch (a kernel build imports it) and numpy
#: (torch warns without it).
PORTABLE_ROOTS = ("kernlock", "torch", "numpy")


def reachable_by_others(path: Path) -> bool:
    """Whether every user may enter ``path`` and each folder above it (the search bit for others)."""
    import stat

    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents])


def portable_python(folder: Path) -> tuple[Path, dict[str, str]]:
    """A copy of this interpreter that every user of the machine can run, wherever this clone (its .venv) and the
    base interpreter lie: a home folder of mode 0700 or 0750 keeps the other users out of both, and a test must
    not open it to them. In ``folder`` (which the caller made reachable by every user): the base interpreter, its
    standard library, its ``libpython`` where it loads one, and the installed distributions that PORTABLE_ROOTS
    need with kernlock from this checkout, each file hard-linked (copied where a link cannot be made: another
    filesystem, a file the others may not read). Returns the interpreter and the variables its environment needs."""
    import importlib.metadata as metadata
    import os
    import shutil
    import stat
    import sysconfig

    from packaging.requirements import Requirement

    import kernlock

    def place(src: Path, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        mode = src.stat().st_mode
        if mode & stat.S_IROTH and (mode & stat.S_IXOTH or not mode & stat.S_IXUSR):
            try:
                os.link(src, dest)  # the same file: the others may read it (and run it) where its owner may
                return
            except OSError:  # another filesystem, or links refused
                pass
        shutil.copyfile(src, dest)
        dest.chmod(0o755 if mode & stat.S_IXUSR else 0o644)

    def place_tree(src: Path, dest: Path, skip: tuple[str, ...] = ()) -> None:
        for path in src.rglob("*"):
            relative = path.relative_to(src)
            if relative.parts[0] not in skip and path.is_file():
                place(path, dest / relative)

    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(os.path.realpath(sys._base_executable))  # type: ignore[attr-defined]
    place(base, folder / "bin" / base.name)
    stdlib = folder / "lib" / version
    place_tree(Path(sysconfig.get_paths()["stdlib"]), stdlib, skip=("site-packages", "test"))
    env = {}
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):  # the interpreter finds libpython by its absolute RUNPATH
        library = Path(sysconfig.get_config_var("LIBDIR")) / sysconfig.get_config_var("INSTSONAME")
        place(library, folder / "lib" / library.name)
        env["LD_LIBRARY_PATH"] = str(folder / "lib")
    site = stdlib / "site-packages"
    todo, seen = list(PORTABLE_ROOTS), set()
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except metadata.PackageNotFoundError:
            continue
        name = dist.metadata["Name"]
        if name in seen:
            continue
        seen.add(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
        for file in dist.files or []:
            # not a script outside site-packages, nor the .pth of an editable install (it names this checkout)
            if file.parts[0] != ".." and not (name == "kernlock" and file.suffix == ".pth"):
                place(Path(dist.locate_file(file)), site / file)
    if not (site / "kernlock" / "__init__.py").exists():  # an editable install: the package from this checkout
        package = Path(kernlock.__file__).parent
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                place(path, site / "kernlock" / path.relative_to(package))
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    return folder / "bin" / base.name, env
