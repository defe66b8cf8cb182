"""Tests of the psum quantizer (npukit.sim.quant) against Python-integer and Fraction references."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from npukit.sim import ConfigError
from npukit.sim.quant import dequantize, ovf, quantize, rne_shift, saturate, wrap


def _ref_wrap(x: int, bits: int) -> int:
    return (x + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)


def _ref_sat(x: int, bits: int) -> int:
    return max(-(2 ** (bits - 1)), min(2 ** (bits - 1) - 1, x))


def _ref_q(x: int, mult: int, shift: int, bits: int) -> int:
    return _ref_sat(round(Fraction(x * mult, 2**shift)), bits)  # round() on a Fraction: ties to even


def test_rne_ties_exhaustive():
    """Every y in [-4*2**s, 4*2**s] for s = 1..10 covers odd and even multiples of one half."""
    for s in range(1, 11):
        ys = range(-(4 << s), (4 << s) + 1)
        expect = [round(Fraction(y, 2**s)) for y in ys]
        assert [rne_shift(y, s) for y in ys] == expect
        np.testing.assert_array_equal(rne_shift(np.array(ys, dtype=np.int64), s), expect)
    # the ties themselves: (2j+1)/2 goes to the even neighbour
    for j in range(-6, 6):
        y = 2 * j + 1  # y / 2 = j + 0.5
        assert rne_shift(y, 1) == (j if j % 2 == 0 else j + 1)
    assert [rne_shift(y, 0) for y in (-3, 0, 5)] == [-3, 0, 5]


def test_rne_large_shifts():
    rng = np.random.default_rng(0)
    y = rng.integers(-(2**62), 2**62, size=2000, dtype=np.int64)
    y[:4] = [2**62, -(2**62), 2**61, -(2**61) - 1]
    for s in (31, 32, 61, 62, 63):
        expect = [round(Fraction(int(v), 2**s)) for v in y]
        np.testing.assert_array_equal(rne_shift(y, s), expect)
        assert [rne_shift(int(v), s) for v in y[:50]] == expect[:50]


def test_quantize_ties_through_multiplier():
    # x * mult lands exactly on odd and even multiples of half an LSB
    for mult in (1, 3, -3, 5, -32768, 32767):
        for shift in (0, 1, 2, 3, 7):
            for x in range(-70, 71):
                assert quantize(x, mult, shift, 12) == _ref_q(x, mult, shift, 12)


def test_saturation_at_both_ends():
    for bits in (2, 8, 16, 32):
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        assert quantize(hi, 1, 0, bits) == hi and quantize(hi + 1, 1, 0, bits) == hi
        assert quantize(lo, 1, 0, bits) == lo and quantize(lo - 1, 1, 0, bits) == lo
        assert quantize(10**12, 7, 0, bits) == hi and quantize(-(10**12), 7, 0, bits) == lo
        assert saturate(np.array([lo - 5, lo, 0, hi, hi + 5]), bits).tolist() == [lo, lo, 0, hi, hi]
    # rounding up past the top saturates: 255/2 = 127.5 -> 128 (even) -> 127 at 8 bits
    assert quantize(255, 1, 1, 8) == 127
    # 253/2 = 126.5 -> 126 (even), no saturation
    assert quantize(253, 1, 1, 8) == 126
    # negative: -257/2 = -128.5 -> -128 (even) fits; -259/2 = -129.5 -> -130 -> -128
    assert quantize(-257, 1, 1, 8) == -128 and quantize(-259, 1, 1, 8) == -128


def test_wrap_semantics():
    for bits in range(1, 11):
        xs = list(range(-(3 << bits), (3 << bits) + 1))
        expect = [_ref_wrap(x, bits) for x in xs]
        assert [wrap(x, bits) for x in xs] == expect
        np.testing.assert_array_equal(wrap(np.array(xs), bits), expect)
    assert wrap(128, 8) == -128 and wrap(-129, 8) == 127 and wrap(255, 8) == -1
    assert wrap(2**63, 64) == -(2**63) and wrap(2**70 + 5, 64) == 5
    big = np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max], dtype=np.int64)
    np.testing.assert_array_equal(wrap(big, 64), big)
    np.testing.assert_array_equal(wrap(big, 63), [_ref_wrap(int(v), 63) for v in big])
    assert ovf(300, 8, "wrap") == 44 and ovf(300, 8, "saturate") == 127


def test_vectorised_equals_scalar_100k():
    rng = np.random.default_rng(1)
    n = 100_000
    for pbits in (32, 62):  # 62-bit psums times a 16-bit multiplier overflow int64: the exact path
        x = rng.integers(-(2 ** (pbits - 1)), 2 ** (pbits - 1), size=n, dtype=np.int64)
        x[:4] = [-(2 ** (pbits - 1)), 2 ** (pbits - 1) - 1, 0, -1]
        mult = int(rng.integers(-(2**15), 2**15))
        shift = int(rng.integers(0, 64))
        bits = int(rng.integers(1, 65))
        vec = quantize(x, mult, shift, bits)
        assert vec.dtype == np.int64 and vec.shape == x.shape
        assert vec.tolist() == [quantize(int(v), mult, shift, bits) for v in x]
        sample = rng.choice(n, 500, replace=False)
        assert [int(vec[i]) for i in sample] == [_ref_q(int(x[i]), mult, shift, bits) for i in sample]
    # wrap and saturate, vector == scalar
    x = rng.integers(-(2**40), 2**40, size=n, dtype=np.int64)
    assert wrap(x, 17).tolist() == [wrap(int(v), 17) for v in x]
    assert saturate(x, 33).tolist() == [saturate(int(v), 33) for v in x]


def test_random_against_fraction_reference():
    rng = np.random.default_rng(2)
    for _ in range(3000):
        x = int(rng.integers(-(2**31), 2**31))
        mult = int(rng.integers(-(2**15), 2**15))
        shift = int(rng.integers(0, 40))
        bits = int(rng.integers(2, 40))
        assert quantize(x, mult, shift, bits) == _ref_q(x, mult, shift, bits)


def test_dequantize():
    assert dequantize(3, 4, 2) == pytest.approx(3.0)
    np.testing.assert_allclose(dequantize(np.array([1, -2]), -8, 5), [-4.0, 8.0])
    # round trip within half an LSB of the quantized grid
    x = np.arange(-1000, 1000)
    q = quantize(x, 37, 6, 32)
    assert np.all(np.abs(dequantize(q, 37, 6) - x) <= 0.5 * 2**6 / 37 + 1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: quantize(1, 1, 64, 8), "shift"),
        (lambda: quantize(1, 1, -1, 8), "shift"),
        (lambda: quantize(1, 2**15, 0, 8), "multiplier"),
        (lambda: quantize(1, 3, 0, 8, mult_bits=2), "multiplier"),
        (lambda: quantize(1, 1, 0, 0), "bits"),
        (lambda: wrap(1, 65), "bits"),
        (lambda: saturate(np.array([1.5]), 8), "integer"),
        (lambda: ovf(1, 8, "clip"), "overflow mode"),
        (lambda: dequantize(1, 0, 0), "non-zero"),
    ],
)
def test_bad_parameters(call, match):
    with pytest.raises(ConfigError, match=match) as exc:
        call()
    assert "\n" not in str(exc.value)
