"""PsumQuant per-token activation scales and calibrated attention matmuls (PsumMatmul): hand-computed
references, bit-exactness against the cycle-level model, every policy, bad input, report logic."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from npukit.kernels.psumquant import psumquant_matmul
from npukit.models.psumquant import (
    POLICIES,
    Matmul,
    PsumMatmul,
    PsumQuantConfig,
    PsumQuantError,
    calibrate,
    convert,
    fit_report,
    psum_layers,
    psum_matmul,
    psum_matmuls,
    reconfigure,
    unconvert,
)
from npukit.models.psumquant._matmul import bmm_psum
from npukit.sim import quant as squant
from npukit.sim.cycle import run_gemm
from npukit.sim.errors import NpukitError


def _rows(n: int, d: int, seed: int) -> torch.Tensor:
    """Rows whose magnitudes differ by orders of magnitude (log-normal per-row scale)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g) * torch.exp(1.5 * torch.randn(n, 1, generator=g))


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y - ref).norm() / ref.norm())


# ---------------------------------------------------------------------------------- per-token activations
def test_token_path_equals_hand_computed_reference() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(24, 10)
    x = _rows(7, 24, 1)
    x[3] = 0.0  # an all-zero row keeps scale 1 and output = bias
    q = convert(copy.deepcopy(lin), PsumQuantConfig(rows=8, cols=4, policy="none", act_granularity="token", exact=True))
    w = lin.weight.detach().double().numpy()
    s_w = np.abs(w).max(1) / 127
    wq = np.clip(np.round(w / s_w[:, None]), -127, 127)
    xn = x.double().numpy()
    amax = np.abs(xn).max(1, keepdims=True)
    s_x = np.where(amax > 0, amax / 127, 1.0)
    xq = np.clip(np.round(xn / s_x), -127, 127)
    expect = (xq @ wq.T) * s_x * s_w + lin.bias.detach().double().numpy()
    assert np.allclose(q(x).double().numpy(), expect, rtol=1e-5, atol=1e-6)
    assert np.allclose(q(x)[3].detach().numpy(), lin.bias.detach().numpy(), atol=1e-6)


@pytest.mark.parametrize("overflow", ["saturate", "wrap"])
def test_token_path_exact_equals_run_gemm_per_row(overflow: str) -> None:
    """Per-token scales leave the psum domain integer: the exact layer equals run_gemm on the
    per-row-quantized integers, dequantized, times s_row * s_w, bit for bit up to float rounding."""
    torch.manual_seed(1)
    lin = nn.Linear(40, 12)
    cfg = PsumQuantConfig(rows=8, cols=4, psum_buffer_bits=6, policy="static", exact=True, overflow=overflow,
                          act_granularity="token")
    layer = convert(lin, cfg, [_rows(16, 40, s) for s in (2, 3)])
    x = _rows(10, 40, 4)
    a, w, mult, shift = layer.integer_operands(x)
    amax = x.abs().amax(1, keepdim=True)
    s_row = (amax / 127).numpy()
    assert np.array_equal(a, np.clip(np.round(x.numpy() / s_row), -127, 127).astype(np.int64))
    assert np.abs(a).max(1).tolist() == [127] * 10  # every row uses the full int8 range
    m, s = int(mult.flat[0]), int(shift.flat[0])
    ref = run_gemm(a, w, 8, 4, "ws", 8, 32, overflow, psum_buffer_bits=6, quant=(m, s)).out
    expect = squant.dequantize(ref, m, s) * s_row * layer.w_scale.numpy() + lin.bias.detach().numpy()
    assert np.allclose(layer(x).numpy(), expect, rtol=1e-5, atol=1e-5)


def test_token_scales_beat_tensor_scales_and_psumquant_runs() -> None:
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 32)).eval()
    cal, x = [_rows(128, 256, s) for s in (5, 6)], _rows(256, 256, 7)
    ref = net(x).detach()
    err = {}
    for gran in ("tensor", "token"):
        cfg = PsumQuantConfig(rows=64, cols=64, psum_buffer_bits=8, policy="none", act_granularity=gran)
        q = convert(copy.deepcopy(net), cfg, cal)
        err[gran, "none"] = _rel(q(x), ref)
        reconfigure(q, policy="psumquant")
        err[gran, "psumquant"] = _rel(q(x), ref)
        y_float = q(x)
        reconfigure(q, exact=True)
        assert torch.equal(q(x), y_float)  # float path == integer path with per-token scales too
    assert err["token", "none"] < 0.5 * err["tensor", "none"]
    assert err["token", "psumquant"] < err["tensor", "psumquant"]
    assert err["token", "psumquant"] < 0.1


