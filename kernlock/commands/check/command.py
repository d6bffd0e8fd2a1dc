"""`kernlock check`: is each locked kernel this environment loads numerically right here, and how fast?
(docs/check.md)

Every locked entry of this environment is first verified in the cache (:func:`kernlock.sync.integrity.check_variant`:
not synced is an error naming `kernlock sync`, so no request is made), then loaded exactly as activation loads it
(kernlock activated in this process with the project's lock, strict mode) and compared with the torch path it
replaces (:mod:`kernlock.commands.check.parity`) on this machine's device. ``speed`` also times it against that
path (:mod:`kernlock.commands.check.speed`), trains one model with eager, sdpa and every locked attention kernel
(:mod:`kernlock.commands.check.training`; ``model``, ``batch``: :mod:`kernlock.commands.check.training_models`),
draws that comparison with ``plot`` (:mod:`kernlock.commands.check.speed_plot`) and compares the figures with those
recorded for the build it replaced (:mod:`kernlock.commands.check.regression`). ``record`` writes the results to
``kernels.check.toml`` beside the lock (:mod:`kernlock.commands.check.report`), keyed by commit, variant and
environment. `check --upgrade` is :mod:`kernlock.commands.check.upgrade`.
"""

from __future__ import annotations

from pathlib import Path

from kernlock.commands.check.report import CheckReport, CheckRow
from kernlock.errors import KernlockError, LockError, ProjectError
from kernlock.lock.model import Lock, LockedKernel

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from kernlock.commands.check.speed import Base, SpeedRow

__all__ = ["CheckReport", "CheckRow", "check", "check_lock", "entries_here"]


def entries_here(lock: Lock, environment: str, kernels: list[str] | None) -> list[LockedKernel]:
    """The lock's entries this environment loads (``kernels``: only these repos, each of which must be one)."""
    entries = [k for k in lock.kernels if k.variant_for(environment) is not None]
    if not entries and lock.kernels:
        raise LockError(
            f"kernels.lock does not cover this environment, {environment}",
            fix="add it to `environments` in [tool.kernlock] and run `kernlock lock`, then `kernlock sync`",
        )
    if kernels:
        wanted = {name.casefold() for name in kernels}
        unknown = sorted(wanted - {k.repo.casefold() for k in entries})
        if unknown:
            known = ", ".join(sorted(k.repo for k in entries)) or "none"
            raise ProjectError(f"{', '.join(unknown)}: not locked for {environment} (locked here: {known}).")
        entries = [k for k in entries if k.repo.casefold() in wanted]
    return entries


def check(
    root: Path | None = None,
    kernels: list[str] | None = None,
    dtypes: list[str] | None = None,
    record: bool = False,
    speed: bool = False,
    seqlens: list[int] | None = None,
    *,
    model: str | None = None,
    batch: int | None = None,
    plot: Path | None = None,
) -> CheckReport:
    """Check every locked kernel of this environment (``kernels``: only these repos); see the module."""
    from dataclasses import replace

    from kernlock.commands import lock as locking
    from kernlock.commands.check import report as results
    from kernlock.environments.environment import detect
    from kernlock.project import inputs as projects

    if plot is not None:
        from kernlock.commands.check import speed_plot

        if not speed:
            raise ProjectError("--plot draws the training step of --speed", fix="add --speed")
        speed_plot.prepare(plot)  # a wrong suffix or no matplotlib: said before anything runs
    project = projects.load(projects.locate(root))
    lock = locking.read_lock(project)
    environment = str(detect())
    entries = entries_here(lock, environment, kernels)
    report = check_lock(
        project.lockfile,
        entries,
        environment,
        dtypes,
        speed=speed,
        seqlens=seqlens,
        model=model,
        batch=batch,
        train=plot is not None,
    )
    if speed:
        from kernlock.commands.check import regression

        recorded = results.read(project.lockfile.parent / results.FILE_NAME)
        report = replace(report, regressions=tuple(regression.regressions(recorded, report)))
    if record:
        report = replace(report, recorded=results.write(project.lockfile.parent, report))
    if plot is not None:
        report = replace(report, plotted=speed_plot.draw(report, plot))
    return report


