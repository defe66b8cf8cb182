"""The psum quantizer of PsumQuant: the one bit-exact definition shared by the model and the RTL.

Every function takes either a scalar (Python or NumPy integer; returns a Python ``int``) or a NumPy
integer array (returns an ``int64`` array of the same shape). Array arithmetic is done in ``int64``
when it provably cannot overflow and falls back to exact Python integers otherwise, so the array
form always equals the scalar form element by element.

Bit semantics (all integers are two's complement; ``bits`` is a width in bits, 1..64):

* ``wrap(x, bits)``: keep the low ``bits`` bits of ``x`` and read them as signed:
  ``((x + 2**(bits-1)) mod 2**bits) - 2**(bits-1)`` (what a ``bits``-wide adder without overflow
  handling leaves in its register).
* ``saturate(x, bits)``: clamp ``x`` to ``[-2**(bits-1), 2**(bits-1) - 1]``.
* ``ovf(x, bits, mode)``: ``saturate`` when ``mode == 'saturate'``, ``wrap`` when ``mode == 'wrap'``.
* ``rne_shift(y, shift)``, ``shift`` in 0..63: ``y / 2**shift`` rounded to the nearest integer, ties
  to even. Bit-exact form (the RTL's): ``r = y >> shift`` (arithmetic, i.e. floor);
  ``rem = y & (2**shift - 1)``; ``half = 2**(shift-1)``; result ``r + 1`` when ``rem > half`` or
  (``rem == half`` and ``r`` is odd), else ``r``. ``shift == 0`` returns ``y``.
* ``quantize(x, mult, shift, bits)`` = ``saturate(rne_shift(x * mult, shift), bits)``: ``x`` is a
  signed P-bit psum leaving the array, ``mult`` a signed integer of ``mult_bits`` bits (default 16,
  MULT_W of ``rtl/psum_quantizer.v``), ``bits`` the accumulator width B. The quantizer always
  saturates (never wraps), whatever the array's overflow mode.
* ``dequantize(q, mult, shift)`` = ``q * 2**shift / mult`` as float64: the real value a quantized
  accumulator stands for.

The accumulator that follows the quantizer (``rtl/accumulator.v``, :func:`npukit.sim.cycle.run_gemm`)
computes ``acc <- ovf(acc + q, B, mode)`` with the array's overflow mode; the first K-fold of an
output writes ``acc <- ovf(q, B, mode)`` (= ``q`` whenever ``q`` fits B bits, always true with a
quantizer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .datapath import OVERFLOW_MODES
from .errors import ConfigError

__all__ = ["quantize", "rne_shift", "saturate", "wrap", "ovf", "dequantize", "check_mult"]

MULT_BITS = 16
MAX_SHIFT = 63

IntOrArray = Any  # int | numpy integer | numpy integer ndarray


def _check_bits(bits: Any, what: str = "bits") -> int:
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or not 1 <= int(bits) <= 64:
        raise ConfigError(f"{what} must be an integer width in 1..64 bits, got {bits!r}")
    return int(bits)


def _check_shift(shift: Any) -> int:
    if isinstance(shift, bool) or not isinstance(shift, int | np.integer) or not 0 <= int(shift) <= MAX_SHIFT:
        raise ConfigError(f"quantizer shift must be an integer in 0..{MAX_SHIFT}, got {shift!r}")
    return int(shift)


def check_mult(mult: Any, mult_bits: int = MULT_BITS) -> int:
    """Validate a quantizer multiplier: a signed integer of ``mult_bits`` bits; returns it as int."""
    mult_bits = _check_bits(mult_bits, "mult_bits")
    lo, hi = -(1 << (mult_bits - 1)), (1 << (mult_bits - 1)) - 1
    if isinstance(mult, bool) or not isinstance(mult, int | np.integer) or not lo <= int(mult) <= hi:
        raise ConfigError(f"quantizer multiplier must be a signed {mult_bits}-bit integer in [{lo}, {hi}], got {mult!r}")
    return int(mult)


def _split(x: Any, name: str = "x") -> tuple[bool, Any]:
    """(is_array, value): value is a Python int or an int64/object ndarray of Python ints."""
    if isinstance(x, bool | np.bool_):
        raise ConfigError(f"{name} must be an integer or an integer array, got a bool")
    if isinstance(x, int | np.integer):
        return False, int(x)
    arr = np.asarray(x)
    if arr.dtype == object:
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in arr.flat):
            raise ConfigError(f"{name} must hold integers only")
        return True, arr
    if not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{name} must be an integer or an integer array, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        return True, arr.astype(object)
    return True, arr.astype(np.int64)


def _to_int64(arr: np.ndarray, what: str) -> np.ndarray:
    """Object array of Python ints that are known to fit int64 -> int64 array."""
    if arr.dtype == object:
        return np.array([int(v) for v in arr.flat], dtype=np.int64).reshape(arr.shape)
    return arr


def _pyint(arr: np.ndarray) -> np.ndarray:
    """Any integer array -> object array of Python ints (exact arithmetic)."""
    out = np.empty(arr.shape, dtype=object)
    out.flat[:] = [int(v) for v in arr.flat]
    return out


# ---------------------------------------------------------------------------------- scalar cores
def _wrap_int(x: int, bits: int) -> int:
    half = 1 << (bits - 1)
    return ((x + half) & ((1 << bits) - 1)) - half


def _sat_int(x: int, bits: int) -> int:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return lo if x < lo else hi if x > hi else x


def _rne_int(y: int, shift: int) -> int:
    if shift == 0:
        return y
    r = y >> shift
    rem = y & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    return r + 1 if rem > half or (rem == half and r & 1) else r


# ---------------------------------------------------------------------------------- public API
def wrap(x: IntOrArray, bits: int) -> IntOrArray:
    """Two's-complement wrap of ``x`` to ``bits`` bits (see module docstring)."""
    bits = _check_bits(bits)
    is_arr, v = _split(x)
    if not is_arr:
        return _wrap_int(v, bits)
    if v.dtype == object or bits == 64:
        if v.dtype != object:
            return v.copy()  # an int64 already is its own 64-bit wrap
        return _to_int64(np.vectorize(lambda e: _wrap_int(int(e), bits), otypes=[object])(v), "wrap")
    half = np.int64(1 << (bits - 1))
    mask = np.int64((1 << bits) - 1)
    # (v + half) may overflow int64 only when bits == 64 (excluded above); uint arithmetic avoids UB anyway
    return (((v.astype(np.uint64) + np.uint64(half)) & np.uint64(mask)).astype(np.int64)) - half


