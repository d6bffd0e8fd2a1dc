"""What the CLI prints for each command's result (kernlock.cli.app parses; these write the text users read)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from kernlock.util import interrupt
from kernlock.util.wording import count, size

if TYPE_CHECKING:
    from kernlock.commands.lock import AddResult, LockResult
    from kernlock.commands.sync import NotSynced
    from kernlock.commands.unchanged import Synced
    from kernlock.resolve.interop import ImportResult
    from kernlock.resolve.outdated import Report
    from kernlock.resolve.repair import Repair
    from kernlock.sync.engine import SyncReport
    from kernlock.sync.verify import VerifyResult

__all__ = [
    "interrupted",
    "print_active",
    "print_added",
    "print_env",
    "print_import",
    "print_lock",
    "print_not_synced",
    "print_outdated",
    "print_show",
    "print_sync",
    "print_sync_after_add",
    "print_synced",
    "print_verify",
    "warn_gate",
]


def warn_gate() -> None:
    """One line (stderr) when the installed transformers/kernels pair turns transformers' Hub kernel paths off."""
    from kernlock.environments import gatewarning

    message = gatewarning.warning()
    if message:
        click.secho(message, fg="yellow", err=True)


def print_active(active: str, command: tuple[str, ...], quiet: bool) -> None:
    """`run`: the one line (stderr) that says which lock is active for CMD, unless ``quiet``."""
    if not quiet:
        import shlex

        click.echo(f"{active} for {shlex.join(command)}", err=True)


def print_lock(result: LockResult, dry_run: bool = False) -> None:
    """`lock`, `add`, `remove`: up to date, or what was (would be) written and how the pins moved."""
    if result.repaired is not None:
        _print_repair(result.repaired, result.written, dry_run)
        return
    if not result.written:
        click.echo(f"kernels.lock is up to date ({count(len(result.lock.kernels), 'entry', 'entries')})")
        return
    if result.previous is not None:
        from kernlock.lock import changes

        diff = changes.diff(result.previous, result.lock)
        click.echo(f"{'would write' if dry_run else 'wrote'} kernels.lock ({result.reason})")
        for line in diff.render() or ["(no kernel changes: the file is rewritten in the current format)"]:
            click.echo(f"  {line}" if line.startswith(" ") else line)
        return
    click.echo(f"{'would write' if dry_run else 'wrote'} kernels.lock ({result.reason})")
    for kernel in result.lock.kernels:
        via = f" (dependency of {', '.join(kernel.required_by)})" if kernel.required_by else ""
        click.echo(f"  {kernel.repo} {kernel.requested} -> {kernel.commit[:12]}{via}")
        for env, variant in sorted((env, v.name) for v in kernel.variants for env in v.environments):
            click.echo(f"    {env} -> {variant}")


def print_not_synced(result: LockResult) -> None:
    """`lock` wrote commits this machine has not synced: say so (`add` syncs, `lock` does not), before an offline
    run finds out."""
    if not result.written:
        return
    from kernlock import api

    found = api.not_synced_here(result.lock)
    if found is None:
        return
    env, kernels = found
    click.secho(
        f"not synced here yet ({env}): {', '.join(kernels)}; run `kernlock sync` before an offline run loads "
        "them (or lock with --sync)",
        fg="yellow",
    )


def _print_repair(repaired: Repair, written: bool, dry_run: bool) -> None:
    """A lock that failed its checks: what failed and what was read, then a line per entry of the new lock."""
    for line in repaired.summary:
        click.secho(line, fg="yellow" if line.startswith(("kernels.lock failed", "chose:")) else None)
    if written:
        click.echo(f"{'would write' if dry_run else 'wrote'} kernels.lock")
    for line in repaired.changes:
        click.echo(line)
    if written and not dry_run:
        merge = " (`git add kernels.lock` ends the merge)" if repaired.conflicted else ""
        click.echo(f"review the result with `git diff kernels.lock`, then commit it{merge}")


