"""`kernlock check` (issue 26): each locked kernel against the torch path it replaces, forward and backward.

The proof is a fixture attention kernel whose backward is wrong only for grouped-query attention
(``kernels-community/gqa-attention`` v3, kernels-community#1085 on the CPU): `kernlock check` fails its GQA
gradients and nothing else, and its correct sibling v2 passes every case. Layer kernels (activation, RMSNorm) are
checked against the modules they replace; a kernel of neither kind (rotary) is "not checked", never passed. Every
check runs with the Hub stopped: the locked, synced builds load as activation loads them, with no request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli import assert_clean_error, run_cli
from envs import user_env_for
from projects import CPU_ENV, write_pyproject

from kernlock.testing import Catalog, HubServer

pytestmark = pytest.mark.subprocess

GQA = "kernels-community/gqa-attention"
ACTIVATION = "kernels-community/activation"
LAYER_NORM = "kernels-community/triton-layer-norm"
ROTARY = "kernels-community/rotary"


def _locked(catalog: Catalog, base: Path, gqa_rev: str) -> tuple[Path, dict[str, str]]:
    """A project locking the attention kernel at ``gqa_rev`` and three others, synced; the Hub is then stopped."""
    project = base / f"project-{gqa_rev}"
    project.mkdir()
    kernels = f'"{GQA}" = "{gqa_rev}"\n"{ACTIVATION}" = "v1"\n"{LAYER_NORM}" = "v1"\n"{ROTARY}" = "v1"\n'
    write_pyproject(project, kernels, environments=[CPU_ENV])
    env = user_env_for(base)
    with HubServer(catalog.root) as server:
        for command in ("lock", "sync"):
            result = run_cli(command, "--project", str(project), env={**env, **server.env()})
            assert result.returncode == 0, result.stderr
        stopped = {**env, **server.env()}
    return project, stopped


@pytest.fixture(scope="module")
def checked(catalog: Catalog, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, str]]]:
    base = tmp_path_factory.mktemp("check")
    return {rev: _locked(catalog, base, rev) for rev in ("v2", "v3")}


def _rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    """(kernel, case) -> the row's cells, from the printed table."""
    rows = {}
    for line in stdout.splitlines():
        cells = line.split("  ")
        cells = [c.strip() for c in cells if c.strip()]
        if cells and cells[0].startswith("kernels-community/"):
            rows[(cells[0], cells[3])] = cells
    return rows


@pytest.mark.slow
def test_check_catches_the_gqa_only_backward_bug(checked: dict[str, tuple[Path, dict[str, str]]]) -> None:
    project, env = checked["v3"]
    result = run_cli("check", "--project", str(project), env=env)
    print(result.stdout)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    rows = _rows(result.stdout)
    failed = sorted(case for (kernel, case), row in rows.items() if row[-1] == "FAIL")
    assert failed == ["attention GQA float32 gradients"], result.stdout
    for case in ("attention MHA float32 logits", "attention MHA float32 gradients", "attention GQA float32 logits"):
        assert rows[(GQA, case)][-1] == "pass"
    gqa = rows[(GQA, "attention GQA float32 gradients")]
    assert float(gqa[4]) > 10 * float(gqa[5])  # the error is far above the tolerance, not at its edge


@pytest.mark.slow
def test_check_passes_the_correct_sibling_and_layers_and_never_passes_the_unchecked(
    checked: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    project, env = checked["v2"]
    result = run_cli("check", "--project", str(project), env=env)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    rows = _rows(result.stdout)
    cases = {case for kernel, case in rows if kernel == GQA}
    assert cases == {f"attention {s} float32 {what}" for s in ("MHA", "GQA") for what in ("logits", "gradients")}
    assert all(row[-1] == "pass" for (kernel, _), row in rows.items() if kernel == GQA)
    assert rows[(LAYER_NORM, "layer LlamaRMSNorm float32 outputs")][-1] == "pass"
    assert rows[(LAYER_NORM, "layer RMSNorm float32 input gradients")][-1] == "pass"
    assert rows[(ACTIVATION, "layer SiluAndMul float32 input gradients")][-1] == "pass"
    assert rows[(ROTARY, "-")][-1] == "not checked"
    assert "not checked: kernels-community/rotary" in result.stdout
    commit = rows[(GQA, "attention GQA float32 logits")][1]
    assert len(commit) == 12 and rows[(GQA, "attention GQA float32 logits")][2] == CPU_ENV


@pytest.mark.slow
def test_check_json_kernel_filter_and_record(checked: dict[str, tuple[Path, dict[str, str]]]) -> None:
    project, env = checked["v3"]
    result = run_cli("check", "--kernel", GQA, "--json", "--record", "--project", str(project), env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["environment"] == CPU_ENV and report["device"] == "cpu"
    assert {row["kernel"] for row in report["rows"]} == {GQA}
    [bad] = [row for row in report["rows"] if row["result"] == "FAIL"]
    assert bad["case"] == "attention GQA float32 gradients" and bad["max-abs-error"] > bad["tolerance"]
    recorded = (project / "kernels.check.toml").read_text()
    print(recorded)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    [entry] = tomllib.loads(recorded)["check"]
    assert (entry["repo"], entry["environment"], entry["device"], entry["result"]) == (GQA, CPU_ENV, "cpu", "FAIL")
    assert len(entry["commit"]) == 40 and entry["variant"] == CPU_ENV
    again = run_cli("check", "--kernel", GQA, "--json", "--record", "--project", str(project), env=env)
    assert again.returncode == 1
    assert (project / "kernels.check.toml").read_text() == recorded  # same key, same results: same bytes


def test_check_refuses_a_kernel_not_locked_here_and_an_unsynced_build(
    checked: dict[str, tuple[Path, dict[str, str]]], tmp_path: Path
) -> None:
    project, env = checked["v2"]
    result = run_cli("check", "--kernel", "kernels-community/flash-attn2", "--project", str(project), env=env)
    assert_clean_error(result, "kernels-community/flash-attn2: not locked for", GQA)
    empty = {**env, "HF_HUB_CACHE": str(tmp_path / "empty-cache"), "KERNLOCK_CACHE": str(tmp_path / "kl")}
    result = run_cli("check", "--project", str(project), env=empty)
    assert_clean_error(result, "kernlock sync")
