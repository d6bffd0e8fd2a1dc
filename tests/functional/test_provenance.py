"""The lock travels with the model (issue 34): checkpoints carry the kernel builds that computed them, a resume on
other builds is caught, and `kernlock add --from` pins a model's builds.

One project locks a fixture attention kernel (``kernels-community/flash-attn2`` v2, a pure-torch CPU build) and is
synced and checked (`kernlock check --record`). A child process then trains a tiny GQA Llama through it with
transformers' ``Trainer`` (CPU, 2 steps, a checkpoint), resumes it on the same builds, writes the Trainer's model
card and pushes the model to the test Hub with ``push_to_hub`` (which accepts uploads: kernlock.testing.uploads).
Then the branch moves and the lock is re-resolved: resuming warns (warn mode) or refuses (strict mode). Finally
`kernlock add --from` reproduces the model's commits from the checkpoint folder and from the Hub model repo.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_cli
from envs import user_env_for
from projects import CPU_ENV, write_pyproject

from kernlock.lock import check_results
from kernlock.lock import file as lockfile
from kernlock.testing import CPU_VARIANT, HubServer, create_kernel_repo, move_branch

pytestmark = pytest.mark.subprocess  # every test here starts kernlock, Python or a server process

FA2 = "kernels-community/flash-attn2"
PUSHED = "acme/tiny-llama-ft"

# A tiny GQA Llama trained with transformers' Trainer through the locked attention kernel; argv: output folder,
# max steps, what to resume from ("" for nothing, "last" for the last checkpoint, else a folder).
TRAINER = """\
import sys, torch
from transformers import AutoModelForCausalLM, LlamaConfig, Trainer, TrainingArguments

def trainer(output, steps, model=None):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = model or AutoModelForCausalLM.from_config(config, attn_implementation="kernels-community/flash-attn2")
    ids = torch.randint(0, 64, (8, 8))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(output_dir=output, max_steps=steps, save_steps=2, per_device_train_batch_size=2,
                             logging_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=data)
"""

FIRST_RUN = (
    TRAINER
    + """\
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=2)
AutoModelForCausalLM.from_config(config).save_pretrained(sys.argv[1] + "/before")  # not activated yet

import kernlock
kernlock.activate()
first = trainer(sys.argv[1] + "/run", 2)
first.train()
first.save_model(sys.argv[1] + "/final")
first.create_model_card(model_name="tiny-llama-ft")
print("RESUMING", file=sys.stderr, flush=True)
trainer(sys.argv[1] + "/run", 3, first.model).train(resume_from_checkpoint=True)  # the same builds: silent
print("PUSHING", file=sys.stderr, flush=True)
first.model.save_pretrained(sys.argv[1] + "/a-project")  # a project's folder keeps its own kernels.lock
first.model.push_to_hub("acme/tiny-llama-ft")
import os
os.environ["KERNLOCK_PROVENANCE"] = "0"  # the opt-out: this save writes no kernels.lock
first.model.save_pretrained(sys.argv[1] + "/env-off")
"""
)

# The later run, on the re-resolved lock, in three activations of one process (argv: a folder for its runs; the
# first run's checkpoints; a model folder with a damaged kernels.lock; the lock of a copy of the project with
# `provenance = false`): warn mode, strict mode, and the opt-out.
RESUME = (
    TRAINER
    + """\
import os
import kernlock
from kernlock.errors import ActivationError
out, checkpoints, damaged, off = sys.argv[1:5]

print("PHASE warn", file=sys.stderr, flush=True)
kernlock.activate(mode="warn")
AutoModelForCausalLM.from_pretrained(damaged)
trainer(out + "/warn", 4).train(resume_from_checkpoint=checkpoints + "/checkpoint-2")

print("PHASE strict", file=sys.stderr, flush=True)
kernlock.activate(mode="strict")
try:
    trainer(checkpoints, 4).train(resume_from_checkpoint=True)