def saturate(x: IntOrArray, bits: int) -> IntOrArray:
    """Clamp ``x`` to the signed ``bits``-bit range ``[-2**(bits-1), 2**(bits-1) - 1]``."""
    bits = _check_bits(bits)
    is_arr, v = _split(x)
    if not is_arr:
        return _sat_int(v, bits)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if v.dtype == object:
        return _to_int64(np.vectorize(lambda e: _sat_int(int(e), bits), otypes=[object])(v), "saturate")
    return np.clip(v, lo, hi).astype(np.int64)


def ovf(x: IntOrArray, bits: int, mode: str) -> IntOrArray:
    """``saturate`` or ``wrap`` to ``bits`` bits as ``mode`` says (``'saturate'`` | ``'wrap'``)."""
    if mode == "saturate":
        return saturate(x, bits)
    if mode == "wrap":
        return wrap(x, bits)
    raise ConfigError(f"unknown overflow mode '{mode}': use one of {', '.join(OVERFLOW_MODES)}")


def rne_shift(y: IntOrArray, shift: int) -> IntOrArray:
    """``y / 2**shift`` rounded to nearest, ties to even, bit-exact (see module docstring).

    Arrays must hold values that fit int64 (the result then fits too)."""
    shift = _check_shift(shift)
    is_arr, v = _split(y, "y")
    if not is_arr:
        return _rne_int(v, shift)
    if v.dtype == object:
        return np.vectorize(lambda e: _rne_int(int(e), shift), otypes=[object])(v)
    if shift == 0:
        return v.copy()
    r = v >> np.int64(shift)
    rem = v & np.int64((1 << shift) - 1)
    half = np.int64(1 << (shift - 1))
    up = (rem > half) | ((rem == half) & ((r & 1) == 1))
    return r + up.astype(np.int64)


def quantize(x: IntOrArray, mult: int, shift: int, bits: int, mult_bits: int = MULT_BITS) -> IntOrArray:
    """The psum quantizer: ``saturate(rne_shift(x * mult, shift), bits)``.

    ``x``: psums (integers, any width), ``mult``: signed ``mult_bits``-bit multiplier, ``shift``:
    0..63 (bits), ``bits``: output (accumulator) width B in bits. Returns an int (scalar ``x``) or
    an int64 array (array ``x``); raises :class:`ConfigError` on an out-of-range parameter."""
    mult = check_mult(mult, mult_bits)
    shift = _check_shift(shift)
    bits = _check_bits(bits)
    is_arr, v = _split(x)
    if not is_arr:
        return _sat_int(_rne_int(v * mult, shift), bits)
    if v.dtype != object and v.size:
        big = max(abs(int(v.min())), abs(int(v.max())))
        if big * abs(mult) < (1 << 63):
            return saturate(rne_shift(v * np.int64(mult), shift), bits)
    if v.size == 0:
        return np.zeros(v.shape, dtype=np.int64)
    exact = _pyint(v) * mult
    return _to_int64(np.vectorize(lambda e: _sat_int(_rne_int(int(e), shift), bits), otypes=[object])(exact), "quantize")


def dequantize(q: IntOrArray, mult: int, shift: int) -> float | np.ndarray:
    """Real value a quantized accumulator stands for: ``q * 2**shift / mult`` (float64)."""
    shift = _check_shift(shift)
    if isinstance(mult, bool) or not isinstance(mult, int | np.integer) or int(mult) == 0:
        raise ConfigError(f"dequantize needs a non-zero integer multiplier, got {mult!r}")
    is_arr, v = _split(q, "q")
    scale = float(2**shift) / float(int(mult))
    if not is_arr:
        return float(v) * scale
    return v.astype(np.float64) * scale
