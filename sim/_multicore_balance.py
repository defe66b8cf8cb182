"""Shares of a split over MAC cores that differ (a 128 x 128 core beside 32 x 32 ones): sized so that the cores
finish together, not equal.

An even split leaves the big core idle while the small ones work through the same share (a 4096^3 GEMM on one
128 x 128 and two 32 x 32 cores: 39.1 M cycles, three times the big core alone). Here each kind of core's cycles for
a share of ``s`` (rows, columns, reduction, batch elements, image rows or input channels: what the split cuts,
:func:`~npukit.sim._multicore_cost.split_extent`) are taken as ``a + b s``, from the core's own model at two sizes
(an even share and the whole extent): ``a`` its fixed cost (fill and drain, weight loads, a fold's overhead), ``b``
its cycles per unit. The shares then fill to a common finish time ``T`` (water filling): core ``i`` gets
``(T - a_i) / b_i``, and a core whose fixed cost alone exceeds ``T`` gets nothing; rounded to whole units that add
up to the extent. Identical cores keep the even split (:func:`~npukit.sim._multicore_cost.even_bounds`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence


def fill_shares(size: int, costs: Sequence[tuple[float, float]]) -> list[float]:
    """Real shares of ``size`` (summing to it) for cores of cycles ``a + b * share`` (``costs[i] = (a, b)``, ``b > 0``)
    that finish together: :math:`(T - a_i) / b_i` for the cores whose fixed cost ``a_i`` is below the common finish
    time ``T``, 0 for the others."""
    order = sorted(range(len(costs)), key=lambda i: costs[i][0])
    active: list[int] = []
    t = 0.0
    for n, i in enumerate(order):
        active.append(i)
        t = (size + sum(costs[j][0] / costs[j][1] for j in active)) / sum(1 / costs[j][1] for j in active)
        if n + 1 == len(order) or t <= costs[order[n + 1]][0]:
            break
    return [max(0.0, (t - costs[i][0]) / costs[i][1]) if i in active else 0.0 for i in range(len(costs))]


def whole_bounds(size: int, shares: Sequence[float]) -> tuple[int, ...]:
    """Cut points (``len(shares) + 1``, from 0 to ``size``) of whole-unit shares nearest ``shares`` (largest
    remainders first), in the given order."""
    total = sum(shares) or 1.0
    real = [size * s / total for s in shares]
    whole = [math.floor(x) for x in real]
    for i in sorted(range(len(real)), key=lambda i: (whole[i] - real[i], i))[:size - sum(whole)]:
        whole[i] += 1
    out = [0]
    for w in whole:
        out.append(out[-1] + w)
    return tuple(out)


def balanced_bounds(size: int, kinds: Sequence[object], cycles: Callable[[object, int], float],
                    throughput: Callable[[object], float], even: int) -> tuple[int, ...]:
    """Cut points of ``size`` over cores of ``kinds`` (one entry per core, equal entries for identical cores) such
    that they finish together: ``cycles(kind, share)`` is a core's cycles for a share (called at ``even``, the even
    share, and at ``size`` once per kind); a kind whose two sizes give no positive slope is taken as
    ``share / throughput(kind)``, as are all when ``size`` is the even share."""
    fit: dict[object, tuple[float, float]] = {}
    for k in dict.fromkeys(kinds):
        a, b = 0.0, 1.0 / throughput(k)
        if size > even:
            c1, c2 = cycles(k, even), cycles(k, size)
            slope = (c2 - c1) / (size - even)
            if math.isfinite(slope) and slope > 0 and math.isfinite(c1):
                a, b = c1 - slope * even, slope
        fit[k] = (a, b)
    return whole_bounds(size, fill_shares(size, [fit[k] for k in kinds]))


def _pipeline_latency(load: Sequence[float], cores: Sequence[Sequence[int]], speed: Sequence[float], tiles: int) -> float:
    """A pipeline's latency (ns) over ``tiles`` tiles, stage ``s`` doing ``load[s]`` MACs evenly over ``cores[s]``."""
    times = [w / (len(cs) * min(speed[c] for c in cs)) for w, cs in zip(load, cores, strict=True)]
    return (sum(times) + (tiles - 1) * max(times)) / tiles


def pipeline_plan(work: Sequence[float], speed: Sequence[float], tiles: Callable[[int], int],
                  max_cuts: int = 256) -> tuple[list[int], list[list[int]]]:
    """Stages of a pipelined group over cores that differ: the stage (0, 1, ...; contiguous, in order) of each of its
    GEMMs, whose MACs are ``work``, and each stage's cores (indices into ``speed``, each core's MACs per ns, fastest
    first; a core left out idles). A stage's GEMMs are split evenly over its cores (its producer's and consumer's
    shares must line up), so a stage of ``n`` cores runs at ``n`` times its slowest core's speed; a stage's time is
    its MACs over that. For each number of stages and each cut of the GEMMs into contiguous stages (the first
    ``max_cuts``), the cores are dealt fastest first: the first ones to the stages with the most MACs, one each, then
    each to the stage (or to none) that lowers the pipeline's latency most, ``(sum + (t - 1) max) / t`` of the stage
    times over its ``tiles(stages)`` tiles, as the pipeline is timed. The lowest latency wins (fewer stages on a
    tie)."""
    best: tuple[float, list[int], list[list[int]]] | None = None
    for n in range(1, min(len(work), len(speed)) + 1):
        t = max(1, tiles(n))
        for k, cut in enumerate(itertools.combinations(range(1, len(work)), n - 1)):
            if k >= max_cuts:
                break
            edges = (0, *cut, len(work))
            load = [float(sum(work[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
            cores: list[list[int]] = [[] for _ in range(n)]
            for j, s in enumerate(sorted(range(n), key=lambda s: (-load[s], s))):
                cores[s] = [j]
            for c in range(n, len(speed)):
                now = _pipeline_latency(load, cores, speed, t)
                trial = [_pipeline_latency(load, [cs + [c] if i == s else cs for i, cs in enumerate(cores)], speed, t)
                         for s in range(n)]
                s = min(range(n), key=lambda s: (trial[s], s))
                if trial[s] < now:
                    cores[s].append(c)
            val = _pipeline_latency(load, cores, speed, t)
            if best is None or val < best[0]:
                best = (val, [s for s in range(n) for _ in range(edges[s], edges[s + 1])], cores)
    assert best is not None and math.isfinite(best[0])
    return best[1], best[2]
