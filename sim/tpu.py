"""A TPU-like chip from public specifications and a by-mechanism predictor of its matmul times.

:data:`TPU_V4` describes one Cloud TPU v4 chip as JAX sees it (one device = one chip, its two
TensorCores driven together as a "megacore"). Sources (primary):

* Google Cloud, "TPU v4" (https://cloud.google.com/tpu/docs/v4): two TensorCores per chip, four
  matrix-multiply units (MXUs) per TensorCore, peak 275 TFLOP/s (bf16) per chip, 32 GiB HBM2 at
  1200 GB/s.
* Google Cloud, "TPU system architecture" (https://cloud.google.com/tpu/docs/system-architecture-tpu-vm):
  each MXU is a 128 x 128 systolic array of bf16 multipliers with fp32 accumulation.
* Jouppi et al., "TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning with Hardware
  Support for Embeddings", ISCA 2023: 1050 MHz clock, 128 MiB CMEM on chip. The clock also follows
  from the two numbers above: 275e12 / (8 MXUs * 128 * 128 * 2 FLOP) = 1.049 GHz.
* JAX, "TPU Hardware Reference" (https://docs.jax.dev/en/latest/pallas/tpu/hardware.html): 16 MiB of
  vector memory (VMEM) per v4 TensorCore.

The predictor (:func:`matmul_terms`, :func:`predict_us`) times one XLA matmul fusion
``(M x K) @ (K x N)`` as a loop over tiles of at most :data:`TILE` (rows per TensorCore, N, K): the first
tile runs on its own, the others stream behind it in a software pipeline::

    t = t0 + fill/drain + first tile's MXU time / eta_mxu + first tile's HBM bytes / (bandwidth * eta_hbm)
           + max(the other tiles' MXU time / STEADY_ETA_MXU, the other tiles' HBM bytes / (bandwidth * eta_hbm))

Every shipped shape (M, N, K <= 1024) is one tile, so there ``t`` is the sum of its terms, calibrated on them.

* MXU streaming: the weight-stationary array of :mod:`npukit.sim._mapping` (the MXU holds the RHS
  stationary and streams the LHS and results: Norrie and Patil, "Google's Training Chips Revealed:
  TPUv2 and TPUv3", Hot Chips 32, 2020) with double-buffered weights (our assumption: the measured
  times show no fill and drain per weight tile, see docs/tpu.md). Each fold streams its
  rows; K and N are padded to the 128-wide MXU, M to the 8-row sublane tile of the TPU layout
  (``T(8,128)``), and the folds are spread over all MXUs of the chip (XLA's megacore splits the
  output rows over the two TensorCores; each core spreads its weight tiles over its four MXUs).
  The array fills and drains once per call (R + R + C - 2 cycles, npukit's double-buffered ws
  formula), the rest of the folds stream back to back.
* HBM: within a tile every operand is read once and the output written once, at the dtype's width (the
  measured data are float16: 2 bytes); over the loop A is read once per column of tiles and B once per
  row of tiles (a tiled matmul's re-reads).
* The pipeline: beyond one tile, the loads of the next tile overlap the MXU work of this one, as in the
  blocked, pipelined matmul of JAX's "Pallas TPU: Matrix Multiplication" guide
  (https://docs.jax.dev/en/latest/pallas/tpu/matmul.html), whose blocks of 512 x 1024 x 1024 reach XLA's
  own matmul speed there; those blocks are :data:`TILE` (their double-buffered operands, float32
  accumulator and output fit the 16 MiB VMEM of a v4 TensorCore). In that steady state the MXUs run at
  :data:`STEADY_ETA_MXU`, the fraction of the bf16 peak XLA's matmul reaches on a 4096^3 bf16 matmul in the
  same guide (84.3%, measured on a TPU v5e, timed from Python: an estimate for v4 and float16, not a
  measurement of it). The shipped shapes are one tile each and cannot calibrate it.
* The three calibrated parameters (:class:`TpuFit`): ``t0_us`` (launch and fixed per-call overhead),
  ``eta_mxu`` (fraction of the bf16 MXU peak a one-tile matmul reaches: it folds in what the fusion
  does besides streaming, serialised within one tile) and ``eta_hbm`` (fraction of the HBM bandwidth
  reached). Within a tile the terms add: the data fit a sum better than a max (docs/tpu.md).

Everything here is plain arithmetic on shapes; :func:`fit` needs numpy. Bad input (a shape, chip or fit that
is not one, or a fit whose parameters are not physical) raises :class:`npukit.sim.ConfigError` with one line.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable
from dataclasses import dataclass

from ._mapping import n_folds, stationary_cycles
from .arch import Arch
from .bounded import short
from .errors import ConfigError

__all__ = ["TpuChip", "TPU_V4", "GENERATIONS", "TpuFit", "N_PARAMS", "TILE", "STEADY_ETA_MXU", "MAX_TPU_DIM",
           "matmul_terms", "first_tile_us", "predict_us", "fit"]

#: How many parameters :func:`fit` calibrates (t0_us, eta_mxu, eta_hbm).
N_PARAMS = 3

#: The largest tile of XLA's matmul loop: (rows per TensorCore, N, K), in elements. The blocks with which JAX's
#: "Pallas TPU: Matrix Multiplication" guide (docs.jax.dev/en/latest/pallas/tpu/matmul.html) matches XLA's
#: matmul speed (bm = 512, bn = 1024, bk = 1024); our assumption that XLA tiles the same way.
TILE = (512, 1024, 1024)

#: Fraction of the bf16 MXU peak the MXUs reach once the tile loop is pipelined. Not calibrated here: XLA's
#: matmul of 4096^3 bf16 runs at 84.3% of the chip's peak in the guide above (TPU v5e, timed from Python with
#: its dispatch, so a lower bound there); carried to v4 and float16 as an estimate.
STEADY_ETA_MXU = 0.843


#: The largest matmul dimension (M, N or K) the predictor takes, in elements: an int32 extent, far past any chip's
#: memory and small enough that every term stays a finite float. Not :data:`npukit.sim.MAX_DIM` (2**40, the
#: largest dimension of a workload layer): a TPU shape must pass this one.
MAX_TPU_DIM = 2**31 - 1
#: The same value under its former name, kept for existing callers; prefer :data:`MAX_TPU_DIM` (``npukit.sim.MAX_DIM``
#: is another, larger limit). Not exported by ``from npukit.sim.tpu import *``, so it never shadows that one.
MAX_DIM = MAX_TPU_DIM


def _count(owner: str, field: str, v: object, most: int = MAX_TPU_DIM) -> int:
    """``v`` as a Python int from 1 to ``most`` (numpy integers taken, bool refused); ConfigError otherwise."""
    try:
        n = operator.index(v) if not isinstance(v, bool) else None
    except TypeError:
        n = None
    if n is None or not 1 <= n <= most:
        raise ConfigError(f"{owner} {field} must be an integer from 1 to {most}, got {short(v)}")
    return n


def _as_float(v: object) -> float:
    """A real number (numpy's included, bool not) as a Python float; NaN for anything else or an int too large."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        return math.nan
    try:
        return float(v)
    except (OverflowError, ValueError, TypeError):
        return math.nan


def _real(owner: str, field: str, v: object, lo: float, hi: float = math.inf, lo_open: bool = True,
          hint: str = "") -> float:
    """``v`` as a finite Python float in (lo, hi] (or [lo, hi] when not ``lo_open``); bool refused; ConfigError."""
    x = _as_float(v)
    if not (math.isfinite(x) and (lo < x if lo_open else lo <= x) and x <= hi):
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]" if hi != math.inf else f"{'>' if lo_open else '>='} {lo:g}"
        raise ConfigError(f"{owner} {field} must be a finite number {span}, got {short(v)}{hint}")
    return x


