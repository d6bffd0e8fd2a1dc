"""kernlock.distributions finds each installed distribution's version exactly as importlib.metadata does."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kernlock import distributions


def test_every_installed_distribution_has_importlib_metadatas_version():
    """A differential test over this environment: every distribution importlib.metadata lists (torch, kernels,
    transformers, huggingface_hub and ~100 more, kernlock's editable install included) gets the same version, by
    its own name and by other spellings of it."""
    names = {dist.metadata["Name"] for dist in importlib.metadata.distributions()}
    assert {"torch", "kernels", "transformers", "huggingface_hub", "kernlock"} <= {n.replace("-", "_") for n in names}
    for name in sorted(names):
        expected = importlib.metadata.version(name)
        assert distributions.version(name) == expected, name
        assert distributions.version(name.upper().replace("_", "-")) == expected, name


def test_a_missing_distribution_has_no_version():
    assert distributions.version("kernlock-no-such-distribution") is None
    assert distributions.version("kernels-community") is None  # a prefix of an installed name is not that name


def test_the_lookup_imports_no_importlib_metadata():
    """The point of it: `kernlock env` asks several versions without importlib.metadata's imports (email, zipfile)."""
    code = "import sys; from kernlock import distributions; distributions.version('torch');"
    code += "print(sorted(m for m in ('importlib.metadata', 'email', 'zipfile') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _write(path: Path, text: str, newline: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, newline=newline)


def test_every_form_of_metadata_is_found_as_importlib_metadata_finds_it(tmp_path: Path):
    """A differential test over the forms a sys.path can hold: `name-version.dist-info` shadowing a later one,
    `.egg-info` folders without a version (`setup.py develop`) and with dots in the name, an `.egg-info` file,
    upper-case suffixes, a first match without a Version (it still wins), an empty METADATA beside a PKG-INFO,
    header edge cases (a space before the colon, trailing blanks, CRLF, a body), a `*.egg` folder's EGG-INFO, a
    metadata folder without metadata, and a zip file on sys.path (where importlib.metadata itself is asked)."""
    first, second, egg, zipped = (
        tmp_path / "first",
        tmp_path / "second",
        tmp_path / "iota-1.0-py3.11.egg",
        tmp_path / "z.zip",
    )
    meta = "Metadata-Version: 2.1\nName: {0}\n"
    _write(first / "alpha-1.0.dist-info" / "METADATA", meta.format("alpha") + "Version: 1.0\n")
    _write(second / "alpha-9.0.dist-info" / "METADATA", meta.format("alpha") + "Version: 9.0\n")
    _write(first / "Beta.Pkg.egg-info" / "PKG-INFO", meta.format("Beta.Pkg") + "Version: 2.0\n")
    _write(first / "gamma-3.0.egg-info", meta.format("gamma") + "Version: 3.0\n")
    _write(first / "delta.egg-info" / "PKG-INFO", meta.format("delta") + "Version: 4.0\n")
    _write(first / "EPS-5.0.DIST-INFO" / "METADATA", meta.format("eps") + "Version: 5.0\n")
    _write(first / "zeta-6.0.dist-info" / "METADATA", meta.format("zeta"))
    _write(second / "zeta-7.0.dist-info" / "METADATA", meta.format("zeta") + "Version: 7.0\n")
    _write(first / "eta-8.0.dist-info" / "METADATA", "")
    _write(first / "eta-8.0.dist-info" / "PKG-INFO", meta.format("eta") + "Version: 8.0\n")
    _write(first / "theta-1.dist-info" / "METADATA", "Name: theta\r\nVersion:  1.0 \r\n\r\nVersion: 2\r\n", "")
    _write(first / "xi-1.dist-info" / "METADATA", "Name: xi\nVersion : 0.1\nVersion: 1.0\n")  # no header: the body
    _write(first / "mu-1.dist-info" / "METADATA", "Name: mu\nSummary: a\n b\nVersion:\t1.0\n continued\nLicense: x\n")
    _write(first / "nu-1.dist-info" / "METADATA", "Name: nu\nnot a header\nVersion: 1.0\n")
    (first / "lambda-2.0.dist-info").mkdir()
    _write(egg / "EGG-INFO" / "PKG-INFO", meta.format("iota") + "Version: 1.0\n")
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("kappa-1.0.dist-info/METADATA", meta.format("kappa") + "Version: 1.0\n")
    names = ["alpha", "ALPHA", "beta.pkg", "Beta-Pkg", "beta_pkg", "gamma", "delta", "eps", "Eps", "zeta", "eta"]
    names += ["theta", "xi", "mu", "nu", "lambda", "iota", "Iota", "kappa", "omega"]
    code = (
        "import importlib.metadata as m, json, sys\n"
        "from kernlock import distributions as d\n"
        "def std(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        f"sys.path[:0] = {[str(first), str(egg), str(zipped), str(second)]!r}\n"
        f"print(json.dumps([[n, std(n), d.version(n)] for n in {names!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert [(n, mine) for n, _std, mine in found] == [(n, std) for n, std, _mine in found]
    expected = {n: std for n, std, _mine in found}  # the forms above do reach their edge cases:
    assert expected["zeta"] is expected["xi"] is expected["nu"] is expected["lambda"] is None
    assert (expected["theta"], expected["eta"], expected["iota"], expected["kappa"]) == ("1.0 ", "8.0", "1.0", "1.0")


@given(st.text(alphabet="aZ9-_.", max_size=12))
def test_names_are_normalized_as_importlib_metadata_does(name: str):
    """kernlock.distributions normalizes by str methods what importlib.metadata normalizes by re.sub."""
    assert distributions._normalize(name) == re.sub(r"[-_.]+", "_", name).lower()
