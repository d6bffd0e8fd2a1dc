"""The Hub kernels transformers 5.25 loads by itself, on a CUDA machine with no network (issue 42, item 2).

transformers 5.25 kernelizes every ``from_pretrained`` with its default kernel mapping; on a GPU that means Hub
kernels (for a Llama: ``kernels-community/liger-kernels`` v4 for RMSNorm, ``activation`` v1 for SiLU, ``rotary`` v2
for rotary_pos_emb). The script, with transformers' real CUDA mapping:

1. `kernlock env` lists what transformers loads by itself on this GPU, none of it locked;
2. plain transformers, no kernlock, the Hub unreachable: ``from_pretrained(tiny Llama, device_map="cuda")`` dies
   (the issue's ``ValueError``), with and without ``HF_HUB_OFFLINE=1``; only ``USE_HUB_KERNELS=0`` loads;
3. on the local test Hub (kernlock.testing.build_transformers_catalog: those three repos under transformers' names,
   pure-Python ``torch-cuda`` builds): `kernlock add --implicit` of the three, for this machine declared with its
   GPU's capability and a CPU environment (which loads none of them: they are recorded for this machine only);
   `kernlock add --implicit` of every kernel of the mapping fails in one line (the sample Hub lacks most);
   `kernlock env` shows the three locked; `kernlock bundle`, then `kernlock sync --from` into a fresh cache;
4. the Hub stopped, from that bundled cache: the same ``from_pretrained`` under `kernlock run` loads the locked
   builds (their commits, their layers ran on the GPU), logits equal torch's, no socket opened, also with
   ``HF_HUB_OFFLINE=1``;
5. rotary left out of the lock: strict mode stops with one line naming `kernlock add --implicit
   kernels-community/rotary`, no traceback; warn mode keeps torch's forward for rotary with one warning line.

Run on the GPU machine from the repository root (torch with CUDA; transformers 5.25, kernels 0.19 and
huggingface_hub 2.4 from the wheels of gpu/README.md's recipe):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl \\
      && PYTHONPATH="$PWD:/tmp/site" python3 gpu/implicit_demo.py --out "$OUT"

It prints every transcript, writes them to ``OUT/implicit-demo.md`` and exits 1 if a check fails. ``--cpu`` is the dry
run anywhere: the same steps on the CPU, the mapping's Llama entries given a ``"cpu"`` key in every process that
reads it (tests/compat/test_implicit_kernels.py does the same), step 2 skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernlock.environments.facts import as_toml  # noqa: E402
from kernlock.testing import HubServer, build_transformers_catalog  # noqa: E402

CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"
LLAMA = {
    "kernels-community/liger-kernels": "rms_norm",
    "kernels-community/activation": "silu",
    "kernels-community/rotary": "apply_rotary",
}
ROTARY = "kernels-community/rotary"
#: --cpu: transformers' mapping reaches the CPU (its Llama entries get a "cpu" key, a copy of the "cuda" one).
ON_CPU = """
from transformers.integrations import hub_kernels as _hub_kernels
_mapping = _hub_kernels.get_kernel_mapping_transformers()
for _layer in ("RMSNorm", "SiLU", "rotary_pos_emb"):
    _mapping[_layer]["cpu"] = _mapping[_layer]["cuda"]
"""
#: The program: a tiny random Llama saved, then loaded as transformers 5.25 loads by default, its logits against
#: the same model without kernels. Prints one REPORT line (loaded kernels, sockets, the difference).
PROGRAM = """
import json, os, sys
CONNECTS = []
sys.addaudithook(lambda event, args: CONNECTS.append(repr(args[1])) if event == "socket.connect" else None)
PRELUDE
import torch
from transformers import LlamaForCausalLM
MODEL, DEVICE = sys.argv[1], sys.argv[2]
import importlib.util
torch.manual_seed(0)
ids = torch.randint(0, 64, (2, 8), device=DEVICE)
if DEVICE == "cpu" or importlib.util.find_spec("accelerate") is not None:  # device_map needs accelerate
    HOW = f"from_pretrained(device_map={DEVICE!r})"
    model = LlamaForCausalLM.from_pretrained(MODEL, **({} if DEVICE == "cpu" else {"device_map": DEVICE}))
else:  # the same default mapping, kernelized on the GPU
    HOW = "from_pretrained(), .to('cuda'), set_use_kernels(True) (accelerate is not installed: no device_map)"
    model = LlamaForCausalLM.from_pretrained(MODEL, use_kernels=False).to(DEVICE)
    if os.environ.get("USE_HUB_KERNELS", "yes").lower() in ("true", "1", "y", "yes", "on"):
        model.set_use_kernels(True)
logits = model(input_ids=ids).logits
plain = LlamaForCausalLM.from_pretrained(MODEL, use_kernels=False).to(DEVICE)(input_ids=ids).logits
import kernels
loaded = {
    k.repo_info.repo_id: {"commit": str(k.repo_info.revision), "calls": dict(getattr(k.module, "CALL_COUNTS", {}))}
    for k in kernels.get_loaded_kernels() if k.repo_info is not None
}
diff = float((logits - plain).abs().max())
print(HOW, file=sys.stderr)
print("REPORT " + json.dumps({"loaded": loaded, "connects": CONNECTS, "diff": diff, "device": str(logits.device)}))
"""
SAVE = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)
LlamaForCausalLM(config).save_pretrained(sys.argv[1])
"""
FAILED: list[str] = []
TRANSCRIPT: list[str] = []


