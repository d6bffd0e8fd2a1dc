"""The lock travels with the model (docs/provenance.md): what a save writes and what a load compares.

In an activated process, a model folder that transformers saves (``save_pretrained``, every ``Trainer``/TRL
checkpoint, the folder ``push_to_hub`` uploads) also gets ``kernels.lock``: a lock in kernels.lock's own schema
(read by :func:`kernlock.lock.file.read`, its own content hash) holding exactly the locked builds this process
loaded, each cut down to the variant it loaded here; and, where `kernlock check --record` judged those builds on
this machine, ``kernels.check.toml`` with those verdicts. When an activated process loads a model from such a
folder, or resumes a ``Trainer`` from one, and its own lock would load another commit or variant of one of those
kernels, :func:`compare` says so in one line (warn mode) or refuses (strict mode).

The hooks that call these live in :mod:`kernlock.runtime.provenance_hooks`. Opt out with ``KERNLOCK_PROVENANCE=0``
or ``provenance = false`` in ``[tool.kernlock]`` (both writing and comparing). A failure here never breaks a run:
anything but the strict-mode refusal is one warning.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from kernlock.errors import DamagedLockError, KernlockError, OtherBuildsError
from kernlock.lock import check_results
from kernlock.lock import file as lockfile
from kernlock.lock.model import Lock, LockedKernel
from kernlock.runtime import policy
from kernlock.runtime import state as activated

__all__ = [
    "ENV",
    "FILE_NAME",
    "card_section",
    "carried",
    "compare",
    "describe",
    "enabled",
    "loaded_builds",
    "record",
    "refusal",
    "verdicts",
]

logger = logging.getLogger("kernlock")


#: The switch: ``0``/``false``/``off``/``no`` turns writing and comparing off, ``1``/``true``/``on``/``yes`` on.
ENV = "KERNLOCK_PROVENANCE"
FILE_NAME = lockfile.LOCK_NAME
_OFF = ("0", "false", "off", "no")
_ON = ("1", "true", "on", "yes")
_guard = threading.RLock()
#: What was derived for one activation (its generation): the switch, the lock's header, folders compared.
_memo: dict[str, object] = {"generation": -1}


def _remembered() -> dict[str, object]:
    if _memo.get("generation") != activated.generation:
        _memo.clear()
        _memo["generation"] = activated.generation
    return _memo


def enabled() -> bool:
    """Whether this activation writes and compares model folders' kernels.lock (``KERNLOCK_PROVENANCE``, else
    ``provenance`` in the ``[tool.kernlock]`` table beside the lock, else on)."""
    settings = activated.settings()
    if settings is None:
        return False
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF or value in _ON:
        return value in _ON
    if value:
        policy.warn_once(f"env:{ENV}", f"{ENV}={value!r} is neither on (1, true) nor off (0, false); it is on.")
    with _guard:
        memo = _remembered()
        if "enabled" not in memo:
            from kernlock.project import inputs

            try:
                memo["enabled"] = inputs.load(Path(settings.lockfile).parent).provenance
            except (KernlockError, OSError):  # no readable project beside the lock: the default
                memo["enabled"] = True
        return bool(memo["enabled"])


# -- writing ----------------------------------------------------------------------------------------------------


def loaded_builds() -> tuple[LockedKernel, ...]:
    """The locked builds this process loaded (each entry cut down to this environment's variant), by repo."""
    kernels = sys.modules.get("kernels")
    try:
        loaded = list(kernels.get_loaded_kernels()) if kernels is not None else []
    except Exception:  # a loader without this registry: nothing is known to be loaded
        return ()
    if not loaded:
        return ()
    view, environment = policy.current_lock()
    found: dict[str, LockedKernel] = {}
    for item in loaded:
        info = getattr(item, "repo_info", None)
        entry = view.entry_for(str(getattr(info, "repo_id", "")), environment) if info is not None else None
        if entry is None or entry.commit != str(getattr(info, "revision", "")):
            entry = _origin(getattr(getattr(item, "module", None), "__file__", None))
        if entry is not None:
            found[entry.repo] = entry
    return tuple(found[repo] for repo in sorted(found))


def _origin(file: object) -> LockedKernel | None:
    """The locked entry whose verified variant folder holds the module ``file`` (a build loaded without its Hub
    origin: the ``LOCAL_KERNELS`` fallback)."""
    if not isinstance(file, str):
        return None
    folder = Path(file).parent
    return policy.origin_of(folder) or policy.origin_of(folder.parent)


def _header() -> Lock:
    """The lock in force, read once per activation (for the fields a model's kernels.lock copies)."""
    with _guard:
        memo = _remembered()
        if "lock" not in memo:
            settings = activated.settings()
            assert settings is not None
            memo["lock"] = lockfile.read(Path(settings.lockfile), canonical=False)
        lock = memo["lock"]
        assert isinstance(lock, Lock)
        return lock


def carried(builds: tuple[LockedKernel, ...]) -> Lock:
    """The lock a model folder carries: ``builds`` (entries of this environment) with the header of the lock in
    force (requires-hash, variant rule, and this environment's declared facts)."""
    header = _header()
    environment = builds[0].environments[0]
    return Lock(
        requires_hash=header.requires_hash,
        environments=(environment,),
        kernels=builds,
        variant_rule=header.variant_rule,
        facts=tuple(f for f in header.facts if f[0] == environment),
    )


def refusal(folder: Path) -> str | None:
    """Why kernels.lock must not be written into ``folder`` (a project's folder, the lock in force), else None."""
    settings = activated.settings()
    target = folder / FILE_NAME
    if (folder / "pyproject.toml").exists():
        return "it holds a pyproject.toml (a project keeps its own kernels.lock)"
    if target.is_symlink():
        return f"its {FILE_NAME} is a symbolic link"
    if settings is not None and target.exists():
        try:
            if os.path.samefile(target, settings.lockfile):
                return f"its {FILE_NAME} is the lock in force"
        except OSError:
            pass
    return None


def record(folder: str | os.PathLike[str]) -> Path | None:
    """Write ``folder/kernels.lock`` (and the check verdicts of its builds here, ``kernels.check.toml``) for the
    locked builds this process loaded; None when nothing was written (off, nothing loaded, a project's folder)."""
    if not enabled():
        return None
    builds = loaded_builds()
    if not builds:
        return None
    where = Path(folder)
    why = refusal(where)
    if why is not None:
        policy.warn_once(f"refused:{where.resolve()}", f"not writing {FILE_NAME} into {where}: {why}.")
        return None
    lock = carried(builds)
    target = where / FILE_NAME
    lockfile.write(target, lock)
    found = verdicts(builds)
    if found:
        check_results.write(where / check_results.FILE_NAME, found)
    _say_once(where, builds)
    return target


def _say_once(where: Path, builds: tuple[LockedKernel, ...]) -> None:
    with _guard:
        memo = _remembered()
        if memo.get("said"):
            return
        memo["said"] = True
    listed = ", ".join(describe(entry) for entry in builds)
    logger.warning(
        "kernlock: wrote %s into %s: the kernel builds this model was computed with (%s); every later save does too. "
        "Turn it off with %s=0 or `provenance = false` in [tool.kernlock].",
        FILE_NAME,
        where,
        listed,
        ENV,
    )


def describe(entry: LockedKernel, variant: bool = True) -> str:
    """``org/name v3 508c1555 torch211-cxx11-cu130-x86_64-linux`` (the variant of a cut-down entry)."""
    text = f"{entry.repo} {entry.requested} {entry.commit[:8]}"
    return f"{text} {entry.variants[0].name}" if variant else text


def verdicts(builds: tuple[LockedKernel, ...]) -> list[dict[str, object]]:
    """The `kernlock check --record` entries of ``builds`` on this machine (environment and device), from the
    ``kernels.check.toml`` beside the lock in force; none when it is missing or unreadable."""
    settings = activated.settings()
    if settings is None or not builds:
        return []
    try:
        entries = check_results.read(Path(settings.lockfile).parent / check_results.FILE_NAME)
    except KernlockError:
        return []
    if not entries:
        return []
    device = _device()
    wanted = {(b.repo, b.commit, b.variants[0].name, b.environments[0], device) for b in builds}
    return [entry for entry in entries if check_results.key_of(entry) in wanted]


def _device() -> str:
    """This machine's device as `kernlock check` names it: the CUDA device's name, else ``cpu``."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return str(torch.cuda.get_device_name())
    except Exception:  # a torch without CUDA support compiled in
        pass
    return "cpu"


# -- comparing --------------------------------------------------------------------------------------------------


def compare(folder: str | os.PathLike[str]) -> None:
    """If ``folder`` carries a kernels.lock whose builds the lock in force would not load here (another commit or
    variant of a locked repo), say so in one line (warn mode) or raise ActivationError (strict mode); once per
    folder and activation. Repos the lock in force does not lock are left to the load (it refuses or warns)."""
    where = Path(folder)
    path = where / FILE_NAME
    if not path.is_file() or not enabled() or refusal(where) is not None:
        return
    with _guard:
        seen = _remembered().setdefault("compared", set())
        assert isinstance(seen, set)
        key = str(path.resolve())
        if key in seen:
            return
        seen.add(key)
    try:
        theirs = lockfile.read_foreign(path)  # a model's: at most FOREIGN_MAX bytes read
    except KernlockError as err:
        why = (err.why if isinstance(err, DamagedLockError) else None) or str(err)
        policy.warn_once(
            f"unreadable:{key}",
            f"cannot compare {path} with the lock in force: {why.rstrip('.')}. It is not a kernels.lock kernlock "
            "wrote beside the model; save the model again from an activated process, or delete the file.",
        )
        return
    view, environment = policy.current_lock()
    changes = []
    for entry in theirs.kernels:
        mine = view.entry_for(entry.repo, environment)
        variant = mine.variant_for(environment) if mine is not None else None
        if mine is None or variant is None:
            continue
        if mine.commit == entry.commit and variant.name in {v.name for v in entry.variants}:
            continue
        loads = f"{mine.requested} {mine.commit[:8]}"
        if variant.name not in {v.name for v in entry.variants}:
            loads += f" {variant.name}"
        changes.append(f"{describe(entry)}; this run loads {loads}")
    if not changes:
        return
    message = f"{where.name or where} was trained with " + "; and with ".join(changes)
    if policy.strict():
        raise OtherBuildsError(
            f"{message}. Resuming would change the kernel builds mid-run",
            fix=f"run on the model's builds with `kernlock add --from {where}`, or set KERNLOCK_MODE=warn to go on "
            f"with this run's builds ({ENV}=0 turns this comparison off)",
        )
    logger.warning("kernlock: %s (warn mode: going on with this run's builds).", message)


def card_section() -> str | None:
    """The model card's "Kernels" section (markdown): the locked builds this process loaded, with their check
    verdicts on this machine; None when off or nothing was loaded."""
    if not enabled():
        return None
    builds = loaded_builds()
    if not builds:
        return None
    judged = {(e["repo"], e["commit"], e["variant"]): f"{e['result']} ({e['device']})" for e in verdicts(builds)}
    rows = [
        f"| {k.repo} | {k.requested} | `{k.commit[:12]}` | {v.name} | {judged.get((k.repo, k.commit, v.name), '-')} |"
        for k in builds
        for v in k.variants
    ]
    return (
        "## Kernels\n\n"
        "This model was computed with these Hub kernel builds, recorded by kernlock in `kernels.lock` beside the "
        "weights (check: `kernlock check` of the build against the torch code it replaces, on that device):\n\n"
        "| kernel | requested | commit | variant | check |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\nRun on the same builds: `kernlock add --from <this model's folder or Hub repo>`.\n"
    )