@dataclass(frozen=True)
class TpuChip:
    """A TPU-like chip: ``cores`` TensorCores of ``mxus_per_core`` MXUs of ``mxu_rows`` x ``mxu_cols``
    PEs at ``clock_ghz`` GHz; ``hbm_gbps`` HBM bandwidth in GB/s (1e9 bytes/s); ``hbm_gib`` HBM
    capacity in GiB; ``cmem_mib`` shared on-chip memory in MiB; ``sublanes``: rows of the layout
    tile M is padded to; ``mxu_dtype``: what the MXU multiplies (its peak is for this type); ``vmem_mib``:
    vector memory per TensorCore in MiB (0 where not given), which must hold a pipelined :data:`TILE`."""

    name: str
    cores: int
    mxus_per_core: int
    mxu_rows: int
    mxu_cols: int
    clock_ghz: float
    hbm_gbps: float
    hbm_gib: float
    cmem_mib: float
    sublanes: int = 8
    mxu_dtype: str = "bf16"
    vmem_mib: float = 0.0

    def __post_init__(self) -> None:
        """Each count an integer from 1 to :data:`MAX_TPU_DIM`, the clock and HBM bandwidth finite and positive, the
        capacities finite and >= 0 (0: not given); ConfigError (one line) otherwise. Numbers are stored as Python
        ints and floats."""
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"TpuChip name must be a non-empty string, got {short(self.name)}")
        owner = f"TpuChip {short(self.name)}"
        if not isinstance(self.mxu_dtype, str):
            raise ConfigError(f"{owner} mxu_dtype must be a string, got {short(self.mxu_dtype)}")
        for f in ("cores", "mxus_per_core", "mxu_rows", "mxu_cols", "sublanes"):
            object.__setattr__(self, f, _count(owner, f, getattr(self, f)))
        for f in ("clock_ghz", "hbm_gbps"):
            object.__setattr__(self, f, _real(owner, f, getattr(self, f), 0.0))
        for f in ("hbm_gib", "cmem_mib", "vmem_mib"):
            object.__setattr__(self, f, _real(owner, f, getattr(self, f), 0.0, lo_open=False))

    @property
    def mxus(self) -> int:
        return self.cores * self.mxus_per_core

    @property
    def peak_tflops(self) -> float:
        """Peak dense TFLOP/s of the MXUs (2 FLOP per MAC)."""
        return 2 * self.mxus * self.mxu_rows * self.mxu_cols * self.clock_ghz / 1e3

    def mxu_arch(self) -> Arch:
        """One MXU as an npukit :class:`Arch`: a weight-stationary array with double-buffered weights."""
        return Arch(name=f"{self.name}-mxu", rows=self.mxu_rows, cols=self.mxu_cols, dataflow="ws",
                    timing="double-buffered", clock_ghz=self.clock_ghz)


