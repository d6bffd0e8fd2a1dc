"""Loader adapters chosen by probing, not by version strings (issue #11).

Runs against whichever kernels is installed — kernels 0.17 (generation "kernels-0.17") in the project's venv,
0.15 and 0.16 ("kernels-0.15") in the compat matrix
(``PYTHONPATH=. .matrix/A/bin/python -m pytest tests/functional/test_loaders.py``):

* every load path of the installed generation loads the locked build (``KERNEL_IDENTITY`` at the locked commit)
  from a synced cache with the Hub stopped and no socket connected;
* a loader kernlock does not know — the installed ``kernels`` package copied and really edited (a class or a
  function renamed) — does not break the program: the locked builds are pinned through ``LOCAL_KERNELS``,
  transformers trains through the locked flash-attn2, one line of warning says what is not covered;
* a seam that gains a keyword argument its callers pass is passed through: the locked build still loads;
* ``kernlock env`` lists the load paths and whether each is covered.

The project, the local Hub and the child-process harness are tests/functional/test_runtime.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import test_runtime
from processes import Child, kernelize_silu_and_mul
from projects import CPU_ENV
from test_runtime import ACTIVATION, FA2, LAYER_NORM, PAGED, UNLOCKED, Runtime, _tampered_cache

from kernlock.environments.compat import INSTALL_PAIR, transformers_gate
from kernlock.runtime import loaders

runtime = test_runtime.rt  # the fixture: test_runtime's project, locked and synced, with the Hub stopped

PROBE = loaders.probe()
GENERATION = PROBE.generation
K19, K18, K17, K15 = "kernels-0.19", "kernels-0.18", "kernels-0.17", "kernels-0.15"
#: The generations whose every Hub load asks a resolver object (kernels 0.17 on), and where their modules live.
RESOLVING = {K17: "kernels", K18: "kernels", K19: "kernels._internals"}
_GATE = transformers_gate()
#: transformers loads Hub kernels with this kernels (its version gate; off e.g. for transformers 5.24 + kernels 0.17).
TRANSFORMERS = _GATE is not None and _GATE.ok
GATED = pytest.mark.skipif(not TRANSFORMERS, reason=_GATE.message() if _GATE else "transformers is not installed")
#: The training step of the child processes below, where transformers loads Hub kernels at all.
TRAIN = f'model, result = train_llama("{FA2}")' if TRANSFORMERS else "result = {}"

IDENTITIES = """\
def identities():
    import kernels
    return {k.module.KERNEL_IDENTITY["repo"]: k.module.KERNEL_IDENTITY for k in kernels.get_loaded_kernels()}
"""


@pytest.mark.subprocess
def test_the_installed_loader_is_recognised_by_probing_without_importing_torch(runtime: Runtime):
    assert GENERATION in (*RESOLVING, K15), PROBE
    assert PROBE.missing == ()
    child = runtime.run_argv(
        [
            sys.executable,
            "-c",
            "import sys; from kernlock.runtime import loaders; "
            "p = loaders.probe(); print(p.generation, 'torch' in sys.modules)",
        ]
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == [GENERATION, "False"]


# -- every load path of this generation, with the Hub stopped ---------------------------------------------------


def _their_lock(rt: Runtime, repo: str) -> list[dict]:
    """kernels' own lock file for ``repo`` at kernlock's locked commit, in this generation's format."""
    commit = rt.entry(repo).commit
    if GENERATION in RESOLVING:
        return [{"dependency": {"repo-id": repo, "version": 2}, "lock": {"commit": commit}}]
    return [{"repo_id": repo, "sha": commit, "variants": {}}]


def _fake_distribution(site: Path, lock: list[dict]) -> None:
    """An installed package ``lockedpkg`` that ships kernels' lock: ``get_locked_kernel(repo)`` without a
    lockfile argument (kernels 0.15/0.16) reads the lock from the calling package's distribution."""
    (site / "lockedpkg").mkdir(parents=True)
    (site / "lockedpkg" / "__init__.py").write_text(
        "import kernels\n\ndef load(repo):\n    return kernels.get_locked_kernel(repo)\n"
    )
    info = site / "lockedpkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lockedpkg\nVersion: 0.1\n")
    (info / "top_level.txt").write_text("lockedpkg\n")
    (info / "kernels.lock").write_text(json.dumps(lock))


