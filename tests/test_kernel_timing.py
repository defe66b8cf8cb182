"""The kernel timer (npukit.kernels.timing) and the chunked dense N-way router baseline."""

from __future__ import annotations

import time

import torch

from npukit.kernels.omnimoe import dense_router
from npukit.kernels.timing import band_timer, median_timer


def test_cpu_band_timer_calls_warm_up_plus_reps_and_orders_its_band() -> None:
    calls = []
    med, lo, hi = band_timer(False, reps=5)(lambda: calls.append(1))
    assert len(calls) == 6  # one warm-up, five timed
    assert 0 <= lo <= med <= hi
    # the median is in milliseconds and is the middle of the timed calls: fn sleeps 1, 20, 5 ms on the timed
    # calls (after a 1 ms warm-up), so the median is about 5 ms, never the 1 ms minimum or the 20 ms maximum
    sleeps = iter([0.001, 0.001, 0.020, 0.005])
    med = median_timer(False, reps=3)(lambda: time.sleep(next(sleeps)))
    assert 4.9 <= med < 19.0


def test_a_long_warm_up_is_never_a_sample() -> None:
    # the warm-up takes 30 ms (over the 10 ms single-shot threshold here): one more call (1 ms) is the measurement
    sleeps = iter([0.030, 0.001, 0.050, 0.050])
    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(next(sleeps))

    med, lo, hi = band_timer(False, reps=3, single_shot_ms=10.0)(fn)
    assert len(calls) == 2
    assert med == lo == hi and 0.9 <= med < 25.0


def test_dense_router_in_chunks_equals_the_whole_logits() -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(37, 8, generator=g), torch.randn(49, 8, generator=g)
    scores, idx = dense_router(x, w, 5, chunk=4)
    logits = x @ w.t()
    want_s, want_i = logits.log_softmax(-1).topk(5, dim=-1)
    assert torch.equal(idx, want_i)
    torch.testing.assert_close(scores, want_s, rtol=1e-5, atol=1e-5)
