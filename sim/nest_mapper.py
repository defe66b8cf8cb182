"""A mapper over :class:`~npukit.sim.hardware.Hardware`: per layer, the spatial unrolling (the given one, or
the best of the few highest-utilization candidates within what each array dimension allows), the loop
order, and the temporal tiling at every memory level, minimising energy, latency or EDP.

The temporal search is LOMA's (the ZigZag 3.9.1 engine, ``zigzag/opt/loma``): the temporal loops are
split into prime factors (at most ``lpf_limit``, merging the two smallest factors of the dimension with
the most, ties broken in ZigZag's dimension order), every distinct order of them is tried, and each order
is allocated bottom-up to the memories: at each memory, for the operands it holds, the prefix of the
remaining loops that fits its capacity and minimises the traffic to the level above (remaining
iterations x tile size). Each order is costed in closed form (:func:`npukit.sim.loopnest.evaluate`);
identical layer shapes are mapped once (cache).

Speed without changing the result: a layer's orders are allocated all at once with numpy
(:mod:`npukit.sim.nest_batch`, the same float operations in the same order as the scalar
:mod:`npukit.sim.nest_alloc`); an order is cut as soon as the energy and latency parts of its first operands
prove it cannot beat the best found (bound pruning: :func:`npukit.sim.loopnest.lower_bound` and
:func:`npukit.sim.nest_latency.latency_bound`, never above the exact energy and latency; ties kept as
ZigZag keeps them); orders whose allocation prefix and
bottom-of-top-level ir loops match one already costed (one at a time), or whose loops per level after the
merge-down match one's (all at once: :func:`npukit.sim.nest_batch.stationary_groups`), are skipped (same
cost; the first of equal ones is kept either way); on a square layer only one
of two X/Y-mirrored orders is tried. ``map_layer(..., exhaustive=True)`` is the reference without any of
them (``tests/test_nest_speed.py`` checks both find the same best for every objective).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from .errors import ConfigError
from .hardware import Hardware
from .loopnest import (
    IR_DIMS,
    R_DIMS,
    Loop,
    NestCost,
    NestLayer,
    cost_of,
    effective_spatial,
    evaluate,
    lower_bound,
    operand_part,
    operand_parts,
    score_of,
    spatial_context,
    spatial_per_level,
)
from .nest_alloc import allocate
from .nest_batch import allocate_batch, stationary_groups, temporal_mapping
from .nest_latency import NestLatency, latency_bound, latency_of, nest_latency, with_latency
from .nest_spatial import SPATIAL_CANDIDATES as SPATIAL_CANDIDATES  # re-exported: its old home
from .nest_spatial import clip_spatial, ranked_spatial
from .nest_spatial import spatial_candidates as spatial_candidates  # re-exported: its old home
from .nest_transfers import _top_run, operand_latency, operand_transfers

LPF_LIMIT = 6
BATCH_MIN = 24  # loop orders from which a layer's orders are allocated at once (numpy); fewer: one by one


@dataclass
class NestMapping:
    """A chosen mapping: ``spatial`` ({array dim: {loop dim: factor}}), ``temporal`` ({operand: loops per
    memory level, innermost first}) and its :class:`NestCost`."""

    layer: NestLayer
    spatial: dict[str, dict[str, int]]
    temporal: dict[str, list[list[Loop]]]
    cost: NestCost
    latency: NestLatency | None = field(default=None, compare=False, repr=False)

    def loop_nest(self, hw: Hardware) -> str:
        """The mapping as a loop nest per memory level, outermost first (Timeloop/ZigZag style)."""
        lines = []
        for op in ("W", "I", "O"):
            mems = hw.levels(op)
            parts = [f"{m.name}: " + (" ".join(f"for {d} in {s}" for d, s in reversed(lv)) or "-")
                     for m, lv in zip(reversed(mems), reversed(self.temporal[op]), strict=True)]
            lines.append(f"  {op}: " + " | ".join(parts))
        sp = ", ".join(f"{dim}: " + " ".join(f"{d}{f}" for d, f in loops.items()) for dim, loops in self.spatial.items())
        return f"  spatial: parfor {sp}\n" + "\n".join(lines)


def _pfs(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


_OPS = ("W", "I", "O")
_CONV_ORDER = ("B", "K", "G", "OX", "OY", "C", "FX", "FY")
_GEMM_ORDER = ("C", "B", "K", "G")


def temporal_lpfs(layer: NestLayer, sm: dict[str, dict[str, int]], limit: int = LPF_LIMIT) -> list[Loop]:
    """The temporal loops as prime factors, at most ``max(limit, number of dimensions)`` of them."""
    spatial: dict[str, int] = {}
    for loops in sm.values():
        for d, f in loops.items():
            spatial[d] = spatial.get(d, 1) * min(f, layer.dims.get(d, 1))
    per_dim = {}
    # ZigZag's dimension order (its ONNX conv / GEMM parsers'): it breaks ties between dimensions with as
    # many factors when merging, so the order decides which loops stay fine-grained.
    gemm = layer.in_extent == (0, 0) and all(layer.dims.get(d, 1) == 1 for d in ("OY", "OX", "FY", "FX"))
    order = _GEMM_ORDER if gemm else _CONV_ORDER
    for d in sorted(layer.dims, key=lambda k: order.index(k) if k in order else len(order)):
        n = layer.dims[d]
        t = math.ceil(n / spatial.get(d, 1))
        if t > 1:
            per_dim[d] = sorted(_pfs(t))
    limit = max(limit, len(per_dim))
    while sum(len(v) for v in per_dim.values()) > limit:
        d = max(per_dim, key=lambda k: len(per_dim[k]))
        f = per_dim[d]
        per_dim[d] = sorted([f[0] * f[1]] + f[2:])
    return [(d, p) for d, f in per_dim.items() for p in f] or [("K", 1)]


_SWAP = (("OX", "OY"), ("FX", "FY"))


def _symmetric_spatial(sm: dict[str, dict[str, int]]) -> bool:
    """The X/Y swap is a symmetry only if the spatial unrolling treats both axes alike (it unrolls none)."""
    return not any(d in ("OX", "OY", "FX", "FY") for loops in sm.values() for d in loops)


def symmetric_pairs(layer: NestLayer, lpfs: list[Loop]) -> list[tuple[str, str]]:
    """Dimension pairs (OX/OY, FX/FY) that a square layer makes interchangeable: same temporal factors,
    same sizes, strides and input extents along both axes."""
    d = layer.dims
    if layer.stride[0] != layer.stride[1] or layer.in_extent[0] != layer.in_extent[1]:
        return []
    out = []
    for a, b in _SWAP:
        if d.get(a) == d.get(b) and sorted(f for x, f in lpfs if x == a) == sorted(f for x, f in lpfs if x == b):
            out.append((a, b))
    if len(out) == 1:  # swapping one axis pair alone is not a symmetry (OX goes with FX)
        return []
    return out


def _orders(lpfs: list[Loop], sym: list[tuple[str, str]] = ()):
    """Distinct orders of the loop prime factors (ZigZag's multiset permutations). Pruning: of two orders
    that swapping the X and Y axes of a square layer maps onto each other (same cost), only the smaller.
    (Two adjacent factors of one dimension are not interchangeable: an allocation may cut between them.)"""
    seen = set()
    swap = {}
    for a, b in sym:
        swap[a], swap[b] = b, a
    # equal loops as one index (the same distinct orders, in the same order); loops compared by their rank
    uniq = list(dict.fromkeys(lpfs))
    rank = {x: r for r, x in enumerate(sorted(set(uniq) | {(swap.get(d, d), f) for d, f in uniq}))}
    rk, rk_swap = [rank[x] for x in uniq], [rank[(swap.get(d, d), f)] for d, f in uniq]
    for p in itertools.permutations([uniq.index(x) for x in lpfs]):
        if p in seen:
            continue
        seen.add(p)
        if swap and list(map(rk_swap.__getitem__, p)) < list(map(rk.__getitem__, p)):
            continue
        yield list(map(uniq.__getitem__, p))


def _distinct_orders(lpfs: list[Loop]):
    """Every distinct order of the loop prime factors (no pruning)."""
    seen = set()
    for perm in itertools.permutations(lpfs):
        if perm not in seen:
            seen.add(perm)
            yield list(perm)


def _ir_run(op: str, loops: list[Loop]) -> tuple:
    """The ir loops at the bottom of ``loops`` (a multiset) and the products of the ir and of the r loops at
    their top (ZigZag's latency reads those: :mod:`npukit.sim.nest_latency`)."""
    run = []
    for d, f in loops:
        if d not in IR_DIMS[op]:
            break
        run.append((d, f))
    return (tuple(sorted(run)), _top_run(loops, IR_DIMS[op]), _top_run(loops, R_DIMS[op]))


def _score(c: NestCost, objective: str) -> float:
    if objective == "energy":
        return c.energy_pj
    if objective == "latency":
        return c.cycles
    return c.energy_pj * c.cycles


def _first(parts: list[tuple]) -> tuple[int, ...]:
    """W, I, O (indices) in the order to cost them: the heaviest (energy) in the best so far first."""
    return tuple(sorted(range(3), key=lambda j: -parts[j][4]))


SPATIAL_KEEP = 3  # feasible spatial candidates evaluated when the unrolling is searched


_CACHE: dict[tuple, NestMapping] = {}


def _latency(hw: Hardware, m: NestMapping, memo: dict | None = None) -> NestLatency:
    """ZigZag's latency of ``m`` (computed once and kept on it; ``memo``: nest_latency's, per spatial mapping)."""
    if m.latency is None:
        m.latency = nest_latency(hw, m.layer, m.spatial, m.temporal, memo)
    return m.latency


def _better(hw: Hardware, cand: NestMapping, score: float, best: NestMapping | None, best_score: float,
            objective: str, memo: dict | None = None) -> bool:
    """ZigZag's rule for keeping ``cand`` (``score``) over ``best``: a lower score; on an equal energy the
    lower latency (``MinimalEnergyStage``), on an equal latency the lower energy (``MinimalLatencyStage``);
    else the first stays. With no best yet, ``best_score`` is :func:`map_layer`'s ``bound`` (inf: none), which
    ``cand`` must be below."""
    if best is None:
        return score < best_score or best_score == math.inf
    if score < best_score:
        return True
    if score > best_score:
        return False
    if objective == "energy":
        return _latency(hw, cand, memo).total < _latency(hw, best).total
    if objective == "latency":
        return cand.cost.energy_pj < best.cost.energy_pj
    return False


def _consider(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], tm: dict[str, list[list[Loop]]],
              ctx: dict, objective: str, best: NestMapping | None, best_score: float,
              first: tuple[int, ...], ids: tuple[int, ...] | None = None,
              local: dict | None = None, memo: dict | None = None,
              fids: tuple[int, ...] | None = None) -> tuple[NestMapping | None, float, tuple[int, ...]]:
    """(best, its score, operand order) after costing ``tm``; ``ids``, ``fids``: per operand an id of its loop
    multisets per level (and ir run at the bottom), and a finer one also of the ir and r runs at each level's
    top (:func:`npukit.sim.nest_batch.stationary_groups`), keys of the operands' parts in ``local``.
    Bound: an order whose first one or two
    operands already prove its score above the best is cut before its other operands are costed
    (loopnest.lower_bound: never above the exact score); ties follow ZigZag (:func:`_better`). Latency
    and EDP are scored with ZigZag's latency of the whole mapping (:func:`npukit.sim.nest_latency.nest_latency`),
    bounded per operand (:func:`_consider_latency`)."""
    if objective != "energy":
        return _consider_latency(hw, layer, sm, tm, ctx, objective, best, best_score, first, ids, local,
                                 {} if memo is None else memo, fids)
    parts = operand_parts(hw, layer, tm, ctx, best_score, first, objective, ids, local)
    if parts is None:
        return best, best_score, first
    energy = score_of(ctx, *parts)
    if energy > best_score:
        return best, best_score, first
    cand = NestMapping(layer, sm, tm, cost_of(ctx, *parts))
    if _better(hw, cand, energy, best, best_score, objective, memo):
        # the operands weighing most in the best so far are costed first (earlier cuts)
        return cand, energy, _first(parts[1])
    return best, best_score, first


def _cached_cut(ctx: dict, total_cycle: int, objective: str, best_score: float, cids: tuple[int, ...],
                fids: tuple[int, ...], local: dict, memo: dict) -> bool:
    """Whether the parts of an order's operands already costed for other orders (kept in ``local`` by their
    ids, as :func:`_consider` keeps them) prove it cannot replace the best (score ``best_score``): the
    cut :func:`_consider` would make once it had them, made before the order's mapping is even built."""
    get = local.get
    if objective == "energy":
        return lower_bound(ctx, total_cycle, [get((0, cids[0])), get((1, cids[1])), get((2, cids[2]))], "energy") > best_score
    a, b, c = get(("lat", 0, fids[0])), get(("lat", 1, fids[1])), get(("lat", 2, fids[2]))
    if a is None:
        a = get(("tr", 0, cids[0]))
    if b is None:
        b = get(("tr", 1, cids[1]))
    if c is None:
        c = get(("tr", 2, cids[2]))
    if a is None and b is None and c is None:
        lat_lb = total_cycle
    else:  # the same parts recur in many orders: their bound is kept (by the parts' identities)
        key = ("lb", id(a), id(b), id(c))
        lat_lb = get(key)
        if lat_lb is None:
            lat_lb = local[key] = latency_bound(memo, [a, b, c])
    if objective == "latency":
        return lat_lb > best_score
    energy = lower_bound(ctx, total_cycle, [get((0, cids[0])), get((1, cids[1])), get((2, cids[2]))], "energy")
    return energy * lat_lb >= best_score


def _consider_latency(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], tm: dict[str, list[list[Loop]]],
                      ctx: dict, objective: str, best: NestMapping | None, best_score: float,
                      first: tuple[int, ...], ids: tuple[int, ...] | None, local: dict | None,
                      memo: dict, fids: tuple[int, ...] | None) -> tuple[NestMapping | None, float, tuple[int, ...]]:
    """:func:`_consider` under ``latency`` or ``edp``. Operand by operand (``first``'s order), its part of
    ZigZag's latency (:func:`npukit.sim.nest_transfers.operand_transfers` kept in ``local`` by ``ids``, then
    :func:`npukit.sim.nest_transfers.operand_latency` by ``fids``) and
    of the energy give lower bounds on the exact latency (:func:`npukit.sim.nest_latency.latency_bound`)
    and energy (:func:`npukit.sim.loopnest.lower_bound`); the order is cut as soon as they prove it cannot
    replace the best under :func:`_better`'s rule: ``latency``: a latency bound above the best, or equal
    to it with an energy bound at or above the best's energy (an equal latency keeps the lower energy);
    ``edp``: energy bound x latency bound at or above the best (an equal EDP keeps the first). A cut
    order could never have replaced the best, so the result is the uncut search's."""
    total_cycle = math.prod(s for lv in tm["O"] for _, s in lv)
    parts: list = [None, None, None]
    lats: list = [None, None, None]
    best_energy = best.cost.energy_pj if best is not None else math.inf
    # per operand first what its loops' multisets per level give (transfers: shared by more orders), the
    # operands known already first (free bounds); then each operand's whole part
    fine = [local.get(("lat", k, fids[k])) for k in range(3)] if fids is not None else [None, None, None]
    ks = sorted(first, key=lambda k: 0 if fine[k] is not None else 2 if ids is None or ("tr", k, ids[k]) not in local else 1)
    lat_lb: float = total_cycle  # the latency is at least the temporal cycles
    if objective == "edp" and ids is not None:
        # all three energies first (cheaper than transfers, and kept by their coarse ids), against the
        # latency bound of the transfers known already
        lats = [f if f is not None else local.get(("tr", k, ids[k])) for k, f in enumerate(fine)]
        if any(x is not None for x in lats):
            lat_lb = latency_bound(memo, lats)
        for k in ks:
            parts[k] = operand_part(hw, layer, tm, ctx, k, total_cycle, ids, local)
            if lower_bound(ctx, total_cycle, parts, "energy") * lat_lb >= best_score:
                return best, best_score, first
    for stage in (0, 1):
        for k in ks:
            if stage == 0:
                lat = fine[k]
                if objective == "edp" and parts[k] is None:  # the energy first: it may cut before the transfers
                    parts[k] = operand_part(hw, layer, tm, ctx, k, total_cycle, ids, local)
                    if lower_bound(ctx, total_cycle, parts, "energy") * lat_lb >= best_score:
                        return best, best_score, first
                if lat is None and ids is not None:
                    lat = local.get(("tr", k, ids[k]))
                if lat is None:
                    lat = operand_transfers(hw, layer, sm, _OPS[k], tm[_OPS[k]], memo)
                    if ids is not None:
                        local[("tr", k, ids[k])] = lat
            elif fine[k] is None:
                lat = fine[k] = operand_latency(hw, layer, sm, _OPS[k], tm[_OPS[k]], memo)
                if fids is not None:
                    local[("lat", k, fids[k])] = lat
            else:
                continue
            lats[k] = lat
            lat_lb = latency_bound(memo, lats)
            if objective == "latency":
                if lat_lb > best_score:
                    return best, best_score, first
                continue  # the energy is needed only for a tie (below)
            if parts[k] is None:
                parts[k] = operand_part(hw, layer, tm, ctx, k, total_cycle, ids, local)
            if lower_bound(ctx, total_cycle, parts, "energy") * lat_lb >= best_score:
                return best, best_score, first
        if objective == "latency" and lat_lb >= best_score:  # at best a tie, which only a lower energy wins
            for k in ks:
                if parts[k] is None:
                    parts[k] = operand_part(hw, layer, tm, ctx, k, total_cycle, ids, local)
                    if lower_bound(ctx, total_cycle, parts, "energy") >= best_energy:
                        return best, best_score, first
    for k in ks:
        if parts[k] is None:
            parts[k] = operand_part(hw, layer, tm, ctx, k, total_cycle, ids, local)
    cand = NestMapping(layer, sm, tm, cost_of(ctx, total_cycle, parts),
                       latency_of(memo, dict(zip(_OPS, lats, strict=True))))
    total = cand.latency.total
    score = total if objective == "latency" else score_of(ctx, total_cycle, parts) * total
    if _better(hw, cand, score, best, best_score, objective, memo):
        return cand, score, _first(parts)
    return best, best_score, first