# ---------------------------------------------------------------------------------- matmuls
class _Attn(nn.Module):
    """One attention head block with Matmul slots: softmax(q k^T / sqrt(d)) v."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.qk, self.pv = Matmul(), Matmul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.qk(self.q(x), self.k(x).transpose(-1, -2)) / math.sqrt(x.shape[-1])
        return self.pv(torch.softmax(s, -1), self.v(x))


def _seq(b: int, t: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, 32, generator=g) * torch.exp(torch.randn(b, t, 1, generator=g))


@pytest.fixture(scope="module")
def attn() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(3)
    net = _Attn().eval()
    cfg = PsumQuantConfig(rows=16, cols=8, psum_buffer_bits=8, policy="psumquant", act_granularity="token", calib_rows=256)
    q = convert(copy.deepcopy(net), cfg, [_seq(4, 24, s) for s in (10, 11)], matmuls=True)  # sequence lengths vary
    return net, q, _seq(3, 20, 12)


def test_bmm_psum_equals_the_2d_kernel_slice_by_slice() -> None:
    g = torch.Generator().manual_seed(4)
    a = torch.randint(-127, 128, (3, 9, 37), generator=g).float()
    b = torch.randint(-127, 128, (3, 37, 11), generator=g).float()
    for sem, shape in (("buffer", (3, 9, 3)), ("transfer", (3, 9, 3, 3))):
        inv = torch.exp2(-torch.randint(6, 12, shape, generator=g).float())
        for ovf in ("saturate", "wrap"):
            y = bmm_psum(a, b, inv, 16, 4, 6, sem, ovf)
            for s in range(3):
                ref = psumquant_matmul(a[s], b[s], inv[s], 16, 4, 6, sem, ovf, "torch")
                assert torch.equal(y[s], ref), (sem, ovf, s)


def test_psum_matmul_calibrated_policies_in_attention(attn) -> None:
    net, q, x = attn
    assert [n for n, _ in psum_matmuls(q)] == ["qk", "pv"] and len(psum_layers(q)) == 3
    reconfigure(q, policy="none")
    ref_int8 = q(x)
    ref = net(x).detach()
    assert _rel(ref_int8, ref) < 0.05
    err = {}
    for pol in POLICIES:
        for bits in (8, 4):
            reconfigure(q, policy=pol, psum_buffer_bits=bits)
            y = q(x)
            assert y.shape == ref.shape and bool(torch.isfinite(y).all())
            err[pol, bits] = _rel(y, ref_int8)
    reconfigure(q, policy="psumquant", psum_buffer_bits=8)
    assert err["psumquant", 8] < 0.1 and err["static", 8] < 0.2
    assert err["psumquant", 4] < err["static", 4]
    assert err["psumquant", 8] < err["psumquant", 4]
    rep = fit_report(q)
    for name in ("qk", "pv"):
        assert rep[name]["kind"] == "matmul" and rep[name]["policy"] == "psumquant"
        assert rep[name]["predictor_n_tiles"] > 0 and 0.0 <= rep[name]["range_mae_log2"] < 2.0
        assert 0.0 <= rep[name]["clip_frac"] <= 1.0


@pytest.mark.parametrize("policy", ["static", "sigma", "psumquant"])
def test_psum_matmul_float_path_equals_exact_path(attn, policy: str) -> None:
    _, q, x = attn
    mm = psum_matmuls(q)[0][1]
    a, b = torch.randn(2, 3, 20, 32), torch.randn(2, 3, 32, 20)
    reconfigure(q, policy=policy, psum_buffer_bits=6, semantics="transfer")
    y_t = mm(a, b)
    reconfigure(q, exact=True)
    assert torch.equal(mm(a, b), y_t)
    reconfigure(q, exact=False, semantics="buffer")
    y_b = mm(a, b)
    reconfigure(q, exact=True)
    assert torch.equal(mm(a, b), y_b)
    reconfigure(q, exact=False, policy="psumquant", psum_buffer_bits=8)


def test_matmul_slots_stay_plain_without_matmuls_and_unconvert_restores(attn) -> None:
    net, _, x = attn
    q = convert(copy.deepcopy(net), PsumQuantConfig(rows=16, cols=8, policy="none", wa_bits=None))
    assert not psum_matmuls(q) and isinstance(q.qk, Matmul)
    q2 = convert(copy.deepcopy(net), PsumQuantConfig(rows=16, cols=8, policy="static"), [_seq(2, 8, 1)], matmuls=True)
    slots = (q2.qk.orig, q2.pv.orig)
    back = unconvert(q2)
    assert (back.qk, back.pv) == slots and not psum_matmuls(back) and not psum_layers(back)
    assert torch.allclose(back(x), net(x), atol=1e-6)


def test_psum_matmul_functional_token_granularity_hand_computed() -> None:
    g = torch.Generator().manual_seed(5)
    a = torch.randn(2, 6, 16, generator=g) * torch.exp(torch.randn(2, 6, 1, generator=g))
    b = torch.randn(2, 16, 5, generator=g)
    y = psum_matmul(a, b, PsumQuantConfig(policy="none", act_granularity="token"))
    sa = a.abs().amax(-1, keepdim=True) / 127
    sb = b.abs().amax(-2, keepdim=True) / 127
    expect = (torch.round(a / sa) @ torch.round(b / sb)) * sa * sb
    assert torch.allclose(y, expect, rtol=1e-5, atol=1e-6)
    assert _rel(y, a @ b) < 0.02


# ---------------------------------------------------------------------------------- bad input
def test_bad_granularity_and_matmul_input_raise_typed_one_line_errors(attn) -> None:
    net, q, _ = attn
    cases = [
        (lambda: PsumQuantConfig(act_granularity="channel"), "unknown act_granularity 'channel'"),
        (lambda: PsumQuantConfig(act_granularity="token", wa_bits=None), "needs integer activations"),
        (lambda: reconfigure(q, act_granularity="tensor"), "reconfigure cannot change act_granularity"),
        (lambda: convert(copy.deepcopy(net), matmuls="yes"), "matmuls must be True or False"),
        (lambda: psum_matmuls(q)[0][1](torch.randn(2, 4, 8), torch.randn(3, 8, 4)), "equal leading dims"),
        (lambda: psum_matmuls(q)[0][1](torch.full((1, 2, 32), float("nan")), torch.randn(1, 32, 2)), "NaN"),
        (lambda: psum_matmul(torch.randn(4, 8), torch.randn(8, 4), PsumQuantConfig(policy="static")), "matmuls=True"),
        (lambda: convert(nn.Sequential(Matmul()), matmuls=False), "no nn.Linear or nn.Conv2d"),
    ]
    for fn, msg in cases:
        with pytest.raises(PsumQuantError, match=msg) as ei:
            fn()
        assert isinstance(ei.value, NpukitError) and "\n" not in str(ei.value)
    fresh = convert(copy.deepcopy(net), PsumQuantConfig(rows=16, cols=8, policy="static", wa_bits=None), matmuls=True)
    with pytest.raises(PsumQuantError, match="not fitted"):
        fresh.pv(torch.randn(1, 4, 4), torch.randn(1, 4, 32))
    only_mm = convert(nn.Sequential(Matmul()), PsumQuantConfig(rows=4, cols=4, policy="static"), matmuls=True)
    assert isinstance(only_mm[0], PsumMatmul)

    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.mm = nn.Linear(4, 4), Matmul()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    un = convert(Unused(), PsumQuantConfig(rows=4, cols=4, policy="static"), matmuls=True)
    with pytest.raises(PsumQuantError, match="matmul 'mm' was never reached"):
        calibrate(un, [torch.randn(2, 4)])


# ---------------------------------------------------------------------------------- experiment report
def test_minilm_acceptance_states_which_settings_pass() -> None:
    from npukit.experiments.psumquant._report import _minilm_acceptance
    from npukit.experiments.psumquant.run import QUICK, _minilm_settings

    settings = _minilm_settings(QUICK)
    assert [(s[0], s[3]) for s in settings] == [("int8", False), ("int8-token", False), ("int8-token", True), ("fp32", False)]
    rows = []
    for (wa, att), (c_none, c_pq) in {("int8", "fp32"): (0.983, 0.981), ("int8-token", "fp32"): (0.997, 0.995),
                                      ("int8-token", "psum"): (0.997, 0.989)}.items():
        for pol, c in (("none", c_none), ("psumquant", c_pq)):
            rows.append({"policy": pol, "bits": 8, "array": "128x128", "wa": wa, "attention": att, "cosine": c,
                         "cosine_vs_none": c / c_none, "n_sentences": 200,  # a +-0.0005 interval: decided
                         "cosine_lo": c - 0.0005, "cosine_hi": c + 0.0005})
    lines = _minilm_acceptance(rows)
    assert len(lines) == 4
    assert "per-tensor activations" in lines[0] and lines[0].count("FAIL") == 1 and "no psum policy can pass" in lines[0]
    assert "per-token" in lines[1] and "PASS" in lines[1] and "0.9950" in lines[1]
    assert "also on the array" in lines[2] and "FAIL" in lines[2] and "no psum policy" not in lines[2]
    met, not_met = lines[3].split("Not met with:")
    assert "per-token activations, attention matmuls fp32" in met and "per-tensor" not in met
    assert "per-tensor" in not_met and "also on the array" in not_met
