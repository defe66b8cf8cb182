"""Read one layer of a ZigZag 3.9.1 run (its ``<layer>_complete.json`` dump) into npukit's loop-nest terms:
the layer (:class:`~npukit.sim.loopnest.NestLayer`), the spatial unrolling ZigZag used
(``{array dim: {loop dim: factor}}``), its temporal mapping per operand and memory level (innermost
first, after ZigZag's stationarity merge-down), the operand widths, and ZigZag's own results (latency
terms, total energy), so npukit's models can be evaluated on ZigZag's mapping and compared term by term.

Loop dimension ``D`` (ZigZag's GEMM batch) becomes ``B``. Strides come from the equation relations
(``IX = 2*OX + 1*FX``). The unpadded input extent (ZigZag clips a partially relevant tile to it) is not
in the dump: it is recovered from the top memory's utilisation (``utilization`` x size = the bits of
every operand held there; the input's share over ``B*C*G`` elements is ``IY*IX``, square when the output
is square or when it had to be clipped).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .hardware import Hardware
from .loopnest import Loop, NestLayer


@dataclass
class ZigZagCase:
    """One dumped layer: ``layer``, ``spatial``, ``temporal``, ``bits`` (W, I, O, O_final), ``accelerator``
    (its name), ``latency`` (ZigZag's ``data_onloading``, ``computation``, ``data_offloading``; cycles) and
    ``energy_pj`` (its total)."""

    layer: NestLayer
    spatial: dict[str, dict[str, int]]
    temporal: dict[str, list[list[Loop]]]
    bits: dict[str, int]
    accelerator: str
    latency: dict[str, float]
    energy_pj: float
    top_bits: float  # bits of all operands in the top memory (for the input extent)


def _dim(d: str) -> str:
    return "B" if d == "D" else d


def _loop(s: str) -> Loop:
    d, f = s.strip("() ").split(",")
    return _dim(d.strip()), int(f)


def read_dump(path: str | Path) -> ZigZagCase:
    """A ``*_complete.json`` dump -> :class:`ZigZagCase` (raises ConfigError if it is not one)."""
    try:
        z = json.loads(Path(path).read_text())
        inp, lay = z["inputs"], z["inputs"]["layer"]
        dims = {_dim(d): int(n) for d, n in lay["loop_dimensions"].items()}
        stride = {}
        for rel in lay.get("equation_relations") or []:
            m = re.match(r"\s*I([XY])\s*=\s*(\d+)\*O[XY]", rel)
            if m:
                stride[m.group(1)] = int(m.group(2))
        spatial = {oa: {_dim(d): int(f) for d, f in loops.items()} for oa, loops in lay["user_spatial_mapping"].items()}
        temporal = {op: [[_loop(s) for s in lv] for lv in lvs] for op, lvs in inp["temporal_mapping"].items()}
        bits = {k: int(v) for k, v in lay["operand_precision"].items()}
        top = z["outputs"]["memory"]["utilization"]["I"][-1] * inp["accelerator"]["mem_size_dict"]["I1"][-1]
        layer = NestLayer(str(lay["name"]).strip("/").replace("/", "."), dims, (stride.get("Y", 1), stride.get("X", 1)))
        return ZigZagCase(layer, spatial, temporal, bits, str(inp["accelerator"]["name"]), dict(z["outputs"]["latency"]),
                          float(z["outputs"]["energy"]["energy_total"]), top)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(f"{path}: not a ZigZag layer dump ({exc})") from None


def input_extent(case: ZigZagCase, hw: Hardware) -> tuple[int, int]:
    """The unpadded input extent (IY, IX) of a conv case, from the bits its top input memory holds; (0, 0)
    for a GEMM (no partially relevant loops)."""
    d = case.layer.dims
    if "OY" not in d or "FY" not in d:
        return (0, 0)
    sy, sx = case.layer.stride
    py, px = sy * (d["OY"] - 1) + d["FY"], sx * (d["OX"] - 1) + d["FX"]
    top = hw.levels("I")[-1]
    bits = round(case.top_bits)
    for op in ("W", "O"):
        if top in hw.levels(op):
            n = math.prod(d.get(k, 1) for k in (("K", "C", "FY", "FX", "G") if op == "W" else ("B", "K", "OY", "OX", "G")))
            bits -= n * case.bits["O_final" if op == "O" else "W"]
    area = bits / case.bits["I"] / (d.get("B", 1) * d.get("C", 1) * d.get("G", 1))
    if abs(area - py * px) < 0.5 or area <= 0:
        return (py, px)
    side = round(math.sqrt(area))
    if py == px or (side <= py and side <= px):
        return (side, side)
    return (min(py, side), min(px, round(area / min(py, side))))


def case_inputs(case: ZigZagCase, hw: Hardware) -> tuple[Hardware, NestLayer]:
    """(``hw`` with the dump's operand widths, the layer with its input extent) of ``case``."""
    from dataclasses import replace

    hw = replace(hw, bits={k: case.bits[k] for k in ("W", "I", "O", "O_final")})
    return hw, replace(case.layer, in_extent=input_extent(case, hw))