def _finish(hw: Hardware, m: NestMapping) -> NestMapping:
    """``m`` with ZigZag's latency terms as its cost's cycles."""
    return NestMapping(m.layer, m.spatial, m.temporal,
                       with_latency(hw, m.layer, m.spatial, m.temporal, m.cost, _latency(hw, m)), m.latency)


def map_layer(hw: Hardware, layer: NestLayer, spatial: dict[str, dict[str, int]] | None = None,
              objective: str = "energy", lpf_limit: int = LPF_LIMIT, exhaustive: bool = False,
              bound: float = math.inf) -> NestMapping | None:
    """The best mapping of ``layer`` on ``hw`` under ``objective`` (energy, latency or edp); ``spatial``
    fixes the unrolling (a ZigZag mapping file's), else it is searched. ``exhaustive``: allocate and cost
    every distinct order of the loop prime factors, without the pruning, the shared allocation decisions
    or the cache (slow; the reference the fast search must equal). ``bound``: the best mapping only if its
    score (:func:`mapping_score`) is below ``bound``, else None; orders that cannot beat it are cut (the
    search's own bounds), so a caller that only wants a mapping better than one it holds pays little."""
    ckey = (id(hw), hw.name, layer.key(), repr(spatial), objective, lpf_limit)
    hit = None if exhaustive else _CACHE.get(ckey)
    if hit is not None:
        if bound < math.inf and not mapping_score(hit.cost, objective) < bound:
            return None
        return NestMapping(layer, hit.spatial, hit.temporal, hit.cost)
    cands = [spatial] if spatial is not None else itertools.islice(ranked_spatial(hw, layer), 64)
    best: NestMapping | None = None
    best_score = bound if not exhaustive else math.inf
    first = (0, 1, 2)
    feasible = 0
    for sm in cands:
        if spatial is None and feasible >= SPATIAL_KEEP:
            break
        fits = False
        sm = clip_spatial(hw, layer, sm)
        esm = effective_spatial(layer, sm)
        su = {o: spatial_per_level(hw, o, esm) for o in ("W", "I", "O")}
        done: set = set()
        memo: dict = {}
        groups: dict[tuple, list[int] | None] = {}  # allocation prefix -> loops below each operand's top
        lengths: list[int] = []
        lpfs = temporal_lpfs(layer, sm, lpf_limit)
        ctx = spatial_context(hw, layer, sm)
        lmemo: dict = {}  # nest_latency's, for this spatial mapping
        if exhaustive:
            for order in _distinct_orders(lpfs):
                tm = allocate(hw, layer, esm, order, None, su, None)
                if tm is not None:
                    cand = NestMapping(layer, sm, tm, evaluate(hw, layer, sm, tm))
                    score = _score(cand.cost, objective)
                    if _better(hw, cand, score, best, best_score, objective):
                        best, best_score = cand, score
                    fits = True
            feasible += fits
            continue
        order_list = list(_orders(lpfs, symmetric_pairs(layer, lpfs) if _symmetric_spatial(sm) else []))
        # every order allocated at once (numpy) where that is exact, and only one order of each group of
        # equal cost (same loops per level after the merge-down) costed; else one at a time below
        batch = allocate_batch(hw, layer, esm, order_list, su) if len(order_list) >= BATCH_MIN else None
        if batch is not None:
            local: dict = {}
            total = None
            for k, ids, cids in stationary_groups(batch, coarse=True):
                fits = True
                if total is not None and _cached_cut(ctx, total, objective, best_score, cids, ids, local, lmemo):
                    continue
                tm = temporal_mapping(batch, k)
                total = math.prod(s for lv in tm["O"] for _, s in lv)
                # the energy parts read only the coarse loops (cids), the latency parts the fine ones (ids)
                best, best_score, first = _consider(hw, layer, sm, tm, ctx, objective, best, best_score, first, cids, local,
                                                   lmemo, ids)
            feasible += fits
            continue
        for order in order_list:
            # Pruning: an order whose allocation prefix was seen allocates the same below the top levels;
            # it can only differ by which ir loops sit at the bottom of a top level (stationarity).
            key = None
            t_order = tuple(order)
            for n in lengths:  # the prefix lengths in ``groups``, shortest first: the first match is the shortest
                if (pre := t_order[:n]) in groups:
                    cuts = groups[pre]
                    if cuts is None:
                        key = "skip"
                        break
                    key = (pre, tuple(_ir_run(o, order[c:]) for o, c in zip(("W", "I", "O"), cuts, strict=True)))
                    break
            if key == "skip" or key in done:
                continue
            reach = [0]
            tm = allocate(hw, layer, esm, order, reach, su, memo)
            pre = t_order[:max(reach[0], 1)]
            if len(pre) not in lengths:
                lengths = sorted({*lengths, len(pre)})
            if tm is None:
                groups[pre] = None
                continue
            cuts = [sum(len(lv) for lv in tm[o][:-1]) for o in ("W", "I", "O")]
            groups[pre] = cuts
            done.add((pre, tuple(_ir_run(o, order[c:]) for o, c in zip(("W", "I", "O"), cuts, strict=True))))
            fits = True
            best, best_score, first = _consider(hw, layer, sm, tm, ctx, objective, best, best_score, first,
                                                memo=lmemo)
        feasible += fits
    if not feasible:
        raise ConfigError(f"layer '{layer.name}': no loop order fits {hw.name}'s memories")
    if best is None or (exhaustive and not best_score < bound):
        return None  # no mapping below ``bound``
    best = _finish(hw, best)
    if not exhaustive:
        _CACHE[ckey] = best
    return best


def mapping_score(cost: NestCost, objective: str) -> float:
    """A mapping's score under ``objective``: energy (pJ), latency (cycles) or their product (edp); exactly the
    score the search compares (:class:`NestCost`'s ``energy_pj`` and ``cycles`` after ZigZag's latency)."""
    return _score(cost, objective)