def say(text: str) -> None:
    print(text, flush=True)
    TRANSCRIPT.append(text)


def check(ok: bool, what: str) -> None:
    say(f"  [{'ok' if ok else 'FAILED'}] {what}")
    if not ok:
        FAILED.append(what)


def run(argv: list[str], env: dict[str, str], shown: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    say(f"\n$ {shown}")
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith(("REPORT ", "Loading"))]
    say("\n".join(lines[-40:]).rstrip() + f"\n(exit {proc.returncode})")
    return proc


def report(proc: subprocess.CompletedProcess) -> dict:
    line = next((x for x in proc.stdout.splitlines() if x.startswith("REPORT ")), None)
    return json.loads(line[len("REPORT ") :]) if line else {}


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [x for x in proc.stderr.splitlines() if x.startswith("kernlock") or "kernlock: " in x]


class Demo:
    def __init__(self, tmp: Path, cpu: bool) -> None:
        self.tmp, self.cpu = tmp, cpu
        self.device = "cpu" if cpu else "cuda"
        self.prelude = ON_CPU if cpu else ""
        self.base = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        for key in ("HF_HUB_OFFLINE", "KERNLOCK_MODE", "KERNLOCK_LOCKFILE", "USE_HUB_KERNELS", "LOCAL_KERNELS"):
            self.base.pop(key, None)
        self.model = tmp / "tiny-llama"
        self.program = tmp / "program.py"
        self.program.write_text(PROGRAM.replace("PRELUDE", self.prelude))

    def env(self, name: str, **extra: str) -> dict[str, str]:
        """A user's environment with caches of its own (``name``), the Hub unreachable unless ``extra`` says."""
        folder = self.tmp / name
        caches = {"HF_HOME": str(folder / "hf"), "KERNLOCK_CACHE": str(folder / "kernlock"), "HF_HUB_DISABLE_XET": "1"}
        return {**self.base, "HF_ENDPOINT": "http://127.0.0.1:9", **caches, **extra}

    def kernlock(self, *args: str, env: dict[str, str], project: Path | None = None) -> subprocess.CompletedProcess:
        where = ["--project", str(project)] if project is not None and args[0] not in ("run",) else []
        shown = "kernlock " + " ".join(args)
        if not self.prelude:
            return run([sys.executable, "-m", "kernlock", *args, *where], env, shown, cwd=project)
        code = self.prelude + "import sys\nfrom kernlock.cli.console import run\nsys.argv[0] = 'kernlock'\nrun()"
        return run(
            [sys.executable, "-c", code, *args, *where], env, shown + "   # (--cpu: the mapping reaches the CPU)"
        )

    def load(
        self, env: dict[str, str], shown: str, project: Path, run_under: bool = True
    ) -> subprocess.CompletedProcess:
        argv = [sys.executable, str(self.program), str(self.model), self.device]
        if run_under:
            argv = [sys.executable, "-m", "kernlock", "run", "-q", "--project", str(project), "--", *argv]
        return run(argv, env, shown, cwd=project)


