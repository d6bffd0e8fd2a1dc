"""`kernlock run --record` (issue 26): every Hub kernel request of every process of a run, locked afterwards.

The run is the one the issue names: transformers with ``attn_implementation="flash_attention_2"`` (flash-attn is not
installed, so transformers silently falls back to ``kernels-community/flash-attn2`` at ``version=4``) and
``use_kernels=True`` on a tiny Llama whose RMSNorm maps to a fixture repo, under ``torchrun`` with 2 ranks (gloo).
The recorded run adds both kernels with the revision asked and re-locks; the same run then passes in strict mode
with the Hub stopped.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_cli
from envs import user_env_for
from projects import CPU_ENV, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.testing import Catalog, HubServer

FA2 = "kernels-community/flash-attn2"
LAYER_NORM = "kernels-community/triton-layer-norm"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")

# One rank: a tiny Llama saved by the test, loaded with the flash_attention_2 fallback and use_kernels=True (its
# RMSNorm mapped to a fixture repo for this CPU device), one training step, the loss all-reduced over gloo.
TRAIN = """\
import json, os, sys
import torch
import torch.distributed as dist
from kernels import LayerRepository, register_kernel_mapping
from transformers import AutoModelForCausalLM

register_kernel_mapping(
    {"RMSNorm": {"cpu": LayerRepository("kernels-community/triton-layer-norm", layer_name="LlamaRMSNorm", version=1)}}
)
import torch._dynamo  # before the process group exists: see the end
dist.init_process_group("gloo")
rank = dist.get_rank()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], attn_implementation="flash_attention_2", use_kernels=True)
model.train()
torch.manual_seed(rank)
ids = torch.randint(0, 64, (2, 8))
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
total = loss.detach().clone()
dist.all_reduce(total)
import kernels
loaded = {k.repo_info.repo_id: k.repo_info.revision for k in kernels.get_loaded_kernels() if k.repo_info}
out = {"rank": rank, "attn": model.config._attn_implementation, "loss": float(total), "loaded": loaded}
dist.barrier()
# torch._dynamo, first imported while a process group exists (here: as the model loads), keeps references to the
# group, so destroy_process_group() left gloo's threads running into the interpreter's teardown, where they now and
# then ended the rank in SIGABRT (tests/system/test_launchers.py says how). Imported before, it holds none: the
# group goes here, its threads joined.
dist.destroy_process_group()
tasks = [open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")]
out["gloo_threads"] = sorted(name for name in tasks if "gloo" in name)
open(os.path.join(sys.argv[2], f"rank{rank}.json"), "w").write(json.dumps(out))
sys.stdout.flush()
os._exit(0)  # a backstop, as tests/system/test_launchers.py's ranks: gloo's threads were once seen outliving the group
"""

MODEL = """\
import sys
from transformers import AutoModelForCausalLM, LlamaConfig
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
AutoModelForCausalLM.from_config(config).save_pretrained(sys.argv[1])
"""


def _ranks(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.binds
@pytest.mark.slow
@pytest.mark.subprocess
def test_recorded_torchrun_locks_what_transformers_asked_then_runs_strict_with_the_hub_stopped(
    catalog: Catalog, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pyproject = write_pyproject(project, "", environments=[CPU_ENV])
    (project / "train.py").write_text(TRAIN)
    env = {**user_env_for(tmp_path), "OMP_NUM_THREADS": "1"}
    model = tmp_path / "tiny-llama"
    subprocess.run([sys.executable, "-c", MODEL, str(model)], env=env, check=True, timeout=300)
    before = pyproject.read_text()
    torchrun = [TORCHRUN, "--standalone", "--nproc_per_node", "2", "train.py", str(model)]

    with HubServer(catalog.root) as server:
        hub_env = server.env()
        out = tmp_path / "recorded"
        out.mkdir()
        recorded = run_cli("run", "--record", "--", *torchrun, str(out), env={**env, **hub_env}, cwd=project)
    print(recorded.stdout)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr[-4000:]
    lines = recorded.stdout.splitlines()
    assert "CMD exited with status 0; 2 Hub kernel requests recorded by 2 processes" in lines
    table = [line.split() for line in lines if line.startswith("kernels-community/")]
    assert [row[:2] for row in table] == [[FA2, "v4"], [LAYER_NORM, "v1"]], recorded.stdout
    fa2_row = next(line for line in lines if line.startswith(FA2))
    norm_row = next(line for line in lines if line.startswith(LAYER_NORM))
    assert "flash_attention fallback (flash_attention_2)" in fa2_row and fa2_row.split()[-2:] == ["no", "2"]
    assert "kernelize mapping (LlamaRMSNorm)" in norm_row and norm_row.split()[-2:] == ["no", "2"]
    assert f'added "{FA2}" = "v4" to [tool.kernlock.kernels]' in recorded.stdout
    assert f'added "{LAYER_NORM}" = "v1" to [tool.kernlock.kernels]' in recorded.stdout

    diff = "".join(difflib.unified_diff(before.splitlines(True), pyproject.read_text().splitlines(True)))
    print(diff)
    assert f'+"{FA2}" = "v4"\n' in diff and f'+"{LAYER_NORM}" = "v1"\n' in diff
    assert [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")] == []
    lock_text = (project / "kernels.lock").read_text()
    print(lock_text)
    lock = lockfile.read(project / "kernels.lock")
    assert {(k.repo, k.requested) for k in lock.kernels} == {(FA2, "v4"), (LAYER_NORM, "v1")}
    assert all(r["attn"] == FA2 for r in _ranks(out))  # the recorded run trained through the fallback

    strict = tmp_path / "strict"
    strict.mkdir()
    # the Hub is stopped: HF_ENDPOINT points at a port nothing listens on
    child = run_cli("run", "--", *torchrun, str(strict), env={**env, **hub_env}, cwd=project)
    print(child.stdout, child.stderr[-3000:])
    assert child.returncode == 0, child.stderr[-4000:]
    pins = {k.repo: k.commit for k in lock.kernels}
    for rank in _ranks(strict):
        assert rank["attn"] == FA2
        assert rank["loaded"] == pins


@pytest.mark.binds
@pytest.mark.subprocess
def test_strict_error_names_the_revision_asked_and_run_record(catalog: Catalog, tmp_path: Path) -> None:
    """transformers asks flash-attn2 for version=4: the fix offered is `kernlock add ...@v4`, and run --record."""
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV])
    env = user_env_for(tmp_path)
    assert run_cli("lock", "--project", str(project), env=env).returncode == 0
    code = 'import kernels\nkernels.get_kernel("kernels-community/flash-attn2", version=4)\n'
    child = run_cli("run", "--", sys.executable, "-c", code, env=env, cwd=project)
    assert child.returncode == 1
    line = [line for line in child.stderr.splitlines() if line.strip()][-1]
    assert f"`kernlock add {FA2}@v4`" in line and "`kernlock run --record -- CMD...`" in line, line


def test_hostile_records_are_dropped_and_name_no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record is input: a bad repo id, a revision with a path in it, an unknown load path, a symlinked or oversized
    file are dropped, counted, and never reach pyproject."""
    from kernlock.runtime import records

    monkeypatch.setenv("KERNLOCK_CACHE", str(tmp_path / "cache"))
    folder = records.make_folder()
    good = {"repo": FA2, "asked": "v4", "path": "get_kernel", "detail": "", "locked": False}
    bad = [
        {**good, "repo": "../../etc/passwd"},
        {**good, "asked": "../../x"},
        {**good, "path": "somewhere"},
        {**good, "detail": "\x1b[2J"},
        {**good, "locked": "no"},
        {**good, "extra": 1},
    ]
    (folder / "1.jsonl").write_text("\n".join(json.dumps(r) for r in [good, *bad]) + "\nnot json\n")
    (folder / "2.jsonl").write_bytes(b"x" * (records.MAX_FILE + 1))
    # A loaded build's line (a worker on another node names its node): checked as strictly.
    build = {"loaded": FA2, "commit": "a" * 40, "variant": "torch213-cxx11-cpu-x86_64-linux", "node": "n0de.1"}
    bad_builds = [
        {**build, "commit": "a" * 39},
        {**build, "variant": "../x"},
        {**build, "node": "a/b"},
        {**build, "node": "x" * 65},
        {**build, "loaded": "../../etc"},
    ]
    (folder / "n0de.1-4.jsonl").write_text("\n".join(json.dumps(r) for r in [build, *bad_builds]) + "\n")
    (folder / "other-5.jsonl").write_text(json.dumps({**build, "node": "other"}) + "\n")
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({**good, "repo": "kernels-community/evil"}) + "\n")
    os.symlink(outside, folder / "3.jsonl")
    gathered = records.gather(folder)
    assert [(r.repo, r.asked) for r in gathered.requests] == [(FA2, "v4")]
    assert [(b.repo, b.commit, b.processes, b.nodes) for b in gathered.builds] == [
        (FA2, "a" * 40, 2, ("n0de.1", "other"))
    ]
    # the bad lines, the non-JSON line, the big and the linked file
    assert gathered.dropped == len(bad) + len(bad_builds) + 1 + 2
    records.remove_folder(folder)
    assert not folder.exists()
    records.remove_folder(tmp_path)  # not a record folder: left alone
    assert outside.exists()


