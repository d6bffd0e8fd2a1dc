"""How `kernlock check --speed` measures (docs/check.md, "Honest measurement").

* CUDA: every timed call sits between two ``torch.cuda.Event``s and the end event is synchronized, so the time is
  the device's, not the launch's; CPU: ``time.perf_counter`` around the call.
* Warm-up first (kernel loading, autotuning, allocator growth happen there, not in the figures), then repeated
  timings: as many as fit in :data:`BUDGET_S` per path, never fewer than :data:`MIN_REPEATS` nor more than
  :data:`MAX_REPEATS`. The paths being compared are timed **interleaved** (kernel, reference, kernel, ...; the order
  rotates every round), so a load that comes and goes on the machine falls on all of them alike.
* The figure is the **median**, with the interquartile range as its spread; never a pass/fail by absolute time.
* Peak memory is ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, one separate call per path
  (inputs included, the same for every path); on the CPU it is not measured (None), never guessed.

The figures are shown as :func:`timing_text` and :func:`memory_text` write them, in the tables and the picture alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUDGET_S",
    "MAX_REPEATS",
    "MIN_REPEATS",
    "WARMUP",
    "Timing",
    "figure",
    "measure",
    "memory_text",
    "peak_memory",
    "read_peak",
    "reset_peak",
    "synchronize",
    "timing_text",
]

#: Warm-up calls of each path before any timing.
WARMUP = 3
#: Timed calls of each path: at least, at most, and the time they may take together (per path, seconds).
MIN_REPEATS = 7
MAX_REPEATS = 25
BUDGET_S = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """The median of ``repeats`` timings (milliseconds) and its interquartile range."""

    median: float
    q1: float
    q3: float
    repeats: int

    @classmethod
    def of(cls, samples: list[float]) -> Timing:
        ordered = sorted(samples)
        if len(ordered) >= 2:
            q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        else:
            q1 = q3 = ordered[0]
        return cls(median=statistics.median(ordered), q1=q1, q3=q3, repeats=len(ordered))

    @property
    def spread(self) -> float:
        """The interquartile range, in milliseconds."""
        return self.q3 - self.q1

    def as_dict(self) -> dict[str, Any]:
        return {"median-ms": self.median, "iqr-ms": self.spread, "repeats": self.repeats}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timing:
        median, spread = float(data["median-ms"]), float(data.get("iqr-ms", 0.0))
        return cls(median=median, q1=median - spread / 2, q3=median + spread / 2, repeats=int(data.get("repeats", 0)))


def figure(value: float) -> str:
    """Three significant digits, never an exponent: ``0.412``, ``4.12``, ``41.2``, ``412`` (``4120``)."""
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def timing_text(timing: Timing | None) -> str:
    """``12.3 ms ±0.41``: the median and half the interquartile range; ``-`` when not timed."""
    if timing is None:
        return "-"
    return f"{figure(timing.median)} ms ±{figure(timing.spread / 2)}"


def memory_text(peak: int | None, timed: bool) -> str:
    """``1234 MiB`` of a timed path; ``not measured`` (the CPU) or ``-`` (not timed)."""
    if not timed:
        return "-"
    return "not measured" if peak is None else f"{figure(peak / 2**20)} MiB"


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _timed(fn: Callable[[], object], device: str) -> float:
    """One call of ``fn``, in milliseconds of the device."""
    if device == "cuda":
        import torch

        event: Any = torch.cuda.Event
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))
    begin = time.perf_counter()
    fn()
    return (time.perf_counter() - begin) * 1000.0


def measure(
    paths: dict[str, Callable[[], object]], device: str, *, warmup: int = WARMUP, repeats: int | None = None
) -> dict[str, Timing]:
    """Time every path, interleaved (see the module); ``repeats`` None: as many as the budget allows."""
    import gc

    names = list(paths)
    slowest = 0.0
    for _ in range(max(1, warmup)):
        for name in names:
            slowest = max(slowest, _timed(paths[name], device))
    if repeats is None:
        repeats = max(MIN_REPEATS, min(MAX_REPEATS, int(BUDGET_S * 1000.0 / max(slowest, 1e-3))))
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()  # a collection inside one timing would land on whichever path ran then
    try:
        for round_ in range(repeats):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(_timed(paths[name], device))
    finally:
        if enabled:
            gc.enable()
    return {name: Timing.of(values) for name, values in samples.items()}


def reset_peak(device: str) -> None:
    """Start a peak-memory count (CUDA; nothing on the CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def read_peak(device: str) -> int | None:
    """The peak since :func:`reset_peak`, in bytes; None on the CPU (not measured)."""
    if device != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def peak_memory(fn: Callable[[], object], device: str) -> int | None:
    """``torch.cuda.max_memory_allocated`` over one call of ``fn``, the counter reset first; None on the CPU."""
    reset_peak(device)
    if device == "cuda":
        fn()
    return read_peak(device)
