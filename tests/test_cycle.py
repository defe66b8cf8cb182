"""Tests of the cycle-level systolic-array model (npukit.sim.cycle.run_gemm) against the contract.

The references here are independent pure-Python re-derivations of the cycle contract (the docstrings of
npukit.sim.cycle and its kernels): the
arithmetic applies ovf_P after every addition in the contract's order (rows 0..R-1 of a K-fold,
then the accumulator across K-folds; os: k = 0..K-1 in the PE), the quantizer is written with
Fractions, and the leave cycles come from the contract's closed-form schedule.
"""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npukit.sim import Arch, ConfigError, Layer, Ledger, map_layer
from npukit.sim.cycle import CycleResult, contract_cycles, run_gemm
from npukit.sim.datapath import cycle_count, fold_growth_bits
from npukit.sim.quant import ovf, quantize

DATAFLOWS = ("ws", "os", "is")
TIMINGS = ("scalesim", "double-buffered")


# ------------------------------------------------------------------------------ references
def _ovf(x: int, bits: int, mode: str) -> int:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    if mode == "saturate":
        return max(lo, min(hi, x))
    return (x - lo) % 2**bits + lo


def _q(x: int, mult: int, shift: int, bits: int) -> int:
    """sat_B(round-half-even(x * mult / 2**shift)) via Fractions (Python's round() is banker's)."""
    return _ovf(round(Fraction(x * mult, 2**shift)), bits, "saturate")


def ref_out(A, B, R, dataflow, P, Bb, mode, quant):
    """Outputs by the contract's arithmetic, one output at a time, in Python ints."""
    M, K = A.shape
    N = B.shape[1]
    a = A.tolist()
    b = B.tolist()
    out = np.zeros((M, N), dtype=object)
    for m in range(M):
        for n in range(N):
            if dataflow == "os":
                acc = 0
                for k in range(K):
                    acc = _ovf(acc + a[m][k] * b[k][n], P, mode)
                out[m, n] = _q(acc, *quant, Bb) if quant else acc
                continue
            acc = 0
            for i in range(math.ceil(K / R)):
                psum = 0
                for r in range(min(R, K - i * R)):  # rows 0..R-1 down the column
                    k = i * R + r
                    psum = _ovf(psum + a[m][k] * b[k][n], P, mode)
                q = _q(psum, *quant, Bb) if quant else psum
                acc = _ovf(q if i == 0 else acc + q, Bb, mode)
            out[m, n] = acc
    return out.astype(np.int64)


def ref_out_cycle(M, N, K, R, C, dataflow, timing):
    """The contract's absolute leave cycle of every output's last psum."""
    oc = np.zeros((M, N), dtype=np.int64)
    for m in range(M):
        for n in range(N):
            if dataflow == "os":
                i, r = divmod(m, R)
                j, c = divmod(n, C)
                f = i * math.ceil(N / C) + j
                start = f * (R + C + K - 2) if timing == "scalesim" else f * K
                oc[m, n] = start + K - 1 + r + c
                continue
            kf = math.ceil(K / R)
            temporal, stream, spatial = (M, m, n) if dataflow == "ws" else (N, n, m)
            j, c = divmod(spatial, C)
            f = j * kf + (kf - 1)  # the last K-fold of column fold j
            if timing == "scalesim":
                oc[m, n] = f * (2 * R + C + temporal - 2) + 2 * R - 1 + stream + c
            else:
                oc[m, n] = R + f * (temporal + R + C - 2) + (R - 1) + stream + c
    return oc


def _rand(rng, shape, bits):
    return rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), size=shape, dtype=np.int64)


dims = st.tuples(
    st.integers(1, 12), st.integers(1, 12), st.integers(1, 40), st.integers(1, 40), st.integers(1, 40)
)
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


