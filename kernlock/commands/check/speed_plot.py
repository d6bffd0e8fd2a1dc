"""`kernlock check --speed --plot FILE`: the training step as a picture (docs/check.md), the chart TRL's "Kernels
Hub" page ends with, for this lock, this model and this machine.

Two horizontal bar panels, time per training step (ms) and peak allocated memory (MiB; on the CPU the panel says
it was not measured), one bar per implementation (eager, sdpa, each locked kernel as ``repo@commit``), each
labelled with the very text the table prints (:func:`~kernlock.commands.check.timing.timing_text`,
:func:`~kernlock.commands.check.timing.memory_text`): the picture and the table cannot disagree. SVG text stays text
(``svg.fonttype`` none). matplotlib (``kernlock[plot]``) is imported here only, and only with ``--plot``; the file
is written atomically.
"""

from __future__ import annotations

import io
from pathlib import Path

from kernlock.commands.check.report import CheckReport
from kernlock.commands.check.timing import memory_text, timing_text
from kernlock.errors import ProjectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from kernlock.commands.check.speed import SpeedRow

__all__ = ["INSTALL", "SUFFIXES", "draw", "prepare"]

#: The formats --plot writes, by the file's suffix.
SUFFIXES = (".svg", ".png")
#: What installs matplotlib for kernlock.
INSTALL = "pip install 'kernlock[plot]'"
_COLOURS = {"eager": "#9e9e9e", "sdpa": "#4c72b0"}
_KERNEL_COLOURS = ("#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


def prepare(path: Path) -> None:
    """Refuse, before anything is timed, a file of another format, a missing folder, or a machine without
    matplotlib."""
    if path.suffix.lower() not in SUFFIXES:
        raise ProjectError(
            f"--plot {path} is not a .svg or .png file",
            why="the suffix chooses the format",
            fix="name a .svg or .png file",
        )
    if not path.parent.is_dir():
        raise ProjectError(f"--plot {path}: there is no folder {path.parent}", fix="create it or name another")
    try:
        import matplotlib
    except ImportError as err:
        raise ProjectError(f"--plot needs matplotlib, which is not installed here: {INSTALL}") from err
    matplotlib.use("Agg")


def draw(report: CheckReport, path: Path) -> Path:
    """Draw ``report``'s training step into ``path`` (atomically); returns ``path``."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from kernlock.util.atomic import write_bytes_atomic

    setup = report.training
    if setup is None:
        raise ProjectError("--plot draws the training step of --speed, and none ran", fix="add --speed")
    rows = [row for row in report.speed if row.case == setup.case]
    figure = Figure(figsize=(11, 1.6 + 0.45 * len(rows)), layout="constrained")
    step, memory = figure.subplots(1, 2, sharey=True)
    names = [row.label for row in rows]
    _panel(step, rows, [row.total.median if row.total else 0.0 for row in rows], [timing_text(r.total) for r in rows])
    step.set_yticks(range(len(rows)), names)
    step.invert_yaxis()
    step.set_xlabel("time per training step (ms): median, ± half the interquartile range")
    memory.set_xlabel("peak allocated memory (MiB)")
    if any(row.peak is not None for row in rows):
        peaks = [row.peak / 2**20 if row.peak is not None else 0.0 for row in rows]
        _panel(memory, rows, peaks, [memory_text(row.peak, row.total is not None) for row in rows])
    else:
        where = "CPU" if report.device == "cpu" else report.device
        memory.text(0.5, 0.5, f"{where}: not measured", transform=memory.transAxes, ha="center", va="center")
        memory.set_xticks([])
    memory.tick_params(left=False)
    figure.suptitle(
        f"Training step: {setup.model} ({setup.architecture}), batch {setup.batch}, seqlen {setup.seqlen}, "
        f"{setup.dtype}, {report.device}"
    )
    out = io.BytesIO()
    kind = path.suffix.lower().removeprefix(".")
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "kernlock"}):
        figure.savefig(out, format=kind, dpi=150, metadata={"Date": None} if kind == "svg" else None)
    write_bytes_atomic(path, out.getvalue())
    return path


def _panel(axes: Axes, rows: list[SpeedRow], values: list[float], labels: list[str]) -> None:
    """One bar per row, its label (the table's text) at its end; a row not timed says so."""
    kernels = iter(_KERNEL_COLOURS * len(rows))
    colours = [_COLOURS[row.path] if row.path in _COLOURS else next(kernels) for row in rows]
    bars = axes.barh(range(len(rows)), values, color=colours)
    shown = [text if row.total is not None else "not timed" for row, text in zip(rows, labels, strict=True)]
    axes.bar_label(bars, labels=shown, padding=4)
    axes.set_xlim(0, max(values, default=0.0) * 1.45 or 1.0)
    axes.spines[["top", "right"]].set_visible(False)
