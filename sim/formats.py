"""Number formats per operand (int4, int8, int16, fp8, fp16, bf16, fp32) and the MAC energy of each pair.

The energies come from an :class:`~npukit.sim.energy.EnergyTable` (``horowitz45``: Horowitz, ISSCC 2014,
45 nm): integer formats use its integer multiply (quadratic in the widths) plus an add at the accumulator
width; fp16 and fp32 use its cited fp16/fp32 multiply and add. Formats the table does not cite are
**estimates**, marked as such by :func:`mac_energy` (second value ``True``):

* bf16: the fp16 entries scaled by the mantissa multiplier area, (8/11)^2 for the multiply (8-bit vs 11-bit
  significands), the fp16 add unchanged (estimate);
* fp8 (E4M3): the fp16 entries scaled by (4/11)^2 for the multiply, half the fp16 add (estimate);
* int4: the table's quadratic integer multiply at 4 x 4 bits (an extrapolation below its 8-bit anchor).

A mixed pair (e.g. int8 weights, fp16 activations) is priced as the wider format's MAC.
"""

from __future__ import annotations

from dataclasses import dataclass

from .energy import EnergyTable
from .errors import ConfigError


@dataclass(frozen=True)
class NumberFormat:
    """A number format: ``bits`` wide; ``kind`` int or fp; ``accumulate`` the accumulator width (bits)."""

    name: str
    bits: int
    kind: str
    accumulate: int


FORMATS = {
    "int4": NumberFormat("int4", 4, "int", 16),
    "int8": NumberFormat("int8", 8, "int", 32),
    "int16": NumberFormat("int16", 16, "int", 32),
    "fp8": NumberFormat("fp8", 8, "fp", 16),
    "fp16": NumberFormat("fp16", 16, "fp", 32),
    "bf16": NumberFormat("bf16", 16, "fp", 32),
    "fp32": NumberFormat("fp32", 32, "fp", 32),
}

# Estimate factors relative to the fp16 entries (see the module docstring).
_FP_SCALE = {"fp16": (1.0, 1.0), "bf16": ((8 / 11) ** 2, 1.0), "fp8": ((4 / 11) ** 2, 0.5)}


def number_format(name: str) -> NumberFormat:
    """The format called ``name`` (raises ConfigError listing the known ones)."""
    try:
        return FORMATS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown number format '{name}' (known: {', '.join(FORMATS)})") from None


def mac_energy(table: EnergyTable, weight: str, activation: str) -> tuple[float, bool]:
    """(pJ per MAC, whether it is an estimate) for ``weight`` x ``activation`` formats on ``table``."""
    w, a = number_format(weight), number_format(activation)
    wide = max((w, a), key=lambda f: (f.kind == "fp", f.bits))
    if wide.kind == "int":
        ai, bi = (w.bits, a.bits) if w.kind == a.kind == "int" else (wide.bits, wide.bits)
        return table.mac(ai, bi, wide.accumulate), 4 in (ai, bi)
    if wide.name == "fp32":
        return table.fp("mult", 32) + table.fp("add", 32), False
    mult, add = _FP_SCALE[wide.name]
    return table.fp("mult", 16) * mult + table.fp("add", 16 if wide.accumulate <= 16 else 32) * add, wide.name != "fp16"
