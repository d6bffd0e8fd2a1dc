"""The kernels transformers loads by itself, as values: which environment loads which kernel of the mapping (its
device, its declared GPU capabilities), what `kernlock add --implicit` asks for (requirements scoped to the
environments that load them), a real kernels mapping read as plain values, and a requirement's `environments`."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernlock.environments.environment import Environment
from kernlock.environments.implicit import MappedKernel, Mapping, applies, device_of, mapped_kernels
from kernlock.errors import ProjectError, ResolutionError, SpecError
from kernlock.project import inputs
from kernlock.resolve.implicit import plan

CPU = "torch213-cxx11-cpu-x86_64-linux"
CUDA = "torch211-cxx11-cu128-x86_64-linux"
ROCM = "torch210-cxx11-rocm64-x86_64-linux"
GB10 = {"name": "torch212-cxx11-cu130-aarch64-linux", "cuda-capabilities": ["12.1"]}
H200 = {"name": "torch211-cxx11-cu130-x86_64-linux", "cuda-capabilities": ["9.0"]}


def _k(repo: str, device: str = "cuda", rev: str = "v2", layer: str = "L", caps: tuple[int, int] | None = None):
    return MappedKernel(layer=layer, device=device, repo=repo, kernel_layer=layer, rev=rev, capabilities=caps)


ROTARY = _k("kernels-community/rotary", layer="rotary_pos_emb")
ROTARY_XPU = _k("kernels-community/rotary", device="xpu", layer="rotary_pos_emb")
GDN = _k("Atlas-Inference/gdn", rev="531ae679ab5c13a3bf49607e1b6e6459300772e9", caps=(121, 121))
AITER = _k("kernels-community/aiter-rope", device="rocm", rev="v3")
MAPPING = Mapping(transformers="5.25.0", by_default=True, kernels=(ROTARY, ROTARY_XPU, GDN, AITER))


def _env(declared: str | dict) -> Environment:
    return Environment.from_declared(declared)


@pytest.mark.parametrize(
    ("declared", "device"),
    [
        (CPU, "cpu"),
        (CUDA, "cuda"),
        (ROCM, "rocm"),
        ("torch210-cxx11-xpu20253-x86_64-linux", "xpu"),
        ("torch211-metal-aarch64-darwin", "mps"),
    ],
)
def test_an_environment_names_the_device_transformers_maps(declared: str, device: str) -> None:
    assert device_of(_env(declared)) == device


def test_a_capability_kernel_loads_only_where_the_environment_declares_that_capability() -> None:
    assert applies(ROTARY, _env(CUDA)) is True and applies(ROTARY, _env(CPU)) is False
    assert applies(GDN, _env(GB10)) is True
    assert applies(GDN, _env(H200)) is False
    assert applies(GDN, _env(CUDA)) is None  # no `cuda-capabilities`: kernlock cannot tell
    assert applies(AITER, _env(ROCM)) is True and applies(AITER, _env(CUDA)) is False


def _project(tmp_path: Path, environments: list, kernels: str = "") -> inputs.Project:
    listed = ", ".join(f'"{e}"' if isinstance(e, str) else _inline(e) for e in environments)
    text = f'[project]\nname = "p"\nversion = "0"\n\n[tool.kernlock]\nenvironments = [{listed}]\n'
    (tmp_path / "pyproject.toml").write_text(text + f"\n[tool.kernlock.kernels]\n{kernels}")
    return inputs.load(tmp_path)


def _inline(table: dict) -> str:
    return "{ " + ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in table.items()) + " }"


def test_plan_scopes_each_kernel_to_the_environments_whose_device_the_mapping_names(tmp_path: Path) -> None:
    project = _project(tmp_path, [CPU, CUDA, GB10])
    found = plan(MAPPING, project, list(project.environments or ()), [])
    rotary = found.requirements["kernels-community/rotary"]
    assert rotary.pins[0].rev == "v2" and rotary.environments == tuple(sorted([CUDA, GB10["name"]]))
    gdn = found.requirements["Atlas-Inference/gdn"]
    assert gdn.pins[0].rev == GDN.rev and gdn.environments == (GB10["name"],)
    assert [(u.kernel.repo, u.environment) for u in found.undecided] == [("Atlas-Inference/gdn", CUDA)]
    assert "kernels-community/aiter-rope" not in found.requirements  # no ROCm environment


def test_plan_keeps_what_the_project_requires_and_widens_a_scope(tmp_path: Path) -> None:
    kernels = '"kernels-community/rotary" = { rev = "v1", environments = ["' + CUDA + '"] }\n'
    project = _project(tmp_path, [CPU, CUDA, GB10], kernels)
    found = plan(MAPPING, project, list(project.environments or ()), ["kernels-community/rotary"])
    widened = found.requirements["kernels-community/rotary"]
    assert widened.pins[0].rev == "v1" and widened.environments == tuple(sorted([CUDA, GB10["name"]]))
    project = _project(tmp_path, [CPU, CUDA], '"kernels-community/rotary" = "v1"\n')
    found = plan(MAPPING, project, list(project.environments or ()), ["kernels-community/rotary"])
    assert found.requirements == {} and found.kept == ("kernels-community/rotary",)


def test_plan_refuses_a_revision_a_kernel_it_does_not_load_and_two_revisions(tmp_path: Path) -> None:
    project = _project(tmp_path, [CPU, CUDA])
    envs = list(project.environments or ())
    with pytest.raises(SpecError, match="without @v2"):
        plan(MAPPING, project, envs, ["kernels-community/rotary@v2"])
    with pytest.raises(SpecError, match="loads no kernels-community/aiter-rope by itself on"):
        plan(MAPPING, project, envs, ["kernels-community/aiter-rope"])
    twice = Mapping(transformers="5.25.0", by_default=True, kernels=(ROTARY, _k("kernels-community/rotary", rev="v3")))
    with pytest.raises(ResolutionError, match="at v2 and v3"):
        plan(twice, project, envs, [])


def test_a_kernels_mapping_reads_as_plain_values() -> None:
    kernels = pytest.importorskip("kernels")
    from kernels import CUDAProperties, Device, LayerRepository, Mode

    rope = LayerRepository(repo_id="kernels-community/rotary", layer_name="apply_rotary_transformers", version=2)
    gdn = LayerRepository(repo_id="a/gdn", layer_name="G", revision="531ae679", trust_remote_code=True)
    mapping = {
        "rotary_pos_emb": {"cuda": {Mode.TRAINING: rope, Mode.INFERENCE: rope}, "xpu": rope},
        "G": {Device(type="cuda", properties=CUDAProperties(min_capability=121, max_capability=121)): gdn},
    }
    found = mapped_kernels(mapping)
    assert [(k.repo, k.device, k.rev, k.capabilities, k.trust) for k in found] == [
        ("a/gdn", "cuda", "531ae679", (121, 121), True),
        ("kernels-community/rotary", "cuda", "v2", None, False),
        ("kernels-community/rotary", "xpu", "v2", None, False),
    ], kernels.__version__
    assert found[1].asked == "version=2" and found[0].asked == "revision=531ae679"


def test_a_requirement_may_name_the_environments_it_is_locked_for(tmp_path: Path) -> None:
    scoped = '"kernels-community/rotary" = { rev = "v2", environments = ["' + CUDA + '"] }\n'
    project = _project(tmp_path, [CPU, CUDA], scoped + '"kernels-community/activation" = "v1"\n')
    rotary = project.requirements["kernels-community/rotary"]
    assert rotary.applies_to(CUDA) and not rotary.applies_to(CPU)
    assert rotary.as_data()["environments"] == [CUDA]
    assert "environments" not in project.requirements["kernels-community/activation"].as_data()  # digest unchanged
    with pytest.raises(ProjectError, match=r"which \[tool.kernlock\] environments does not"):
        _project(tmp_path, [CPU], scoped)
    with pytest.raises(ProjectError, match="must be a non-empty list of environment strings"):
        _project(tmp_path, [CPU], '"kernels-community/rotary" = { rev = "v2", environments = "x" }\n')