def main(argv: list[str]) -> int:
    cpu = "--cpu" in argv
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path(os.environ.get("OUT", "."))
    with tempfile.TemporaryDirectory() as folder:
        demo = Demo(Path(folder), cpu)
        steps(demo)
    say(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: ' + '; '.join(FAILED)}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "implicit-demo.md").write_text("```\n" + "\n".join(TRANSCRIPT) + "\n```\n")
    return 1 if FAILED else 0


def steps(demo: Demo) -> None:
    import importlib.metadata as metadata

    versions = {n: metadata.version(n) for n in ("torch", "transformers", "kernels", "huggingface_hub")}
    say("versions: " + ", ".join(f"{n} {v}" for n, v in versions.items()) + f"; device {demo.device}")
    saved = subprocess.run([sys.executable, "-c", SAVE, str(demo.model)], env=demo.env("save"), capture_output=True)
    check(saved.returncode == 0, "a tiny random Llama saved")

    # 1. what transformers loads by itself here
    empty = demo.tmp / "empty"
    empty.mkdir()
    found = demo.kernlock("env", "--json", env=demo.env("env"), project=empty)
    here = json.loads(found.stdout) if found.returncode == 0 else {}
    implicit = here.get("implicit") or {}
    rows = {row["repo"]: row for row in implicit.get("kernels", [])}
    check(
        implicit.get("device") == demo.device, f"`kernlock env` names this machine's device: {implicit.get('device')}"
    )
    check(set(LLAMA) <= set(rows) and not any(r["locked"] for r in rows.values()), "it lists the Llama's kernels")
    demo.kernlock("env", env=demo.env("env"), project=empty)
    declared = here.get("declared") or {"name": CPU_ENV}
    if demo.cpu:
        declared = {"name": CPU_ENV}

    # 2. plain transformers, no kernlock, no Hub
    if not demo.cpu:
        plain = demo.load(
            demo.env("plain"), "python program.py   # plain transformers, the Hub unreachable", empty, False
        )
        check(plain.returncode != 0 and "ValueError" in plain.stderr, "plain transformers dies (ValueError)")
        offline = demo.load(demo.env("plain", HF_HUB_OFFLINE="1"), "HF_HUB_OFFLINE=1 python program.py", empty, False)
        check(offline.returncode != 0, "and with HF_HUB_OFFLINE=1")
        off = demo.load(demo.env("plain", USE_HUB_KERNELS="0"), "USE_HUB_KERNELS=0 python program.py", empty, False)
        check(off.returncode == 0 and report(off).get("loaded") == {}, "only USE_HUB_KERNELS=0 loads")

    # 3. lock them on the local Hub, bundle, install the bundle into a fresh cache
    hub_root = demo.tmp / "hub"
    build_transformers_catalog(hub_root)
    projects = {"full": demo.tmp / "full", "partial": demo.tmp / "partial"}
    environments = [declared] + ([] if demo.cpu else [CPU_ENV])
    for project in projects.values():
        project.mkdir()
        listed = ", ".join(as_toml(env) for env in environments)
        (project / "pyproject.toml").write_text(f"[tool.kernlock]\nenvironments = [{listed}]\n")
    say("\n# pyproject.toml\n" + (projects["full"] / "pyproject.toml").read_text())
    with HubServer(hub_root) as server:
        online = demo.env("lock", **server.env())
        repos = list(LLAMA)
        added = demo.kernlock("add", "--implicit", *repos, env=online, project=projects["full"])
        check(added.returncode == 0, "`kernlock add --implicit` of the three (and synced here)")
        if not demo.cpu:
            check(f"none on {CPU_ENV}" in added.stdout, "the CPU environment loads none of them: not locked there")
        if not demo.cpu:  # the sample Hub has 3 of the mapping's repos: the others fail, in one line
            every = demo.kernlock("add", "--implicit", env=online, project=projects["full"])
            check(every.returncode == 1 and "Traceback" not in every.stderr, "all of the mapping: refused in one line")
        partial = [r for r in repos if r != ROTARY]
        done = demo.kernlock("add", "--implicit", *partial, env=online, project=projects["partial"])
        check(done.returncode == 0, "a second project: `kernlock add --implicit` of all but rotary")
        demo.kernlock("env", env=online, project=projects["full"])
        bundles = {}
        for name, project in projects.items():
            bundles[name] = demo.tmp / f"{name}.tar"
            done = demo.kernlock("bundle", "-o", str(bundles[name]), env=online, project=project)
            check(done.returncode == 0, f"bundle of {name}")
        root = {k: v for k, v in server.env().items() if k == "KERNLOCK_SIGSTORE_TRUSTED_ROOT"}  # signed builds
    say("\n(the Hub is stopped)")
    envs = {name: demo.env(f"site-{name}", **root) for name in projects}
    for name, project in projects.items():
        done = demo.kernlock("sync", "--from", str(bundles[name]), env=envs[name], project=project)
        check(done.returncode == 0, f"`kernlock sync --from` {name}.tar into a fresh cache, no network")

    # 4. the same from_pretrained, air-gapped
    lock = (projects["full"] / "kernels.lock").read_text()
    for extra, label in (({}, ""), ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=1 ")):
        done = demo.load({**envs["full"], **extra}, f"{label}kernlock run -- python program.py", projects["full"])
        got = report(done)
        loaded = got.get("loaded", {})
        check(done.returncode == 0, f"{label}from_pretrained loads")
        for repo, call in LLAMA.items():
            commit = loaded.get(repo, {}).get("commit", "")
            ran = loaded.get(repo, {}).get("calls", {}).get(call, 0)
            check(bool(commit) and commit in lock and ran > 0, f"{repo} at its locked commit {commit[:12]}, {call} ran")
        check(got.get("connects") == [], "no socket opened")
        check(
            got.get("diff", 1.0) < 1e-3 and got.get("device", "").startswith(demo.device),
            f"logits = torch's: {got.get('diff')}",
        )

    # 5. rotary not locked
    strict = demo.load(envs["partial"], "kernlock run -- python program.py   # rotary not locked", projects["partial"])
    lines = error_lines(strict)
    check(strict.returncode == 1 and "Traceback" not in strict.stderr and len(lines) == 1, "strict: one line")
    check(bool(lines) and f"`kernlock add --implicit {ROTARY}`" in lines[0], "naming `kernlock add --implicit`")
    warn = demo.load(
        {**envs["partial"], "KERNLOCK_MODE": "warn"}, "KERNLOCK_MODE=warn kernlock run -- ...", projects["partial"]
    )
    got = report(warn)
    check(warn.returncode == 0 and len(error_lines(warn)) == 1, "warn: it loads, with one warning line")
    check(ROTARY not in got.get("loaded", {}) and got.get("diff", 1.0) < 1e-3, "rotary keeps torch's own forward")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