#: Cloud TPU v4, one chip (sources in the module docstring).
TPU_V4 = TpuChip(name="tpu-v4", cores=2, mxus_per_core=4, mxu_rows=128, mxu_cols=128, clock_ghz=1.05,
                 hbm_gbps=1200.0, hbm_gib=32.0, cmem_mib=128.0, vmem_mib=16.0)

#: One JAX device of each Cloud TPU generation, for telling them apart from measurements (docs/tpu.md).
#: v2 and v3 expose each TensorCore as its own device (half the chip's HBM bandwidth); v4 one chip
#: (megacore); v5e and v6e have one TensorCore per chip. Clocks marked "derived" are peak / (MXU MACs * 2).
#: Sources: v2: Jouppi et al., "A Domain-Specific Supercomputer for Training Deep Neural Networks",
#: CACM 63(7), 2020 (one 128x128 MXU per core, 700 MHz, 700 GB/s HBM per chip of two cores); v3:
#: cloud.google.com/tpu/docs/v3 (two cores of two MXUs, 123 TFLOP/s and 900 GB/s per chip; 940 MHz
#: derived); v5e: cloud.google.com/tpu/docs/v5e (one core of four MXUs, 197 TFLOP/s, 819 GB/s; 1.5 GHz
#: derived); v6e: cloud.google.com/tpu/docs/v6e (one core of two 256x256 MXUs, 918 TFLOP/s, 1638 GB/s;
#: its "clock" 3.5 GHz is only what makes 2 MXUs reach that peak, not a published clock). ``hbm_gib`` and
#: ``cmem_mib`` are 0 where this table does not use them.
GENERATIONS: dict[str, TpuChip] = {
    "v2 (one core)": TpuChip("tpu-v2-core", 1, 1, 128, 128, 0.70, 350.0, 0, 0),
    "v3 (one core)": TpuChip("tpu-v3-core", 1, 2, 128, 128, 0.94, 450.0, 0, 0),
    "v4 (one chip)": TPU_V4,
    "v5e (one chip)": TpuChip("tpu-v5e", 1, 4, 128, 128, 1.50, 819.0, 0, 0),
    "v6e (one chip)": TpuChip("tpu-v6e", 1, 2, 256, 256, 3.50, 1638.0, 0, 0),
}


