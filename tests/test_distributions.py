"""kernlock.distributions finds each installed distribution's version exactly as importlib.metadata does."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

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
