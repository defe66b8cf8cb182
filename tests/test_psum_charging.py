"""One set of psum charging rules: the analytical simulator, the cycle model's ledger and PsumQuant's PyTorch
traffic counter charge the same psum records (component, action, widths, count, energy) for one GEMM with
several K-folds, quantized and unquantized (npukit.sim.psum_path.psum_records)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from npukit.models.psumquant import PsumQuantConfig, PsumTraffic, convert
from npukit.sim import Layer, Ledger, Workload, load_table, simulate
from npukit.sim.arch import Arch, Bits, PsumQuantHW
from npukit.sim.cycle import run_gemm
from npukit.sim.psum_path import PsumCounts, psum_records
from npukit.sim.simulator import declare_components

PSUM = ("psum_buffer", "psum_adder", "psum_quantizer", "psum_features", "psum_predictor")
M, K, N, R, C = 16, 96, 8, 32, 8  # 3 K-folds, one N-tile
TABLE = load_table("horowitz45")


def _arch(buffer_bits: int, policy: str, semantics: str, scale_form: str) -> Arch:
    return Arch(rows=R, cols=C, mapping="fixed", bits=Bits(pe_psum=32, psum_buffer=buffer_bits),
                psum_quant=PsumQuantHW(policy=policy, semantics=semantics, scale_form=scale_form))


def _psum(led: Ledger) -> dict[tuple[str, str, tuple[int, ...]], tuple[float, float]]:
    """(component, action, bits) -> (count, energy pJ) of the psum records, scopes summed."""
    out: dict[tuple[str, str, tuple[int, ...]], list[float]] = {}
    for (_, comp, act, bits), n in led.counts.items():
        if comp in PSUM and n:
            e = n * TABLE.action_energy(act, bits, led.components.get(comp), comp)
            acc = out.setdefault((comp, act, bits), [0.0, 0.0])
            acc[0] += n
            acc[1] += e
    return {k: (v[0], pytest.approx(v[1], rel=1e-12)) for k, v in out.items()}


def _simulate(arch: Arch) -> Ledger:
    return simulate(Workload("g", [Layer("g", M, N, K, kind="gemm")]), arch, table=TABLE).ledger


def _cycle(arch: Arch, quantized: bool) -> Ledger:
    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, (M, K)), rng.integers(-128, 128, (K, N))
    led = Ledger()
    declare_components(led, arch)
    run_gemm(a, b, R, C, "ws", 8, pe_psum_bits=32, psum_buffer_bits=arch.bits.psum_buffer,
             quant=(3, 12) if quantized else None, ledger=led, psum_hw=arch.psum_quant)
    return led


def _torch(arch: Arch, policy: str, semantics: str, scale_form: str) -> Ledger:
    torch.manual_seed(0)
    lin = nn.Linear(K, N, bias=False)
    cfg = PsumQuantConfig(rows=R, cols=C, psum_buffer_bits=8, pe_psum_bits=32, policy=policy, semantics=semantics,
                          scale_form=scale_form, calib_rows=64, margin_rows=16)
    q = convert(lin, cfg, [torch.randn(64, K)])
    with PsumTraffic(q) as tr:
        q(torch.randn(M, K))
    return tr.record(Ledger(), arch=arch)


CASES = [  # (torch policy, arch policy, semantics, scale form)
    ("none", None, "buffer", "pow2"),
    ("static", "static", "buffer", "mult_shift"),
    ("static", "static", "transfer", "pow2"),
    ("psumquant", "psumquant", "buffer", "pow2"),
    ("psumquant", "psumquant", "transfer", "mult_shift"),
]


@pytest.mark.parametrize("policy, hw_policy, semantics, scale_form", CASES)
def test_three_producers_charge_identical_psum_records(policy, hw_policy, semantics, scale_form) -> None:
    quantized = hw_policy is not None
    arch = _arch(8 if quantized else 32, hw_policy or "static", semantics, scale_form)
    sim, cyc, tor = _psum(_simulate(arch)), _psum(_cycle(arch, quantized)), _psum(_torch(arch, policy, semantics, scale_form))
    assert sim == cyc == tor
    kf = -(-K // R)
    # the rules themselves, so that three producers agreeing on something wrong still fails
    held = 32 if (not quantized or semantics == "transfer") else 8
    assert sim[("psum_buffer", "sram_write", (held,))][0] == M * N * (kf - 1)
    assert sim[("psum_adder", "int_add", (held,))][0] == M * N * (kf - 1)
    assert any(k[0] == "psum_quantizer" for k in sim) == quantized
    assert any(k[0] == "psum_predictor" for k in sim) == (hw_policy == "psumquant")
    assert (("psum_quantizer", "int_mult", (32, 16)) in sim) == (quantized and scale_form == "mult_shift")


def test_rules_scale_with_the_counts() -> None:
    """The one function: the adder follows the running psum's width, spilled psums are added too."""
    hw = PsumQuantHW(policy="static", semantics="buffer", scale_form="pow2")
    recs = {(c, a, b): n for c, a, b, n in psum_records(PsumCounts(4, 64, 8, 16, 8, 12, 12, 5), Bits(psum_buffer=8), hw)}
    assert recs[("psum_adder", "int_add", (8,))] == 17
    assert recs[("psum_quantizer", "int_add", (8,))] == recs[("psum_quantizer", "int_add", (32,))] == 4 * 8 * 4
    assert ("psum_quantizer", "int_mult", (32, 16)) not in recs  # a pow2 step is a shift
