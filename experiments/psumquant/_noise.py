"""The noise of every verdict of the PsumQuant experiment: paired bootstrap intervals over the
evaluated examples (test images, sentences, held-out windows).

A difference between two policies is measured on the same examples, so the interval resamples the
examples (with replacement) and recomputes the statistic on both policies' per-example values together
(a paired bootstrap; Efron & Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13, percentile
interval). ``RESAMPLES`` resamples with a fixed seed, so a run is reproducible. The interval says how
much the number would move on another draw of the same number of examples; it does not cover the
training seed of the model (one trained model per family).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

RESAMPLES = 1000
LEVEL = 0.95


def bootstrap_interval(values: list[torch.Tensor], stat: Callable[..., torch.Tensor],
                       resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0) -> tuple[float, float]:
    """The ``level`` percentile interval of ``stat(*values_resampled)`` over ``resamples`` paired
    resamples of the examples (dimension 0 of every tensor in ``values``, all the same length);
    ``stat`` maps tensors [resamples, n] (one resample a row) to [resamples]. (nan, nan) for no examples."""
    n = len(values[0])
    if n == 0:
        return math.nan, math.nan
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (resamples, n), generator=gen)
    dist = stat(*[v.double()[idx] for v in values])
    lo, hi = torch.quantile(dist, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)).tolist()
    return float(lo), float(hi)


def mean_diff_interval(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Interval of mean(a) - mean(b) for per-example values measured on the same examples
    (e.g. 0/1 correctness of two policies: a top-1 difference in [-1, 1])."""
    return bootstrap_interval([a, b], lambda x, y: x.mean(1) - y.mean(1))


def mean_interval(a: torch.Tensor) -> tuple[float, float]:
    """Interval of mean(a) over the examples (e.g. the per-sentence embedding cosine)."""
    return bootstrap_interval([a], lambda x: x.mean(1))


def ppl_diff_interval(nll_a: torch.Tensor, nll_b: torch.Tensor) -> tuple[float, float]:
    """Interval of exp(mean nll_a) - exp(mean nll_b): a perplexity difference from per-window mean
    losses (nats per byte; windows of equal length, so the mean of window means is the byte mean)."""
    return bootstrap_interval([nll_a, nll_b], lambda x, y: torch.exp(x.mean(1)) - torch.exp(y.mean(1)))


def verdict(lo: float, hi: float, ok: Callable[[float], bool]) -> str:
    """PASS when the criterion ``ok`` holds at both ends of the interval, FAIL when at neither, else
    'WITHIN NOISE' (the interval straddles the criterion: more examples are needed to decide)."""
    if math.isnan(lo) or math.isnan(hi):
        return "NO INTERVAL"
    a, b = ok(lo), ok(hi)
    return "PASS" if a and b else "FAIL" if not a and not b else "WITHIN NOISE"
