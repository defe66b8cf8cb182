"""The spatial unrollings the loop-nest mapper (:func:`npukit.sim.nest_mapper.map_layer`) tries on a layer: one
loop dimension per array dimension, highest utilization first, those whose lowest memories hold what the
unrolling puts there; and ZigZag's clipping of a given unrolling to the layer and the array."""

from __future__ import annotations

import heapq
import itertools
import math

from .errors import ConfigError
from .hardware import Hardware
from .loopnest import NestLayer, spatial_per_level
from .nest_alloc import _tensor

SPATIAL_CANDIDATES = ("K", "C", "OX", "OY", "G", "FX", "FY", "B")


def spatial_candidates(hw: Hardware, layer: NestLayer, keep: int = 3) -> list[dict[str, dict[str, int]]]:
    """The ``keep`` unrollings (one loop dimension per array dimension, clipped to the layer) of highest
    utilization; ``hw.array.allowed`` restricts the loop dimensions of each array dimension."""
    return list(itertools.islice(ranked_spatial(hw, layer), keep))


def ranked_spatial(hw: Hardware, layer: NestLayer):
    """The unrollings of :func:`spatial_candidates` that fit, highest utilization first (ties: in enumeration
    order), each checked against the memories only when the caller asks for the next. When none fits (a GEMV's
    one long loop unrolled over every array dimension overfills a register, say), the same enumeration again with
    array dimensions allowed to stay idle (an empty unrolling, "": that dimension's PEs do no work)."""
    dims = list(hw.array.dims.items())
    allowed = getattr(hw.array, "allowed", None) or {}
    opts = [[d for d in allowed.get(name, SPATIAL_CANDIDATES) if layer.dims.get(d, 1) > 1] or ["K"] for name, _ in dims]
    found = False
    for sm in _fitting(hw, layer, opts):
        found = True
        yield sm
    if not found:
        yield from _fitting(hw, layer, [[*o, ""] for o in opts])


def _fitting(hw: Hardware, layer: NestLayer, opts: list[list[str]]):
    """The unrollings taking one of ``opts[i]`` on array dimension ``i`` that fit, by utilization."""
    dims = list(hw.array.dims.items())
    scored = _scored([size for _, size in dims], opts, layer.dims)
    heapq.heapify(scored)  # popped lazily: the caller usually wants only the first few that fit
    while scored:
        _, _, combo, fs = heapq.heappop(scored)
        sm = {name: ({d: f} if d else {}) for (name, _), d, f in zip(dims, combo, fs, strict=True)}
        if spatial_fits(hw, layer, sm):
            yield sm


def _scored(sizes: list[int], opts: list[list[str]], loops: dict[str, int]) -> list[tuple]:
    """(-PEs used, enumeration index, loop per array dim, factor per array dim) of every choice of one loop of
    ``opts[i]`` per array dimension ``i`` of ``sizes``, in ``itertools.product`` order (depth first, each prefix's
    factors and product computed once): a factor is what the dimension and the loop's iterations left allow."""
    out: list[tuple] = []
    n_dims = len(sizes)
    combo: list[str] = [""] * n_dims
    fs: list[int] = [0] * n_dims
    left: dict[str, int] = {}  # what the array dims so far leave of each loop they unroll

    def walk(i: int, used: float) -> None:
        if i == n_dims:
            out.append((-used, len(out), tuple(combo), list(fs)))
            return
        size = sizes[i]
        for d in opts[i]:
            if not d:  # this array dimension idle
                combo[i], fs[i] = d, 1
                walk(i + 1, used)
                continue
            had = d in left
            n = left[d] if had else loops.get(d, 1)
            f = min(size, n)
            left[d] = math.ceil(n / max(f, 1))
            combo[i], fs[i] = d, f
            walk(i + 1, used * f)
            if had:
                left[d] = n
            else:
                del left[d]

    walk(0, 1.0)
    return out


def spatial_fits(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]]) -> bool:
    """Whether each operand's lowest memory holds the data its spatial loops put there."""
    for op in ("W", "I", "O"):
        loops = spatial_per_level(hw, op, sm)[0]
        bits = hw.bits["O_final"] if op == "O" else hw.bits[op]
        if _tensor(layer, op, loops) * bits > hw.levels(op)[0].size_bits:
            return False
    return True


def clip_spatial(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """ZigZag's ``check_and_reduce``: each unrolling clipped to the layer's loop size and the array dimension's
    size (an unknown array dimension is an error); factors of 1 dropped."""
    out: dict[str, dict[str, int]] = {}
    for dim, loops in sm.items():
        if dim not in hw.array.dims:
            raise ConfigError(f"spatial mapping names array dimension {dim}, {hw.name} has {', '.join(hw.array.dims)}")
        out[dim] = {}
        for d, f in loops.items():
            f = min(f, layer.dims.get(d, 1), hw.array.dims[dim])
            if f > 1:
                out[dim][d] = f
    return out
