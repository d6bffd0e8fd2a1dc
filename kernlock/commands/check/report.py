"""What `kernlock check` found (its rows and report) and ``kernels.check.toml``, where `--record` keeps it, per locked
build and machine (docs/check.md).

Its own file beside the lock (the lock stays machine-independent). One ``[[check]]`` table per (repo, commit,
variant, environment, device): a new result for the same key replaces the old one, every other entry is kept, so
a team sees which environments were checked on which hardware. Entries are sorted: the same results give the same
bytes. A file that does not read as such tables is refused with its name, never overwritten. `--speed` figures go
into the same table (``speed``, with the date they were taken, ``speed-recorded``; a kernel's training step with the
eager and sdpa rows it was compared with); a record without `--speed` keeps the figures already there for that key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernlock.lock import check_results
from kernlock.lock.check_results import FILE_NAME, read

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kernlock.commands.check.speed import SpeedRow
    from kernlock.commands.check.training_models import Setup

__all__ = ["FILE_NAME", "CheckReport", "CheckRow", "read", "write"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckRow:
    """One line of the table: a case of one locked build, or a kernel (or layer) not checked."""

    kernel: str
    commit: str
    variant: str
    case: str
    error: float | None
    tolerance: float | None
    verdict: str  # "pass", "FAIL" or "not checked"
    note: str = ""
    ref: str = ""  # the branch or tag the build was locked through

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "ref": self.ref,
            "commit": self.commit,
            "variant": self.variant,
            "case": self.case,
            "max-abs-error": self.error,
            "tolerance": self.tolerance,
            "result": self.verdict,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckRow:
        return cls(
            kernel=data["kernel"],
            ref=data.get("ref", ""),
            commit=data["commit"],
            variant=data["variant"],
            case=data["case"],
            error=data["max-abs-error"],
            tolerance=data["tolerance"],
            verdict=data["result"],
            note=data.get("note", ""),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """Every row, this machine's environment and device, and where the results were recorded (if they were)."""

    environment: str
    device: str
    rows: tuple[CheckRow, ...]
    recorded: Path | None = None
    speed: tuple[SpeedRow, ...] = ()  # `--speed`: every path of every speed case and of the training step
    regressions: tuple[str, ...] = ()  # `--speed`: slower than the recorded figures of the build it replaced
    training: Setup | None = None  # `--speed`: what the training step trained (model, batch, seqlen, dtype)
    plotted: Path | None = None  # `--plot`: the picture written

    @property
    def ok(self) -> bool:
        return not any(row.verdict == "FAIL" for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "device": self.device,
            "ok": self.ok,
            "rows": [row.as_dict() for row in self.rows],
            "speed": [row.as_dict() for row in self.speed],
            "regressions": list(self.regressions),
            "training": self.training.as_dict() if self.training else None,
            "recorded": str(self.recorded) if self.recorded else None,
            "plot": str(self.plotted) if self.plotted else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckReport:
        from kernlock.commands.check.speed import SpeedRow
        from kernlock.commands.check.training_models import Setup

        return cls(
            environment=data["environment"],
            device=data["device"],
            rows=tuple(CheckRow.from_dict(row) for row in data["rows"]),
            speed=tuple(SpeedRow.from_dict(row) for row in data.get("speed", [])),
            regressions=tuple(data.get("regressions", [])),
            training=Setup.from_dict(data["training"]) if data.get("training") else None,
        )


def write(folder: Path, report: CheckReport) -> Path:
    """Merge ``report`` into ``folder/kernels.check.toml`` (atomically); returns its path."""
    from kernlock._version import __version__

    path = folder / FILE_NAME
    entries = {check_results.key_of(e): e for e in read(path)}
    by_build: dict[tuple[str, str, str], list[Any]] = {}
    for row in report.rows:
        by_build.setdefault((row.kernel, row.commit, row.variant), []).append(row)
    timed: dict[tuple[str, str, str], list[SpeedRow]] = {}
    for speed_row in report.speed:
        timed.setdefault((speed_row.kernel, speed_row.commit, speed_row.variant), []).append(speed_row)
    shared = timed.pop(("", "", ""), [])  # the training step's eager and sdpa: kept with each kernel it timed
    for (repo, commit, variant), rows in by_build.items():
        cases = []
        for row in rows:
            case: dict[str, Any] = {"case": row.case, "result": row.verdict}
            if row.error is not None:
                case["max-abs-error"] = float(f"{row.error:.3e}")
            if row.tolerance is not None:
                case["tolerance"] = float(f"{row.tolerance:.3e}")
            cases.append(case)
        failed = any(row.verdict == "FAIL" for row in rows)
        checked = any(row.verdict == "pass" for row in rows)
        entry: dict[str, Any] = {
            "repo": repo,
            "commit": commit,
            "variant": variant,
            "environment": report.environment,
            "device": report.device,
            "result": "FAIL" if failed else "pass" if checked else "not checked",
            "kernlock": __version__,
        }
        if rows[0].ref:
            entry["ref"] = rows[0].ref
        entry["cases"] = cases
        key = check_results.key_of(entry)
        if (repo, commit, variant) in timed:
            own = timed[(repo, commit, variant)]
            beside = [row for row in shared if row.case in {mine.case for mine in own}]
            entry["speed-recorded"] = _today()
            entry["speed"] = [_figures(row) for row in [*own, *beside]]
        elif key in entries and "speed" in entries[key]:  # a record without --speed keeps the figures
            entry["speed-recorded"] = entries[key].get("speed-recorded", "")
            entry["speed"] = entries[key]["speed"]
        entries[key] = entry
    return check_results.write(path, list(entries.values()))


def _today() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).date().isoformat()


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def _figures(row: SpeedRow) -> dict[str, Any]:
    """One speed row as kernels.check.toml keeps it: milliseconds and MiB, four significant digits."""
    figures: dict[str, Any] = {"case": row.case, "path": row.path}
    name = "step" if row.training else "forward-backward"
    for label, timing in (("forward", row.forward), (name, row.total)):
        if timing is not None:
            figures[f"{label}-ms"] = _round(timing.median)
            figures[f"{label}-iqr-ms"] = _round(timing.spread)
    if row.total is not None:
        figures["repeats"] = row.total.repeats
    if row.peak is not None:
        figures["peak-mib"] = _round(row.peak / 2**20)
    if row.loss is not None:
        figures["loss"] = _round(row.loss)
    if row.note:
        figures["note"] = row.note
    return figures
