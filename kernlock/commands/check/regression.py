"""`kernlock check --speed`: is the build this lock loads slower than the build it replaced, on this machine?

The figures come from ``kernels.check.toml`` (`check --speed --record`): of the entries of the same repo, this
environment and this device, at another commit and with speed figures, the most recently recorded one is the build
the kernel replaced. Each kernel figure of the same case and shape (forward+backward of an attention or layer
case; the training step) is divided by the recorded one, and that by the same ratio of the reference path (sdpa,
torch) on the same shapes where both runs timed it: each run times the kernel and its reference interleaved, so
the quotient does not move with the machine's own speed between the two runs (a busy host, another clock). When the
worst reaches :data:`THRESHOLD`, one line says so, with both ratios it came from. Never a failure: a regression is
reported, not judged. `check --upgrade` compares its two builds the same way
(:func:`worst`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernlock.commands.check.report import CheckReport

__all__ = ["THRESHOLD", "Slowdown", "figures", "label", "regressions", "worst"]

#: The slowdown (kernel time now / recorded, against its reference path) from which a regression is reported.
THRESHOLD = 1.2

#: (case, path) -> median milliseconds of forward+backward (a training step for the training case).
Figures = dict[tuple[str, str], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class Slowdown:
    """The kernel's worst slowdown over the cases both sides measured: its time now over then (``raw``), divided by
    the same ratio of the reference path (``drift``: how much the machine itself changed) where both runs timed it."""

    raw: float
    case: str
    reference: str  # the path the kernel replaces in that case (sdpa, torch)
    drift: float | None

    @property
    def ratio(self) -> float:
        """The slowdown against the reference: ``raw / drift`` (``raw`` where the reference was not timed)."""
        return self.raw / self.drift if self.drift else self.raw

    @property
    def what(self) -> str:
        return "training step" if self.case.startswith("training step") else "forward+backward"

    @property
    def detail(self) -> str:
        """``attention GQA ... d64; the kernel's own time 1.33x, sdpa on the same shapes 1.01x``."""
        if self.drift is None:
            return self.case.removeprefix("training step ")
        beside = f"; the kernel's own time {self.raw:.2f}x, {self.reference} on the same shapes {self.drift:.2f}x"
        return self.case.removeprefix("training step ") + beside

    def describe(self) -> str:
        """``forward+backward 1.32x slower (attention GQA ...; the kernel's own time 1.33x, sdpa ... 1.01x)``."""
        how = f"{self.ratio:.2f}x slower" if self.ratio >= 1 else f"{1 / self.ratio:.2f}x faster"
        return f"{self.what} {how} ({self.detail})"


def label(ref: str, commit: str) -> str:
    """``v3 508c1555`` (the commit alone when no ref is known)."""
    return f"{ref} {commit[:8]}" if ref and ref != commit else commit[:8]


def _reference(case: str) -> str:
    return "torch" if case.startswith("layer ") else "sdpa"


def figures(report: CheckReport, repo: str) -> Figures:
    """The measured figures of ``repo`` in ``report`` (with the training step's eager and sdpa, which name none)."""
    return {(r.case, r.path): r.total.median for r in report.speed if r.kernel in (repo, "") and r.total is not None}


def _recorded(entry: dict[str, Any]) -> Figures:
    found = {}
    for item in entry.get("speed", []):
        metric = "step-ms" if item["case"].startswith("training step") else "forward-backward-ms"
        if isinstance(item.get(metric), int | float) and item[metric] > 0:
            found[(item["case"], str(item.get("path", "")))] = float(item[metric])
    return found


def worst(then: Figures, now: Figures) -> Slowdown | None:
    """The kernel path's largest slowdown (against its reference, :class:`Slowdown`) over the cases in both, or
    None when none is."""
    found: Slowdown | None = None
    for (case, path), median in now.items():
        if path != "kernel" or not then.get((case, path)):
            continue
        reference = _reference(case)
        before, after = then.get((case, reference)), now.get((case, reference))
        drift = after / before if before and after else None
        slowdown = Slowdown(raw=median / then[(case, path)], case=case, reference=reference, drift=drift)
        if found is None or slowdown.ratio > found.ratio:
            found = slowdown
    return found


def regressions(recorded: list[dict[str, Any]], report: CheckReport) -> list[str]:
    """One line per kernel whose figures are :data:`THRESHOLD` or more slower than the build it replaced."""
    refs = {(row.kernel, row.commit): row.ref for row in report.rows}
    lines = []
    for repo, commit in sorted({(row.kernel, row.commit) for row in report.speed if row.kernel}):
        before = [
            e
            for e in recorded
            if e["repo"] == repo
            and e["environment"] == report.environment
            and e["device"] == report.device
            and e["commit"] != commit
            and _recorded(e)
        ]
        if not before:
            continue
        previous = max(before, key=lambda e: str(e.get("speed-recorded", "")))
        found = worst(_recorded(previous), figures(report, repo))
        if found is None or found.ratio < THRESHOLD:
            continue
        lines.append(
            f"{repo} {label(refs.get((repo, commit), ''), commit)} is {found.ratio:.2f}x slower than "
            f"{label(str(previous.get('ref', '')), previous['commit'])} on {report.device}, recorded "
            f"{previous.get('speed-recorded') or 'at an unknown date'} ({found.what}, {found.detail})"
        )
    return lines