@pytest.mark.subprocess
def test_every_kernels_load_path_of_this_generation_loads_the_locked_build(runtime: Runtime, tmp_path: Path):
    """get_kernel (version=, revision=), LayerRepository + kernelize, FuncRepository, kernels' own lock
    (get_locked_kernel, load_kernel, LockedLayerRepository), has_kernel, install_kernel: all the locked build."""
    fa2 = runtime.entry(FA2).commit
    theirs = tmp_path / "kernels-own.lock"
    theirs.write_text(json.dumps(_their_lock(runtime, FA2)))
    site = tmp_path / "site"
    _fake_distribution(site, _their_lock(runtime, FA2))
    locked_call = (
        f'kernels.get_locked_kernel("{FA2}", lockfile=theirs)'
        if GENERATION in RESOLVING
        else f'__import__("lockedpkg").load("{FA2}")'
    )
    activation_lock = tmp_path / "activation-own.lock"
    activation_lock.write_text(json.dumps(_their_lock(runtime, ACTIVATION)))
    child = runtime.run(
        textwrap.dedent(
            f"""
        from pathlib import Path
        import kernels
        from kernels import FuncRepository, LockedLayerRepository
        sys.path.insert(0, sys.argv[2])
        theirs = Path(sys.argv[1])

        by_version = kernels.get_kernel("{FA2}", version=4)            # transformers' default here; the lock pins v2
        by_branch = kernels.get_kernel("{FA2}", revision="v2")
        by_commit = kernels.get_kernel("{FA2}", revision="{fa2[:7]}")
        by_their_lock = {locked_call}
        by_load_kernel = kernels.load_kernel("{FA2}", lockfile=theirs)
        installed = kernels.install_kernel("{FA2}", revision="{fa2}")
        has = kernels.has_kernel("{FA2}", version=4)
        """
        )
        + kernelize_silu_and_mul(ACTIVATION)
        + textwrap.dedent(
            f"""
        layer(torch.randn(3, 8))
        func = FuncRepository("{ACTIVATION}", func_name="silu_and_mul", version=1).load()
        func()(torch.empty(3, 4), torch.randn(3, 8))
        locked_layer = LockedLayerRepository("{ACTIVATION}", lockfile=Path(sys.argv[3]), layer_name="SiluAndMul")
        norm = LayerRepository("{LAYER_NORM}", layer_name="LlamaRMSNorm", version=3).load()
        report(
            same=by_version is by_branch is by_commit is by_their_lock is by_load_kernel,
            installed=str(installed),
            module_file=by_version.__file__,
            has=has,
            locked_layer=locked_layer.load() is kernels.get_kernel("{ACTIVATION}", version=2).layers.SiluAndMul,
            norm=norm.__module__,
        )
        """
        ),
        args=[str(theirs), str(site), str(activation_lock)],
    )
    report = runtime.assert_locked(child, FA2, ACTIVATION, LAYER_NORM)
    assert report["same"] is True and report["has"] is True and report["locked_layer"] is True
    assert Path(report["module_file"]).parent == Path(report["installed"])
    assert report["loaded"][FA2]["identity"]["version"] == 2
    calls = report["loaded"][ACTIVATION]["calls"]
    assert calls["silu_and_mul"] == 2  # the kernelized layer and the FuncRepository function both ran


@pytest.mark.slow
@pytest.mark.subprocess
@GATED
def test_transformers_trains_through_the_locked_build(runtime: Runtime):
    """``attn_implementation="org/repo"`` (transformers' default version: 1 on 5.13, 3/4 later) and the implicit
    ``flash_attention_2`` Hub fallback: a forward and backward pass through the locked flash-attn2."""
    child = runtime.run(
        f"""
        model, result = train_llama("{FA2}")
        fallback, again = train_llama("flash_attention_2")
        report(first=result, second=again)
        """
    )
    report = runtime.assert_locked(child, FA2)
    assert report["first"]["attn"] == FA2 and report["first"]["q_grad"] > 0
    assert report["second"]["q_grad"] > 0
    assert report["loaded"][FA2]["calls"]["flash_attn_func"] == 4  # two layers, two models


