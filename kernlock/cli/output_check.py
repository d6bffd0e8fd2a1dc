"""What `kernlock check` prints, with `--speed` and `--upgrade` (docs/check.md explains every column)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kernlock.cli.common import print_table
from kernlock.commands.check.timing import memory_text, timing_text
from kernlock.util.wording import count

if TYPE_CHECKING:
    from kernlock.commands.check.command import CheckReport, CheckRow
    from kernlock.commands.check.speed import SpeedRow
    from kernlock.commands.check.upgrade import UpgradeReport

__all__ = ["print_check", "print_speed", "print_upgrade"]


def _peak(row: SpeedRow) -> str:
    return memory_text(row.peak, row.total is not None)


def _ratios(rows: list[SpeedRow]) -> dict[tuple[str, str, str], str]:
    """(kernel, case, path) -> the kernel's forward+backward (or step) time divided by that path's."""
    kernel = {(r.kernel, r.case): r.total.median for r in rows if r.path == "kernel" and r.total is not None}
    found = {}
    for row in rows:
        mine = kernel.get((row.kernel, row.case))
        if row.path != "kernel" and row.total is not None and mine:
            found[(row.kernel, row.case, row.path)] = f"{mine / row.total.median:.2f}x"
    return found


def print_speed(report: CheckReport) -> None:
    """`check --speed`: the speed table, the training-step table, the notes and any regression."""
    rows = [row for row in report.speed if not row.training]
    ratios = _ratios(rows)
    if rows:
        repeats = sorted({row.total.repeats for row in rows if row.total is not None})
        runs = f"{repeats[0]}" if len(repeats) == 1 else f"{repeats[0]}-{repeats[-1]}" if repeats else "0"
        click.echo(
            f"\nspeed on {report.device}: median of {runs} timed runs after warm-up, ± half the interquartile range; "
            "kernel ÷ path: the kernel's forward+backward time over that path's (above 1: the kernel is slower)"
        )
        table = [
            (
                row.kernel,
                row.case,
                row.path,
                timing_text(row.forward),
                timing_text(row.total),
                _peak(row),
                ratios.get((row.kernel, row.case, row.path), "-"),
            )
            for row in rows
        ]
        print_table(("kernel", "case", "path", "forward", "forward+backward", "peak memory", "kernel ÷ path"), table)
    if report.training is not None:
        _print_training(report)
    for row in report.speed:
        if row.note:
            who = f"{row.label} {row.case}" if row.training else f"{row.kernel} {row.case} {row.path}"
            click.secho(f"  {who}: not timed: {row.note}", fg="yellow")
    for line in report.regressions:
        click.secho(f"regression: {line}", fg="yellow")


def _print_training(report: CheckReport) -> None:
    """The training step: one row per attention implementation of the same model (the picture `--plot` draws)."""
    setup = report.training
    assert setup is not None
    steps = [row for row in report.speed if row.case == setup.case]
    sdpa = next((row.total.median for row in steps if row.path == "sdpa" and row.total is not None), None)
    click.echo(
        f"\ntraining step on {report.device}: {setup.model} ({setup.architecture}), {setup.dtype}, batch "
        f"{setup.batch} x {setup.seqlen} tokens, AdamW, the same weights and batch with each attention implementation; "
        "median step time, peak memory, the loss of the last step, and the step time over sdpa's"
    )
    table = [
        (
            row.label,
            timing_text(row.total),
            _peak(row),
            "-" if row.loss is None else f"{row.loss:.4f}",
            f"{row.total.median / sdpa:.2f}x" if sdpa and row.total is not None and row.path != "sdpa" else "-",
        )
        for row in steps
    ]
    print_table(("attention", "step", "peak memory", "loss", "÷ sdpa"), table)


def _result(row: CheckRow | None) -> str:
    """``pass 1.19e-07``: the verdict and the error of one case ("-" where that side has no such case)."""
    if row is None:
        return "-"
    return row.verdict if row.error is None else f"{row.verdict} {row.error:.2e}"


def print_upgrade(report: UpgradeReport) -> None:
    """`check --upgrade`: each case of the locked build beside the new one, the speed of both, then the verdicts."""
    if not report.pairs:
        what = ", ".join(report.unchanged) or "no kernel"
        click.echo(f"the upgrade moves no build of this environment ({report.environment}): {what} stays as locked")
        return
    assert report.locked is not None and report.upgraded is not None
    click.echo(f"kernlock check --upgrade on {report.device} ({report.environment})")
    table = []
    for pair in report.pairs:
        before = {row.case: row for row in report.locked.rows if row.kernel == pair.repo}
        after = {row.case: row for row in report.upgraded.rows if row.kernel == pair.repo}
        for case in dict.fromkeys([*before, *after]):
            new = after.get(case)
            tolerance = "-" if new is None or new.tolerance is None else f"{new.tolerance:.1e}"
            table.append((pair.repo, case, _result(before.get(case)), _result(after.get(case)), tolerance))
    print_table(("kernel", "case", "locked", "upgrade", "tolerance"), table)
    timed = []
    for pair in report.pairs:
        locked = {(r.case, r.path): r for r in report.locked.speed if r.kernel in (pair.repo, "")}
        for row in report.upgraded.speed:
            old = locked.get((row.case, row.path))
            if row.kernel not in (pair.repo, "") or old is None or old.total is None or row.total is None:
                continue
            ratio = f"{row.total.median / old.total.median:.2f}x"
            timed.append((pair.repo, row.case, row.path, timing_text(old.total), timing_text(row.total), ratio))
    if timed:
        click.echo("\nforward+backward (training step: the whole step), locked build and upgrade, on this machine")
        print_table(("kernel", "case", "path", "locked", "upgrade", "upgrade ÷ locked"), timed)
    click.echo("")
    for pair in report.pairs:
        click.secho(pair.verdict, fg="red" if pair.breaks else None)
    if report.unchanged:
        click.echo(f"not moved by the upgrade here: {', '.join(report.unchanged)}")
    broken = sum(pair.breaks for pair in report.pairs)
    summary = f"{count(broken, 'upgrade')} would break parity" if broken else "no upgrade breaks parity"
    click.echo(f"{summary}; kernels.lock is unchanged (`kernlock lock --upgrade` moves it)")


def print_check(report: CheckReport) -> None:
    """`check`: one line per case, then the verdict."""
    rows = [
        (
            row.kernel,
            row.commit[:12] if row.commit else "-",
            row.variant or "-",
            row.case,
            "-" if row.error is None else f"{row.error:.2e}",
            "-" if row.tolerance is None else f"{row.tolerance:.1e}",
            row.verdict,
        )
        for row in report.rows
    ]
    click.echo(f"kernlock check on {report.device} ({report.environment})")
    print_table(("kernel", "commit", "variant", "case", "max abs error", "tolerance", "result"), rows)
    failed = [row for row in report.rows if row.verdict == "FAIL"]
    for row in failed:
        if row.note:
            click.secho(f"  {row.kernel} {row.case}: {row.note}", fg="red")
    unchecked = sorted({row.kernel for row in report.rows if row.verdict == "not checked"})
    passed = sum(row.verdict == "pass" for row in report.rows)
    summary = f"{count(passed, 'case')} passed, {count(len(failed), 'case')} failed"
    if unchecked:
        summary += f"; not checked: {', '.join(unchecked)}"
    click.echo(summary)