def check_lock(
    lockfile: Path,
    entries: list[LockedKernel],
    environment: str,
    dtypes: list[str] | None,
    *,
    speed: bool = False,
    seqlens: list[int] | None = None,
    model: str | None = None,
    batch: int | None = None,
    train: bool = False,
) -> CheckReport:
    """Verify, load (activated with ``lockfile``) and check ``entries``: the work of :func:`check` for one lock.
    ``train``: run the training step (eager and sdpa) even when no attention kernel is checked."""
    from dataclasses import replace

    from kernlock.commands.check import parity, training_models
    from kernlock.runtime import activation as runtime
    from kernlock.sync.integrity import check_variant

    verified = {}
    for entry in entries:
        variant = entry.variant_for(environment)
        assert variant is not None
        verified[entry.repo] = (entry, variant, check_variant(entry, variant))  # not synced: names `kernlock sync`
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = dtypes or (["float32", "bfloat16"] if device == "cuda" else ["float32"])
    for dtype in chosen:
        if dtype not in parity.TOLERANCES:
            raise ProjectError(f"unknown --dtype {dtype}", fix=f"use one of {', '.join(parity.TOLERANCES)}")
    if seqlens is not None and any(n < 1 for n in seqlens):
        raise ProjectError("--seqlen takes a positive number of tokens.")
    trained = training_models.choose(model, batch, device) if speed else None  # a bad --model: said before timing
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    runtime.activate(lockfile=lockfile, mode="strict")
    import kernels as loader

    rows: list[CheckRow] = []
    timed: list[SpeedRow] = []
    attention: list[Base] = []  # the locked attention kernels, trained beside eager and sdpa
    for entry, variant, _path in verified.values():
        base = {"kernel": entry.repo, "commit": entry.commit, "variant": variant.name}
        try:
            module = loader.get_kernel(entry.repo, revision=entry.commit)
        except KernlockError:
            raise
        except Exception as err:  # the locked build does not import here: it cannot be right here
            why = f"{type(err).__name__}: {err}".splitlines()[0][:160]
            rows.append(
                CheckRow(**base, ref=entry.ref, case="load", error=None, tolerance=None, verdict="FAIL", note=why)
            )
            continue
        found = parity.kinds(module)
        if not found:
            why = "neither an attention kernel (flash_attn_varlen_func) nor a layer kernel (layers)"
            rows.append(
                CheckRow(**base, ref=entry.ref, case="-", error=None, tolerance=None, verdict="not checked", note=why)
            )
        cases: list[parity.Case] = []
        if "attention" in found:
            cases += parity.attention_cases(entry.repo, device, chosen)
        if "layers" in found:
            layer_cases, unknown = parity.layer_cases(module, device, chosen)
            cases += layer_cases
            for name in unknown:
                why = "no reference module is known for this layer"
                rows.append(
                    CheckRow(
                        **base,
                        ref=entry.ref,
                        case=f"layer {name}",
                        error=None,
                        tolerance=None,
                        verdict="not checked",
                        note=why,
                    )
                )
        for case in cases:
            verdict = "pass" if case.passed else "FAIL"
            row = CheckRow(
                **base, ref=entry.ref, case=case.name, error=case.error, tolerance=case.tolerance, verdict=verdict
            )
            rows.append(replace(row, note=case.note))
        if speed:
            build: Base = {"kernel": entry.repo, "commit": entry.commit, "variant": variant.name}
            timed += _speed(module, found, build, device, dtypes, seqlens)
            attention += [build] if "attention" in found else []
    setup = None
    if trained is not None and (attention or train):
        from kernlock.commands.check.speed import SEQLENS, speed_dtypes
        from kernlock.commands.check.training import training_speed

        setup = trained.setup((seqlens or SEQLENS[device])[0], speed_dtypes(device, dtypes)[0])
        timed += training_speed(attention, trained, setup, device)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return CheckReport(environment=environment, device=name, rows=tuple(rows), speed=tuple(timed), training=setup)


def _speed(
    module: ModuleType,
    found: list[str],
    base: Base,
    device: str,
    dtypes: list[str] | None,
    seqlens: list[int] | None,
) -> list[SpeedRow]:
    """`--speed`'s rows for one loaded kernel: its attention or layers against their torch paths."""
    from kernlock.commands.check import speed

    chosen = speed.speed_dtypes(device, dtypes)
    lengths = list(seqlens or speed.SEQLENS[device])
    rows: list[SpeedRow] = []
    if "attention" in found:
        rows += speed.attention_speed(module, base, device, chosen, lengths)
    if "layers" in found:
        rows += speed.layer_speed(module, base, device, chosen)
    return rows
