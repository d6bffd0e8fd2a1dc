"""GPU compute capability at lock time, on a CUDA machine (written for an NVIDIA H200: capability 9.0).

1. Prints `kernlock env --json`: this machine in the declared form, with the GPUs' `cuda-capabilities` asked of
   the driver (NVML; a CUDA machine only), and checks that answer against torch's and that `env` imported no torch.
2. Builds `kernels-community/capability-demo` on the local test Hub (kernlock.testing): v1's CUDA build declares
   archs 8.0, 9.0, 10.0; the newer v2's declares 8.0, 8.6, 10.0, 12.0 (no sm90). Both carry this machine's variant
   and a CPU build.
3. Declares this machine with its facts in a project and runs, printing each transcript:
   - `kernlock lock` with `"kernels-community/capability-demo" = "v2"`: refused (exit 1) naming this environment,
     the missing capability, and v1 as the version that works;
   - `kernlock add kernels-community/capability-demo --no-sync`: skips v2, records v1 (the lock shows the facts);
   - the same lock of v2 with the plain environment string (no facts): kernlock cannot know, it locks v2, and
     the real loader then refuses v2's build on this GPU at load time (`kernels.get_kernel`), which is what the
     declared capability prevents.

Run on the GPU machine from the repository root (kernlock importable, e.g. `PYTHONPATH=.`; torch with CUDA,
kernels 0.17.x): `python gpu/capability_demo.py`. Exits 1 if a check fails. A dry run on a CPU machine:
`python gpu/capability_demo.py --declare '{"name": "torch213-cxx11-cu130-x86_64-linux", "cuda-capabilities":
["9.0"]}'` (there the last check fails: without a GPU the loader has no capability to check). Not part of the
CPU test suite (tests/functional/test_variant_language.py checks the same refusals with declared capabilities).
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
from kernlock.testing import HubServer, create_kernel_repo  # noqa: E402

REPO = "kernels-community/capability-demo"
CPU_ENV = "torch213-cxx11-cpu-x86_64-linux"
WITH_SM90 = ["8.0", "9.0", "10.0"]
WITHOUT_SM90 = ["8.0", "8.6", "10.0", "12.0"]
FAILED: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"  [{'ok' if ok else 'FAILED'}] {what}")
    if not ok:
        FAILED.append(what)


def kernlock(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the kernlock CLI in a fresh process and print the transcript."""
    print(f"\n$ kernlock {' '.join(args)}")
    proc = subprocess.run([sys.executable, "-m", "kernlock", *args], env=env, cwd=cwd, capture_output=True, text=True)
    print((proc.stdout + proc.stderr).rstrip() + f"\n(exit {proc.returncode})")
    return proc


#: `kernlock env --json` in this process, then whether it imported torch (to stderr).
_ENV_WITHOUT_TORCH = """
import runpy, sys
sys.argv = ["kernlock", "env", "--json", "--project", sys.argv[1]]
try:
    runpy.run_module("kernlock", run_name="__main__")
except SystemExit:
    pass
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
"""


def _check_driver_probe(env: dict[str, str], folder: str) -> None:
    """The driver's answer (NVML, kernlock.environments.gpus) equals torch's, and `kernlock env` asks the driver, not
    torch."""
    code = "import json; from kernlock.environments.gpus import nvml_capabilities; "
    code += "from kernlock.environments.facts import _torch_capabilities; "
    code += "print(json.dumps({'nvml': nvml_capabilities(), 'torch': _torch_capabilities()}))"
    both = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    print(f"\n$ NVML vs torch: {both.stdout.strip()} {both.stderr.strip()[-300:]}")
    answers = json.loads(both.stdout) if both.returncode == 0 else {}
    check(bool(answers.get("nvml")) and answers.get("nvml") == answers.get("torch"), "NVML and torch agree")
    ran = subprocess.run([sys.executable, "-c", _ENV_WITHOUT_TORCH, folder], env=env, capture_output=True, text=True)
    print(ran.stderr.strip()[-300:])
    check("torch imported: False" in ran.stderr, "`kernlock env` detects the capability without importing torch")


def main(argv: list[str]) -> int:
    base = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        report = json.loads(kernlock("env", "--json", "--project", tmp, env=base).stdout)
        declared = report["declared"]
        if argv[:1] == ["--declare"]:  # a dry run elsewhere: `--declare '{"name": ..., "cuda-capabilities": ...}'`
            declared = json.loads(argv[1])
        name, capabilities = declared["name"], declared.get("cuda-capabilities", [])
        check("-cu" in name, f"a CUDA environment was detected: {name}")
        check("9.0" in capabilities, f"compute capability 9.0 (H100/H200) detected: {capabilities}")
        if argv[:1] != ["--declare"]:
            _check_driver_probe(base, tmp)
        if FAILED:
            return 1

        hub_root = tmp_path / "hub"
        branches = {"v1": [name, CPU_ENV], "v2": [name, CPU_ENV]}
        create_kernel_repo(hub_root, REPO, branches, cuda_archs={"v1": WITH_SM90, "v2": WITHOUT_SM90})
        project = tmp_path / "project"
        project.mkdir()
        with HubServer(hub_root) as server:
            env = {
                **base,
                **server.env(),
                "HF_HOME": str(tmp_path / "hf"),
                "KERNLOCK_CACHE": str(tmp_path / "cache"),
            }

            def declare(environment: str, kernels: str) -> None:
                text = f"[tool.kernlock]\nenvironments = [{environment}]\n\n[tool.kernlock.kernels]\n{kernels}"
                (project / "pyproject.toml").write_text(text)
                print(f"\n# pyproject.toml\n{text}")

            declare(as_toml(declared), f'"{REPO}" = "v2"\n')
            refused = kernlock("lock", "--project", str(project), env=env)
            check(refused.returncode == 1, "locking v2 for this GPU is refused (exit 1)")
            check(f"lacks CUDA capability 9.0 (built for {', '.join(WITHOUT_SM90)})" in refused.stderr, "names sm90")
            check(f"versions with a build for {name}: v1" in refused.stderr, "names v1 as the version that works")
            check(not (project / "kernels.lock").exists(), "nothing written")

            declare(as_toml(declared), "")
            added = kernlock("add", REPO, "--no-sync", "--project", str(project), env=env)
            lock = (project / "kernels.lock").read_text() if added.returncode == 0 else ""
            print("\n# kernels.lock (head)\n" + "\n".join(lock.splitlines()[:12]))
            check(added.returncode == 0 and '"v1"' in (project / "pyproject.toml").read_text(), "add skips v2: v1")
            check("environment-facts" in lock and '"9.0"' in lock, "the lock records the capability")

            declare(json.dumps(name), f'"{REPO}" = "v2"\n')
            plain = kernlock("lock", "--project", str(project), env=env)
            check(plain.returncode == 0, "without the declared capability kernlock cannot know: v2 is locked")
            load = "import kernels; kernels.get_kernel('kernels-community/capability-demo', version=2)"
            print(f"\n$ python -c {load!r}")
            loaded = subprocess.run([sys.executable, "-c", load], env=env, capture_output=True, text=True)
            print(loaded.stderr.strip().splitlines()[-1] if loaded.stderr.strip() else "(no error)")
            check(
                loaded.returncode != 0 and "CUDA capability 9.0" in loaded.stderr,
                "the loader refuses v2's build on this GPU at load time (what the declared capability prevents)",
            )
    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
