"""The Hub kernels transformers loads by itself, in whichever matrix set is installed, through transformers' real
mapping code: transformers 5.25 kernelizes every ``from_pretrained`` with its default kernel mapping
(``get_kernel_mapping_transformers()``), older releases with ``use_kernels=True``. The mapping names cuda, rocm, xpu
and mps; here its entries for the three layers a Llama kernelizes (``RMSNorm``, ``SiLU``, ``rotary_pos_emb``) gain a
``"cpu"`` key, a copy of their ``"cuda"`` one (transformers' own repos, versions and layer names), and
:func:`kernlock.testing.build_transformers_catalog` serves those repos with pure-Python builds.

* `add --implicit` (in a process with that mapping) locks them for the CPU environment, then `from_pretrained`
  loads the locked builds with the Hub stopped and no socket opened, logits equal to torch's;
* rotary not locked: strict mode stops `from_pretrained` with one line naming `kernlock add --implicit`, no
  traceback; warn mode keeps torch's own forward for ``rotary_pos_emb`` with one warning line;
* `kernlock env` lists what transformers loads by itself here, each locked or not;
* with the installed mapping unchanged, `add --implicit` locks the GPU kernels for a CUDA environment only (a CPU
  one loads none of them), and `kernlock add` of one of them drops that scope.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from envs import user_env_for
from packaging.version import Version
from projects import CPU_ENV, LockedProject, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.testing import TRANSFORMERS_KERNELS, HubServer, build_transformers_catalog

pytestmark = pytest.mark.subprocess

CUDA_ENV = "torch211-cxx11-cu128-x86_64-linux"
ACTIVATION, LIGER, ROTARY = (
    "kernels-community/activation",
    "kernels-community/liger-kernels",
    "kernels-community/rotary",
)
LLAMA = {"RMSNorm": LIGER, "SiLU": ACTIVATION, "rotary_pos_emb": ROTARY}
TRANSFORMERS = importlib.metadata.version("transformers")
DEFAULT_ON = Version(TRANSFORMERS) >= Version("5.25.0.dev0")
only_default_on = pytest.mark.skipif(not DEFAULT_ON, reason=f"transformers {TRANSFORMERS} loads it when asked only")

#: Child code: the mapping's entries for a Llama's layers reach the CPU.
ON_CPU = """
from transformers.integrations import hub_kernels as _hub_kernels
_mapping = _hub_kernels.get_kernel_mapping_transformers()
for _layer in ("RMSNorm", "SiLU", "rotary_pos_emb"):
    _mapping[_layer]["cpu"] = _mapping[_layer]["cuda"]
"""
#: Child code: what transformers' mapping asks for a Llama on cuda, or why this set cannot run these tests.
PROBE = """
import json
try:
    import transformers.integrations.hub_kernels  # read() then reads it here, not in a child of its own
except Exception:
    pass