# Every load path of the issue in one process: an unlocked repo per path (one load fails, one repo does not exist),
# a locked repo, and a repo asked for with two revisions.
EVERY_PATH = """\
from kernels import LayerRepository, get_kernel, register_kernel_mapping
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.integrations.hub_kernels import lazy_load_kernel

register_kernel_mapping(
    {"RMSNorm": {"cpu": LayerRepository("kernels-community/triton-layer-norm", layer_name="LlamaRMSNorm", version=1)}}
)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=2)
model = AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2")
model.set_use_kernels(True)
AutoModelForCausalLM.from_config(config, attn_implementation="kernels-community/gqa-attention@v2")
get_kernel("kernels-community/flash-attn2", revision="v3")
get_kernel("kernels-community/paged-attention", version=1)  # kernel-depends on activation version 1
for load in (lambda: get_kernel("kernels-community/rotary", version=2), lambda: lazy_load_kernel("finegrained-fp8")):
    try:
        load()  # rotary v2 has no CPU build; finegrained-fp8 is not on this Hub: both fail, both are recorded
    except Exception as err:
        print("failed:", type(err).__name__)
raise SystemExit(3)
"""


@pytest.mark.binds
@pytest.mark.slow
@pytest.mark.subprocess
def test_every_load_path_is_recorded_even_when_the_load_fails(catalog: Catalog, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pyproject = write_pyproject(project, f'"{LAYER_NORM}" = "v1"\n', environments=[CPU_ENV])
    (project / "every.py").write_text(EVERY_PATH)
    env = user_env_for(tmp_path)
    with HubServer(catalog.root) as server:
        env.update(server.env())
        assert run_cli("lock", env=env, cwd=project).returncode == 0
        before = (pyproject.read_text(), (project / "kernels.lock").read_text())
        result = run_cli("run", "--record", "--dry-run", "--", sys.executable, "every.py", env=env, cwd=project)
    print(result.stdout)
    assert result.returncode == 3, result.stderr[-3000:]  # CMD's status, after the table
    requests, builds = result.stdout.split("Locked builds loaded:\n")
    rows = {tuple(line.split()[:2]): line for line in requests.splitlines() if "/" in line.split(" ")[0]}
    # The one locked build, as the process was handed it: the locked commit, this machine's variant, one node.
    entry = lockfile.read(project / "kernels.lock").entry_for(LAYER_NORM, CPU_ENV)
    assert entry is not None
    loaded = [line.split() for line in builds.splitlines() if line.startswith(LAYER_NORM)]
    assert loaded == [
        [LAYER_NORM, entry.commit[:12], entry.variant_for(CPU_ENV).name, "1", "1", f"({os.uname().nodename})"]
    ]
    expected = {
        ("kernels-community/activation", "v1"): "kernel dependency",
        ("kernels-community/finegrained-fp8", "v4"): "lazy layer (finegrained-fp8)",
        ("kernels-community/flash-attn2", "v4"): "flash_attention fallback (flash_attention_2)",
        ("kernels-community/flash-attn2", "v3"): "get_kernel",
        ("kernels-community/gqa-attention", "v2"): "attn_implementation (kernels-community/gqa-attention@v2)",
        ("kernels-community/paged-attention", "v1"): "get_kernel",
        ("kernels-community/rotary", "v2"): "get_kernel",
        (LAYER_NORM, "v1"): "kernelize mapping (LlamaRMSNorm)",
    }
    assert set(rows) == set(expected), result.stdout
    for key, path in expected.items():
        assert path in rows[key], (key, rows[key])
        assert rows[key].split()[-2] == ("yes" if key[0] == LAYER_NORM else "no")
    assert "flash-attn2 was asked for with several revisions (v3, v4); not added" in result.stdout
    for repo, rev in [("activation", "v1"), ("finegrained-fp8", "v4"), ("gqa-attention", "v2"), ("rotary", "v2")]:
        assert f'would add "kernels-community/{repo}" = "{rev}"' in result.stdout
    assert f'would add "{LAYER_NORM}"' not in result.stdout  # locked already
    assert (pyproject.read_text(), (project / "kernels.lock").read_text()) == before  # --dry-run changes nothing


@pytest.mark.binds
@pytest.mark.subprocess
def test_no_lock_edits_pyproject_only(catalog: Catalog, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    pyproject = write_pyproject(project, "# my kernels\n", environments=[CPU_ENV])
    env = user_env_for(tmp_path)
    code = 'import kernels\nkernels.get_kernel("kernels-community/activation", version=2)\n'
    with HubServer(catalog.root) as server:
        env.update(server.env())
        result = run_cli("run", "--record", "--no-lock", "--", sys.executable, "-c", code, env=env, cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    tail = '[tool.kernlock.kernels]\n# my kernels\n"kernels-community/activation" = "v2"\n'
    assert pyproject.read_text().endswith(tail)
    assert "kernels.lock not re-locked (--no-lock): run `kernlock lock`" in result.stdout
    assert lockfile.read(project / "kernels.lock").kernels == ()  # the empty lock the record run needed


@pytest.mark.binds
@pytest.mark.subprocess
def test_a_record_folder_outside_the_cache_is_never_written(catalog: Catalog, tmp_path: Path, sentinel: Path) -> None:
    """KERNLOCK_RECORD is read by every process: pointed anywhere but a record folder under kernlock's cache, it
    writes nothing there (one warning; the run goes on). The sentinel fixture checks the folder is untouched."""
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV])
    env = user_env_for(tmp_path)
    with HubServer(catalog.root) as server:
        env.update(server.env())
        assert run_cli("lock", env=env, cwd=project).returncode == 0
        code = 'import kernels\nkernels.get_kernel("kernels-community/activation", version=2)\nprint("loaded")\n'
        hostile = {**env, "KERNLOCK_RECORD": str(sentinel / "keep"), "KERNLOCK_MODE": "warn"}
        child = run_cli("run", "--", sys.executable, "-c", code, env=hostile, cwd=project)
    assert child.returncode == 0 and "loaded" in child.stdout, child.stderr[-3000:]
    assert "is not a record folder of `kernlock run --record`" in child.stderr


def test_a_node_name_is_written_as_the_gatherer_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host or Ray node name with characters a record cannot carry (a space, a slash, non-ASCII letters) is written
    in the form the gatherer accepts, so that node's records are not dropped."""
    from kernlock.runtime import recording, records

    for name in ("nœud-1", "login 1/a", "x" * 80, "ñ"):
        monkeypatch.setenv("KERNLOCK_NODE", name)
        written = recording.node()
        assert records._NODE.fullmatch(written), (name, written)
        assert records._FILE.fullmatch(f"{written}-4242.jsonl"), (name, written)