def print_env(report: dict[str, Any], verbose: bool = False) -> None:
    """`env`: this machine, its library versions and loader, each locked kernel's variant; with ``verbose``, also
    every load path of the loader and whether kernlock pins it (without: only those it does not; ``--json``: all)."""
    if report["environment"] is None:
        click.secho(f"environment: unknown ({report['environment_error']})", fg="yellow")
    else:
        from kernlock.environments.facts import as_toml

        click.echo(f"environment: {report['environment']}")
        click.echo(f"declare as: {as_toml(report['declared'])}")
    for name, version in report["versions"].items():
        click.echo(f"{name}: {version or 'not installed'}")
    if report.get("unsupported_loader"):
        click.secho(f"WARNING: {report['unsupported_loader']}", fg="yellow")
    gate = report.get("transformers_gate")
    if gate:
        click.secho(("ok: " if gate["ok"] else "WARNING: ") + gate["message"], fg=None if gate["ok"] else "yellow")
    loader = report["loader"]
    if loader["generation"] is None:
        click.echo("loader: kernels is not installed")
    elif loader["generation"] == "unknown":
        click.secho(
            f"loader: kernels {loader['kernels']} (unknown generation: {loader['why']}); {loader['advice']}",
            fg="yellow",
        )
    else:
        click.echo(f"loader: kernels {loader['kernels']} ({loader['generation']} generation)")
    rows = [(_coverage(row), row) for row in report["load_paths"]]
    shown = [(label, row) for label, row in rows if verbose or label == "NOT covered"]
    if shown:
        click.echo("load paths:")
    for label, row in shown:
        click.echo(f"  {label:<12}{row['path']}: {row['how']}")
    for line in report.get("facts_differ", []):
        click.secho(f"WARNING: {line} (declared facts of this environment in pyproject.toml)", fg="yellow")
    if report["kernels"]:
        click.echo("locked kernels, variant here:")
    for row in report["kernels"]:
        click.echo(f"  {row['repo']}: {row['variant'] or 'NOT LOCKED for this environment'}")
    if report.get("lock_error"):
        click.echo(f"  ({report['lock_error']})")
    if len(shown) < len(rows):
        click.echo("(`kernlock env -v` lists each load path of this loader and whether kernlock pins it)")


def _coverage(row: dict[str, Any]) -> str:
    return "covered" if row["covered"] else "n/a" if row["how"].startswith("not supported") else "NOT covered"


def print_synced(found: Synced, mode: str | None = None) -> None:
    """A sync's summary line; ``mode`` says what it did (None: it found every file in place, as one answered from
    memory does: :mod:`kernlock.commands.unchanged`)."""
    interrupt.finish()
    mode = mode or f"0 downloaded, {found.variants} already verified"
    click.echo(
        f"synced {count(found.variants, 'variant')} of {count(found.kernels, 'kernel')} for "
        f"{', '.join(found.environments)} into {found.cache} ({mode})"
    )


def print_sync(report: SyncReport | NotSynced) -> None:
    """Print a kernlock.sync.engine.SyncReport: what was downloaded or repaired, and a one-line summary (or the one
    line that says why nothing was synced here). The sync is done: an interrupt from here on no longer turns it into
    a failure (:func:`interrupt.finish`)."""
    from kernlock.commands.sync import NotSynced  # imported already: the command that made ``report`` did
    from kernlock.commands.unchanged import Synced

    interrupt.finish()
    if report.relocked:
        click.echo(f"re-locked kernels.lock first ({report.relocked})")
    if isinstance(report, NotSynced):  # a machine that loads none of the lock's builds
        _print_not_synced(report)
        return
    for v in report.variants:
        if v.repaired:
            click.secho(
                f"  repaired {v.repo} {v.variant}: {', '.join(v.repaired)} did not match kernels.lock", fg="yellow"
            )
        if v.removed:
            click.secho(
                f"  removed from {v.repo} {v.variant}: {', '.join(v.removed)} (not in kernels.lock)", fg="yellow"
            )
        verb = "downloaded" if report.source is None else "installed"
        if v.downloaded:
            click.echo(
                f"  {verb} {v.repo} {v.variant} ({count(len(v.downloaded), 'file')}, {size(v.downloaded_bytes)})"
            )
    fetched = sum(1 for v in report.variants if v.downloaded)
    present = len(report.variants) - fetched
    if report.offline and report.source is None:
        mode = "checked offline"
    elif report.source is not None:
        mode = f"{fetched} installed from {report.source}, {present} already verified"
    else:
        mode = f"{fetched} downloaded, {present} already verified"
    variants, kernels, cache = len(report.variants), len(report.kernels), str(report.cache)
    print_synced(Synced(variants=variants, kernels=kernels, environments=report.environments, cache=cache), mode)
    if report.receipts_refused is not None:
        click.secho(
            f"note: no receipts are kept in {report.receipts_refused}: it cannot be made, or it is not yours alone "
            "(another user owns it or a folder above it, or a group or others can write one), so every load hashes "
            "the kernel files. Point KERNLOCK_CACHE at a folder of your own (docs/security.md).",
            fg="yellow",
            err=True,
        )


