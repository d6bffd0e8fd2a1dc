"""Draw docs/benchmarks.md's charts as small SVG files from the benchmarks' ``--json`` output.

    python benchmarks/chart.py local.json [--out docs/benchmarks-local.svg]
    python benchmarks/chart.py real_size.json --out docs/benchmarks-real-size.svg

The kind of chart follows the JSON: ``benchmarks/local.py --json`` gives each command's median wall time as a ratio
to ``python -c "import click"``, with the goal that covers it; ``benchmarks/real_size.py --json`` gives kernlock's
sync against its floor (curl + sha256sum). Both are horizontal bars against a line at 1.0x (the floor) and a tick
at each bar's goal. The SVG is written by hand (no plotting library): a few kilobytes that diff as text.
"""

from __future__ import annotations

import argparse
import json
import sys
from html import escape
from pathlib import Path
from typing import Any

#: Layout, in SVG user units (pixels at 100 %).
LABEL_WIDTH, BAR_WIDTH, ROW, TOP, RIGHT = 250, 360, 26, 40, 90
BAR, OVER, FLOOR, GOAL, TEXT = "#4c78a8", "#e45756", "#555555", "#f58518", "#222222"


class Bar:
    """One row of a chart: a label, a ratio and the goal it is held to (None: none)."""

    def __init__(self, label: str, ratio: float, goal: float | None) -> None:
        self.label, self.ratio, self.goal = label, ratio, goal


def local_bars(data: dict[str, Any]) -> tuple[str, list[Bar]]:
    """``local.py --json``: every kernlock command's wall-time ratio to ``import click``, with its goal."""
    goals: dict[str, float] = {}
    for goal in data["goals"]:
        for command in goal["commands"]:
            goals[command] = goal["limit"]
    bars = [
        Bar(name.removeprefix("kernlock "), row["vs_click"], goals.get(name))
        for name, row in data["rows"].items()
        if name.startswith("kernlock ")
    ]
    title = f'Local commands, median wall time vs python -c "import click" ({data["runs"]} runs)'
    return title, bars


def real_size_bars(data: dict[str, Any]) -> tuple[str, list[Bar]]:
    """``real_size.py --json``: kernlock's cold sync against curl + sha256sum of the same bytes (goal 1.0x)."""
    bars = [Bar(name, row["ratio"], 1.0) for name, row in data["rows"].items()]
    return "Cold sync of real build sizes vs curl + sha256sum", bars


def svg(title: str, bars: list[Bar]) -> str:
    """The chart: one bar per row, a dashed line at 1.0x, a goal tick per bar; bars over their goal in red."""
    top = max([2.0, *(b.ratio for b in bars), *(b.goal or 0 for b in bars)]) * 1.1
    scale = BAR_WIDTH / top
    width, height = LABEL_WIDTH + BAR_WIDTH + RIGHT, TOP + ROW * len(bars) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="22" font-weight="bold" fill="{TEXT}">{escape(title)}</text>',
    ]
    for i, bar in enumerate(bars):
        y = TOP + i * ROW
        length = bar.ratio * scale
        colour = OVER if bar.goal is not None and bar.ratio > bar.goal else BAR
        out += [
            f'<text x="{LABEL_WIDTH - 8}" y="{y + 15}" text-anchor="end" fill="{TEXT}">{escape(bar.label)}</text>',
            f'<rect x="{LABEL_WIDTH}" y="{y + 3}" width="{length:.1f}" height="{ROW - 8}" fill="{colour}"/>',
            f'<text x="{LABEL_WIDTH + length + 6:.1f}" y="{y + 15}" fill="{TEXT}">{bar.ratio:.2f}x</text>',
        ]
        if bar.goal is not None:
            x = LABEL_WIDTH + bar.goal * scale
            tick = f'x1="{x:.1f}" y1="{y + 1}" x2="{x:.1f}" y2="{y + ROW - 3}"'
            out.append(f'<line {tick} stroke="{GOAL}" stroke-width="3"/>')
    x, bottom = LABEL_WIDTH + scale, TOP + ROW * len(bars)
    out += [
        f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="{FLOOR}" stroke-dasharray="4 3"/>',
        f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" fill="{FLOOR}">1.0x (floor)</text>',
        f'<rect x="{LABEL_WIDTH + BAR_WIDTH - 40}" y="{bottom + 7}" width="4" height="12" fill="{GOAL}"/>',
        f'<text x="{LABEL_WIDTH + BAR_WIDTH - 30}" y="{bottom + 16}" fill="{TEXT}">goal</text>',
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("figures", type=Path, help="a benchmark's --json output")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks-local.svg"), help="the SVG to write")
    args = parser.parse_args()
    data = json.loads(args.figures.read_text())
    title, bars = local_bars(data) if "goals" in data else real_size_bars(data)
    args.out.write_text(svg(title, bars))
    print(f"wrote {args.out} ({len(bars)} bars)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