@dataclass(frozen=True)
class TpuFit:
    """The calibrated parameters: ``t0_us`` (µs, finite and >= 0), ``eta_mxu`` and ``eta_hbm`` (fractions of the
    MXU and HBM peaks, in (0, 1]: no part of a chip runs faster than its peak). Anything else raises ConfigError
    (one line); the fields are stored as Python floats."""

    t0_us: float
    eta_mxu: float
    eta_hbm: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "t0_us", _real("TpuFit", "t0_us", self.t0_us, 0.0, lo_open=False,
                                                hint=" (a fixed time in µs)"))
        for f in ("eta_mxu", "eta_hbm"):
            # 1 / eta must be finite too: a rate of 1e-320 of the peak is a time of inf
            v = _real("TpuFit", f, getattr(self, f), 0.0, 1.0, hint=" (a fraction of the peak)")
            if not math.isfinite(1.0 / v):
                raise ConfigError(f"TpuFit {f} must be a finite number (0, 1], got {v!r} (its inverse overflows)")
            object.__setattr__(self, f, v)


@dataclass(frozen=True)
class MatmulTerms:
    """The mechanism's times for one matmul, before calibration, in µs: ``fill_us`` (one array fill and
    drain), ``mxu_us`` (streaming all padded folds at the MXU peak), ``hbm_us`` (all bytes moved, re-reads
    included, at the HBM peak); ``first_mxu_us`` and ``first_hbm_us``: the part of those of the first tile
    of XLA's loop (all of them when the matmul is one tile); ``cycles``: npukit's double-buffered ws cycles
    of one MXU; ``folds``: its weight folds; ``tiles``: how many tiles of :data:`TILE` the loop runs."""

    fill_us: float
    mxu_us: float
    hbm_us: float
    cycles: int
    folds: int
    first_mxu_us: float
    first_hbm_us: float
    tiles: int

    @property
    def rest_mxu_us(self) -> float:
        """MXU streaming of the tiles after the first, at the peak (µs)."""
        return self.mxu_us - self.first_mxu_us

    @property
    def rest_hbm_us(self) -> float:
        """HBM time of the tiles after the first, at the peak (µs)."""
        return self.hbm_us - self.first_hbm_us


def _check_shape(m: int, n: int, k: int, dtype_bytes: float) -> tuple[int, int, int, float]:
    """(M, N, K) as Python ints from 1 to :data:`MAX_TPU_DIM` (numpy integers taken; bool, floats and strings
    refused) and ``dtype_bytes`` as a float in (0, 64] bytes (any real number but bool); ConfigError otherwise."""
    dims = tuple(_count("matmul", name, v) for name, v in (("M", m), ("N", n), ("K", k)))
    width = _as_float(dtype_bytes)
    if not 0 < width <= 64:
        raise ConfigError(f"dtype_bytes must be a number of bytes in (0, 64], got {short(dtype_bytes)}")
    return dims[0], dims[1], dims[2], width


