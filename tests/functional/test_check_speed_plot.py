"""`kernlock check --speed --model --batch --plot` (issue 43): the training step TRL's "Kernels Hub" page compares —
eager, sdpa and each locked attention kernel — for the user's own model config, as a table, JSON and a picture
whose numbers are the table's.

Run on the CPU against the local Hub, two attention kernels locked (flash-attn2 v2, gqa-attention v2), with the
tiny preset and with a tiny Qwen3 config folder written by the test; short sequences keep it a few seconds.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli import assert_clean_error, run_cli
from envs import user_env_for
from projects import CPU_ENV, write_pyproject

from kernlock.commands.check.timing import figure
from kernlock.lock import file as lockfile
from kernlock.testing import Catalog, HubServer

pytestmark = pytest.mark.subprocess  # every test here starts kernlock

KERNELS = ("kernels-community/flash-attn2", "kernels-community/gqa-attention")
SPEED = ("check", "--speed", "--seqlen", "32")


@pytest.fixture(scope="module")
def synced(catalog: Catalog, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], list[str]]:
    """A project locking two attention kernels, locked and synced (the Hub stopped after): (project, user env,
    the training step's labels: eager, sdpa, then each kernel as repo@commit)."""
    base = tmp_path_factory.mktemp("plot")
    project = base / "project"
    project.mkdir()
    write_pyproject(project, "".join(f'"{repo}" = "v2"\n' for repo in KERNELS), environments=[CPU_ENV])
    env = user_env_for(base / "home")
    with HubServer(catalog.root) as server:
        for command in ("lock", "sync"):
            done = run_cli(command, "--project", str(project), env={**env, **server.env()})
            assert done.returncode == 0, done.stderr
    lock = lockfile.read(project / "kernels.lock")
    commits = {entry.repo: entry.commit for entry in lock.kernels}
    return project, env, ["eager", "sdpa", *(f"{repo}@{commits[repo][:8]}" for repo in KERNELS)]


def _svg_texts(path: Path) -> list[str]:
    """Every text of an SVG matplotlib wrote with svg.fonttype none."""
    return [html.unescape(text) for text in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())]


def _training_table(stdout: str) -> dict[str, list[str]]:
    """The training-step table: label -> its cells (step, peak memory, loss, ÷ sdpa)."""
    lines = stdout.split("\ntraining step on cpu:", 1)[1].splitlines()
    assert lines[1].split() == ["attention", "step", "peak", "memory", "loss", "÷", "sdpa"], lines[:2]
    table = {}
    for line in lines[2:]:
        if not line.strip() or line.startswith("wrote "):
            break
        cells = re.split(r"\s{2,}", line.strip())
        table[cells[0]] = cells[1:]
    return table


def test_the_tiny_preset_draws_every_implementation_with_the_table_s_numbers(
    synced: tuple[Path, dict[str, str], list[str]], tmp_path: Path
) -> None:
    project, env, labels = synced
    picture = tmp_path / "speed.svg"
    done = run_cli(*SPEED, "--model", "tiny", "--plot", str(picture), "--project", str(project), env=env)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    table = _training_table(done.stdout)
    assert list(table) == labels  # eager, sdpa, then every locked attention kernel
    assert "tiny (llama 2 layers h4/2 d32), float32, batch 2 x 32 tokens" in done.stdout
    assert all(cells[1] == "not measured" for cells in table.values())  # no peak memory on the CPU
    assert f"wrote {picture}" in done.stdout
    texts = _svg_texts(picture)
    assert "Training step: tiny (llama 2 layers h4/2 d32), batch 2, seqlen 32, float32, cpu" in texts
    assert all(label in texts for label in labels)
    assert [text for text in texts if " ms ±" in text] == [cells[0] for cells in table.values()]  # the same text
    assert "CPU: not measured" in texts


def test_a_config_folder_and_batch_reach_the_json_and_the_picture(
    synced: tuple[Path, dict[str, str], list[str]], tmp_path: Path
) -> None:
    import transformers

    project, env, labels = synced
    folder = tmp_path / "qwen3-tiny"
    config: Any = transformers.Qwen3Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    config.save_pretrained(folder)
    picture = tmp_path / "speed.svg"
    args = ("--model", str(folder), "--batch", "3", "--json", "--plot", str(picture), "--project", str(project))
    done = run_cli(*SPEED, *args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(done.stdout)
    setup = {"model": str(folder), "architecture": "qwen3 2 layers h4/2 d16", "batch": 3, "seqlen": 32}
    assert report["training"] == {**setup, "dtype": "float32"} and report["plot"] == str(picture)
    rows = [row for row in report["speed"] if row["case"] == "training step qwen3 2 layers h4/2 d16 float32 b3 s32"]
    named = [row["path"] if row["path"] != "kernel" else f"{row['kernel']}@{row['commit'][:8]}" for row in rows]
    assert named == labels
    losses = [row["loss"] for row in rows]
    assert max(losses) - min(losses) < 1e-3, losses  # the same weights and batch, the same (right) math
    texts = _svg_texts(picture)
    assert f"Training step: {folder} (qwen3 2 layers h4/2 d16), batch 3, seqlen 32, float32, cpu" in texts
    assert all(label in texts for label in labels)
    for row in rows:
        step = row["step"]
        assert f"{figure(step['median-ms'])} ms ±{figure(step['iqr-ms'] / 2)}" in texts, (row, texts)


def test_bad_choices_are_one_line_errors_before_anything_runs(
    synced: tuple[Path, dict[str, str], list[str]], tmp_path: Path
) -> None:
    project, env, _ = synced
    no_config = tmp_path / "empty"
    no_config.mkdir()
    encoder = tmp_path / "t5"
    import transformers

    transformers.T5Config(d_model=32, num_layers=1, num_heads=2).save_pretrained(encoder)
    for args, needles in (
        (("--plot", str(tmp_path / "x.gif")), ("--plot", "name a .svg or .png file")),
        (("--model", str(tmp_path / "missing")), ("not a preset (tiny, small, qwen3-8b-8layers) nor a folder",)),
        (("--model", "llama-70b"), ("--model llama-70b: not a preset",)),
        (("--model", str(no_config)), ("the folder has no config.json", "hf download")),
        (("--model", str(encoder)), ("a t5 config is not a causal language model",)),
        (("--batch", "0"), ("--batch 0: a training step needs at least one sequence", "give a positive number")),
    ):
        done = run_cli(*SPEED, *args, "--project", str(project), env=env)
        assert_clean_error(done, *needles)
        assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == "", done.stderr


def test_plot_without_matplotlib_names_the_extra_before_reading_the_project(tmp_path: Path) -> None:
    """A matplotlib that fails to import, found first on the path: the error comes first, even in a folder that is
    no project (so before any check or timing)."""
    site = tmp_path / "site" / "matplotlib"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("raise ImportError('matplotlib is not installed here')\n")
    env = {**user_env_for(tmp_path / "home"), "PYTHONPATH": str(site.parent)}
    done = run_cli(*SPEED, "--plot", str(tmp_path / "x.svg"), "--project", str(tmp_path), env=env)
    assert_clean_error(done, "--plot needs matplotlib", "pip install 'kernlock[plot]'")
    assert len(done.stderr.strip().splitlines()) == 1
