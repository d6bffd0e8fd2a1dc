"""What `kernlock check` found (its rows and report) and ``kernels.check.toml``, where `--record` keeps it, per locked
build and machine (docs/check.md).

Its own file beside the lock (the lock stays machine-independent). One ``[[check]]`` table per (repo, commit,
variant, environment, device): a new result for the same key replaces the old one, every other entry is kept, so
a team sees which environments were checked on which hardware. Entries are sorted: the same results give the same
bytes. A file that does not read as such tables is refused with its name, never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernlock.lock import checkfile
from kernlock.lock.checkfile import FILE_NAME, read

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "commit": self.commit,
            "variant": self.variant,
            "case": self.case,
            "max-abs-error": self.error,
            "tolerance": self.tolerance,
            "result": self.verdict,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """Every row, this machine's environment and device, and where the results were recorded (if they were)."""

    environment: str
    device: str
    rows: tuple[CheckRow, ...]
    recorded: Path | None = None

    @property
    def ok(self) -> bool:
        return not any(row.verdict == "FAIL" for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "device": self.device,
            "ok": self.ok,
            "rows": [row.as_dict() for row in self.rows],
            "recorded": str(self.recorded) if self.recorded else None,
        }


def write(folder: Path, report: CheckReport) -> Path:
    """Merge ``report`` into ``folder/kernels.check.toml`` (atomically); returns its path."""
    from kernlock._version import __version__

    path = folder / FILE_NAME
    entries = {checkfile.key_of(e): e for e in read(path)}
    by_build: dict[tuple[str, str, str], list[Any]] = {}
    for row in report.rows:
        by_build.setdefault((row.kernel, row.commit, row.variant), []).append(row)
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
        entry = {
            "repo": repo,
            "commit": commit,
            "variant": variant,
            "environment": report.environment,
            "device": report.device,
            "result": "FAIL" if failed else "pass" if checked else "not checked",
            "kernlock": __version__,
            "cases": cases,
        }
        entries[checkfile.key_of(entry)] = entry
    return checkfile.write(path, list(entries.values()))