@pytest.mark.subprocess
def test_unlocked_repo_is_refused_before_any_request(runtime: Runtime):
    """Strict mode: an unlocked repo is an error naming `kernlock add`, before the trust check or refs lookup."""
    child = runtime.run(
        f"""
        import kernels
        errors = []
        for kwargs in ({{"version": 1}}, {{"revision": "v1"}}):
            try:
                kernels.get_kernel("{UNLOCKED}", **kwargs)
            except Exception as err:
                errors.append([type(err).__name__, str(err)])
        report(errors=errors)
        """
    )
    report = child.report
    assert report["connects"] == [] and report["loaded"] == {}
    assert [name for name, _ in report["errors"]] == ["ActivationError", "ActivationError"]
    (_, by_version), (_, by_revision) = report["errors"]
    assert f"{UNLOCKED} (version=1) is not in" in by_version and f"`kernlock add {UNLOCKED}@v1`" in by_version
    assert f"{UNLOCKED} (revision=v1) is not in" in by_revision


@pytest.mark.subprocess
@pytest.mark.skipif(
    GENERATION not in RESOLVING, reason="kernel dependencies (get_kernel_dep) exist from kernels 0.17 on"
)
def test_kernel_dependencies_load_the_locked_builds(runtime: Runtime):
    child = runtime.run(
        f'import kernels\npaged = kernels.get_kernel("{PAGED}", version=1)\nreport(dep=paged.DEPENDENCY_IDENTITIES)'
    )
    report = runtime.assert_locked(child, PAGED, ACTIVATION)
    assert report["dep"] == {ACTIVATION: runtime.identity(ACTIVATION)}


# -- a loader kernlock does not know: the real package, edited ---------------------------------------------------


def _edited_kernels(tmp_path: Path, edit: Callable[[Path, str], str]) -> Path:
    """A copy of the installed ``kernels`` package with ``edit(file, source)`` applied to every module; returns
    the folder to put first on PYTHONPATH."""
    import kernels

    site = tmp_path / "edited"
    target = site / "kernels"
    shutil.copytree(Path(kernels.__file__).parent, target, ignore=shutil.ignore_patterns("__pycache__"))
    changed = 0
    for path in target.rglob("*.py"):
        source = path.read_text()
        new = edit(path.relative_to(target), source)
        if new != source:
            path.write_text(new)
            changed += 1
    assert changed, "the edit matched nothing"
    return site


def _rename(old: str, new: str) -> Callable[[Path, str], str]:
    return lambda _path, source: re.sub(rf"\b{old}\b", new, source)


#: Per generation: an internal renamed upstream, as a kernels release may do.
RENAMED = {
    K17: [
        ("class", _rename("HubResolver", "HubResolverV2")),
        ("function", _rename("resolve_version_spec_as_ref", "resolve_version_ref")),
    ],
    K18: [
        ("class", _rename("HubResolver", "HubResolverV2")),
        ("validator", _rename("SignatureValidator", "SignatureCheck")),
    ],
    K19: [
        ("class", _rename("HubResolver", "HubResolverV2")),
        ("latest", _rename("LatestHubResolver", "NewestHubResolver")),
    ],
    K15: [
        ("function", _rename("_check_trust_remote_code", "_check_trust")),
        ("version", _rename("resolve_version_spec_as_ref", "resolve_version_ref")),
    ],
}