def _stream_cycles(m_pad: int, n: int, k: int, chip: TpuChip) -> float:
    """Cycles one MXU streams for ``m_pad`` padded rows: each core's ceil(K/R) * ceil(N/C) weight tiles spread
    evenly over its MXUs (fractional folds per MXU kept as a mean), each streaming the core's rows once."""
    return n_folds(k, chip.mxu_rows) * n_folds(n, chip.mxu_cols) / chip.mxus_per_core * (m_pad / chip.cores)


def matmul_terms(m: int, n: int, k: int, chip: TpuChip = TPU_V4, dtype_bytes: float = 2.0) -> MatmulTerms:
    """Mechanism terms of ``(m x k) @ (k x n)`` on ``chip`` (operands and output ``dtype_bytes`` wide).

    Rows (M) are padded to ``chip.sublanes`` and split over the cores; each core's weight tiles
    (ceil(K/R) * ceil(N/C)) are spread evenly over its MXUs, each streaming the core's rows once per
    tile. The cycles are :func:`npukit.sim._mapping.stationary_cycles` (double-buffered ws, one fill and
    drain per MXU): R + (R + C - 2) + folds * rows cycles (a count), with fractional folds per MXU kept as a mean.
    The loop over tiles of :data:`TILE` reads A once per column of tiles and B once per row of tiles; the
    first tile (the whole matmul when it fits one) is reported apart.
    """
    if not isinstance(chip, TpuChip):
        raise ConfigError(f"chip must be a TpuChip, got {type(chip).__name__}")
    m, n, k, dtype_bytes = _check_shape(m, n, k, dtype_bytes)
    arch = chip.mxu_arch()
    m_pad = n_folds(m, chip.sublanes) * chip.sublanes
    tile_rows, tile_n, tile_k = chip.cores * TILE[0], TILE[1], TILE[2]
    rows_t, cols_t, deep_t = n_folds(m_pad, tile_rows), n_folds(n, tile_n), n_folds(k, tile_k)
    m1, n1, k1 = min(m, tile_rows), min(n, tile_n), min(k, tile_k)
    # stationary_cycles with one fill/drain group: r + (r + c - 2) + folds * rows
    fill = stationary_cycles(0, 0, 1, arch, groups=1)  # = r + (r + c - 2): the exposed fill and drain
    stream = _stream_cycles(m_pad, n, k, chip)
    first = _stream_cycles(min(m_pad, tile_rows), n1, k1, chip)
    cyc_per_us = chip.clock_ghz * 1e3
    byte_us = dtype_bytes / (chip.hbm_gbps * 1e3)
    times = (fill / cyc_per_us, stream / cyc_per_us, (m * k * cols_t + k * n * rows_t + m * n) * byte_us,
             first / cyc_per_us, (m1 * k1 + k1 * n1 + m1 * n1) * byte_us)
    if not all(math.isfinite(v) for v in (*times, fill + stream)):
        raise ConfigError(f"the terms of {m}x{n}x{k} on {chip.name} overflow a float (clock {chip.clock_ghz:g} GHz, "
                          f"HBM {chip.hbm_gbps:g} GB/s); use a chip with realistic rates")
    return MatmulTerms(fill_us=times[0], mxu_us=times[1], hbm_us=times[2], cycles=round(fill + stream),
                       folds=n_folds(k, arch.rows) * n_folds(n, arch.cols), first_mxu_us=times[3],
                       first_hbm_us=times[4], tiles=rows_t * cols_t * deep_t)


def first_tile_us(t: MatmulTerms, params: TpuFit) -> float:
    """The first tile's share of :func:`predict_us` (the whole prediction when the matmul is one tile), in µs:
    t0, the fill and drain, and the first tile's MXU and HBM times at the calibrated rates, added."""
    _check_fit(params)
    return _finite_us(_first_us(t, params.t0_us, 1.0 / params.eta_mxu, 1.0 / params.eta_hbm), "the first tile")


