"""Seeded GEMM test cases for the RTL: random ints, edge values, overflow stress and quantized psums.

Sizes are chosen per array so every case has several folds, the last ones partial (padding rows
and columns are exercised), while keeping Icarus runs short.
"""

from __future__ import annotations

import numpy as np

from ._config import RtlConfig
from ._runner import GemmCase


def default_dims(cfg: RtlConfig) -> tuple[int, int, int]:
    """(M, N, K) with 2 spatial-row folds and 2 column folds, both last folds partial, short stream."""
    r, c = cfg.rows, cfg.cols
    n = c + max(1, c // 2)
    if cfg.dataflow == "ws":
        return min(6, 2 * r + 1), n, r + max(1, r // 2)
    return r + max(1, r // 2), n, min(6, 2 * c + 1)


def _edge(rng: np.random.Generator, shape: tuple[int, int], bits: int) -> np.ndarray:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return rng.choice(np.array([lo, hi, lo + 1, hi - 1, -1, 0, 1], dtype=np.int64), size=shape,
                      p=[0.35, 0.35, 0.05, 0.05, 0.1, 0.05, 0.05])


def standard_cases(cfg: RtlConfig, seed: int, dims: tuple[int, int, int] | None = None) -> list[GemmCase]:
    """The suite for one build: random, edge values (+-max products, P-bit overflow when P is small),
    same-sign extremes (overflow in every PE chain) and a quantized case (random multiplier/shift)."""
    m, n, k = dims or default_dims(cfg)
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (cfg.data_bits - 1)), (1 << (cfg.data_bits - 1)) - 1
    cases = [GemmCase("random", rng.integers(lo, hi + 1, (m, k)), rng.integers(lo, hi + 1, (k, n)), None, seed)]
    cases.append(GemmCase("edges", _edge(rng, (m, k), cfg.data_bits), _edge(rng, (k, n), cfg.data_bits), None, seed))
    # every output a same-sign sum of +-2^(2D-2)-sized products: overflows P bits for small P
    a_ext = np.where((np.arange(m) < (m + 1) // 2)[:, None], lo, hi) * np.ones((m, k), np.int64)
    b_ext = np.where((rng.random(n) < 0.5)[None, :], lo, hi) * np.ones((k, n), np.int64)
    cases.append(GemmCase("extremes", a_ext, b_ext, None, seed))
    mult_lo, mult_hi = -(1 << (cfg.mult_bits - 1)), (1 << (cfg.mult_bits - 1)) - 1
    mult = int(rng.integers(mult_lo, mult_hi + 1))
    shift = int(rng.integers(0, 24))
    cases.append(GemmCase("quant", rng.integers(lo, hi + 1, (m, k)), rng.integers(lo, hi + 1, (k, n)), (mult, shift), seed))
    return cases
