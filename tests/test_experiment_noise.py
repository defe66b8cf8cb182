"""The noise behind the experiments' verdicts: PsumQuant's paired bootstrap intervals, OmniMoE's
across-seed interval, and the verdicts that come out of them (fast, no model is trained)."""

import math

import pytest
import torch

from npukit.experiments.omnimoe.run import loss_verdict, seed_interval
from npukit.experiments.psumquant import _noise


def test_paired_interval_holds_the_difference_and_shrinks_with_more_examples() -> None:
    gen = torch.Generator().manual_seed(1)
    widths = []
    for n in (50, 800):
        a = (torch.rand(n, generator=gen) < 0.9).float()
        b = a.clone()
        b[: n // 10] = 1 - b[: n // 10]  # b differs from a on a tenth of the examples
        lo, hi = _noise.mean_diff_interval(a, b)
        d = float(a.mean() - b.mean())
        assert lo <= d <= hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2  # 16x the examples: about a quarter of the width


def test_paired_interval_of_identical_policies_is_a_point() -> None:
    a = (torch.arange(100) % 3 == 0).float()
    assert _noise.mean_diff_interval(a, a.clone()) == (0.0, 0.0)
    lo, hi = _noise.mean_interval(torch.full((40,), 0.98))
    assert lo == pytest.approx(0.98) and hi == pytest.approx(0.98)


def test_ppl_interval_is_about_the_perplexity_difference() -> None:
    gen = torch.Generator().manual_seed(0)
    base = 2.0 + 0.3 * torch.rand(256, generator=gen)
    worse = base + 0.01
    lo, hi = _noise.ppl_diff_interval(worse, base)
    d = math.exp(float(worse.mean())) - math.exp(float(base.mean()))
    assert lo <= d <= hi and lo > 0  # a shift on every window is a significant increase


@pytest.mark.parametrize("lo,hi,expect", [(0.0, 0.5, "PASS"), (1.2, 3.0, "FAIL"), (0.5, 1.5, "WITHIN NOISE"),
                                          (math.nan, math.nan, "NO INTERVAL")])
def test_verdict_needs_the_whole_interval_on_one_side(lo: float, hi: float, expect: str) -> None:
    assert _noise.verdict(lo, hi, lambda x: x <= 1.0) == expect


def test_seed_interval_and_loss_verdict() -> None:
    assert all(math.isnan(x) for x in seed_interval([0.01]))
    assert loss_verdict(*seed_interval([0.01])).startswith("NO INTERVAL")
    lo, hi = seed_interval([-0.05, -0.04, -0.06])
    assert lo < -0.05 < hi < 0  # mean -0.05, t(2) 95% half-width 4.30 * 0.01 / sqrt(3) = 0.0248
    assert hi == pytest.approx(-0.05 + 4.302653 * 0.01 / math.sqrt(3), rel=1e-5)
    assert loss_verdict(lo, hi) == "PASS"
    assert loss_verdict(*seed_interval([0.05, 0.04, 0.06])) == "FAIL"
    assert loss_verdict(*seed_interval([-0.05, 0.04, 0.01])) == "WITHIN NOISE"


def test_full_run_acceptance_lines_carry_their_interval_and_quick_ones_no_verdict() -> None:
    from npukit.experiments.psumquant import _report
    from npukit.experiments.psumquant.run import FULL, QUICK

    def row(pol: str, bits: int, top1: float, lo: float, hi: float) -> dict:
        return {"policy": pol, "bits": bits, "array": "128x128", "top1": top1, "n_test": 719, "float_top1": 0.95,
                "float_top1_all": 0.95, "delta_top1_lo": lo,
                "delta_top1_hi": hi, "minus_static_lo": math.nan, "minus_static_hi": math.nan}

    res = {"resnet18": [row("none", 8, 0.95, 0.0, 0.0), row("psumquant", 8, 0.945, -0.012, 0.002)], "minilm": [],
           "digits": [], "lm": [], "energy": []}
    lines = _report._acceptance(res)
    assert "95% paired bootstrap interval over 719 test images: [-0.20, 1.20]" in lines[0]
    assert lines[0].endswith("WITHIN NOISE")  # 0.5 points lost, but the interval reaches past 1 point
    full = _report.summary_markdown(res, [], FULL, {})
    quick = _report.summary_markdown(res, [], QUICK, {})
    assert "WITHIN NOISE" in full and "smoke run (--quick): no verdict" not in full
    assert "smoke run (--quick): no verdict" in quick and "WITHIN NOISE" not in quick and "PASS" not in quick