def _check_fit(params: object) -> None:
    if not isinstance(params, TpuFit):
        raise ConfigError(f"params must be a TpuFit, got {type(params).__name__}")


def _finite_us(t: float, what: str) -> float:
    if not (math.isfinite(t) and t > 0):
        raise ConfigError(f"the predicted time of {what} is not a finite, positive number of µs ({t!r}); "
                          "check the chip's rates and the fit")
    return t


def _first_us(t: MatmulTerms, t0_us: float, inv_mxu: float, inv_hbm: float) -> float:
    return t0_us + t.fill_us + t.first_mxu_us * inv_mxu + t.first_hbm_us * inv_hbm


def _time_us(t: MatmulTerms, t0_us: float, inv_mxu: float, inv_hbm: float) -> float:
    return _first_us(t, t0_us, inv_mxu, inv_hbm) + max(t.rest_mxu_us / STEADY_ETA_MXU, t.rest_hbm_us * inv_hbm)


def predict_us(params: TpuFit, m: int, n: int, k: int, chip: TpuChip = TPU_V4, dtype_bytes: float = 2.0) -> float:
    """Predicted device time of one matmul fusion ``(m x k) @ (k x n)`` with operands ``dtype_bytes`` bytes wide, in
    µs: finite and positive, or ConfigError (one line) for a shape, chip or fit that is not one."""
    _check_fit(params)
    return _finite_us(_time_us(matmul_terms(m, n, k, chip, dtype_bytes), params.t0_us, 1.0 / params.eta_mxu,
                               1.0 / params.eta_hbm), f"{m}x{n}x{k}")


#: Round-off a fit may show on exact data: a t0 this far below 0 µs, or an eta this far above 1, is read as 0 or 1.
FIT_ROUNDOFF = 1e-9