# ------------------------------------------------------------------------------ property tests
@settings(max_examples=150, **SETTINGS)
@given(dims, st.sampled_from(DATAFLOWS), st.sampled_from(TIMINGS), st.integers(0, 2**32 - 1))
def test_cycles_outputs_and_schedule_match_contract(d, dataflow, timing, seed):
    R, C, M, N, K = d
    rng = np.random.default_rng(seed)
    A, B = _rand(rng, (M, K), 8), _rand(rng, (K, N), 8)
    res = run_gemm(A, B, R, C, dataflow, timing=timing, return_fold_psums=True)
    arch = Arch(rows=R, cols=C, dataflow=dataflow, timing=timing, mapping="fixed")  # the model runs SCALE-Sim's order
    counts = map_layer(Layer("x", M, N, K), arch)
    # one cycle count everywhere: the cycle model reports what the analytical model reports
    assert res.cycles == counts.compute_cycles == contract_cycles(M, N, K, R, C, dataflow, timing)
    assert res.pe_cycles == R * C * res.cycles
    assert res.out.dtype == np.int64 and res.out.shape == (M, N)
    np.testing.assert_array_equal(res.out, A @ B)  # |psum| <= 40 * 2**14 never overflows 32 bits
    np.testing.assert_array_equal(res.out_cycle, ref_out_cycle(M, N, K, R, C, dataflow, timing))
    # the last output leaves at the last cycle when the last fold uses the whole array
    last_fold_full = (N % C == 0) if dataflow == "ws" else (M % C == 0) if dataflow == "is" else (M % R == 0 and N % C == 0)
    assert res.counts["last_output_cycle"] == int(res.out_cycle.max())
    # out_cycle is an index; the compute cycles are the last cycle's index through the one convention
    if last_fold_full:
        assert cycle_count(int(res.out_cycle.max()), timing) == res.cycles
    else:
        assert cycle_count(int(res.out_cycle.max()), timing) <= res.cycles
    # never fewer cycles than MACs / PEs, except SCALE-Sim's 1x1 os array (F*K - 1 cycles for F*K MACs)
    if (R, C, dataflow, timing) == (1, 1, "os", "scalesim"):
        assert res.cycles == M * N * K - 1
    else:
        assert res.cycles * R * C >= M * N * K
    # fold psums: one per fold, in fold order, summing to the output
    assert [fp[0] for fp in res.fold_psums] == list(range(counts.folds))
    total = np.zeros((M, N), dtype=np.int64)
    for _, kfold, rows, cols, psums in res.fold_psums:
        assert psums.shape == total[rows, cols].shape
        if dataflow == "os":
            assert kfold == 0
        total[rows, cols] += psums
    np.testing.assert_array_equal(total, res.out)
    # event counts agree with the analytical model's where it counts the same thing
    ev = res.counts
    assert ev["macs"] == counts.macs == M * N * K
    assert ev["ifmap_reads"] == counts.ifmap_reads
    assert ev["filter_reads"] == counts.filter_reads
    assert ev["psum_buffer_updates"] == counts.psum_reads == counts.psum_writes
    regs = dict(counts.reg_writes)
    assert ev["reg_input"] == regs["input"] and ev["reg_weight"] == regs["weight"]
    if dataflow == "os":
        assert ev["reg_accumulator"] == regs["accumulator"]
    else:  # psums also pass down the rows below the last mapped K row of a fold
        assert ev["reg_accumulator"] == M * N * R * math.ceil(K / R)


@settings(max_examples=100, **SETTINGS)
@given(
    st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 12), st.integers(1, 12), st.integers(1, 20)),
    st.sampled_from(DATAFLOWS),
    st.sampled_from(TIMINGS),
    st.sampled_from(("saturate", "wrap")),
    st.integers(2, 14),
    st.one_of(st.none(), st.integers(2, 16)),
    st.integers(0, 2**32 - 1),
)
def test_overflow_follows_the_rule(d, dataflow, timing, mode, P, buffer_bits, seed):
    """Small P, big operands: every PE add saturates/wraps to P bits in the contract's order."""
    R, C, M, N, K = d
    rng = np.random.default_rng(seed)
    A, B = _rand(rng, (M, K), 8), _rand(rng, (K, N), 8)
    if buffer_bits is not None:  # the width rule: at most P + ceil(log2(K-folds)) (os: no K-folds)
        buffer_bits = min(buffer_bits, P + fold_growth_bits(1 if dataflow == "os" else math.ceil(K / R)))
    res = run_gemm(A, B, R, C, dataflow, pe_psum_bits=P, overflow=mode, timing=timing, psum_buffer_bits=buffer_bits)
    Bb = P if buffer_bits is None else buffer_bits
    np.testing.assert_array_equal(res.out, ref_out(A, B, R, dataflow, P, Bb, mode, None))


