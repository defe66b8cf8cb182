"""npukit's general multi-core simulator on the ``tpu_v4`` preset (``sim/archs/tpu_v4.toml``: 8 MXU cores, the CMEM,
the HBM pool) as a predictor of measured TPU v4 matmul times, beside the dedicated mechanism of ``npukit.sim.tpu``.

Each shape is one GEMM, ``simulate_multicore`` under ``none/split`` (its split over the eight MXUs searched under the
chip's latency objective); the simulator knows nothing of XLA's launch cost or of how far the fusion falls short of
its cycles, so two parameters are calibrated on measurements, as for the baseline line: t = t0 + scale x simulated
time (least squares on the relative error)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

Shape = tuple[int, int, int]
Row = tuple[str, Shape, float]
Predictor = Callable[[Shape], float]
PRESET = "tpu_v4"


def simulated_us(shapes: Iterable[Shape]) -> dict[Shape, float]:
    """The simulator's latency of each shape on the preset, in µs (uncalibrated)."""
    from npukit.sim.multicore import load_multicore_arch
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.sim.workload import gemm

    chip = load_multicore_arch(PRESET)
    return {s: simulate_multicore(gemm(*s), chip, "none/split").latency_s * 1e6 for s in dict.fromkeys(shapes)}


def fit_simulator(rows: Sequence[Row], sim: dict[Shape, float]) -> tuple[Predictor, tuple[float, float]]:
    """(predictor, (t0 µs, scale)) of t = t0 + scale x ``sim[shape]`` fitted on ``rows``; ``sim`` must hold every
    shape the predictor is asked for."""
    import numpy as np

    y = np.array([r[2] for r in rows])
    x = np.c_[np.ones(len(rows)), [sim[r[1]] for r in rows]]
    t0, scale = np.linalg.lstsq(x / y[:, None], np.ones(len(rows)), rcond=None)[0]
    return (lambda s: float(t0 + scale * sim[s])), (float(t0), float(scale))
