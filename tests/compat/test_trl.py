"""TRL's "Kernels Hub integration" page, under kernlock: its three ways to train with a Hub attention kernel, offline.

The page shows ``from_pretrained(attn_implementation="kernels-community/flash-attn2")``, ``python sft.py ...
--attn_implementation kernels-community/flash-attn2`` and ``trl sft ... --attn_implementation ...``, and recommends
pinning ``@v2`` or a commit. Here a project locks flash-attn2 ``v2`` (transformers itself asks another version) for
this machine, syncs it from the local Hub, and the Hub is stopped. With ``HF_HUB_OFFLINE=1`` and a tiny local
Qwen3 model (grouped-query attention, random weights) and dataset, each form trains two steps with TRL's real
trainer, and a probe in every process (``tests/processes.py``: a sitecustomize) proves which build ran: the locked
build's ``KERNEL_IDENTITY`` at the locked commit, its ``flash_attn_func`` called, no socket opened. Each output
folder and checkpoint carries the kernels.lock of the builds that computed it (docs/provenance.md).

* (a) ``kernlock run -- trl sft ...`` (TRL's console script: it runs the SFT script through ``accelerate launch``),
  also asked ``@v2`` as the page recommends; and ``accelerate launch --multi_gpu --num_processes 2`` of the same
  script on the CPU: both ranks load the locked build;
* (b) an ``sft.py`` whose first line is ``import kernlock.activate``, asked for the locked commit ``@<sha>``;
* (c) ``from_pretrained`` and ``SFTTrainer`` in a notebook-style script; asked ``@v3``, which the lock does not pin,
  it stops in one line naming the ``kernlock add`` to run (docs/activation.md).

TRL is in the main set's test extra and in set G (today's newest releases); elsewhere this module is skipped. The
accelerate launcher's two ranks run in the main set only (what differs between sets is the load, which `trl sft`
shows in G; CI's matrix is its critical path).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from envs import user_env_for
from processes import install_probe, read_probes
from projects import CPU_ENV, LockedProject, locked_offline, write_pyproject

from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, create_kernel_repo, set_org_trust

pytest.importorskip("trl", reason="TRL is installed in the main set and set G only")

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

FA2 = "kernels-community/flash-attn2"
WORDS = ["the", "a", "kernel", "lock", "build", "loads", "exact", "commit", "variant", "cluster", "train", "fast"]
#: TRL's SFT options every form shares: two steps, a checkpoint at the second, on the CPU in float32.
SFT_ARGS = (
    *("--max_steps", "2", "--save_steps", "2", "--per_device_train_batch_size", "2", "--report_to", "none"),
    *("--bf16", "false", "--use_cpu", "true", "--dataloader_num_workers", "0"),
)


@pytest.fixture(scope="module")
def trl_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedProject]:
    """flash-attn2 v2 locked and synced for this machine from a local Hub that is then stopped; a tiny local
    Qwen3 model and dataset under the project folder."""
    base = tmp_path_factory.mktemp("trl")
    root = base / "hub"
    set_org_trust(root, "kernels-community", True)
    create_kernel_repo(root, FA2, {"v2": [CPU_VARIANT], "v3": [CPU_VARIANT]}, kind="attention")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{FA2}" = "v2"\n', environments=[CPU_ENV])
    locked = locked_offline(root, project, user_env_for(base))
    _tiny_model_and_dataset(project)
    locked.env["HF_HUB_OFFLINE"] = "1"
    # The venv's console scripts (trl, accelerate) as a user's shell finds them; one thread per process.
    locked.env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), locked.env.get("PATH", os.defpath)])
    locked.env["OMP_NUM_THREADS"] = "1"
    yield locked


def _tiny_model_and_dataset(project: Path) -> None:
    """``model/``: a Qwen3 of 2 layers with grouped-query attention (4 heads, 2 KV heads), random weights, and a
    word-level tokenizer; ``data/train.jsonl``: 32 lines of text."""
    code = f"""
import json, random
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