@settings(max_examples=100, **SETTINGS)
@given(
    st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 12), st.integers(1, 12), st.integers(1, 20)),
    st.sampled_from(DATAFLOWS),
    st.sampled_from(("saturate", "wrap")),
    st.integers(6, 24),
    st.integers(4, 16),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(0, 63),
    st.integers(0, 2**32 - 1),
)
def test_quantizer_and_accumulator_follow_the_rule(d, dataflow, mode, P, Bb, mult, shift, seed):
    R, C, M, N, K = d
    rng = np.random.default_rng(seed)
    A, B = _rand(rng, (M, K), 8), _rand(rng, (K, N), 8)
    Bb = min(Bb, P + fold_growth_bits(1 if dataflow == "os" else math.ceil(K / R)))  # the width rule
    res = run_gemm(A, B, R, C, dataflow, pe_psum_bits=P, overflow=mode, psum_buffer_bits=Bb, quant=(mult, shift),
                   return_fold_psums=True)
    np.testing.assert_array_equal(res.out, ref_out(A, B, R, dataflow, P, Bb, mode, (mult, shift)))
    if dataflow != "os":
        # the accumulator over quant.quantize of the fold psums reproduces the outputs
        acc = np.zeros((M, N), dtype=np.int64)
        for _, kfold, rows, cols, psums in res.fold_psums:
            q = quantize(psums, mult, shift, Bb)
            acc[rows, cols] = ovf(q if kfold == 0 else acc[rows, cols] + q, Bb, mode)
        np.testing.assert_array_equal(acc, res.out)


# ------------------------------------------------------------------------------ hand-computed cases
A32 = np.array([[1, 2], [3, 4], [5, 6]])
B22 = np.array([[1, -1], [2, 3]])


@pytest.mark.parametrize(
    "dataflow, timing, cycles, expected",
    [
        # ws, R=C=2, M=3, K=2, N=2: one fold, T = 2R + C + M - 2 = 7, total F*T - 1 = 6.
        # Output (m, c) leaves at 2R - 1 + m + c = 3 + m + c.
        ("ws", "scalesim", 6, [[3, 4], [4, 5], [5, 6]]),
        # double-buffered: T' = M + R + C - 2 = 5, last cycle R + F*T' - 1 = 6, counted: 7 cycles;
        # leave R + (R-1) + m + c = 3 + m + c.
        ("ws", "double-buffered", 7, [[3, 4], [4, 5], [5, 6]]),
        # os: mf = 2 row folds (rows {0,1} and {2}), nf = 1, T = R + C + K - 2 = 4, total 2*4 - 1 = 7.
        # fold 0 (s=0): (r, c) final at K - 1 + r + c = 1 + r + c; fold 1 (s=4): row 2 -> r=0: 4 + 1 + c.
        ("os", "scalesim", 7, [[1, 2], [2, 3], [5, 6]]),
        # os double-buffered: fold f final at f*K + K - 1 + r + c; fold 1: 2 + 1 + c. Last cycle
        # F*K + R + C - 3 = 5, counted: 6 cycles.
        ("os", "double-buffered", 6, [[1, 2], [2, 3], [3, 4]]),
        # is: spatial rows K=2, cols M=3 -> 2 M-folds, stream over N=2; T = 2R + C + N - 2 = 6, total 11.
        # output (j*C + c, n) leaves at s_f + 2R - 1 + n + c: fold 0 -> 3 + n + c; fold 1 (m=2, c=0) -> 6 + 3 + n.
        ("is", "scalesim", 11, [[3, 4], [4, 5], [9, 10]]),
        # is double-buffered: T' = N + R + C - 2 = 4, leave R + f*T' + R - 1 + n + c: fold 1 -> 2 + 4 + 1 + n.
        # Last cycle R + F*T' - 1 = 9, counted: 10 cycles.
        ("is", "double-buffered", 10, [[3, 4], [4, 5], [7, 8]]),
    ],
)
def test_hand_computed_2x2(dataflow, timing, cycles, expected):
    res = run_gemm(A32, B22, 2, 2, dataflow, timing=timing)
    assert res.cycles == cycles
    np.testing.assert_array_equal(res.out_cycle, np.array(expected))
    np.testing.assert_array_equal(res.out, A32 @ B22)


