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


def fit_costs(size: int, kinds: Sequence[object], cycles: Callable[[object, int], float],
              throughput: Callable[[object], float], even: int) -> dict[object, tuple[float, float]]:
    """Each kind's cycles for a share of ``s`` units of ``size`` as ``(a, b)``, ``a + b s``: ``cycles(kind, share)``
    is a core's cycles for a share (called at ``even``, the even share, and at ``size`` once per kind); a kind whose
    two sizes give no positive slope is taken as ``s / throughput(kind)``, as are all when ``size`` is the even
    share."""
    fit: dict[object, tuple[float, float]] = {}
    for k in dict.fromkeys(kinds):
        line = line_through(even, cycles(k, even), size, cycles(k, size)) if size > even else None
        fit[k] = line or (0.0, 1.0 / throughput(k))
    return fit


def refit_costs(fit: dict[object, tuple[float, float]], cycles: Callable[[object, int], float], even: int,
                found: dict[object, int]) -> dict[object, tuple[float, float]]:
    """:func:`fit_costs`' lines refitted through the even share and the share ``found[kind]`` (at least 1) a first cut
    gave each kind, where the two differ and the line rises: the fit's second try, nearer the cut it will make."""
    line = dict(fit)
    for k, at in found.items():
        if at != even:
            line[k] = line_through(even, cycles(k, even), at, cycles(k, at)) or line[k]
    return line


def line_through(x1: int, c1: float, x2: int, c2: float) -> tuple[float, float] | None:
    """``(a, b)`` of the line ``a + b x`` through ``(x1, c1)`` and ``(x2, c2)`` (cycles at two share sizes); None
    unless its slope is positive and both are finite."""
    slope = (c2 - c1) / (x2 - x1)
    return (c1 - slope * x1, slope) if math.isfinite(slope) and slope > 0 and math.isfinite(c1) else None


def balanced_cuts(size: int, kinds: Sequence[object], cycles: Callable[[object, int], float],
                  throughput: Callable[[object], float], even: int) -> list[tuple[int, ...]]:
    """Cut points of ``size`` over cores of ``kinds`` (one entry per core, equal entries for identical cores) such
    that they finish together: the cut of each kind's cycles fitted by :func:`fit_costs`, then the cut of those lines
    refitted through the share the first cut gave the first core of each kind (:func:`refit_costs`). The caller
    times them (and the even split) with the cores' models: a fit on two sizes can miss (a small core that streams
    every weight for a few rows)."""
    fit = fit_costs(size, kinds, cycles, throughput, even)
    cut = whole_bounds(size, fill_shares(size, [fit[k] for k in kinds]))
    found = {k: max(1, cut[i + 1] - cut[i]) for i, k in reversed(list(enumerate(kinds)))}
    line = refit_costs(fit, cycles, even, found)
    return [cut, whole_bounds(size, fill_shares(size, [line[k] for k in kinds]))]


def aligned_cut(cut: tuple[int, ...], units: Sequence[int]) -> tuple[int, ...] | None:
    """``cut`` (cut points, one share per core) with each share rounded to the nearest multiple of its core's
    ``units`` (an array's rows or columns: a share one past a multiple costs a whole further fold), the remainder to
    the largest share; None when that leaves a share below 0. A fitted cut is linear in the share and sees no folds:
    doubling the cores' DRAM ports moved a 32-wide core's columns from 57 to 65, 3 folds instead of 2, and made a GEMM
    6.5% slower (2026-12-07)."""
    shares = [b - a for a, b in zip(cut, cut[1:], strict=False)]
    out = [round(x / u) * u if u > 0 else x for x, u in zip(shares, units, strict=True)]
    big = max(range(len(shares)), key=lambda i: (shares[i], -i))
    out[big] += cut[-1] - cut[0] - sum(out)
    if min(out) < 0:
        return None
    pts = [cut[0]]
    for x in out:
        pts.append(pts[-1] + x)
    return tuple(pts)


def common_fractions(fits: Sequence[tuple[int, dict[object, tuple[float, float]]]], kinds: Sequence[object]
                     ) -> list[float]:
    """One fraction of every layer per core (summing to 1) for layers that must be cut alike (the GEMMs of one
    pipeline stage: a producer's row shares are its consumer's), such that the cores finish the layers together:
    each layer is ``(size, fit_costs(...))``; a core's cycles for a fraction ``x`` of all of them are
    ``sum(a) + x * sum(b * size)``, filled as :func:`fill_shares` fills one layer."""
    costs = [(sum(f[k][0] for _, f in fits), sum(f[k][1] * size for size, f in fits)) for k in kinds]
    return fill_shares(1, costs)


def pipeline_latency(times: Sequence[float], tiles: int) -> float:
    """A pipeline's latency over ``tiles`` tiles of stages taking ``times`` (the whole rows each): the first tile
    through every stage, the others behind the slowest."""
    return sum(times) / tiles + (tiles - 1) * max(times) / tiles


