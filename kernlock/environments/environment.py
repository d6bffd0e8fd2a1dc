"""Environments: the machine a lock targets, written in the Hub's build-variant grammar.

An environment string such as ``torch213-cxx11-cpu-x86_64-linux`` describes a machine (torch 2.13, C++11 ABI,
no accelerator, x86_64 Linux). Which build variant such a machine loads is decided by kernlock's own, versioned
copy of the kernels loader's rule (:mod:`kernlock.variants.grammar`, ``RULE``), called with the environment's facts
instead of this machine's, so that a lock made anywhere picks what the loader picks on the target. Nothing here
imports ``kernels`` except the probe of a machine whose torch is already imported.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernlock.environments import facts as optional
from kernlock.environments.machine import platform_parts, torch_environment
from kernlock.errors import EnvironmentStringError
from kernlock.variants import grammar as variants
from kernlock.variants import rule as variant_rule
from kernlock.variants import types as variant_types

__all__ = [
    "PYTHONS",
    "Environment",
    "detect",
    "detect_with_facts",
]


#: The Pythons an environment that declares none may run (torch's and kernlock's): kernels 0.19's choice must be the
#: same on each, or the environment must declare its ``python``.
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")

# Metal builds need macOS 26; an environment that does not declare its macOS version is taken to be a machine
# that can run the Metal builds it names.
_METAL_MACOS = variants.METAL_MIN_MACOS

_GRAMMAR = (
    "write it as torch{M}{m}[-cxx11|-cxx98]-{backend}-{cpu}-{os}, e.g. torch213-cxx11-cpu-x86_64-linux or "
    "torch211-cxx11-cu128-x86_64-linux (run `kernlock env` to print this machine's)"
)


def _with_abi_rule(name: str) -> str:
    """``name`` (a Torch arch variant) with the ABI tag an environment of its OS needs: cxx11 on Linux
    when missing, none elsewhere."""
    parsed = variants.parse_variant(name)
    assert isinstance(parsed, variant_types.ArchVariant) and isinstance(parsed.framework, variant_types.Torch)
    abi = True if parsed.os == "linux" else None
    if parsed.framework.cxx11_abi is None or abi is None:
        parsed = replace(parsed, framework=replace(parsed.framework, cxx11_abi=abi))
    return parsed.variant_str


def _legacy_machine(parsed: variant_types.ArchVariant) -> str:
    """The environment string of the machine a torch arch build names, in the legacy form with the ABI tag its OS
    needs (``torch-2.15-cuda-13.2-cpython-3.10-abi3-x86_64-linux`` -> ``torch215-cxx11-cu132-x86_64-linux``)."""
    assert isinstance(parsed.framework, variant_types.Torch)
    framework = variant_types.Torch(version=parsed.framework.version, cxx11_abi=parsed.framework.cxx11_abi)
    backend = parsed.backend
    if isinstance(backend, variant_types.VERSIONED_BACKENDS):
        backend = type(backend)(version=backend.version)  # the legacy form (``cu132``)
    legacy = variant_types.ArchVariant(framework=framework, backend=backend, cpu=parsed.cpu, os=parsed.os)
    return _with_abi_rule(legacy.variant_str)


def _suggest_environment(text: str) -> str | None:
    """A valid environment string close to ``text``, or None."""
    suggestion = variants.suggest_variant_name(text)
    if suggestion is None:
        return None
    parsed = variants.parse_variant(suggestion)
    if not (isinstance(parsed, variant_types.ArchVariant) and isinstance(parsed.framework, variant_types.Torch)):
        return None
    suggestion = _with_abi_rule(suggestion)
    return suggestion if suggestion != text else None


def _not_an_environment(text: str, reason: str, hint: str | None = None) -> EnvironmentStringError:
    suggestion = _suggest_environment(text)
    if suggestion:
        return EnvironmentStringError(
            f"'{text}' is not an environment string", why=reason, fix=f"did you mean '{suggestion}'?"
        )
    detail = f" ({hint})" if hint else ""
    return EnvironmentStringError(f"'{text}' is not an environment string", why=f"{reason}{detail}", fix=_GRAMMAR)


def _parse_environment(text: str) -> variant_types.ArchVariant:
    try:
        parsed = variants.parse_variant(text)
    except variants.VariantNameError as err:
        raise _not_an_environment(text, err.reason, err.hint) from None
    if isinstance(parsed, variant_types.NoarchVariant):
        raise _not_an_environment(text, "a noarch build name, not a machine")
    if isinstance(parsed, variant_types.SdkVariant):
        raise _not_an_environment(text, "an SDK build name, not a machine")
    if not parsed.legacy and isinstance(parsed.framework, variant_types.Torch):
        python = parsed.python.version
        raise EnvironmentStringError(
            f"'{text}' is a build name in kernels 0.19's form",
            fix=f"write an environment in the legacy form, its Python declared beside it: "
            f'{{ name = "{_legacy_machine(parsed)}", python = "{python.major}.{python.minor}" }}',
        )
    if isinstance(parsed.framework, variant_types.TorchStableAbi):
        raise _not_an_environment(text, "a stable-ABI build name, not a machine (a machine has a torch version)")
    if isinstance(parsed.framework, variant_types.TvmFfi):
        raise _not_an_environment(text, "a tvm-ffi build name, not a machine (a machine has a torch version)")
    if parsed.os == "linux" and parsed.framework.cxx11_abi is None:
        raise EnvironmentStringError(
            f"'{text}' names a Linux machine without its C++ ABI",
            fix=f"write '{text.replace('-', '-cxx11-', 1)}' (torch's default) or the -cxx98 form",
        )
    if parsed.os != "linux" and parsed.framework.cxx11_abi is not None:
        raise EnvironmentStringError(
            f"'{text}' gives a {parsed.os} machine a C++ ABI tag, which only Linux machines have",
            fix=f"did you mean '{_with_abi_rule(text)}'?",
        )
    return parsed


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Environment:
    """A target machine: torch version, C++ ABI, backend (``cpu``, ``cu128``...), CPU and OS (its ``name``, the
    environment string), and the optional facts the loader also decides on (``extras``: GPU compute capabilities,
    Python, apache-tvm-ffi, kernels and macOS versions; :class:`kernlock.environments.facts.Facts`). A frozen value,
    equal, hashed and ordered by name alone (``extras`` is left out); its parse is made once, on first use, and kept."""

    name: str
    extras: optional.Facts = field(default_factory=optional.Facts, compare=False)
    _parsed: variant_types.ArchVariant | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def parse(cls, text: str) -> Environment:
        """Parse an environment string; raise EnvironmentStringError naming the grammar (or a close valid
        string) on bad input."""
        if not isinstance(text, str):
            raise EnvironmentStringError(f"{text!r} is not an environment string", fix=_GRAMMAR)
        env = cls(name=text.strip())
        env._parts  # noqa: B018 - validates
        return env

    @classmethod
    def from_declared(cls, value: object) -> Environment:
        """An environment as pyproject declares it: a string, or a table ``{ name = "...", <facts> }``
        (:data:`kernlock.environments.facts.TABLE_FORM`); EnvironmentStringError naming the fix on bad input."""
        if not isinstance(value, dict):
            return cls.parse(value)  # type: ignore[arg-type]
        name = value.get("name")
        if not isinstance(name, str):
            raise EnvironmentStringError(
                f"an environment table needs a string `name` (found {', '.join(map(str, value)) or 'nothing'})",
                fix=f"give one, e.g. {optional.TABLE_FORM}",
            )
        env = cls.parse(name)
        try:
            found = optional.parse(value, env.backend, env.os)
        except optional.FactError as err:
            end = "" if str(err).endswith("?") else "."
            raise EnvironmentStringError(f"environment {env}: {err}{end}") from None
        return cls(name=env.name, extras=found)

    @classmethod
    def of_build(cls, name: str) -> Environment | None:
        """The machine a torch arch build is for, as an environment string (``torch-2.15-cxx11-cpu-cpython-3.10-
        abi3-x86_64-linux`` and ``torch215-cpu-x86_64-linux`` -> ``torch215-cxx11-cpu-x86_64-linux``); None for
        any other build (noarch, stable ABI, tvm-ffi, SDK) or name."""
        try:
            parsed = variants.parse_variant(name)
        except ValueError:
            return None
        if not isinstance(parsed, variant_types.ArchVariant) or not isinstance(parsed.framework, variant_types.Torch):
            return None
        return cls.parse(_legacy_machine(parsed))

    def declared(self) -> str | dict[str, Any]:
        """How pyproject declares it: the string, or ``{ name, <facts> }`` when it declares facts."""
        data = self.extras.as_data()
        return {"name": self.name, **data} if data else self.name

    @property
    def _parts(self) -> variant_types.ArchVariant:
        parsed = self._parsed
        if parsed is None:
            parsed = _parse_environment(self.name)
            object.__setattr__(self, "_parsed", parsed)
        return parsed

    @property
    def _framework(self) -> variant_types.Torch:
        framework = self._parts.framework
        assert isinstance(framework, variant_types.Torch)
        return framework

    def __str__(self) -> str:
        return self.name

    @property
    def kernels(self) -> Version | None:
        """The kernels loader version declared for this environment (None: not declared)."""
        return self.extras.kernels

    @property
    def torch(self) -> Version:
        return self._framework.version

    @property
    def backend(self) -> str:
        """The backend as written in variants: ``cpu``, ``cu128``, ``rocm64``, ``metal``..."""
        return self._parts.backend.variant_str

    @property
    def cpu(self) -> str:
        return self._parts.cpu

    @property
    def os(self) -> str:
        return self._parts.os

    def facts(self) -> dict[str, Version | str | None]:
        """The values that `when` conditions compare: torch, cuda, rocm, os, arch."""
        backend = self._parts.backend
        return {
            "torch": self.torch,
            "cuda": backend.version if isinstance(backend, variant_types.CUDA) else None,
            "rocm": backend.version if isinstance(backend, variant_types.ROCm) else None,
            "os": self.os,
            "arch": self.cpu,
        }

    def rule(self, default: str = variants.RULE) -> str:
        """The variant rule of the loader this environment runs: its declared ``kernels`` release's, else
        ``default`` (a lock's ``variant-rule``; kernlock's newest)."""
        declared = self.extras.kernels
        return default if declared is None else variant_rule.rule_for_kernels(declared)

    def accepted_variants(self, names: Iterable[str], *, rule: str | None = None) -> list[str]:
        """The variants among ``names`` this environment can load, most preferred first (the loader's rule,
        kernlock's copy: :meth:`rule` of ``rule``; names outside the grammar are ignored, as the loader ignores
        names it cannot parse). Names are taken in sorted order, so the loader's ties are broken the same way
        wherever kernlock runs. Without a declared ``python``, a choice that depends on the Python version (kernels
        0.19's ``cpython-3.12`` builds) raises ResolutionError naming the declaration that settles it."""
        parsed = []
        for name in sorted(set(names)):
            try:
                parsed.append(variants.parse_variant(name))
            except ValueError:
                continue
        chosen = self.rule(rule or variants.RULE)
        python = self.extras.python_minor
        if python is None and chosen == "kernels-0.19" and any(not v.legacy for v in parsed):
            return self._same_for_every_python(parsed)
        return self._accepted(parsed, chosen, python)

    def _accepted(self, parsed: list[variant_types.Variant], rule: str, python: Version | None) -> list[str]:
        framework = self._framework
        extras = self.extras
        free_threaded = extras.gil_disabled if rule == "kernels-0.19" else extras.free_threaded
        accepted = variant_rule.accepted_variants(
            parsed,
            rule=rule,
            backend=self._parts.backend,
            cpu=self.cpu,
            os=self.os,
            torch_version=framework.version,
            torch_cxx11_abi=framework.cxx11_abi,
            tvm_ffi_version=extras.tvm_ffi_minor,
            macos_version=extras.macos or (_METAL_MACOS if self.os == "darwin" else None),
            free_threaded=free_threaded,
            python_version=python,
            has_mlx=extras.mlx is not None,
        )
        return [variant.variant_str for variant in accepted]

    def _same_for_every_python(self, parsed: list[variant_types.Variant]) -> list[str]:
        """The choice when it is the same on every Python torch runs on (:data:`PYTHONS`), else ResolutionError."""
        by_python = {p: self._accepted(parsed, "kernels-0.19", Version(p)) for p in PYTHONS}
        firsts = {p: (found[0] if found else None) for p, found in by_python.items()}
        if len(set(firsts.values())) == 1:
            return by_python[PYTHONS[-1]]
        from kernlock.errors import ResolutionError

        oldest, newest = PYTHONS[0], PYTHONS[-1]
        raise ResolutionError(
            f"environment {self.name} does not declare its Python, and the build it loads depends on it (Python "
            f"{oldest} loads {firsts[oldest] or 'none'}, {newest} loads {firsts[newest] or 'none'})",
            fix=f'declare it in [tool.kernlock] environments, e.g. {{ name = "{self.name}", python = "3.12" }}, then '
            "run the command again",
        )

    def could_load(self, name: str) -> bool:
        """Whether some loader rule and some facts let this environment load build ``name`` (a tvm-ffi build: some
        tvm-ffi version; a ``cpython-3.12`` build: some Python; an MLX build: mlx installed)."""
        parsed = variants.parse_variant(name)
        table: dict[str, str] = {"name": self.name}
        if isinstance(parsed, variant_types.ArchVariant) and isinstance(parsed.framework, variant_types.TvmFfi):
            table["tvm-ffi"] = str(parsed.framework.version)
        python = getattr(parsed, "python", None)
        if python is not None and not python.legacy:
            table["python"] = f"{python.version.major}.{python.version.minor}{'t' if python.abi == 'abi3t' else ''}"
        if isinstance(parsed, variant_types.NoarchVariant) and parsed.mlx:
            table["mlx"] = "0"
        declared = Environment.from_declared(table)
        return any(declared.select_variant([name], rule=rule) == name for rule in variant_rule.RULES)

    def select_variant(self, names: Iterable[str], *, rule: str | None = None) -> str | None:
        """The variant the kernels loader would load on this environment, or None."""
        accepted = self.accepted_variants(names, rule=rule)
        return accepted[0] if accepted else None


def detect() -> Environment:
    """This machine as an environment string, from the installed torch and the kernels backend probe.

    When torch is not imported yet (the CLI), the facts come from torch's own ``version.py`` without importing
    torch (two seconds saved per command); machines where that could differ from the loader's probe (accelerator
    plugins, macOS, torch < 2.7) take the full path. A test checks that both paths agree.
    """
    name = None if "torch" in sys.modules else _detect_from_version_file()
    return Environment.parse(name or torch_environment())


def detect_with_facts() -> Environment:
    """This machine with its optional facts (:func:`kernlock.environments.facts.detect`; torch is imported only on a
    CUDA machine, for the GPUs' compute capabilities)."""
    env = detect()
    return Environment(name=env.name, extras=optional.detect(env.backend, env.os))


_PLUGINS = ("torch_neuronx", "torch_tpu", "torch_npu", "torch_xla")


def _detect_from_version_file() -> str | None:
    """The environment from ``torch/version.py`` alone (Linux, torch >= 2.7, no accelerator plugin), else None."""
    cpu, system = platform_parts()
    spec = importlib.util.find_spec("torch")
    if system != "linux" or spec is None or not spec.submodule_search_locations:
        return None
    if any(importlib.util.find_spec(plugin) is not None for plugin in _PLUGINS):
        return None
    facts: dict[str, Any] = {}
    try:
        source = Path(next(iter(spec.submodule_search_locations)), "version.py").read_text()
        exec(compile(source, "torch/version.py", "exec"), facts)  # a file of constants
        version = Version(str(facts["__version__"]).split("+")[0])
    except (OSError, KeyError, SyntaxError, InvalidVersion):
        return None
    if version < Version("2.7"):
        return None  # older torch builds shipped both C++ ABIs: ask torch itself
    backend: variant_types.Backend
    try:
        if facts.get("cuda"):
            backend = variant_types.CUDA(version=Version(facts["cuda"]))
        elif facts.get("hip"):
            backend = variant_types.ROCm(version=Version(facts["hip"].split("-")[0]))
        elif facts.get("xpu"):
            xpu = facts["xpu"]
            backend = variant_types.XPU(version=Version(f"{xpu[0:4]}.{xpu[5:6]}"))
        else:
            backend = variant_types.CPU()
    except (InvalidVersion, TypeError, AttributeError):
        return None
    return f"torch{version.major}{version.minor}-cxx11-{backend.variant_str}-{cpu}-{system}"