def test_cycle_count_convention():
    # scalesim: SCALE-Sim's convention, the last cycle's index; double-buffered: a count (index + 1)
    assert cycle_count(6, "scalesim") == 6 and cycle_count(6, "double-buffered") == 7
    with pytest.raises(ConfigError, match="unknown timing mode 'fast'"):
        cycle_count(6, "fast")


@pytest.mark.parametrize("timing, cycles", [("scalesim", 7 * 3 * 5 - 1), ("double-buffered", 7 * 3 * 5)])
def test_1x1_output_stationary_array(timing, cycles):
    # every cycle of a 1x1 os array is a MAC (21 folds of K = 5); double-buffered hides every drain, so the
    # compute cycles are exactly the MACs; scalesim keeps SCALE-Sim's count, one fewer. The cycle model,
    # its contract and the analytical model give the same number.
    rng = np.random.default_rng(5)
    A, B = _rand(rng, (7, 5), 8), _rand(rng, (5, 3), 8)
    res = run_gemm(A, B, 1, 1, "os", timing=timing)
    arch = Arch(rows=1, cols=1, dataflow="os", timing=timing, mapping="fixed")
    assert res.cycles == cycles == contract_cycles(7, 3, 5, 1, 1, "os", timing)
    assert res.cycles == map_layer(Layer("x", 7, 3, 5), arch).compute_cycles
    assert int(res.out_cycle.max()) == 7 * 3 * 5 - 1  # the last output leaves in the last cycle (an index)
    np.testing.assert_array_equal(res.out, A @ B)


def test_hand_computed_k_folds():
    # ws, R=C=2, A 2x3 @ B 3x1: kf = 2 K-folds (rows {0,1}, {2}), nf = 1, T = 2R + C + M - 2 = 6.
    # Fold 1 starts at 6; output m leaves at 6 + 2R - 1 + m + 0 = 9 + m. Total F*T - 1 = 11 (the last
    # fold uses 1 of 2 columns, so the last output leaves at 10 < 11).
    A = np.array([[1, 2, 3], [-4, 5, -6]])
    B = np.array([[7], [8], [9]])
    res = run_gemm(A, B, 2, 2, "ws", return_fold_psums=True)
    assert res.cycles == 11
    np.testing.assert_array_equal(res.out_cycle, [[9], [10]])
    # K-fold 0 sums rows k=0,1: [1*7 + 2*8, -4*7 + 5*8] = [23, 12]; K-fold 1 adds k=2: [27, -54].
    assert [(f, i) for f, i, *_ in res.fold_psums] == [(0, 0), (1, 1)]
    np.testing.assert_array_equal(res.fold_psums[0][4], [[23], [12]])
    np.testing.assert_array_equal(res.fold_psums[1][4], [[27], [-54]])
    np.testing.assert_array_equal(res.out, [[50], [-42]])


def test_hand_computed_saturation_order():
    # One column, P = 8 (range [-128, 127]), ws 3x1 array, K = 3: psum = sat(sat(sat(100) + 100) - 100)
    # = sat(127 - 100) = 27, whereas the exact sum is 100. Wrap: 100 + 100 = 200 -> -56; -56 - 100 = -156 -> 100.
    A = np.array([[10, 10, -10]])
    B = np.array([[10], [10], [10]])
    assert run_gemm(A, B, 3, 1, "ws", pe_psum_bits=8).out[0, 0] == 27
    assert run_gemm(A, B, 3, 1, "ws", pe_psum_bits=8, overflow="wrap").out[0, 0] == 100
    # os accumulates k in order in the PE: same sequence
    assert run_gemm(A, B, 1, 1, "os", pe_psum_bits=8).out[0, 0] == 27