def _cuts(work: Sequence[float], n: int, every: int = 64) -> list[tuple[int, ...]]:
    """Where to cut ``work`` into ``n`` contiguous stages: every way when there are at most ``every``, else the cut
    balanced by MACs and each of its boundaries moved by one."""
    g = len(work)
    if math.comb(g - 1, n - 1) <= every:
        return list(itertools.combinations(range(1, g), n - 1))
    total, acc, cut = sum(work), 0.0, []
    for i, w in enumerate(work[:-1], start=1):
        acc += w
        if len(cut) < n - 1 and acc >= total * (len(cut) + 1) / n and g - i >= n - 1 - len(cut):
            cut.append(i)
    while len(cut) < n - 1:  # too few boundaries reached: the last GEMMs one per stage
        cut.append(max(cut[-1] + 1 if cut else 1, g - (n - 1 - len(cut))))
    out = {tuple(cut)}
    for j in range(n - 1):
        for d in (-1, 1):
            moved = list(cut)
            moved[j] += d
            if all(0 < x < g for x in moved) and len(set(moved)) == n - 1 and moved == sorted(moved):
                out.add(tuple(moved))
    return sorted(out)


def _deal(load: Sequence[float], cores: Sequence[int], speed: Sequence[float], tiles: int) -> list[list[int]]:
    """``cores`` (fastest first, at least one per stage) dealt to stages of MACs ``load``: the first ones one to
    each stage, most MACs first; then each to the stage whose pipeline latency it lowers most."""
    n = len(load)
    out: list[list[int]] = [[] for _ in range(n)]
    for j, st in enumerate(sorted(range(n), key=lambda st: (-load[st], st))):
        out[st] = [cores[j]]
    times = [load[st] / speed[out[st][0]] for st in range(n)]
    for c in cores[n:]:
        best, pick = math.inf, 0
        for st in range(n):
            new = load[st] / ((len(out[st]) + 1) * speed[c])  # the stage now runs at its slowest core, c
            trial = pipeline_latency([new if i == st else x for i, x in enumerate(times)], tiles)
            if trial < best:
                best, pick = trial, st
        out[pick].append(c)
        times[pick] = load[pick] / (len(out[pick]) * speed[c])
    return out


def pipeline_plans(work: Sequence[float], speed: Sequence[float], tiles: Callable[[int], int]
                   ) -> list[tuple[float, list[int], list[list[int]]]]:
    """Stages of a pipelined group over its MAC cores (identical or not): the stage (0, 1, ...; contiguous, in order) of
    each of its GEMMs, whose MACs are ``work``, and each stage's cores (indices into ``speed``, each core's MACs per ns;
    a core left out idles). A stage's time is its MACs over ``n`` times its slowest core's speed for ``n`` cores, the
    even split's (:func:`~npukit.sim._multicore_groups.stage_bounds` then keeps a cut that finishes the cores together
    where the cores' models time it faster; by peaks alone that would always pay, which a small core streaming every
    weight for a few rows belies). For
    each number of stages, each cut of the GEMMs into contiguous stages (:func:`_cuts`) and each set of cores "every
    core at least as fast as one of them" (the fastest kind alone, the two fastest kinds, ...), the cores are dealt
    (:func:`_deal`) and the pipeline's latency, ``(sum + (t - 1) max) / t`` of the stage times over its
    ``tiles(stages)`` tiles as the pipeline is timed, compared; for each number of stages the lowest (fewer cores on
    a tie) is kept, as ``(latency estimate, stages, cores)``, and the list is sorted by the estimate (fewer stages on a
    tie). The estimate counts MACs and peaks alone, so the caller times them
    (:func:`~npukit.sim._multicore_groups.run_pipeline`); and as more cores always look faster by peaks, though a
    stage bound by DRAM is slower on more cores (each streams the stage's weights), the best plan of each number of
    stages ``n`` on the ``n`` fastest cores alone, one a stage, follows them (2026-12-07)."""
    order = sorted(range(len(speed)), key=lambda c: (-speed[c], c))
    prefixes = sorted({sum(1 for c in order if speed[c] >= speed[v]) for v in order})
    plans: list[tuple[float, list[int], list[list[int]]]] = []
    lean: list[tuple[float, list[int], list[list[int]]]] = []
    for n in range(1, min(len(work), len(speed)) + 1):
        t = max(1, tiles(n))
        best: tuple[float, list[int], list[list[int]]] | None = None
        one: tuple[float, list[int], list[list[int]]] | None = None  # the best on the n fastest cores, one a stage
        for cut in _cuts(work, n):
            edges = (0, *cut, len(work))
            load = [float(sum(work[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
            stages = [st for st in range(n) for _ in range(edges[st], edges[st + 1])]
            for k in sorted({k for k in prefixes if k >= n} | {n}):
                cores = _deal(load, order[:k], speed, t)
                val = pipeline_latency([w / (len(cs) * min(speed[c] for c in cs))
                                        for w, cs in zip(load, cores, strict=True)], t)
                if k in prefixes and (best is None or val < best[0] * (1 - 1e-12)):
                    best = (val, stages, cores)
                if k == n and (one is None or val < one[0] * (1 - 1e-12)):
                    one = (val, stages, cores)
        assert best is not None and one is not None and math.isfinite(best[0])
        plans.append(best)
        if one[1:] != best[1:]:
            lean.append(one)
    first = 0  # the lowest, fewer stages on a near tie (as one pass over all plans picks it)
    for i in range(1, len(plans)):
        if plans[i][0] < plans[first][0] * (1 - 1e-12):
            first = i
    return [plans[first]] + sorted((p for i, p in enumerate(plans) if i != first), key=lambda p: p[0]) + lean