def _with_kernels(rt: Runtime, site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), rt.env.get("PYTHONPATH")]))}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("what", [what for what, _ in RENAMED.get(GENERATION or "", [])])
def test_an_unknown_loader_falls_back_to_local_kernels_with_one_line_of_warning(
    runtime: Runtime, tmp_path: Path, what: str
):
    edit = dict(RENAMED[GENERATION or ""])[what]
    site = _edited_kernels(tmp_path, edit)
    child = runtime.run(
        IDENTITIES
        + f"""
import kernels
assert kernels.__file__.startswith(sys.argv[1]), kernels.__file__
from kernlock.runtime import loaders
direct = kernels.get_kernel("{FA2}", version=1)
{TRAIN}
report(generation=loaders.probe().generation, direct=direct.KERNEL_IDENTITY, identities=identities(), **result)
""",
        env=_with_kernels(runtime, site),
        args=[str(site)],
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = child.report
    assert report["generation"] == "unknown"
    assert report["direct"] == runtime.identity(FA2)
    assert report["identities"][FA2] == runtime.identity(FA2)
    assert not TRANSFORMERS or report["q_grad"] > 0
    assert report["connects"] == []
    assert "Traceback" not in child.stderr and "TypeError" not in child.stderr
    lines = [line for line in child.stderr.splitlines() if "kernlock" in line]
    assert len(lines) == 1, child.stderr[-3000:]
    assert "is a loader kernlock does not know" in lines[0] and "LOCAL_KERNELS" in lines[0]
    assert "load_kernel, get_locked_kernel, LockedLayerRepository" in lines[0]
    assert INSTALL_PAIR in lines[0] and "pip install -U kernlock" not in lines[0]


def _renumbered_kernels(tmp_path: Path, version: str) -> Path:
    """The installed ``kernels`` package, unchanged but for the version it reports (its ``__version__`` literal,
    and the metadata of a ``kernels-<version>`` distribution beside it): a release no generation was tested
    with, such as a kernels 0.20 built locally. Returns the folder to put first on PYTHONPATH."""
    site = _edited_kernels(tmp_path, lambda path, source: re.sub(
        r'^__version__ = "[^"]*"', f'__version__ = "{version}"', source, flags=re.M
    ) if path == Path("__init__.py") else source + "\n")  # fmt: skip
    info = site / f"kernels-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kernels\nVersion: {version}\n")
    (info / "top_level.txt").write_text("kernels\n")
    return site


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_kernels_release_no_generation_was_tested_with_is_never_hooked_and_never_crashes(
    runtime: Runtime, tmp_path: Path
):
    """kernels reporting 0.20.0 (this release's own code, renumbered): torch imported first, then activation and
    transformers' kernels integration (kernels 0.19 under kernlock 78e6b59: ModuleNotFoundError, every transformers
    process dead). The lock still wins through LOCAL_KERNELS, with one line naming what is not covered and a tested
    pair to install; `kernlock show` warns in one line, `kernlock env` never advises an impossible command."""
    site = _renumbered_kernels(tmp_path, "0.20.0")
    child = runtime.run(
        IDENTITIES
        + f"""
import torch
import kernlock.activate
import kernels
import transformers.integrations.hub_kernels
from kernlock.runtime import loaders
assert kernels.__version__ == "0.20.0" and kernels.__file__.startswith(sys.argv[1]), kernels.__file__
direct = kernels.get_kernel("{FA2}", version=1)
report(probe=list(loaders.probe()), direct=direct.KERNEL_IDENTITY, identities=identities())
""",
        activate=False,
        env=_with_kernels(runtime, site),
        args=[str(site)],
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = child.report
    assert report["probe"][:2] == ["unknown", "0.20.0"]
    assert report["direct"] == runtime.identity(FA2) and report["connects"] == []
    assert "Traceback" not in child.stderr
    lines = [line for line in child.stderr.splitlines() if "kernlock" in line]
    assert len(lines) == 1, child.stderr[-3000:]
    assert "kernels 0.20.0 is a loader kernlock does not know (it is newer than every release" in lines[0]
    assert INSTALL_PAIR in lines[0] and "LOCAL_KERNELS" in lines[0]
    env = _with_kernels(runtime, site)
    shown = runtime.run_argv([sys.executable, "-m", "kernlock", "show", "--project", str(runtime.project)], env=env)
    assert shown.returncode == 0, shown.stderr
    warned = [line for line in shown.stderr.splitlines() if line.startswith("warning: kernels 0.20.0")]
    assert len(warned) == 1 and INSTALL_PAIR in warned[0], shown.stderr
    text = _env(runtime, env=env)
    assert text.returncode == 0, text.stderr
    assert "loader: kernels 0.20.0 (unknown generation: it is newer than every release" in text.stdout
    assert "pip install -U kernlock" not in text.stdout + text.stderr


@pytest.mark.subprocess
def test_an_unknown_loader_never_imports_a_build_that_fails_verification(runtime: Runtime, tmp_path: Path):
    """The fallback verifies every locked build before pinning it; in strict mode a build that fails is pinned to
    a folder that does not exist, so its loads fail instead of importing unverified code."""
    env, marker = _tampered_cache(runtime, tmp_path, keep_size=False)
    site = _edited_kernels(tmp_path, RENAMED[GENERATION or ""][0][1])
    child = runtime.run(
        IDENTITIES
        + f"""
import kernels
errors = []
try:
    kernels.get_kernel("{FA2}", version=1)
except Exception as err:
    errors.append(type(err).__name__)
activation = kernels.get_kernel("{ACTIVATION}", version=1)
report(errors=errors, identities=identities())
""",
        env={**env, **_with_kernels(runtime, site)},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = child.report
    assert report["errors"] == ["FileNotFoundError"] and not marker.exists()
    assert FA2 not in report["identities"] and report["identities"][ACTIVATION] == runtime.identity(ACTIVATION)
    problem = [line for line in child.stderr.splitlines() if "cannot be pinned through LOCAL_KERNELS" in line]
    assert len(problem) == 1 and FA2 in problem[0] and "its loads fail" in problem[0] and "__init__.py" in problem[0]
    # uncaught, as in a training script: one line naming the repo and the fix, not kernels' FileNotFoundError
    # naming kernlock's not-verified folder (issue 42)
    uncaught = runtime.run(
        f'import kernels\nkernels.get_kernel("{FA2}", version=1)\n', env={**env, **_with_kernels(runtime, site)}
    )
    line = uncaught.error_line()
    assert uncaught.returncode == 1 and line.startswith("kernlock: error:"), uncaught.stderr[-3000:]
    assert "Traceback" not in uncaught.stderr and "not-verified" not in uncaught.stderr, uncaught.stderr[-3000:]
    assert f"{FA2} is locked, but its build here could not be pinned" in line and "`kernlock sync`" in line, line


@pytest.mark.subprocess
def test_an_adapter_that_fails_halfway_is_undone_and_falls_back(runtime: Runtime):
    """An adapter that raises after patching its seams: the patches are reverted, the fallback pins the lock."""
    module, path = (
        (f"{RESOLVING[GENERATION]}.resolver", "HubResolver.resolve")
        if GENERATION in RESOLVING
        else ("kernels.utils", "install_kernel")
    )
    child = runtime.run(
        f"""
        from kernlock.runtime import loaders
        from kernlock.runtime.loaders import _common
        for adapter in loaders.adapters():
            def broken(patcher, install=adapter.install):
                install(patcher)
                raise RuntimeError("boom")
            adapter.install = broken
        import kernels
        direct = kernels.get_kernel("{FA2}", version=1)
        report(hooked=_common.hooked(_common.find("{module}", "{path}")), direct=direct.KERNEL_IDENTITY)
        """
    )
    assert child.returncode == 0, child.stderr[-3000:]
    report = child.report
    assert report["hooked"] is False and report["direct"] == runtime.identity(FA2) and report["connects"] == []
    lines = [line for line in child.stderr.splitlines() if "kernlock" in line]
    assert len(lines) == 1 and "seams failed: RuntimeError: boom" in lines[0], child.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_hook_adds_no_error_of_its_own_to_a_call_it_cannot_read(runtime: Runtime):
    """A call the original refuses is refused by the original, with the same error, activated or not."""
    module, call = (
        (f"{RESOLVING[GENERATION]}.resolver", "HubResolver(trust_remote_code=False).resolve(bogus=1)")
        if GENERATION in RESOLVING
        else ("kernels.utils", 'install_kernel("org/x", "positional-revision")')
    )
    code = f"""
        import importlib
        module = importlib.import_module("{module}")
        try:
            module.{call}
        except Exception as err:
            report(error=f"{{type(err).__name__}}: {{err}}")
        """
    activated, plain = (runtime.run(code, activate=flag).report["error"] for flag in (True, False))
    assert activated == plain and activated.startswith("TypeError:")


def _add_keyword(source: str, call: str, keyword: str) -> str:
    """Add ``keyword`` as the last argument of every call that starts with ``call`` (which ends with "(")."""
    out, start = [], 0
    while (at := source.find(call, start)) >= 0:
        depth, i = 1, at + len(call)
        while depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        inner = source[at + len(call) : i - 1].rstrip()
        sep = " " if inner.endswith(",") else ", "
        out.append(source[start : at + len(call)] + inner + sep + keyword + ")")
        start = i
    return "".join(out) + source[start:]


def _new_keyword(path: Path, source: str) -> str:
    """Every seam kernlock hooks gains a required keyword-only argument ``trace``, which its callers pass."""
    if GENERATION in RESOLVING:
        source = re.sub(r"def resolve\(\s*self,\s*\*,", "def resolve(self, *, trace: list,", source)
        return source.replace(
            ".resolve(api=api, backend=backend, kernel=kernel)",
            ".resolve(api=api, backend=backend, kernel=kernel, trace=[])",
        )
    if path.name != "utils.py":
        return source
    source = re.sub(r"(def install_kernel\(\s*repo_id: str,\s*\*,)", r"\1 trace: list,", source)
    return _add_keyword(source, "variant_path = install_kernel(", "trace=[]")


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_seam_that_gains_a_keyword_argument_passes_it_through(runtime: Runtime, tmp_path: Path):
    site = _edited_kernels(tmp_path, _new_keyword)
    child = runtime.run(
        f"""
import kernels
assert kernels.__file__.startswith(sys.argv[1]), kernels.__file__
from kernlock.runtime import loaders
direct = kernels.get_kernel("{FA2}", version=1)
{TRAIN}
report(generation=loaders.probe().generation, **result)
""",
        env=_with_kernels(runtime, site),
        args=[str(site)],
    )
    report = runtime.assert_locked(child, FA2)
    assert report["generation"] == GENERATION and (not TRANSFORMERS or report["q_grad"] > 0)
    assert "TypeError" not in child.stderr and "does not know" not in child.stderr


# -- `kernlock env` ----------------------------------------------------------------------------------------------


def _env(rt: Runtime, *args: str, env: dict[str, str] | None = None) -> Child:
    return rt.run_argv([sys.executable, "-m", "kernlock", "env", "--project", str(rt.project), *args], env=env)


@pytest.mark.subprocess
def test_kernlock_env_lists_the_load_paths_of_this_loader(runtime: Runtime):
    child = _env(runtime, "--json")
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["loader"] == {"generation": GENERATION, "kernels": PROBE.kernels}
    rows = {row["path"]: row for row in report["load_paths"]}
    assert list(rows) == [path for path, _ in loaders.PATHS]
    gated = not report.get("transformers_gate", {"ok": True})["ok"]
    dependencies = "kernel dependencies (kernel-depends)"
    for path, row in rows.items():
        if path.startswith("transformers") and gated:
            assert row["covered"] is False and "version gate" in row["how"]
        elif path == dependencies and GENERATION == K15:
            assert row["covered"] is False and row["how"] == "not supported by this loader"
        else:
            assert row["covered"] is True, row
    text = _env(runtime, "-v")
    assert text.returncode == 0, text.stderr
    assert f"loader: kernels {PROBE.kernels} ({GENERATION} generation)" in text.stdout
    assert "covered     get_kernel(version=N)" in text.stdout
    short = _env(runtime)
    assert "get_kernel(version=N)" not in short.stdout and "`kernlock env -v`" in short.stdout
    assert CPU_ENV in text.stdout


@pytest.mark.subprocess
def test_kernlock_env_reports_an_unknown_loader_and_what_is_not_covered(runtime: Runtime, tmp_path: Path):
    site = _edited_kernels(tmp_path, RENAMED[GENERATION or ""][0][1])
    child = _env(runtime, "--json", env=_with_kernels(runtime, site))
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["loader"]["generation"] == "unknown" and report["loader"]["missing"]
    rows = {row["path"]: row for row in report["load_paths"]}
    assert rows["get_kernel(version=N)"] == {"path": "get_kernel(version=N)", "covered": True, "how": "LOCAL_KERNELS"}
    for path in ("get_locked_kernel / load_kernel", "LockedLayerRepository", "install_kernel"):
        assert rows[path]["covered"] is False
    text = _env(runtime, env=_with_kernels(runtime, site))
    assert "unknown" in text.stdout and "NOT covered get_locked_kernel / load_kernel" in text.stdout
    assert INSTALL_PAIR in text.stdout and "pip install -U kernlock" not in text.stdout


def test_the_source_probe_reads_definitions_and_words_as_the_regular_expressions_do():
    """`kernlock env` finds kernels' seams with str.find; on every source file of the installed kernels, for every
    name and parameter the adapters ask about (and some it does not), the answer is the regex definition's."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("kernels")
    assert spec is not None and spec.submodule_search_locations
    sources = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.py"))
    asked = {part for adapter in loaders.adapters() for _, path, _ in adapter.SEAMS for part in path.split(".")}
    params = {p for adapter in loaders.adapters() for _, _, ps in adapter.SEAMS for p in ps}
    names = asked | params | {"resolve", "get_kernel", "kernel", "Kernel", "load", "_", "x"}
    for source in sources:
        text = source.read_text(encoding="utf-8")
        for name in names:
            definition = re.search(rf"^\s*(class {name}\b|(async )?def {name}\()", text, re.M) is not None
            assert loaders._defines(text, name) == definition, (source, name)
            assert loaders._has_word(text, name) == (re.search(rf"\b{name}\b", text) is not None), (source, name)
    assert len(sources) > 10 and any(loaders._defines(s.read_text(), "get_kernel") for s in sources)