from kernlock.environments.implicit import read
mapping = read()
found = {k.layer: [k.repo, k.rev] for k in mapping.kernels if k.device == "cuda" and k.layer in LAYERS}
print("PROBE " + json.dumps({"why": mapping.why, "found": found}))
"""
#: Child code: from_pretrained of the tiny Llama (as transformers does by default, or with use_kernels=True before
#: 5.25), its logits against torch's own.
LOAD = """
import torch
from transformers import LlamaForCausalLM
torch.manual_seed(0)
ids = torch.randint(0, 64, (2, 8))
model = LlamaForCausalLM.from_pretrained(MODEL, **KWARGS)
logits = model(input_ids=ids).logits
plain = LlamaForCausalLM.from_pretrained(MODEL, use_kernels=False)(input_ids=ids).logits
report(diff=float((logits - plain).abs().max()))
"""


def _code(body: str, model: Path) -> str:
    kwargs = {} if DEFAULT_ON else {"use_kernels": True}
    return ON_CPU + body.replace("MODEL", repr(str(model))).replace("KWARGS", repr(kwargs))


def _skip_reason(env: dict[str, str]) -> str | None:
    """Why this set cannot run these tests (no mapping, or one asking other repos/versions than the sample's)."""
    if Version(TRANSFORMERS) < Version("5.22"):
        return f"transformers {TRANSFORMERS}: the default mapping's Llama entries are tested from 5.22 on"
    code = PROBE.replace("LAYERS", repr(tuple(LLAMA)))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line is not None, done.stderr[-3000:]
    probe = json.loads(line[len("PROBE ") :])
    if probe["why"]:
        return probe["why"]
    for layer, repo in LLAMA.items():
        asked = probe["found"].get(layer)
        if asked is None or asked[0] != repo or asked[1] not in TRANSFORMERS_KERNELS[repo][0]:
            return f"transformers {TRANSFORMERS} maps {layer} to {asked} on cuda, which the sample Hub does not serve"
    return None


@dataclass
class Locked:
    """The sample Hub's repositories, the tiny Llama, and two CPU projects `add --implicit` locked and synced."""

    root: Path
    model: Path
    all: LockedProject  # the three kernels a Llama kernelizes
    partial: LockedProject  # rotary left out


@pytest.fixture(scope="module")
def implicit(tmp_path_factory: pytest.TempPathFactory) -> Locked:
    """Both projects locked by `add --implicit` in a process whose mapping reaches the CPU, then synced; the Hub is
    stopped on return."""
    base = tmp_path_factory.mktemp("implicit")
    root = base / "hub"
    build_transformers_catalog(root)
    env = user_env_for(base)
    why = _skip_reason(env)
    if why is not None:
        pytest.skip(why)
    model, everything, partial = base / "tiny-llama", base / "all", base / "partial"
    for project in (everything, partial):
        project.mkdir()
        write_pyproject(project, "", [CPU_ENV])
    lock = ON_CPU + textwrap.dedent(
        f"""
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        from kernlock import api
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        )
        LlamaForCausalLM(config).save_pretrained({str(model)!r})
        api.add_implicit({str(everything)!r}, {[ACTIVATION, LIGER, ROTARY]!r})
        api.add_implicit({str(partial)!r}, {[ACTIVATION, LIGER]!r})
        for project in ({str(everything)!r}, {str(partial)!r}):
            api.sync(project, progress=False)
        """
    )
    with HubServer(root) as server:
        env.update(server.env())
        done = subprocess.run([sys.executable, "-c", lock], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]

    def locked(project: Path) -> LockedProject:
        return LockedProject(root, project, lockfile.read(project / "kernels.lock"), env)

    return Locked(root=root, model=model, all=locked(everything), partial=locked(partial))


def test_add_implicit_locks_what_the_mapping_loads_here(implicit: Locked) -> None:
    locked = implicit.all
    assert sorted(entry.repo for entry in locked.lock.kernels) == sorted(LLAMA.values())
    for entry in locked.lock.kernels:
        assert entry.environments == (CPU_ENV,) and entry.variants[0].name == "torch-cpu"
        assert entry.requested in TRANSFORMERS_KERNELS[entry.repo][0]
    text = (locked.project / "pyproject.toml").read_text()
    assert "environments = [" not in text.split("[tool.kernlock.kernels]")[1]  # every environment: no scope
    assert sorted(entry.repo for entry in implicit.partial.lock.kernels) == [ACTIVATION, LIGER]


@pytest.mark.slow
def test_from_pretrained_loads_the_locked_implicit_kernels_offline(implicit: Locked) -> None:
    locked = implicit.all
    child = locked.run(_code(LOAD, implicit.model))
    report = locked.assert_locked(child, *LLAMA.values())  # the locked commits and builds; no socket connected
    calls = {repo: report["loaded"][repo]["calls"] for repo in LLAMA.values()}
    assert calls[LIGER]["rms_norm"] > 0 and calls[ACTIVATION]["silu"] > 0 and calls[ROTARY]["apply_rotary"] > 0
    assert report["diff"] < 1e-5
    assert "kernlock" not in child.stderr, child.stderr[-2000:]


STRICT_AT_EXIT = """
import atexit
atexit.register(lambda: print("CONNECTS " + json.dumps(CONNECTS), flush=True))
"""


@pytest.mark.slow
def test_an_unlocked_implicit_kernel_stops_strict_mode_in_one_line(implicit: Locked) -> None:
    locked = implicit.partial
    child = locked.run(STRICT_AT_EXIT + _code(LOAD, implicit.model))
    assert child.returncode == 1 and "Traceback" not in child.stderr, child.stderr[-3000:]
    line = child.error_line()
    assert line.startswith(
        f"kernlock: error: {ROTARY} (version=2) is loaded by transformers' default kernel mapping (layer "
        f"rotary_pos_emb), but kernels.lock does not lock it for {CPU_ENV}; lock it with `kernlock add --implicit "
        f"{ROTARY}`"
    ), line
    assert "USE_HUB_KERNELS=0" in line and "KERNLOCK_MODE=warn" in line
    assert [x for x in child.stderr.splitlines() if x.startswith("kernlock")] == [line]
    assert "CONNECTS []" in child.stdout, child.stdout


@pytest.mark.slow
def test_warn_mode_keeps_torchs_forward_for_an_unlocked_implicit_kernel(implicit: Locked) -> None:
    locked = implicit.partial
    child = locked.run(_code(LOAD, implicit.model), env={"KERNLOCK_MODE": "warn"})
    report = locked.assert_locked(child, ACTIVATION, LIGER)  # no socket connected: rotary was never fetched
    assert ROTARY not in report["loaded"] and report["diff"] < 1e-5
    warnings = [x for x in child.stderr.splitlines() if "kernlock:" in x]
    assert len(warnings) == 1, child.stderr[-3000:]
    assert f"{ROTARY} (version=2) is loaded by transformers' default kernel mapping" in warnings[0]
    assert "keeping torch's own forward for it" in warnings[0] and f"kernlock add --implicit {ROTARY}" in warnings[0]


def test_kernlock_env_lists_what_transformers_loads_by_itself(implicit: Locked) -> None:
    locked = implicit.partial
    body = f"from kernlock import api\nprint('ENV ' + json.dumps(api.env_report({str(locked.project)!r})['implicit']))"
    child = locked.run(ON_CPU + body, activate=False)
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(next(x for x in child.stdout.splitlines() if x.startswith("ENV "))[4:])
    assert found["transformers"] == TRANSFORMERS and found["device"] == "cpu"
    text = run_cli("env", "--project", str(locked.project), env=locked.env).stdout
    if not DEFAULT_ON:  # loaded with use_kernels=True only: `env` does not read the mapping
        assert found["kernels"] == [] and "only with use_kernels=True" in found["why"]
        assert "only with use_kernels=True" in text
        return
    rows = {row["repo"]: row for row in found["kernels"]}
    assert rows[ACTIVATION]["locked"] == locked.entry(ACTIVATION).commit and "SiLU" in rows[ACTIVATION]["layers"]
    assert rows[LIGER]["locked"] == locked.entry(LIGER).commit and rows[LIGER]["layers"] == ["RMSNorm"]
    assert rows[ROTARY]["locked"] is None and rows[ROTARY]["layers"] == ["rotary_pos_emb"]
    # The installed mapping, as `kernlock env` reads it: nothing on a CPU machine.
    assert f"kernels transformers loads by itself: none (transformers {TRANSFORMERS} on cpu; its mapping names" in text


@pytest.mark.slow
def test_add_implicit_locks_gpu_kernels_for_gpu_environments_only(implicit: Locked, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, "", [CPU_ENV, CUDA_ENV])
    with HubServer(implicit.root) as server:
        env = user_env_for(tmp_path, server)
        result = run_cli("add", "--implicit", ACTIVATION, LIGER, ROTARY, "--project", str(project), env=env)
        assert result.returncode == 0, result.stderr
        assert f'added {ROTARY} = "v2" for {CUDA_ENV}' in result.stdout, result.stdout
        assert f", none on {CPU_ENV}" in result.stdout.splitlines()[0], result.stdout
        lock = lockfile.read(project / "kernels.lock")
        for entry in lock.kernels:
            assert entry.environments == (CUDA_ENV,) and entry.variants[0].name == "torch-cuda", entry
        text = (project / "pyproject.toml").read_text()
        assert f'"{ROTARY}" = {{rev = "v2", environments = ["{CUDA_ENV}"]}}' in text, text
        assert run_cli("lock", "--check", "--project", str(project), env=env).returncode == 0
        again = run_cli("add", "--implicit", ROTARY, "--project", str(project), env=env)
        assert again.returncode == 0 and "(kept)" in again.stdout, again.stdout + again.stderr
        everything = run_cli("add", "--implicit", "--project", str(project), env=env)  # the real Hub's repos too
        assert_clean_error(everything, "kernlock add --implicit")
        assert lockfile.read(project / "kernels.lock") == lock  # nothing written
        # locked for the CUDA environment only: on this CPU machine rotary is an unlocked kernel like any other
        code = f"import kernlock.activate, kernels\nkernels.get_kernel({ROTARY!r}, version=2)"
        here = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True)
        assert here.returncode == 1 and "Traceback" not in here.stderr, here.stderr[-2000:]
        assert f"{ROTARY} (version=2) is not in {project / 'kernels.lock'} for {CPU_ENV}" in here.stderr, here.stderr
        plain = run_cli("add", f"{ROTARY}@v2", "--no-sync", "--project", str(project), env=env)
        assert plain.returncode == 0, plain.stderr
    assert f'"{ROTARY}" = "v2"' in (project / "pyproject.toml").read_text()  # `add` locks it everywhere
    rotary = lockfile.read(project / "kernels.lock").entries(ROTARY)
    assert [sorted(e.environments) for e in rotary] == [sorted([CPU_ENV, CUDA_ENV])]
