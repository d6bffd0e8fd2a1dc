"""kernlock demo: from nothing to a locked training run, on a local Hub with sample kernel repositories.

Run it with `bash scripts/demo.sh` (installs what it needs), or `python examples/demo.py` in the venv. Every step is
the real command a user types; the Hub is a local server over real git repositories (the real Hub is not needed).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from kernlock.environments.facts import as_toml
from kernlock.testing import HubServer, build_catalog, move_branch

CUDA_ENV = "torch211-cxx11-cu128-x86_64-linux"
FLASH_ATTN2 = "kernels-community/flash-attn2"

TRAIN_PY = """\
import kernlock.activate  # first line: every Hub kernel load in this process now comes from kernels.lock

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config)
model.set_attn_implementation("kernels-community/flash-attn2")   # what transformers would load: version 4
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
batch = torch.randint(0, 128, (4, 32))
for step in range(1, 6):
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"  step {step}: loss {loss.item():.4f}")
kernel = next(m for m in list(sys.modules.values()) if isinstance(getattr(m, "KERNEL_IDENTITY", None), dict))
identity = kernel.KERNEL_IDENTITY
print(f"  attention kernel: {identity['repo']} {identity['branch']} {identity['variant']} build {identity['build_id']}")
print(f"  flash_attn calls: {sum(kernel.CALL_COUNTS.values())}")
"""


INTRO = f"""\
kernlock demo: Hub kernels load from version branches that move; a run locked with kernlock does not.

  1. lock {FLASH_ATTN2} and a layer-norm kernel for this machine and a CUDA cluster
  2. train a tiny Llama offline through the locked attention build: no request to the Hub
  3. someone re-uploads {FLASH_ATTN2} on the Hub: the branch moves, the locked run keeps its build
  4. upgrade on purpose: `kernlock lock --upgrade`, `kernlock sync`, and the new build loads
"""


class Demo:
    """Runs each step as a user would, printing the command and what it printed."""

    def __init__(self, work: Path, server: HubServer) -> None:
        self.project = work / "tiny-train"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "KERNEL", "KERNLOCK"))}
        self.env.update(server.env())
        self.env.update(
            {
                "HF_HOME": str(work / "hf-home"),
                "HF_HUB_CACHE": str(work / "hf-cache"),
                "KERNLOCK_CACHE": str(work / "kernlock-cache"),
                "PYTHONUNBUFFERED": "1",
                "TRANSFORMERS_VERBOSITY": "error",
            }
        )
        self.bin = Path(sys.executable).parent

    def step(self, title: str) -> None:
        print(f"\n== {title}")

    def run(self, *argv: str, offline: bool = False, quiet: bool = False) -> str:
        """Run a command in the project as a user would; print it and its output unless ``quiet``."""
        env = dict(self.env, HF_HUB_OFFLINE="1") if offline else self.env
        shown = ("HF_HUB_OFFLINE=1 " if offline else "") + shlex.join(argv)
        program = [str(self.bin / argv[0]) if (self.bin / argv[0]).exists() else argv[0], *argv[1:]]
        proc = subprocess.run(program, cwd=self.project, env=env, capture_output=True, text=True)
        output = (proc.stdout + proc.stderr).rstrip()
        if not quiet:
            print(f"$ {shown}")
            if output:
                print(output if argv[0] == "python" else textwrap.indent(output, "  "))
        if proc.returncode != 0:
            raise SystemExit(f"demo failed: `{shown}` exited {proc.returncode}:\n{output}")
        return proc.stdout

    def train(self, offline: bool = False) -> str:
        """Run train.py; returns the build id of the attention kernel it trained with."""
        output = self.run("python", "train.py", offline=offline)
        return output.rsplit(" build ", 1)[1].split()[0]

    def locked(self, repo: str) -> dict:
        """The `kernlock show --json` row of ``repo``."""
        rows = json.loads(self.run("kernlock", "show", "--json", quiet=True))
        return next(row for row in rows if row["repo"] == repo)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kernlock-demo-") as tmp:
        work = Path(tmp)
        catalog = build_catalog(work / "hub")
        with HubServer(catalog.root) as server:
            print(INTRO)
            print(f"(a local Hub at {server.url} stands in for huggingface.co: {len(catalog.repo_ids)} kernel repos)")
            demo = Demo(work, server)
            demo.project.mkdir()
            # This machine as `kernlock env` declares it: with its Python and kernels, whose rules pick its build.
            declared = json.loads(demo.run("kernlock", "env", "--json", quiet=True))["declared"]
            this_env = declared["name"] if isinstance(declared, dict) else declared
            here = as_toml(declared) if isinstance(declared, dict) else json.dumps(declared)
            (demo.project / "pyproject.toml").write_text(
                '[project]\nname = "tiny-train"\nversion = "0.1.0"\n\n'
                "[tool.kernlock]\n# this laptop and the training cluster\n"
                f'environments = [{here}, "{CUDA_ENV}"]\n'
            )
            (demo.project / "train.py").write_text(TRAIN_PY)

            demo.step(
                f"Add kernels for this machine ({this_env}) and the cluster ({CUDA_ENV}):\n"
                "   the newest version with a build for BOTH is recorded\n"
                "   (flash-attn2: v5 has no CPU build, v4 no torch 2.11 build; transformers alone would load v4)"
            )
            demo.run("kernlock", "add", FLASH_ATTN2, "kernels-community/triton-layer-norm")
            demo.run("cat", "pyproject.toml")
            demo.step("The lock: exact commits, and the variant each environment loads")
            demo.run("kernlock", "lock", "--check")
            demo.run("kernlock", "show")

            demo.step("Train through the locked kernel, offline (the Hub is never asked)")
            server.log.clear()
            first_build = demo.train(offline=True)
            print(f"  requests to the Hub during training: {len(server.log)}")
            demo.run("kernlock", "verify")
            locked = demo.locked(FLASH_ATTN2)

            demo.step(f"Someone re-uploads {FLASH_ATTN2} {locked['requested']} on the Hub: the branch moves")
            new_head = move_branch(catalog.root, FLASH_ATTN2, locked["requested"])
            print(
                f"  {FLASH_ATTN2}@{locked['requested']} is now {new_head[:12]}; kernels.lock still says "
                f"{locked['commit'][:12]}"
            )
            same_build = demo.train()
            assert same_build == first_build, "the moved branch leaked into a locked run"
            print(f"  -> still build {same_build}: the lock wins over the moving branch")

            demo.step("Upgrade on purpose: lock --upgrade moves the pin, sync fetches the new build")
            demo.run("kernlock", "lock", "--upgrade")
            demo.run("kernlock", "sync")
            new_build = demo.train(offline=True)
            assert demo.locked(FLASH_ATTN2)["commit"] == new_head, "lock --upgrade did not move flash-attn2"
            assert new_build != first_build, "the upgraded lock still loads the old build"
            print(
                f"\n{FLASH_ATTN2}: {locked['commit'][:12]} (build {first_build}) -> {new_head[:12]} "
                f"(build {new_build}). Demo done."
            )


if __name__ == "__main__":
    main()
