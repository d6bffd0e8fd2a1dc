"""`kernlock env`, `kernlock environments` and `kernlock outdated`: what this machine is and loads, which environments
kernels have builds for, and what moved on the Hub."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernlock.commands.lock import hub_client, read_lock, target_environments
from kernlock.environments.environment import detect_with_facts
from kernlock.errors import KernlockError, LockError
from kernlock.project import inputs as projects
from kernlock.util import interrupt

if TYPE_CHECKING:
    from kernlock.hub.client import Hub
    from kernlock.resolve.available import Available
    from kernlock.resolve.outdated import Report

__all__ = ["env_report", "environments", "outdated"]


def env_report(root: Path | None = None) -> dict[str, Any]:
    """This machine's environment, library versions, the transformers gate, each locked kernel's variant, and the
    Hub kernels transformers loads by itself here (``implicit``), each locked or not.
    A machine whose environment cannot be detected (no torch: a lock-only machine, or a Python torch has no build
    for) is reported all the same: ``environment`` None and ``environment_error`` saying why."""
    from kernlock.environments import facts
    from kernlock.environments.compat import SUPPORTED, installed, legacy_loader, transformers_gate

    try:
        machine = detect_with_facts()
    except KernlockError as err:
        machine, unknown = None, str(err)
    environment = None if machine is None else str(machine)
    report: dict[str, Any] = {
        "environment": environment,
        "declared": None if machine is None else {"name": environment, **machine.extras.as_data()},
        "versions": {name: installed(name) for name in SUPPORTED},
        "kernels": [],
    }
    if machine is None:
        report["environment_error"] = unknown
    gate = transformers_gate()
    if gate is not None:
        report["transformers_gate"] = {"ok": gate.ok, "message": gate.message()}
    unsupported = legacy_loader()
    if unsupported is not None:
        report["unsupported_loader"] = unsupported
    # The installed loader's generation (read from its files: kernels is not imported) and what kernlock covers.
    from kernlock.runtime import loaders

    probe = loaders.probe_files()
    report["loader"] = {"generation": probe.generation, "kernels": probe.kernels}
    if probe.missing:
        report["loader"]["missing"] = list(probe.missing)
    if probe.generation == "unknown":
        from kernlock.environments.compat import INSTALL_KERNELS

        report["loader"]["why"] = loaders.why_unknown(probe)
        report["loader"]["advice"] = (
            "activation pins locked kernels through LOCAL_KERNELS only (the paths below say what that leaves "
            f"uncovered); for every path, install a tested pair: {INSTALL_KERNELS}"
        )
    gated = None
    if gate is not None and not gate.ok:
        gated = f"transformers {gate.transformers} loads no Hub kernel with kernels {gate.kernels} (its version gate)"
    report["load_paths"] = loaders.load_paths(probe.generation, gated)
    found = projects.locate(root) if root is not None else projects.find_root()
    project = projects.load(found or Path.cwd())
    lock = None
    if environment is not None and project.lockfile.exists():
        try:
            lock = read_lock(project)
        except LockError as err:
            report["lock_error"] = str(err)
    if machine is not None:  # the kernels transformers loads by itself here, and whether each is locked
        from kernlock.commands.implicit import implicit_report

        report["implicit"] = implicit_report(machine, lock)
    if environment is not None and lock is not None:
        differ = facts.differences(lock.facts_for(environment), report["declared"])
        if differ:
            report["facts_differ"] = differ
        for repo in lock.repos:
            entry = lock.entry_for(repo, environment)
            variant = entry.variant_for(environment) if entry else None
            report["kernels"].append(
                {
                    "repo": repo,
                    "commit": entry.commit if entry else None,
                    "variant": variant.name if variant else None,
                }
            )
    return report


def outdated(root: Path | None = None, hub: Hub | None = None) -> Report:
    """`kernlock outdated`: moved refs, newer versions and what `lock --upgrade` would change, per locked kernel."""
    from kernlock.resolve import outdated as outdating

    interrupt.reset()
    project = projects.load(projects.locate(root))
    lock = read_lock(project)
    report = outdating.report(project, lock, target_environments(project), hub_client(hub))
    from kernlock.lock import check_results

    recorded = check_results.read(project.lockfile.parent / check_results.FILE_NAME)
    targets = {(c.new.repo, c.new.commit) for c in report.upgrade.changes if c.new is not None}
    checks = [
        {
            "repo": entry["repo"],
            "commit": entry["commit"],
            "environment": entry["environment"],
            "device": entry["device"],
            "result": entry["result"],
            "failed": [case["case"] for case in entry.get("cases", []) if case.get("result") == "FAIL"],
        }
        for entry in recorded
        if (entry["repo"], entry["commit"]) in targets
    ]
    return replace(report, checks=tuple(checks))


def environments(specs: list[str], root: Path | None = None, hub: Hub | None = None) -> Available:
    """`kernlock environments`: the environment strings the kernels ``specs`` (``org/name[@rev]``; none: the
    project's requirements, each at every revision it pins) have builds for, and which kernels load where."""
    from kernlock.resolve.available import available

    interrupt.reset()
    if specs:
        parsed = [projects.Spec.parse(spec) for spec in specs]
        wanted = [(spec.repo, spec.rev) for spec in parsed]
    else:
        project = projects.load(projects.locate(root))
        wanted = [(repo, pin.rev) for repo, req in project.requirements.items() for pin in req.pins]
        if not wanted:
            example = "`kernlock environments kernels-community/flash-attn2`"
            raise LockError("pyproject.toml asks for no kernel", fix=f"name some, e.g. {example}")
    return available(hub_client(hub), list(dict.fromkeys(wanted)))
