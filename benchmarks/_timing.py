"""Repeated timings and their spread, shared by every benchmark (``npukit bench NAME``).

A measurement is ``repeats`` timed samples after ``warmup`` untimed calls; each sample times a block of calls
long enough (``min_block_s``) that the timer's resolution and one-off scheduler hiccups do not dominate short
kernels (the idea of ``torch.utils.benchmark.Timer.blocked_autorange``), and reports its per-call time. The
summary is min / median / max over the samples; their ratio max/min is the *spread*. A spread above
:data:`WIDE_SPREAD` (2x) is too wide to read a single number from: the benchmark prints a warning line and
marks the row (column ``spread_flag``) instead of quoting the median alone.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: max/min over the repeats above which a measurement is flagged as too noisy to read.
WIDE_SPREAD = 2.0


@dataclass(frozen=True)
class Spread:
    """Summary of ``n`` repeated samples (any unit; times are seconds unless a caller says otherwise)."""

    n: int
    min: float
    median: float
    max: float

    @property
    def ratio(self) -> float:
        """max / min (1.0 for identical samples; inf when min is 0 and max is not)."""
        if self.max == self.min:
            return 1.0
        return self.max / self.min if self.min > 0 else float("inf")

    @property
    def wide(self) -> bool:
        """True when the spread exceeds :data:`WIDE_SPREAD`."""
        return self.ratio > WIDE_SPREAD

    def columns(self, prefix: str = "", scale: float = 1.0) -> dict[str, Any]:
        """CSV/table cells: ``{prefix}min, median, max`` (times ``scale``), ``n``, ``spread`` and ``spread_flag``."""
        return {f"{prefix}min": self.min * scale, f"{prefix}median": self.median * scale,
                f"{prefix}max": self.max * scale, f"{prefix}n": self.n, f"{prefix}spread": round(self.ratio, 3),
                f"{prefix}spread_flag": "WIDE" if self.wide else ""}


def spread(samples: Sequence[float]) -> Spread:
    """The :class:`Spread` of ``samples`` (at least one)."""
    if not samples:
        raise ValueError("spread() needs at least one sample")
    vals = [float(s) for s in samples]
    return Spread(n=len(vals), min=min(vals), median=statistics.median(vals), max=max(vals))


def measure(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1, min_block_s: float = 0.05) -> Spread:
    """Per-call wall time of ``fn`` in seconds over ``repeats`` samples after ``warmup`` untimed calls.

    Each sample runs ``fn`` as many times as fill ``min_block_s`` (calibrated on the last warm-up call) and
    divides. Warm-up calls (JIT compiles, caches, allocator growth) are never samples."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    first = 0.0
    for _ in range(max(1, warmup)):
        t0 = time.perf_counter()
        fn()
        first = time.perf_counter() - t0
    block = 1 if first >= min_block_s else max(1, int(min_block_s / max(first, 1e-7)))
    samples: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(block):
            fn()
        samples.append((time.perf_counter() - t0) / block)
    return spread(samples)


def ratio_interval(num: Spread, den: Spread) -> tuple[float, float, float]:
    """(median ratio, lowest, highest) of ``num / den``: median/median and the extremes min/max, max/min."""
    lo = num.min / den.max if den.max > 0 else float("nan")
    hi = num.max / den.min if den.min > 0 else float("inf")
    return num.median / den.median if den.median > 0 else float("nan"), lo, hi


def wide_warnings(rows: Sequence[dict[str, Any]], label: Callable[[dict[str, Any]], str],
                  prefix: str = "") -> list[str]:
    """One ``warning:`` line per row whose ``{prefix}spread_flag`` is set (the spread and what to do)."""
    return [f"warning: {label(r)}: spread max/min {r[prefix + 'spread']:.1f}x over {r[prefix + 'n']} repeats "
            f"(> {WIDE_SPREAD:g}x): too noisy to read; rerun on an idle machine or with more repeats"
            for r in rows if r.get(prefix + "spread_flag")]
