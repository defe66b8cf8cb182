"""Wall-clock timing of kernels in milliseconds: ``triton.testing.do_bench`` on CUDA (its median and 20th/80th
percentiles), ``time.perf_counter`` on CPU (median, min and max of ``reps`` calls after one warm-up call; after a
warm-up call over 2 s, one more call is the single measurement: the warm-up, which may compile or fill caches, is
never a sample). Used by the ``npukit bench`` microbenchmarks and the
experiments that measure time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

Timer = Callable[[Callable[[], Any]], float]
BandTimer = Callable[[Callable[[], Any]], tuple[float, float, float]]
SINGLE_SHOT_MS = 2000.0  # after a CPU warm-up call longer than this, one timed call is the measurement


def band_timer(cuda: bool, reps: int = 3, single_shot_ms: float = SINGLE_SHOT_MS) -> BandTimer:
    """A timer of ``fn`` returning (median, low, high) ms: the 20th/80th percentiles on CUDA, min/max on CPU.

    On CPU, ``fn`` is called once untimed (warm-up), then ``reps`` times; when the warm-up took over
    ``single_shot_ms`` ms, it is called once more instead and that call is the whole band."""
    if cuda:
        import triton.testing

        def gpu(fn: Callable[[], Any]) -> tuple[float, float, float]:
            med, lo, hi = triton.testing.do_bench(fn, quantiles=[0.5, 0.2, 0.8])
            return float(med), float(lo), float(hi)

        return gpu

    def cpu(fn: Callable[[], Any]) -> tuple[float, float, float]:
        t0 = time.perf_counter()
        fn()
        first = 1e3 * (time.perf_counter() - t0)
        times = []
        for _ in range(1 if first > single_shot_ms else reps):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times), min(times), max(times)

    return cpu


def median_timer(cuda: bool, reps: int = 3) -> Timer:
    """A timer of ``fn`` returning its median time in ms (see :func:`band_timer`)."""
    band = band_timer(cuda, reps)
    return lambda fn: band(fn)[0]
