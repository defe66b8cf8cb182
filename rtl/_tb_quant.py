"""cocotb testbench of psum_quantizer (through quantizer_lanes): bit-exact against npukit.sim.quant.

The job (``$NPUKIT_RTL_JOB``) gives the widths, the number of inputs, the lane count and the seed.
Each step drives LANES independent (x, mult, shift) triples at once and waits 1 ns (the quantizer
is combinational); a "cycle" in a failure message is that step's index. Inputs mix uniform values,
constructed ties (rem == half, both parities), saturating products, extremes (min/max x and mult,
shift 0, 1, product width - 1 and product width (at most 63), 63) and small values. Every shift is
in 0..63 (6 bits), whatever the widths: psums up to RtlConfig's 62 bits are checked. The last step checks en = 0 (identity).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import Timer

from ._layout import pack_lanes, unpack_lanes


def make_inputs(n: int, in_bits: int, mult_bits: int, seed: int) -> tuple[list[int], list[int], list[int]]:
    """n (x, mult, shift) triples: 30% uniform, 25% ties, 20% saturating, 10% extremes, 15% small."""
    rng = np.random.default_rng(seed)
    xlo, xhi = -(1 << (in_bits - 1)), (1 << (in_bits - 1)) - 1
    mlo, mhi = -(1 << (mult_bits - 1)), (1 << (mult_bits - 1)) - 1
    pw = in_bits + mult_bits
    xs: list[int] = []
    ms: list[int] = []
    ss: list[int] = []
    kinds = rng.choice(5, size=n, p=[0.30, 0.25, 0.20, 0.10, 0.15])
    for kind in kinds:
        if kind == 0:  # uniform
            x, m = int(rng.integers(xlo, xhi + 1)), int(rng.integers(mlo, mhi + 1))
            s = int(rng.integers(0, 64)) if rng.random() < 0.3 else int(rng.integers(0, min(pw, 63) + 1))
        elif kind == 1:  # tie: mult = +-2^t, x*2^t = 2^(s-1) mod 2^s
            s = int(rng.integers(1, min(pw - 2, 63) + 1))
            t = int(rng.integers(0, min(s, mult_bits - 1)))
            m = (1 << t) * (1 if rng.random() < 0.5 else -1)
            if m < mlo or m > mhi:
                m = 1 << t if (1 << t) <= mhi else 1
                t = m.bit_length() - 1
            step = 1 << (s - t)
            lo_q, hi_q = (xlo - (step >> 1)) // step + 1, (xhi - (step >> 1)) // step
            q = int(rng.integers(lo_q, hi_q + 1)) if hi_q >= lo_q else 0
            x = q * step + (step >> 1)
            if not xlo <= x <= xhi:
                x, s, m = 1, 1, 1  # 1 * 1 / 2: a tie (rem == half, r = 0 even)
        elif kind == 2:  # saturating: big |x * mult|, small shift
            x = int(rng.integers(xhi // 2, xhi + 1)) * (1 if rng.random() < 0.5 else -1)
            m = int(rng.integers(mhi // 2, mhi + 1)) * (1 if rng.random() < 0.5 else -1)
            s = int(rng.integers(0, 9))
        elif kind == 3:  # extremes
            x = int(rng.choice([xlo, xhi, 0, 1, -1, xlo + 1]))
            m = int(rng.choice([mlo, mhi, 0, 1, -1]))
            s = int(rng.choice([0, 1, min(pw - 1, 63), min(pw, 63), 63]))  # shifts are 6 bits: <= 63
        else:  # small
            x, m = int(rng.integers(-300, 301)), int(rng.integers(-300, 301))
            s = int(rng.integers(0, 12))
        xs.append(max(xlo, min(xhi, x)))
        ms.append(max(mlo, min(mhi, m)))
        ss.append(s)
    return xs, ms, ss


@cocotb.test()
async def quantizer_random(dut):
    """All job inputs: RTL psum_quantizer == npukit.sim.quant.quantize, lane by lane."""
    from npukit.sim.quant import quantize

    job = json.loads(Path(os.environ["NPUKIT_RTL_JOB"]).read_text())
    in_bits, out_bits, mult_bits = job["in_bits"], job["out_bits"], job["mult_bits"]
    lanes, n, seed = job["lanes"], job["n"], job["seed"]
    y_w = max(in_bits, out_bits)
    t0 = time.perf_counter()
    xs, ms, ss = make_inputs(n, in_bits, mult_bits, seed)
    want = [quantize(x, m, s, out_bits, mult_bits=mult_bits) for x, m, s in zip(xs, ms, ss, strict=True)]
    t_model = time.perf_counter() - t0
    ties = sum(1 for x, m, s in zip(xs, ms, ss, strict=True) if s and (x * m) & ((1 << s) - 1) == 1 << (s - 1))
    lo, hi = -(1 << (out_bits - 1)), (1 << (out_bits - 1)) - 1
    sats = sum(1 for w in want if w in (lo, hi))
    mism: list[str] = []
    n_bad = 0
    t0 = time.perf_counter()
    dut.en.value = 1
    steps = -(-n // lanes)
    for step in range(steps):
        sl = slice(step * lanes, min(n, (step + 1) * lanes))
        xv, mv, sv = xs[sl], ms[sl], ss[sl]
        dut.x.value = pack_lanes(xv, in_bits)
        dut.mult.value = pack_lanes(mv, mult_bits)
        dut.shift.value = pack_lanes(sv, 6)
        await Timer(1, unit="ns")
        got = unpack_lanes(str(dut.y.value), y_w, list(range(len(xv))), signed=True)
        for i in range(len(xv)):
            w = want[sl.start + i]
            if got[i] != w:
                n_bad += 1
                if not mism:
                    mism.append(
                        f"step (cycle) {step}, lane {i}: x={xv[i]} mult={mv[i]} shift={sv[i]} -> RTL {got[i]}, model {w} "
                        f"(seed {seed})"
                    )
    # en = 0: the identity
    dut.en.value = 0
    xv = xs[:lanes]
    dut.x.value = pack_lanes(xv, in_bits)
    await Timer(1, unit="ns")
    got = unpack_lanes(str(dut.y.value), y_w, list(range(len(xv))), signed=True)
    for i, x in enumerate(xv):
        if got[i] != x:
            n_bad += 1
            if not mism:
                mism.append(f"step (cycle) {steps}, lane {i}: en=0 must pass x={x}, RTL {got[i]} (seed {seed})")
    t_rtl = time.perf_counter() - t0
    res = {"n": n, "lanes": lanes, "steps": steps + 1, "seed": seed, "ties": ties, "saturated": sats,
           "mismatches": n_bad, "first_mismatch": mism[0] if mism else None, "passed": n_bad == 0,
           "rtl_wall_s": t_rtl, "model_wall_s": t_model}
    with open(job["result_path"] + ".tmp", "w") as fh:
        json.dump(res, fh)
    os.replace(job["result_path"] + ".tmp", job["result_path"])
    assert n_bad == 0, mism[0]