def print_verify(result: VerifyResult) -> bool:
    """`verify`: every problem (to stderr) and what fixes them, or the summary; False when something is wrong."""
    if not result.ok:
        for problem in result.problems:
            click.secho(f"  {problem}", fg="red", err=True)
        kinds = {problem.kind.value for problem in result.problems}
        what = [
            text
            for kind, text in (
                ("not synced", "not synced"),
                ("missing", "missing"),
                ("mismatch", "changed"),
                ("unexpected", "not in kernels.lock"),
            )
            if kind in kinds
        ]
        click.secho(
            f"error: {count(len(result.problems), 'problem')} in {result.cache} ({', '.join(what)}); run "
            "`kernlock sync` to download, replace or remove what does not match kernels.lock.",
            fg="red",
            err=True,
        )
        return False
    if not result.checked:
        why = f"; {result.not_required}" if result.not_required else ""
        click.secho(
            f"error: nothing verified: {result.cache} holds none of kernels.lock's "
            f"{count(result.unchecked, 'variant')}{why}. Run `kernlock sync` for this machine's environment "
            "(declared in pyproject.toml's `environments`, then `kernlock lock`), or `kernlock verify "
            "--all-environments` to require every locked variant in this cache.",
            fg="red",
            err=True,
        )
        return False
    click.echo(
        f"verified {count(len(result.checked), 'variant')}, {count(result.files, 'file')} in {result.cache}: "
        "all match kernels.lock" + (f", {count(result.signed, 'signature')} verified offline" if result.signed else "")
    )
    if result.unchecked:
        click.echo(
            f"not checked: {count(result.unchecked, 'variant')} of other environments "
            f"({', '.join(result.unchecked_environments)}), not in this cache"
        )
    return True


