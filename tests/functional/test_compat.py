"""The transformers/kernels version gate: a pair that silently turns Hub kernels off is reported."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kernlock.cli.app import main
from kernlock.environments.compat import Gate, installed, transformers_gate
from kernlock.environments.environment import detect


def test_gate_reads_the_range_from_the_installed_transformers() -> None:
    gate = transformers_gate()
    assert gate is not None
    assert (gate.transformers, gate.kernels) == (installed("transformers"), installed("kernels"))
    # transformers 5.22 declares KERNELS_MIN_VERSION / KERNELS_MAX_VERSION in utils/import_utils.py
    assert (gate.minimum, gate.maximum) == ("0.17.2", "0.18.0")
    assert gate.ok


def test_a_mismatched_pair_is_reported_with_the_fix() -> None:
    off = Gate(transformers="5.24.0", kernels="0.17.2", minimum="0.18.2", maximum="0.19.0")
    assert not off.ok
    assert "silently OFF" in off.message()
    assert "pip install 'transformers==5.25.0' 'kernels==0.19.1'" in off.message()  # today's newest tested pair
    assert not Gate(transformers="5.22.2", kernels=None, minimum="0.17.2", maximum="0.18.0").ok


def test_env_command_shows_the_gate(tmp_path) -> None:
    result = CliRunner().invoke(main, ["env", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"environment: {detect()}\n")
    assert "ok: transformers 5.22.2 uses kernels 0.17.2" in result.output


@pytest.mark.subprocess
def test_a_loader_older_than_kernel_repositories_is_named_unsupported(tmp_path) -> None:
    """kernels <= 0.13 (transformers <= 5.12) reads `model`-type kernel repos the Hub retired: `kernlock env` says so.
    The old release is simulated by its installed metadata, found first on the path as pip's would be."""
    import json
    import os
    import subprocess
    import sys

    dist = tmp_path / "site" / "kernels-0.12.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.12.0\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    code = "import json; from kernlock import api; print(json.dumps(api.env_report(None)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    message = json.loads(out.stdout.splitlines()[-1])["unsupported_loader"]
    assert "kernels 0.12.0 loads `model`-type kernel repositories" in message and "kernels >= 0.15.2" in message


@pytest.mark.subprocess
def test_env_without_torch_reports_the_rest_and_says_why(tmp_path) -> None:
    """A machine without torch (here: torch hidden from the child's imports) cannot detect its environment:
    `kernlock env` still prints the versions, the loader and its load paths, names the reason, and exits 0."""
    import json
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None; from kernlock.cli.app import main; main(sys.argv[1:])"
    for args in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-c", code, "env", *(args or ["-v"]), "--project", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        if args:
            report = json.loads(done.stdout)
            assert report["environment"] is None and report["declared"] is None
            assert "torch is not installed" in report["environment_error"]
            assert report["loader"]["generation"] == "kernels-0.17" and report["load_paths"]
        else:
            assert done.stdout.startswith("environment: unknown (cannot detect this environment: torch is not")
            assert "loader: kernels 0.17.2 (kernels-0.17 generation)" in done.stdout and "load paths:" in done.stdout


def test_each_kernels_generation_is_one_adapter_module_under_its_id() -> None:
    """The generations of tests/compat/matrix.toml (kernlock/generations/supported.py, generated): each one's adapter
    is the module named after its id, says what every load path gets, and no adapter module is left unlisted."""
    import importlib
    from pathlib import Path

    from kernlock.generations import catalog
    from kernlock.runtime import loaders

    ids = [g.id for g in catalog.GENERATIONS]
    assert {"kernels-0.17", "kernels-0.15"} <= set(ids)
    oldest = catalog.get("kernels-0.15")
    assert oldest is not None and oldest.kernels == ">=0.15.2,<0.17"  # kernels 0.16 included
    # newest first (the probe's order), each range ending where the next one's begins
    for newer, older in zip(catalog.GENERATIONS, catalog.GENERATIONS[1:], strict=False):
        assert older.below == newer.id.removeprefix("kernels-") and older.minimum in older.tested
    for generation in catalog.GENERATIONS:
        module = importlib.import_module(f"kernlock.runtime.loaders.{catalog.module_name(generation.id)}")
        assert generation.id == module.ID
        assert set(module.COVERAGE) == {path for path, _ in loaders.PATHS}
        covers_dependencies = module.COVERAGE["kernel dependencies (kernel-depends)"][0]
        assert covers_dependencies is generation.kernel_dependencies
    folder = Path(loaders.__file__).parent
    assert sorted(p.stem for p in folder.glob("kernels_*.py")) == sorted(map(catalog.module_name, ids))


def test_the_installed_loader_probes_as_the_generation_whose_range_holds_it() -> None:
    from kernlock.generations import catalog
    from kernlock.runtime import loaders
    from kernlock.variants.grammar import RULE

    probe = loaders.probe()
    generation = catalog.get(probe.generation or "")
    assert generation is not None and probe.kernels is not None and generation.contains(probe.kernels)
    assert probe.kernels in generation.tested
    assert catalog.get(RULE) is not None  # a lock's variant-rule names a generation