except ActivationError as err:
    print("REFUSED " + str(err), flush=True)

print("PHASE off", file=sys.stderr, flush=True)
kernlock.activate(lockfile=off, mode="strict")
trainer(out + "/off", 4).train(resume_from_checkpoint=checkpoints + "/checkpoint-2")
print("DONE", flush=True)
"""
)


def _python(code: str, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _said(stderr: str, needle: str) -> list[str]:
    return [line for line in stderr.splitlines() if needle in line]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The first run: a project locking flash-attn2 v2, synced and checked; trained, resumed and pushed."""
    base = tmp_path_factory.mktemp("provenance")
    root = base / "hub"
    create_kernel_repo(root, FA2, {"v2": [CPU_VARIANT]}, kind="attention")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, f'"{FA2}" = "v2"\n', environments=[CPU_ENV])
    env = {**user_env_for(base), "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
    out = base / "out"
    out.mkdir()
    with HubServer(root) as server:
        env.update(server.env())
        for command in (["lock"], ["sync"], ["check", "--record", "--kernel", FA2]):
            result = run_cli(*command, "--project", str(project), env=env)
            assert result.returncode == 0, result.stdout + result.stderr[-3000:]
        (out / "a-project").mkdir()
        (out / "a-project" / "pyproject.toml").write_text('[project]\nname = "elsewhere"\n')
        first = _python(FIRST_RUN, str(out), env=env, cwd=project)
    print(first.stderr[-6000:])
    assert first.returncode == 0, first.stderr[-6000:]
    lock = lockfile.read(project / "kernels.lock")
    return {"root": root, "project": project, "env": env, "out": out, "first": first, "lock": lock}


@pytest.mark.slow
def test_a_checkpoint_carries_the_build_it_was_trained_with(trained: dict) -> None:
    out, lock = trained["out"], trained["lock"]
    entry = lock.entry_for(FA2, CPU_ENV)
    assert entry is not None
    for folder in ("run/checkpoint-2", "run/checkpoint-3", "final"):
        carried = lockfile.read(out / folder / "kernels.lock")  # the lock reader reads it, content hash and all
        assert carried.environments == (CPU_ENV,)
        [kernel] = carried.kernels
        assert (kernel.repo, kernel.requested, kernel.commit) == (FA2, "v2", entry.commit)
        [variant] = kernel.variants
        assert variant.name == CPU_VARIANT and variant.files == entry.variant_for(CPU_ENV).files
        assert variant.signature == entry.variant_for(CPU_ENV).signature
        [verdict] = check_results.read(out / folder / "kernels.check.toml")  # `kernlock check --record`'s, this machine
        assert (verdict["repo"], verdict["commit"], verdict["device"], verdict["result"]) == (
            FA2,
            entry.commit,
            "cpu",
            "pass",
        )
    assert (out / "run/checkpoint-2/config.json").is_file()
    stderr = trained["first"].stderr
    [line] = _said(stderr, "kernlock: wrote kernels.lock into")  # one line, the first time only
    assert f"{FA2} v2 {entry.commit[:8]} {CPU_VARIANT}" in line and "KERNLOCK_PROVENANCE=0" in line


def test_save_pretrained_outside_activation_writes_nothing(trained: dict) -> None:
    before = trained["out"] / "before"
    assert (before / "config.json").is_file()
    assert not (before / "kernels.lock").exists() and not (before / "kernels.check.toml").exists()


def test_a_project_folder_keeps_its_own_lock(trained: dict) -> None:
    """``save_pretrained`` into a folder with a pyproject.toml (a project: ``save_pretrained(".")``) writes the model
    and no kernels.lock, with one warning."""
    folder = trained["out"] / "a-project"
    assert (folder / "config.json").is_file() and not (folder / "kernels.lock").exists()
    [line] = _said(trained["first"].stderr, f"not writing kernels.lock into {folder}")
    assert "pyproject.toml" in line


def test_resuming_on_the_same_builds_says_nothing(trained: dict) -> None:
    stderr = trained["first"].stderr
    resumed = stderr[stderr.index("RESUMING") : stderr.index("PUSHING")]
    assert "kernlock" not in resumed, resumed


def test_the_trainer_model_card_lists_the_kernels(trained: dict) -> None:
    card = (trained["out"] / "run" / "README.md").read_text()
    entry = trained["lock"].entry_for(FA2, CPU_ENV)
    assert "## Kernels" in card and f"| {FA2} | v2 | `{entry.commit[:12]}` | {CPU_VARIANT} | pass (cpu) |" in card
    assert card.count("## Kernels") == 1


def test_push_to_hub_uploads_kernels_lock_and_the_card(trained: dict) -> None:
    """The test Hub accepts the upload (kernlock.testing.uploads): the pushed commit holds the file."""
    repo = trained["root"] / "models" / PUSHED
    git = ["git", "-c", "safe.directory=*", "-C", str(repo)]
    listed = subprocess.run([*git, "ls-tree", "--name-only", "main"], capture_output=True, text=True, check=True)
    assert {"kernels.lock", "kernels.check.toml", "config.json", "model.safetensors", "README.md"} <= set(
        listed.stdout.split()
    )
    text = subprocess.run([*git, "show", "main:kernels.lock"], capture_output=True, text=True, check=True).stdout
    assert text == (trained["out"] / "final" / "kernels.lock").read_text()
    card = subprocess.run([*git, "show", "main:README.md"], capture_output=True, text=True, check=True).stdout
    assert "## Kernels" in card and FA2 in card


@pytest.fixture(scope="module")
def moved(trained: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The branch moved on the Hub and the lock was re-resolved (and synced): this run loads another commit. Then
    one process resumes the first run's checkpoints on it in warn mode, in strict mode, and with the opt-out."""
    project, env, out = trained["project"], trained["env"], trained["out"]
    with HubServer(trained["root"]) as server:
        env = {**env, **server.env()}
        move_branch(trained["root"], FA2, "v2", message="Rebuild")
        for command in (["lock", "--upgrade-kernel", FA2], ["sync"]):
            result = run_cli(*command, "--project", str(project), env=env)
            assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    new = lockfile.read(project / "kernels.lock").entry_for(FA2, CPU_ENV)
    assert new is not None and new.commit != trained["lock"].entry_for(FA2, CPU_ENV).commit
    base = tmp_path_factory.mktemp("resumed")
    shutil.copytree(out / "run", base / "checkpoints")
    damaged = base / "damaged"
    shutil.copytree(out / "final", damaged)
    (damaged / "kernels.lock").write_text((damaged / "kernels.lock").read_text().replace("v2", "v9", 1))
    off = base / "off-project"
    off.mkdir()
    for name in ("kernels.lock", "kernels.check.toml"):
        shutil.copyfile(project / name, off / name)
    text = (project / "pyproject.toml").read_text()
    (off / "pyproject.toml").write_text(text.replace("[tool.kernlock]\n", "[tool.kernlock]\nprovenance = false\n"))
    args = [str(base), str(base / "checkpoints"), str(damaged), str(off / "kernels.lock")]
    resumed = _python(RESUME, *args, env=env, cwd=project)
    print(resumed.stdout, resumed.stderr[-6000:])
    assert resumed.returncode == 0 and "DONE" in resumed.stdout, resumed.stderr[-6000:]
    phases = dict(part.split("\n", 1) for part in resumed.stderr.split("PHASE ")[1:])
    return {**trained, "env": env, "new": new, "base": base, "resumed": resumed, "phases": phases}


def test_resuming_on_other_builds_warns_in_warn_mode(moved: dict) -> None:
    old, new, warn = moved["lock"].entry_for(FA2, CPU_ENV), moved["new"], moved["phases"]["warn"]
    [line] = _said(warn, "was trained with")
    expected = (
        f"checkpoint-2 was trained with {FA2} v2 {old.commit[:8]} {CPU_VARIANT}; this run loads v2 {new.commit[:8]}"
    )
    assert expected in line and "warn mode" in line, line
    [bad] = _said(warn, "cannot compare")  # a damaged kernels.lock beside a model: one warning, no traceback
    assert str(moved["base"] / "damaged" / "kernels.lock") in bad and "content-hash" in bad
    assert "git checkout" not in bad  # a model's file is not a project's lock: no repair advice for one
    assert "Traceback" not in moved["resumed"].stderr
    assert (moved["base"] / "warn" / "checkpoint-4").is_dir()  # warned, then trained on this run's builds


def test_resuming_on_other_builds_is_refused_in_strict_mode(moved: dict) -> None:
    old, new = moved["lock"].entry_for(FA2, CPU_ENV), moved["new"]
    checkpoints = moved["base"] / "checkpoints"
    [refused] = [line for line in moved["resumed"].stdout.splitlines() if line.startswith("REFUSED ")]
    expected = (
        f"checkpoint-3 was trained with {FA2} v2 {old.commit[:8]} {CPU_VARIANT}; this run loads v2 {new.commit[:8]}"
    )
    assert expected in refused  # resume_from_checkpoint=True: the last checkpoint of output_dir
    assert f"`kernlock add --from {checkpoints / 'checkpoint-3'}`" in refused and "KERNLOCK_MODE=warn" in refused
    assert not (checkpoints / "checkpoint-4").exists()  # refused before the first step
    assert "kernlock" not in moved["phases"]["strict"]  # the refusal is the error, not a warning as well


def test_the_opt_out_writes_and_compares_nothing(moved: dict) -> None:
    """``KERNLOCK_PROVENANCE=0`` (the first run's last save), and ``provenance = false`` in [tool.kernlock] (a resume
    on other builds, in strict mode): no kernels.lock is written, and nothing is compared."""
    env_off = moved["out"] / "env-off"
    assert (env_off / "config.json").is_file() and not (env_off / "kernels.lock").exists()
    off = moved["base"] / "off"
    assert (off / "checkpoint-4" / "config.json").is_file() and not (off / "checkpoint-4" / "kernels.lock").exists()
    assert "kernlock" not in moved["phases"]["off"]


@pytest.mark.parametrize("source", ["folder", "hub"])
def test_add_from_pins_the_model_s_commits(moved: dict, source: str, tmp_path: Path) -> None:
    """A new project adopts the model's kernels: from the checkpoint folder, or from the Hub model repo pushed."""
    old = moved["lock"].entry_for(FA2, CPU_ENV)
    project = tmp_path / "fresh"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV])
    where = str(moved["out"] / "run" / "checkpoint-2") if source == "folder" else PUSHED
    with HubServer(moved["root"]) as server:
        result = run_cli("add", "--from", where, "--project", str(project), env={**moved["env"], **server.env()})
    print(result.stdout, result.stderr[-3000:])
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f'"{FA2}" = "{old.commit}"' in (project / "pyproject.toml").read_text()
    entry = lockfile.read(project / "kernels.lock").entry_for(FA2, CPU_ENV)
    assert entry is not None and entry.commit == old.commit and entry.commit != moved["new"].commit
    assert f"same build as the model: {FA2} v2 {old.commit[:8]} {CPU_VARIANT}" in result.stdout
    assert "synced" in result.stdout


def test_add_from_a_folder_without_kernels_lock_says_why(trained: dict, tmp_path: Path) -> None:
    project = tmp_path / "fresh"
    project.mkdir()
    write_pyproject(project, "", environments=[CPU_ENV])
    result = run_cli("add", "--from", str(trained["out"] / "before"), "--project", str(project), env=trained["env"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "has no kernels.lock" in result.stderr and "activated" in result.stderr