def print_show(rows: list[dict[str, Any]], no_variant: str | None = None) -> None:
    """`show`: one line per lock entry, in aligned columns; then why a row has no variant here, if one has none."""
    header = ("kernel", "requested", "ref", "commit", "variant (this environment)", "synced", "signer")
    table = [header]
    for row in rows:
        synced = "-" if row["synced"] is None else "yes" if row["synced"] else "no"
        table.append(
            (
                row["repo"] + (f" (for {', '.join(row['required-by'])})" if row["required-by"] else ""),
                row["requested"],
                row["ref"],
                row["commit"][:12],
                row["variant"] or "-",
                synced,
                row.get("signer") or "-",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for line in table:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    if no_variant:
        click.echo(f"no variant here: {no_variant}")


def print_outdated(report: Report) -> None:
    """`outdated`: per locked kernel, whether its ref moved and a newer version exists; what an upgrade changes."""
    for row in report.rows:
        e = row.entry
        via = f" (dependency of {', '.join(e.required_by)})" if e.required_by else ""
        if row.pinned:
            state = "pinned by commit"
        elif row.gone:
            state = f"{e.ref} no longer exists on the Hub"
        elif row.moved is None:
            state = f"{e.ref} has not moved"
        elif row.moved.commits is None:
            state = f"{e.ref} was rewritten: now {row.moved.head[:12]} ({row.moved.date or 'date unknown'})"
        else:
            state = (
                f"{e.ref} moved {count(row.moved.commits, 'commit')} to {row.moved.head[:12]} "
                f"({row.moved.date or 'date unknown'})"
            )
        click.echo(f"{e.repo} {e.requested} {e.commit[:12]}{via}: {state}")
        if row.newer_version:
            click.echo(f"  newer version with builds for every environment: {row.newest}")
        if row.skipped:
            click.echo(f"  newer versions skipped: {'; '.join(row.skipped)}")
            click.echo("\n".join(row.fix) if row.fix else "  (declare fewer environments to move to them)")
    if report.upgrade_error:
        click.secho(f"`kernlock lock --upgrade` would fail: {report.upgrade_error}", fg="yellow")
    elif report.upgrade:
        click.echo("`kernlock lock --upgrade` would change:")
        for line in report.upgrade.render():
            click.echo(f"  {line}")
    else:
        click.echo("`kernlock lock --upgrade` would change nothing")
    for check in report.checks:  # what `kernlock check --upgrade --record` found for the builds it moves to
        failed = f": {', '.join(check['failed'])}" if check["failed"] else ""
        click.echo(
            f"  checked {check['repo']} {check['commit'][:12]} on {check['device']} ({check['environment']}): "
            f"{check['result']}{failed}"
        )


def print_added(result: AddResult) -> None:
    """`add`: the project it created, each recorded requirement, then the lock."""
    if result.created:
        click.echo(f"created {result.created} (no enclosing project was found)")
    for repo, rev in result.added.items():
        before = result.replaced.get(repo)
        if before is None:
            click.echo(f'added {repo} = "{rev}"')
        elif before == f'"{rev}"':
            click.echo(f'{repo} = "{rev}" was already recorded')
        else:
            click.echo(f'changed {repo} {before} -> "{rev}"')
    print_lock(result.lock)


def print_sync_after_add(report: SyncReport | NotSynced) -> None:
    """`add`'s sync of this machine (or why nothing was synced here)."""
    print_sync(report)


def _print_not_synced(report: NotSynced) -> None:
    """One line: nothing was synced on this machine, why, and what to run instead (exit status 0)."""
    if report.no_torch:
        click.echo(
            f"not synced: {report.why}; run `kernlock sync` where training runs, or `kernlock sync "
            "--all-environments` here to fill a shared cache for every locked environment"
        )
    else:
        click.echo(f"not synced: {report.why} (`kernlock sync --all-environments` fills a cache for all of them)")


def print_import(result: ImportResult) -> None:
    """`import`: the requirements recorded, each pin kept or not (and why), and where the JSON lock went."""
    for repo, rev in result.requirements.items():
        click.echo(f'[tool.kernlock.kernels] "{repo}" = "{rev}"')
    for outcome in result.outcomes:
        pin = outcome.pin
        if outcome.kept:
            click.echo(f"  kept {pin.repo} {pin.rev} {pin.commit[:12]}")
        else:
            now = f" -> {outcome.commit[:12]}" if outcome.commit else ""
            click.secho(f"  not kept {pin.repo} {pin.rev} {pin.commit[:12]}{now}: {outcome.why}", fg="yellow")
    if result.moved_to is not None:
        click.echo(
            f"moved the kernels library's JSON lock to {result.moved_to.name} (refresh it with "
            f"`kernlock export --format kernels -o {result.moved_to.name}`)"
        )
    click.echo(f"wrote kernels.lock ({count(len(result.lock.kernels), 'entry', 'entries')})")


def interrupted(code: int) -> None:
    """Stop now: running downloads are abandoned (their ``.incomplete`` files resume next time), and no worker
    thread is waited for."""
    click.secho(
        "interrupted: stopped before the end; nothing partial was made visible. Run the command again to resume.",
        fg="yellow",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
