"""What XLA itself did on 100 larger profiled TPU v4 matmuls (``tpu_matmul_profiles.csv``, its README gives the
source): each row carries, beside the measured time, the XLA backend config of the one fusion that computes it
(megacore split dimension, emitter, window loop bounds, XLA's own cycle estimate, scoped vector memory).

These columns are compile-time facts read from the profiles, not fitted: the benchmark prints what they say about
XLA's schedule (which dimension the two TensorCores split, how fast each split runs, how many window steps the loop
takes) and how far any smooth function of the shape can follow the times, as an in-sample ceiling."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import numpy as np

from npukit.benchmarks._tpu_sim import fit_simulator
from npukit.sim import ConfigError
from npukit.sim.textfile import check_file, read_text
from npukit.sim.tpu import TPU_V4

PROFILED = Path(__file__).resolve().parent / "data" / "tpu_matmul" / "tpu_matmul_profiles.csv"


@dataclass(frozen=True)
class Schedule:
    """One profiled matmul: ``(m, n, k)``, measured µs, and XLA's choices for it (``split``: the megacore split
    dimension of the output, 0 = M, 1 = N; ``steps``: the window loop's iterations, the product of its bounds;
    ``estimated_cycles``: XLA's cost-model estimate, TPU cycles)."""

    shape: tuple[int, int, int]
    us: float
    split: int
    emitter: str
    steps: int
    estimated_cycles: int


def read_schedules(path: Path = PROFILED) -> list[Schedule]:
    """The profiled rows with their XLA columns (a shipped file: a malformed one is a packaging fault)."""
    text = read_text(check_file(path, "profiled TPU CSV", ConfigError, "reinstall npukit"), "profiled TPU CSV",
                     ConfigError)
    out = []
    for r in csv.DictReader(text.splitlines()):
        steps = math.prod(int(b) for b in r["iteration_bounds"].split("x"))
        out.append(Schedule((int(r["dim_m"]), int(r["dim_n"]), int(r["dim_k"])), float(r["fusion_avg"]),
                            int(r["megacore_split_dim"]), r["emitter"], steps, int(r["xla_estimated_cycles"])))
    return out


def peak_fraction(s: Schedule) -> float:
    """The fraction of the chip's bf16 peak the measured time reaches (padding not counted)."""
    m, n, k = s.shape
    return 2 * m * n * k / (s.us * 1e-6) / (TPU_V4.peak_tflops * 1e12)


def smooth_ceiling(rows: Sequence[Schedule]) -> tuple[float, float]:
    """(R^2, MAPE %) of the best in-sample fit of t = t0 + FLOPs / rate (least squares on the relative error):
    what a two-parameter smooth function of the shape can reach on ``rows`` at best."""
    flops = {s.shape: 2.0 * math.prod(s.shape) for s in rows}
    fitted, _ = fit_simulator([("", s.shape, s.us) for s in rows], flops)  # t0 + scale x FLOPs, as the simulator's
    y = np.array([s.us for s in rows])
    pred = np.array([fitted(s.shape) for s in rows])
    r2 = 1.0 - float(((pred - y) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    return r2, 100.0 * float(np.mean(np.abs(pred - y) / y))


def schedule_lines(rows: Sequence[Schedule]) -> list[str]:
    """What the profiles say about XLA's schedule, as printed lines."""
    larger = sum(s.split == (1 if s.shape[1] > s.shape[0] else 0) for s in rows)
    by_split = {d: [peak_fraction(s) for s in rows if s.split == d] for d in (0, 1)}
    cube = [s for s in rows if s.shape == (1024, 1024, 1024)]
    steps = sorted(s.steps for s in rows)
    r2, mape = smooth_ceiling(rows)
    lines = [f"the two TensorCores split the larger of M and N on {larger} of {len(rows)} shapes; median fraction "
             f"of the bf16 peak reached: {median(by_split[0]):.2f} when they split M ({len(by_split[0])} shapes), "
             f"{median(by_split[1]):.2f} when they split N ({len(by_split[1])})" if all(by_split.values()) else
             f"the two TensorCores split the larger of M and N on {larger} of {len(rows)} shapes",
             f"XLA's window loop takes {steps[0]} to {steps[-1]} steps per matmul, {len({s.emitter for s in rows})} "
             f"emitters" + (f"; 1024^3 is {cube[0].steps} steps" if cube else ""),
             f"in-sample ceiling of a smooth fit t0 + FLOPs / rate on these shapes: R^2 {r2:.3f}, MAPE {mape:.1f}%"]
    return lines
