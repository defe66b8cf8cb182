"""Lower bounds on what the loop-nest mapper (:func:`npukit.sim.nest_mapper.map_layer`) can find for a layer,
computed without mapping it: the fewest temporal cycles any spatial unrolling leaves (:func:`temporal_floor`) and
the fewest elements of each operand a core must receive from or send off chip (:func:`touched`).

A mapping's cycles are ZigZag's ``temporal + stall + on-loading + off-loading + drain``
(:mod:`npukit.sim.nest_latency`), each term at least 0; its ``temporal`` is the product of the temporal loops,
``prod_d ceil(n_d / s_d)`` with ``s_d`` the product of the factors the unrolling puts on loop ``d`` (each clipped to
the loop and to its array dimension: :func:`npukit.sim.nest_spatial.clip_spatial`), and its ``drain`` the units
used along each systolic array dimension less one; both depend on the unrolling only. The floor is the least of
their sum over every unrolling of one loop (or none) per array dimension, each factor as large as the array
dimension and what the array dimensions before it leave of the loop allow (as the mapper sizes them), and over any
other unrollings the caller names (e.g. the mixed ones of
:func:`npukit.sim._multicore_nest.mixed_spatial`). It does not ask which unrollings fit the memories, so it is at or
below what the mapper picks among the ones that fit (:func:`npukit.sim.nest_spatial.ranked_spatial`), idle array
dimensions included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .hardware import Hardware
from .loopnest import NestLayer
from .nest_spatial import SPATIAL_CANDIDATES


def unrolling_cycles(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]]) -> int:
    """Temporal cycles (iterations of the temporal loops) that unrolling ``sm`` ({array dim: {loop: factor}})
    leaves of ``layer`` on ``hw``'s array, ``prod_d ceil(n_d / s_d)`` with factors clipped as the mapper clips them,
    plus its drain (ZigZag's: each systolic array dimension's used units less one): cycles."""
    spatial: dict[str, int] = {}
    drain = 0
    for dim, loops in sm.items():
        size = hw.array.dims.get(dim, 1)
        used = 1
        for d, f in loops.items():
            f = max(1, min(f, layer.dims.get(d, 1), size))
            spatial[d] = spatial.get(d, 1) * f
            used *= f
        drain += used - 1 if dim in hw.array.systolic else 0
    return math.prod(math.ceil(n / spatial.get(d, 1)) for d, n in layer.dims.items()) + drain


def _one_loop_floor(sizes: tuple[int, ...], systolic: tuple[bool, ...], dims: dict[str, int]) -> int:
    """The fewest temporal plus drain cycles over every choice of one loop (or none) per array dimension of
    ``sizes`` (depth first; each factor the largest the dimension and the loop's iterations left allow, as
    :func:`npukit.sim.nest_spatial.ranked_spatial` sizes it; ``systolic``: the dimensions that drain). The same
    enumeration as ``nest_spatial._scored``, walked without building its list: reusing that list made the split
    search's cold calls about 15% slower (bench_vs_stream, four alternating runs)."""
    names = [d for d in SPATIAL_CANDIDATES if dims.get(d, 1) > 1]
    base = math.prod(n for d, n in dims.items() if d not in names)  # loops of size 1 (or not unrollable)
    best = math.prod(dims[d] for d in names) * base
    left = {d: dims[d] for d in names}

    def walk(i: int, drain: int) -> None:
        nonlocal best
        if i == len(sizes):
            best = min(best, math.prod(left.values()) * base + drain)
            return
        walk(i + 1, drain)  # the dimension idle
        for d in names:
            n = left[d]
            if n > 1:
                f = min(sizes[i], n)
                left[d] = math.ceil(n / f)
                walk(i + 1, drain + (f - 1 if systolic[i] else 0))
                left[d] = n

    walk(0, 0)
    return best


def temporal_floor(hw: Hardware, layer: NestLayer, extra: Iterable[dict[str, dict[str, int]]] = ()) -> int:
    """A lower bound on the temporal plus drain cycles of any mapping of ``layer`` on ``hw`` whose unrolling puts
    one loop (or none) on each array dimension, or is one of ``extra``; hence on the mapping's cycles (cycles)."""
    sizes = tuple(hw.array.dims.values())
    systolic = tuple(d in hw.array.systolic for d in hw.array.dims)
    return min([_one_loop_floor(sizes, systolic, layer.dims), *(unrolling_cycles(hw, layer, sm) for sm in extra)])


def touched(layer: NestLayer) -> tuple[float, float, float]:
    """(input, weight, output) elements of ``layer`` that any mapping moves across a core's top memory at least
    once, as ZigZag counts them (:func:`npukit.sim.loopnest.r_size`): all weights (``K C FY FX G``) and outputs
    (``B K OY OX G``); of the inputs at least ``B C G OY OX``, since its input tiles are clipped to the input extent,
    which for a stride-1 conv is the output's (a 3x3 conv on a 9x9 input moves 7x7 per channel)."""
    d = {k: layer.dims.get(k, 1) for k in ("B", "K", "C", "OY", "OX", "FY", "FX", "G")}
    return (float(d["B"] * d["C"] * d["G"] * d["OY"] * d["OX"]), float(d["K"] * d["C"] * d["FY"] * d["FX"] * d["G"]),
            float(d["B"] * d["K"] * d["OY"] * d["OX"] * d["G"]))
