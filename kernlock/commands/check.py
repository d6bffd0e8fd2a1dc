"""`kernlock check`: is each locked kernel this environment loads numerically right here? (docs/check.md)

Every locked entry of this environment is first verified in the cache (:func:`kernlock.sync.check.check_variant`:
not synced is an error naming `kernlock sync`, so no request is made), then loaded exactly as activation loads it
(kernlock activated in this process with the project's lock, strict mode) and compared with the torch path it
replaces (:mod:`kernlock.commands.parity`) on this machine's device. ``record`` writes the results to
``kernels.check.toml`` beside the lock (:mod:`kernlock.commands.check_record`), keyed by commit, variant and
environment.
"""

from __future__ import annotations

from pathlib import Path

from kernlock.commands.check_record import CheckReport, CheckRow
from kernlock.errors import KernlockError, LockError, ProjectError

__all__ = ["CheckReport", "CheckRow", "check"]


def check(
    root: Path | None = None,
    kernels: list[str] | None = None,
    dtypes: list[str] | None = None,
    record: bool = False,
) -> CheckReport:
    """Check every locked kernel of this environment (``kernels``: only these repos); see the module."""
    from dataclasses import replace

    from kernlock.commands import lock as locking
    from kernlock.commands import parity
    from kernlock.environments.environment import detect
    from kernlock.project import inputs as projects
    from kernlock.runtime import activation as runtime
    from kernlock.sync.check import check_variant

    project = projects.load(projects.locate(root))
    lock = locking.read_lock(project)
    environment = str(detect())
    entries = [k for k in lock.kernels if k.variant_for(environment) is not None]
    if not entries and lock.kernels:
        raise LockError(
            f"kernels.lock does not cover this environment, {environment}; add it to `environments` in "
            "[tool.kernlock] and run `kernlock lock`, then `kernlock sync`."
        )
    if kernels:
        wanted = {name.casefold() for name in kernels}
        unknown = sorted(wanted - {k.repo.casefold() for k in entries})
        if unknown:
            known = ", ".join(sorted(k.repo for k in entries)) or "none"
            raise ProjectError(f"{', '.join(unknown)}: not locked for {environment} (locked here: {known}).")
        entries = [k for k in entries if k.repo.casefold() in wanted]
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
            raise ProjectError(f"--dtype {dtype}: use one of {', '.join(parity.TOLERANCES)}.")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    runtime.activate(lockfile=project.lockfile, mode="strict")
    import kernels as loader

    rows: list[CheckRow] = []
    for entry, variant, _path in verified.values():
        base = {"kernel": entry.repo, "commit": entry.commit, "variant": variant.name}
        try:
            module = loader.get_kernel(entry.repo, revision=entry.commit)
        except KernlockError:
            raise
        except Exception as err:  # the locked build does not import here: it cannot be right here
            why = f"{type(err).__name__}: {err}".splitlines()[0][:160]
            rows.append(CheckRow(**base, case="load", error=None, tolerance=None, verdict="FAIL", note=why))
            continue
        found = parity.kinds(module)
        if not found:
            why = "neither an attention kernel (flash_attn_varlen_func) nor a layer kernel (layers)"
            rows.append(CheckRow(**base, case="-", error=None, tolerance=None, verdict="not checked", note=why))
        cases: list[parity.Case] = []
        if "attention" in found:
            cases += parity.attention_cases(entry.repo, device, chosen)
        if "layers" in found:
            layer_cases, unknown = parity.layer_cases(module, device, chosen)
            cases += layer_cases
            for name in unknown:
                why = "no reference module is known for this layer"
                rows.append(
                    CheckRow(**base, case=f"layer {name}", error=None, tolerance=None, verdict="not checked", note=why)
                )
        for case in cases:
            verdict = "pass" if case.passed else "FAIL"
            row = CheckRow(**base, case=case.name, error=case.error, tolerance=case.tolerance, verdict=verdict)
            rows.append(replace(row, note=case.note))
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    report = CheckReport(environment=environment, device=name, rows=tuple(rows))
    if record:
        from kernlock.commands import check_record as checkrecord

        report = replace(report, recorded=checkrecord.write(project.lockfile.parent, report))
    return report