# ------------------------------------------------------------------------------ ledger
@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_ledger_records(dataflow):
    rng = np.random.default_rng(1)
    M, N, K, R, C = 9, 7, 10, 4, 3
    A, B = _rand(rng, (M, K), 6), _rand(rng, (K, N), 6)
    # B = 24 over P = 22: a sum of kf = 3 K-folds grows 2 bits (the width rule); os has no K-folds, B <= P
    # (P was 20: 24 bits is now refused as wider than any sum of 3 folds of 20-bit psums can get)
    Bb = 22 if dataflow == "os" else 24
    led = Ledger()
    with led.scope("g"):
        res = run_gemm(A, B, R, C, dataflow, data_bits=6, pe_psum_bits=22, psum_buffer_bits=Bb, ledger=led)
    assert isinstance(res, CycleResult)
    ev = res.counts
    got = {(sc, comp, act, bits): n for (sc, comp, act, bits), n in led.counts.items()}
    assert got[("g", "pe_array", "mac", (6, 6, 22))] == M * N * K
    assert got[("g", "input_registers", "reg_write", (6,))] == ev["reg_input"]
    assert got[("g", "weight_registers", "reg_write", (6,))] == ev["reg_weight"]
    assert got[("g", "psum_registers", "reg_write", (22,))] == ev["reg_accumulator"]
    for comp, w in (("input_registers", 6), ("weight_registers", 6), ("psum_registers", 22)):
        assert got[("g", comp, "reg_read", (w,))] == M * N * K
    assert got[("g", "ifmap_sram", "sram_read", (6,))] == ev["ifmap_reads"]
    assert got[("g", "filter_sram", "sram_read", (6,))] == ev["filter_reads"]
    kf = math.ceil(K / R)
    if dataflow == "os":
        assert ("g", "psum_buffer", "sram_read", (Bb,)) not in got
    else:
        assert got[("g", "psum_buffer", "sram_read", (Bb,))] == (kf - 1) * M * N
        assert got[("g", "psum_buffer", "sram_write", (Bb,))] == (kf - 1) * M * N
        assert got[("g", "psum_adder", "int_add", (Bb,))] == (kf - 1) * M * N
    assert led.total_cycles(scope_prefix="g") == res.cycles
    if dataflow == "ws":
        assert ev["reg_input"] == M * N * K and ev["reg_weight"] == K * N and ev["ifmap_reads"] == M * K * math.ceil(N / C)
    elif dataflow == "is":
        assert ev["reg_weight"] == M * N * K and ev["reg_input"] == K * M and ev["filter_reads"] == K * N * math.ceil(M / C)
    else:
        assert ev["reg_input"] == ev["reg_weight"] == ev["reg_accumulator"] == M * N * K


# ------------------------------------------------------------------------------ widths and errors
def test_wide_operands_and_psums():
    rng = np.random.default_rng(2)
    A, B = _rand(rng, (17, 23), 16), _rand(rng, (23, 11), 16)
    for df in DATAFLOWS:
        res = run_gemm(A, B, 5, 4, df, data_bits=16, pe_psum_bits=62, timing="double-buffered")
        np.testing.assert_array_equal(res.out, A @ B)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"A": [[128]]}, "do not fit data_bits=8"),
        ({"B": [[-129]]}, "do not fit data_bits=8"),
        ({"A": [[1.5]]}, "must hold integers"),
        ({"A": [[True]]}, "must hold integers"),
        ({"A": [[2**70]]}, "do not fit data_bits=8"),
        ({"A": [[1, 2]]}, "inner dimensions"),
        ({"A": [1, 2]}, "2-D"),
        ({"dataflow": "xs"}, "unknown dataflow"),
        ({"timing": "fast"}, "unknown timing"),
        ({"overflow": "clip"}, "unknown overflow"),
        ({"rows": 0}, "rows must be a positive integer"),
        ({"pe_psum_bits": 63}, "pe_psum_bits"),
        ({"data_bits": 0}, "data_bits"),
        ({"quant": (1 << 15, 0)}, "multiplier"),
        ({"quant": (3, 64)}, "shift"),
        ({"quant": 3}, "quant must be"),
        ({"quant": (30000, 2), "pe_psum_bits": 50}, "pe_psum_bits <= 48"),
    ],
)
def test_bad_input_raises_one_line(kwargs, match):
    args = {"A": [[1]], "B": [[1]], "rows": 2, "cols": 2}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match) as exc:
        run_gemm(**args)
    assert "\n" not in str(exc.value)


def test_import_is_light():
    """npukit.sim.cycle imports numba only when run_gemm is first called (it may be exported by npukit.sim)."""
    code = "import sys, npukit.sim.cycle, npukit.sim.quant; assert 'numba' not in sys.modules, 'numba imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