def fit(shapes: Iterable[tuple[int, int, int]], times_us: Iterable[float], chip: TpuChip = TPU_V4,
        dtype_bytes: float = 2.0) -> TpuFit:
    """Calibrate the :data:`N_PARAMS` parameters on measured times (µs) by least squares on the
    relative error (every shape counts alike, 1 µs or 40 µs). On one-tile shapes the model is linear in
    (t0, 1/eta_mxu, 1/eta_hbm): one weighted linear solve. Shapes of several tiles add a max of two terms, and
    which term a shape takes depends on 1/eta_hbm alone: the fit solves each interval of 1/eta_hbm between those
    switch points (and each switch point) and keeps the least squared error, the exact least-squares optimum.

    ConfigError (one line) when the input is not shapes (M, N, K) with one finite, positive time each (at least
    :data:`N_PARAMS`), when the shapes do not determine the three parameters (e.g. one shape repeated), or when
    the best fit is not physical: t0 < 0 µs, or eta_mxu or eta_hbm outside (0, 1] (faster than the peak) or not
    finite. (Within :data:`FIT_ROUNDOFF` of a bound, the bound is returned.)"""
    import numpy as np

    try:
        if isinstance(shapes, str | bytes) or isinstance(times_us, str | bytes):
            raise TypeError
        shape_list = [tuple(s) for s in shapes]
        y = np.asarray(list(times_us), dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError("fit needs a sequence of (M, N, K) shapes and a sequence of times in µs, one number per "
                          "shape") from None
    if y.ndim != 1 or len(shape_list) != len(y) or len(shape_list) < N_PARAMS:
        raise ConfigError(f"fit needs at least {N_PARAMS} shapes with one time each, got {len(shape_list)} shapes "
                          f"and {y.size} times")
    bad = next((s for s in shape_list if len(s) != 3), None)
    if bad is not None:
        raise ConfigError(f"fit: each shape is (M, N, K), got {short(bad)}")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ConfigError("fit needs finite, positive times")
    terms = [matmul_terms(m, n, k, chip, dtype_bytes) for m, n, k in shape_list]
    fill, fm, fh, rm, rh = (np.array([getattr(t, a) for t in terms]) for a in
                            ("fill_us", "first_mxu_us", "first_hbm_us", "rest_mxu_us", "rest_hbm_us"))
    w = 1.0 / y
    rest_mxu = rm / STEADY_ETA_MXU  # the later tiles' MXU time; their HBM time is rh * (1 / eta_hbm)
    multi = np.array([t.tiles > 1 for t in terms])
    # a multi-tile shape is MXU-bound while 1/eta_hbm < its switch point rest_mxu / rh
    with np.errstate(divide="ignore"):
        switch = np.where(multi & (rh > 0), rest_mxu / np.where(rh > 0, rh, 1.0), np.inf)

    def loss(c: np.ndarray) -> float:
        pred = c[0] + fill + fm * c[1] + fh * c[2] + np.maximum(rest_mxu, rh * c[2])
        return float(np.sum(((pred - y) * w) ** 2))

    def piece(below: float) -> tuple[np.ndarray, bool]:
        """The linear solve with the shapes whose switch point lies above ``below`` on the MXU side."""
        side = multi & (switch > below)
        x = np.column_stack([np.ones(len(y)), fm, fh + np.where(side, 0.0, rh)])
        rhs = y - (fill + np.where(side, rest_mxu, 0.0))
        coef, _, rank, _ = np.linalg.lstsq(x * w[:, None], rhs * w, rcond=None)
        return coef, rank == N_PARAMS

    def edge(inv_hbm: float) -> tuple[np.ndarray, bool]:
        """The best fit with 1/eta_hbm fixed at a switch point (both sides agree there)."""
        x = np.column_stack([np.ones(len(y)), fm])
        rhs = y - (fill + fh * inv_hbm + np.maximum(rest_mxu, rh * inv_hbm))
        coef, _, rank, _ = np.linalg.lstsq(x * w[:, None], rhs * w, rcond=None)
        return np.array([coef[0], coef[1], inv_hbm]), rank == N_PARAMS - 1

    points = np.unique(switch[np.isfinite(switch)])
    cands = [piece(-np.inf)] + [piece(p) for p in points] + [edge(p) for p in points]
    coef, full_rank = cands[0] if len(cands) == 1 else min(cands, key=lambda c: loss(c[0]))
    if not full_rank:
        raise ConfigError("fit: the shapes do not determine the three parameters (their terms are proportional: "
                          "e.g. one shape repeated, or only shapes of several tiles, whose first tiles are all "
                          "alike); add one-tile shapes (M, N, K <= 1024) that vary M, N and K")
    t0, inv_mxu, inv_hbm = (float(v) for v in coef)
    if -FIT_ROUNDOFF <= t0 < 0:
        t0 = 0.0
    inv_mxu, inv_hbm = (1.0 if 1 - FIT_ROUNDOFF <= v < 1 else v for v in (inv_mxu, inv_hbm))
    with np.errstate(all="ignore"):
        eta_mxu, eta_hbm = (1.0 / v if v != 0 else math.inf for v in (inv_mxu, inv_hbm))
    if not (math.isfinite(t0) and t0 >= 0 and 0 < eta_mxu <= 1 and 0 < eta_hbm <= 1 and inv_mxu < math.inf
            and inv_hbm < math.inf):
        raise ConfigError(f"fit gave t0 = {t0:.4g} µs, eta_mxu = {eta_mxu:.4g}, eta_hbm = {eta_hbm:.4g}: not "
                          "physical (t0 >= 0 µs, each eta in (0, 1], no faster than the peak), so the times do not "
                          "follow the model on these shapes; fit on more shapes, small and large (e.g. the shipped "
                          "ones)")
    return TpuFit(t0_us=t0, eta_mxu=eta_mxu, eta_hbm=eta_hbm)