words = {WORDS!r}
vocab = {{"<pad>": 0, "<eos>": 1, "<unk>": 2, **{{w: i + 3 for i, w in enumerate(words)}}}}
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
fast.save_pretrained("model")
torch.manual_seed(0)
config = Qwen3Config(
    vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=1,
)
Qwen3ForCausalLM(config).save_pretrained("model")
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rng = random.Random(0)
    (project / "data").mkdir()
    lines = [json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(12))}) for _ in range(32)]
    (project / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")


def _run(p: LockedProject, argv: list[str], probe: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**p.env, **install_probe(probe)}
    return subprocess.run(argv, env=env, cwd=p.project, capture_output=True, text=True, timeout=timeout)


def _trained_with_the_locked_build(p: LockedProject, done: subprocess.CompletedProcess, probe: Path, ranks: int = 1):
    """The run exited 0; exactly ``ranks`` processes loaded flash-attn2, each the locked build at the locked
    commit, called its attention, and opened no socket (no process of the run opened one)."""
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    reports = read_probes(probe)
    assert reports, done.stderr[-3000:]
    assert [r["connects"] for r in reports] == [[] for _ in reports]
    trained = [r["loaded"][FA2] for r in reports if FA2 in r["loaded"]]
    assert len(trained) == ranks, [r["argv"] for r in reports]
    for build in trained:
        assert build["commit"] == p.entry(FA2).commit
        assert build["identity"] == p.identity(FA2)
        assert sum(build["calls"].values()) > 0, build  # its flash_attn_func (or varlen) computed the attention


def _carries_the_lock(p: LockedProject, *folders: Path) -> None:
    """Each saved model folder holds kernels.lock naming the locked flash-attn2 build (provenance)."""
    for folder in folders:
        saved = lockfile.read(folder / "kernels.lock")
        entry = saved.entry_for(FA2, CPU_ENV)
        assert entry is not None and entry.commit == p.entry(FA2).commit, folder


def _sft(out: Path, attn: str) -> list[str]:
    return [
        *("--model_name_or_path", "model", "--dataset_name", "data", "--attn_implementation", attn),
        *("--output_dir", str(out), *SFT_ARGS),
    ]


@pytest.mark.binds
@pytest.mark.parametrize("attn", [FA2, f"{FA2}@v2"])
def test_trl_sft_cli_under_kernlock_run(attn: str, trl_project: LockedProject, tmp_path: Path):
    """(a) `kernlock run -- trl sft ... --attn_implementation kernels-community/flash-attn2[@v2]`."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "kernlock", "run", "--project", str(trl_project.project), "--", "trl", "sft"]
    done = _run(trl_project, [*argv, *_sft(out, attn)], tmp_path / "probe")
    _trained_with_the_locked_build(trl_project, done, tmp_path / "probe")
    _carries_the_lock(trl_project, out, out / "checkpoint-2")


@pytest.mark.binds
@pytest.mark.skipif(
    bool(os.environ.get("KERNLOCK_MATRIX_SET")),
    reason="the main set runs it: two ranks started by accelerate activate as `trl sft` does (the form that runs here)",
)
def test_accelerate_launch_two_cpu_ranks_of_trl_sft(trl_project: LockedProject, tmp_path: Path):
    """`kernlock run -- accelerate launch --multi_gpu --num_processes 2 -m trl.scripts.sft ...` (the script `trl
    sft` runs), on the CPU: accelerate's torchrun launcher (`--multi_gpu`; its `--cpu` launcher needs MPI for more
    than one process) starts two ranks over gloo, and both train with the locked build, offline."""
    out = tmp_path / "out"
    launch = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no", "-m", "trl.scripts.sft"]
    argv = [sys.executable, "-m", "kernlock", "run", "--project", str(trl_project.project), "--", *launch]
    done = _run(trl_project, [*argv, *_sft(out, FA2)], tmp_path / "probe")
    _trained_with_the_locked_build(trl_project, done, tmp_path / "probe", ranks=2)
    _carries_the_lock(trl_project, out, out / "checkpoint-2")


SFT_PY = """\
import kernlock.activate  # first: every Hub kernel this script loads is the locked build

from trl.scripts.sft import main, make_parser

if __name__ == "__main__":
    script_args, training_args, model_args, dataset_args = make_parser().parse_args_and_config(
        fail_with_unknown_args=False
    )
    main(script_args, training_args, model_args, dataset_args)
"""


def test_sft_py_that_activates_kernlock_at_the_locked_commit(trl_project: LockedProject, tmp_path: Path):
    """(b) `python sft.py ... --attn_implementation kernels-community/flash-attn2@<locked sha>`."""
    script = tmp_path / "sft.py"
    script.write_text(SFT_PY)
    out = tmp_path / "out"
    attn = f"{FA2}@{trl_project.entry(FA2).commit}"
    done = _run(trl_project, [sys.executable, str(script), *_sft(out, attn)], tmp_path / "probe")
    _trained_with_the_locked_build(trl_project, done, tmp_path / "probe")
    _carries_the_lock(trl_project, out, out / "checkpoint-2")


NOTEBOOK = """\
import sys
import kernlock.activate

from datasets import load_dataset
from transformers import AutoModelForCausalLM
from trl import SFTConfig, SFTTrainer

model = AutoModelForCausalLM.from_pretrained("model", attn_implementation=sys.argv[1])
args = SFTConfig(
    output_dir=sys.argv[2], max_steps=2, save_steps=2, per_device_train_batch_size=2, report_to="none", bf16=False,
    use_cpu=True, dataloader_num_workers=0,
)
trainer = SFTTrainer(model=model, args=args, train_dataset=load_dataset("data", split="train"))
trainer.train()
trainer.save_model(sys.argv[2])
"""


def test_from_pretrained_in_a_notebook_style_script(trl_project: LockedProject, tmp_path: Path):
    """(c) `from_pretrained(attn_implementation="kernels-community/flash-attn2")`, then SFTTrainer."""
    out = tmp_path / "out"
    argv = [sys.executable, "-c", NOTEBOOK, FA2, str(out)]
    done = _run(trl_project, argv, tmp_path / "probe")
    _trained_with_the_locked_build(trl_project, done, tmp_path / "probe")
    _carries_the_lock(trl_project, out, out / "checkpoint-2")


def test_a_revision_the_lock_does_not_pin_stops_in_one_line(trl_project: LockedProject, tmp_path: Path):
    """`@v3`, which the lock does not pin (it pins v2): one line naming the `kernlock add` to run, exit 1, no
    traceback, nothing trained or saved."""
    out = tmp_path / "out"
    done = _run(trl_project, [sys.executable, "-c", NOTEBOOK, f"{FA2}@v3", str(out)], tmp_path / "probe")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    line = _last_line(done.stderr)
    assert line.startswith("kernlock: error:") and f"kernlock add {FA2}@v3" in line, line
    assert not (out / "kernels.lock").exists()


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
