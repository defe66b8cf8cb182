"""Closed-form cost of one loop nest (a spatial unrolling and a temporal mapping per memory level) on a
:class:`~npukit.sim.hardware.Hardware`: word accesses per memory level and operand, energy, cycles.

The accounting follows ZigZag 3.9.1's (``zigzag/mapping/mapping.py`` and ``cost_model/cost_model.py``):

* Loops are relevant (r), irrelevant (ir) or partially relevant (pr) to an operand. Weights W: r = K, C,
  FY, FX, G; ir = B, OY, OX. Outputs O: r = B, K, OY, OX, G; ir = C, FY, FX. Inputs I: r = B, C, G; pr =
  IY(OY, FY), IX(OX, FX); ir = K. A pr pair of cumulative sizes (a, b) spans
  ``a*b - max(0, b - s)*(a - 1)`` input rows (s = stride), clipped to the input's extent.
* Stationarity: the ir loops at the bottom of a level sink into the level below (repeatedly), so a tile
  stays put while they run.
* A spatial loop on array dimension D belongs to the lowest level of the operand serving D (one instance
  broadcasts or, for O, collects across D); a level is replicated along the dimensions it does not serve.
* Level m of an operand sends its tile below ``tile_below(m) * boost(m)`` elements once per iteration of
  the temporal loops below it (``total_cycles / cycles_below(m)`` periods) from each of its instances;
  it is written from above with its own tile once per iteration of the loops of levels <= m. Outputs
  also flow up (``fl``/``th``), and are read back below (``tl``) only while they are partial sums (an ir
  loop above the level); partial sums move at ``bits['O']``, final outputs at ``bits['O_final']``.
* One access moves ``max_bw`` bits; a period moving ``n`` bits costs ``ceil(n / min_bw) * min_bw / max_bw``
  accesses (a narrow transfer still pays for ``min_bw``); the accesses of a link over all its periods and
  instances are truncated to a whole number, as ZigZag's are. Energy = reads * r_cost + writes * w_cost;
  MACs cost ``unit_energy`` each.

Cycles are ZigZag's latency model (:mod:`npukit.sim.nest_latency`), filled in by :func:`evaluate` and by
the mapper for the mapping it keeps; :func:`cost_of` alone gives the temporal iterations and the drain.
The per-operand port busy cycles and on/off-loading of :func:`operand_parts` only order the operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import ConfigError
from .hardware import Hardware

LOOP_DIMS = ("B", "K", "C", "OY", "OX", "FY", "FX", "G")
R_DIMS = {"W": ("K", "C", "FY", "FX", "G"), "O": ("B", "K", "OY", "OX", "G"), "I": ("B", "C", "G")}
IR_DIMS = {"W": ("B", "OY", "OX"), "O": ("C", "FY", "FX"), "I": ("K",)}

Loop = tuple[str, int]


@dataclass(frozen=True)
class NestLayer:
    """A conv/GEMM layer as ZigZag's loop dimensions (B, K, C, OY, OX, FY, FX, G; sizes), strides and the
    input extents (``iy``, ``ix``: pr sizes are clipped to them)."""

    name: str
    dims: dict[str, int]
    stride: tuple[int, int] = (1, 1)
    in_extent: tuple[int, int] = (0, 0)

    @property
    def macs(self) -> int:
        return math.prod(self.dims.values())

    def key(self) -> tuple:
        return (tuple(self.dims.get(d, 1) for d in LOOP_DIMS), self.stride, self.in_extent)


def _pr(a: float, b: float, s: int, cap: int) -> float:
    v = a * b - max(0, b - s) * (a - 1)
    return min(v, cap) if cap else v


def r_size(layer: NestLayer, op: str, cum: dict[str, float]) -> float:
    """Elements of operand ``op`` a set of loops (cumulative sizes ``cum``) touches."""
    g = cum.get
    if op == "W":
        return g("K", 1) * g("C", 1) * g("FY", 1) * g("FX", 1) * g("G", 1)
    if op == "O":
        return g("B", 1) * g("K", 1) * g("OY", 1) * g("OX", 1) * g("G", 1)
    # ZigZag truncates fractional (uneven) unrollings to integers here (``calc_tensor_dim``)
    return (g("B", 1) * g("C", 1) * g("G", 1)
            * _pr(int(g("OY", 1)), int(g("FY", 1)), layer.stride[0], layer.in_extent[0])
            * _pr(int(g("OX", 1)), int(g("FX", 1)), layer.stride[1], layer.in_extent[1]))


def _cum(levels: list[list[Loop]]) -> list[dict[str, float]]:
    out, cur = [], {}
    for loops in levels:
        cur = dict(cur)
        for d, s in loops:
            cur[d] = cur.get(d, 1) * s
        out.append(cur)
    return out


def stationary(layer_op: str, tm: list[list[Loop]]) -> list[list[Loop]]:
    """ZigZag's merge-down: ir loops at the bottom of a level move to the top of the level below."""
    ir = IR_DIMS[layer_op]
    prev = [list(lv) for lv in tm]
    while True:
        cur: list[list[Loop]] = [[] for _ in prev]
        for m, loops in enumerate(prev):
            i = 0
            while i < len(loops) and loops[i][0] in ir:
                cur[max(m - 1, 0)].append(loops[i])
                i += 1
            cur[m].extend(loops[i:])
        if cur == prev:
            return cur
        prev = cur


def _stationary_key(op: str, tm: list[list[Loop]]) -> tuple[tuple, int]:
    """(each level's sorted loops, product of the ir run at the very bottom) after :func:`stationary`, in
    one pass from the top: a level's leading ir run (with what came from above, appended at its end)
    moves to the end of the level below, which is where the fixed point of the merge-down puts it."""
    ir = IR_DIMS[op]
    out: list[tuple] = [()] * len(tm)
    carry: list[Loop] = []
    for m in range(len(tm) - 1, 0, -1):
        lv = tm[m] + carry if carry else tm[m]
        i = 0
        while i < len(lv) and lv[i][0] in ir:
            i += 1
        carry = lv[:i]
        out[m] = tuple(sorted(lv[i:]))
    lv = tm[0] + carry if carry else tm[0]
    out[0] = tuple(sorted(lv))
    st = 1
    for d, s in lv:
        if d not in ir:
            break
        st *= s
    return tuple(out), st


def spatial_per_level(hw: Hardware, op: str, sm: dict[str, dict[str, int]]) -> list[list[Loop]]:
    """Spatial loops per arch level of ``op``: level m holds those of the dims its memory m serves first;
    the last entry those no level serves."""
    left = dict(sm)
    out: list[list[Loop]] = []
    for mem in hw.levels(op):
        loops: dict[str, int] = {}
        for dim in mem.served:
            for d, f in left.pop(dim, {}).items():
                loops[d] = loops.get(d, 1) * f
        out.append(list(loops.items()))
    top: dict[str, int] = {}
    for loops_d in left.values():
        for d, f in loops_d.items():
            top[d] = top.get(d, 1) * f
    out.append(list(top.items()))
    return out


@dataclass
class NestCost:
    """Cost of one mapping: ``accesses[op][level][dir]`` (max-bandwidth words), ``energy[op][level]`` (pJ),
    ``mac_pj``, ``cycles`` (ZigZag's latency: temporal iterations, stall, on/off-loading, drain; cycles)."""

    accesses: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    energy: dict[str, list[float]] = field(default_factory=dict)
    mac_pj: float = 0.0
    temporal_cycles: int = 0
    stall_cycles: float = 0.0
    onload_cycles: float = 0.0
    offload_cycles: float = 0.0
    drain_cycles: int = 0

    @property
    def energy_pj(self) -> float:
        return self.mac_pj + sum(sum(v) for v in self.energy.values())

    @property
    def cycles(self) -> float:
        return self.temporal_cycles + self.stall_cycles + self.onload_cycles + self.offload_cycles + self.drain_cycles


class _NoPort(ValueError):
    """A transfer that happens through a memory with no port allocated for it."""


def _acc(amount: float, bits: int, bw: tuple[int, int] | None, periods: float, units: int) -> float:
    if amount == 0 or bits == 0:
        return 0.0
    if bw is None:
        raise _NoPort("no port bandwidth for a transfer that happens")
    lo, hi = bw
    # a whole number of word accesses, truncated as ZigZag 3.9.1 does (cost_model.py: _calc_memory_access)
    return float(int(math.ceil(amount * bits / lo) * (lo / hi) * periods * units))


def effective_spatial(layer: NestLayer, sm: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """ZigZag's unrolling of a dimension that the array does not divide: factor f on a loop of size n runs
    ``ceil(n / f)`` temporal iterations of ``n / ceil(n / f)`` (fractional) PEs; f is first clipped to n."""
    out: dict[str, dict[str, float]] = {}
    for dim, loops in sm.items():
        out[dim] = {}
        for d, f in loops.items():
            n = layer.dims.get(d, 1)
            f = min(f, n)
            out[dim][d] = n / math.ceil(n / f) if n % f else f
    return out


_CTX: dict[tuple, dict] = {}


def spatial_context(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]]) -> dict:
    """Per operand (spatial loops per level, bandwidth boost per level, instances per level), cached."""
    key = (id(hw), hw.name, layer.key(), repr(sm))
    ctx = _CTX.get(key)
    if ctx is None:
        esm = effective_spatial(layer, sm)
        ctx = {"sm": esm, "memo": {}}
        for op in ("W", "I", "O"):
            L = len(hw.levels(op))
            su = spatial_per_level(hw, op, esm)
            r_sp = [r_size(layer, op, c) for c in _cum(su)]
            boost = [round(r_sp[0])] + [round(r_sp[m] / r_sp[m - 1]) for m in range(1, L)]
            tot_sp = [round(round(math.prod(s for lv in su[a:] for _, s in lv), 3)) for a in range(L + 1)]
            ctx[op] = (su, boost, tot_sp)
        ctx["fixed"] = (hw.array.unit_energy_pj * layer.macs,
                        sum(max(math.ceil(math.prod(esm.get(d, {}).values())) - 1, 0) for d in hw.array.systolic))
        if len(_CTX) > 4096:
            _CTX.clear()
        _CTX[key] = ctx
    return ctx


def evaluate(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], tm: dict[str, list[list[Loop]]],
             ctx: dict | None = None) -> NestCost:
    """Cost of spatial mapping ``sm`` ({array dim: {loop dim: factor}}) and temporal mapping ``tm``
    ({layer operand: [loops of memory level 0 (innermost first), level 1, ...]}) of ``layer`` on ``hw``, its
    cycles ZigZag's latency (:func:`npukit.sim.nest_latency.nest_latency`); ``ctx``: :func:`spatial_context`
    of the same (hw, layer, sm), when the caller holds it."""
    from .nest_latency import with_latency  # it builds on this module's helpers

    if ctx is None:
        ctx = spatial_context(hw, layer, sm)
    parts = operand_parts(hw, layer, tm, ctx)
    assert parts is not None
    return with_latency(hw, layer, sm, tm, cost_of(ctx, *parts))


def operand_parts(hw: Hardware, layer: NestLayer, tm: dict[str, list[list[Loop]]], ctx: dict,
                  bound: float = math.inf, first: tuple[int, ...] = (0, 1, 2), objective: str = "energy",
                  ids: tuple[int, ...] | None = None, local: dict | None = None) -> tuple[int, list[tuple]] | None:
    """(temporal cycles, each operand's (accesses, energy per level, port busy cycles, on/off-loading
    cycles, energy, busiest port) for W, I, O) of ``tm``, the operands costed in the order ``first``
    (indices into W, I, O); None as soon as the first one or two of them prove the ``objective``'s score
    (:func:`score_of`) exceeds ``bound`` (:func:`lower_bound`). The third is never cut here: the caller
    compares its exact score. ``ids``: an id per operand of its loops after the merge-down, the key of
    the parts in the caller's ``local`` dict (:func:`npukit.sim.nest_batch.stationary_groups`)."""
    total_cycle = math.prod(s for lv in tm["O"] for _, s in lv)
    parts: list = [None, None, None]
    for n, k in enumerate(first):
        parts[k] = operand_part(hw, layer, tm, ctx, k, total_cycle, ids, local)
        if n < 2 and bound < math.inf and lower_bound(ctx, total_cycle, parts, objective) > bound:
            return None
    return total_cycle, parts


def operand_part(hw: Hardware, layer: NestLayer, tm: dict[str, list[list[Loop]]], ctx: dict, k: int,
                 total_cycle: int, ids: tuple[int, ...] | None = None, local: dict | None = None) -> tuple:
    """Operand ``k``'s (index into W, I, O) entry of :func:`operand_parts`, memoised in ``ctx`` (and in
    ``local`` by ``ids[k]``)."""
    part = local.get((k, ids[k])) if ids is not None else None
    if part is None:
        op = _OPS[k]
        # After the merge-down only each level's loop multiset matters, and the leading ir run at the bottom
        key = (op, total_cycle, *_stationary_key(op, tm[op]))
        memo = ctx["memo"]
        part = memo.get(key)
        if part is None:
            part = memo[key] = _operand_cost(hw, layer, ctx, op, stationary(op, tm[op]), total_cycle)
        if ids is not None:
            local[(k, ids[k])] = part
    return part


_OPS = ("W", "I", "O")


def lower_bound(ctx: dict, total_cycle: int, parts: list, objective: str) -> float:
    """A lower bound on the ``objective``'s exact score (energy pJ, ZigZag's latency in cycles, or their
    product) from the operands costed so far (``None`` in ``parts`` for the others), never above the exact
    score in floating point either: every term is >= 0 and IEEE addition and multiplication round
    monotonically, so a partial sum of one or two of the three operand energies (in any order) is <= their
    sum; ZigZag's latency (:func:`npukit.sim.nest_latency.nest_latency`) is the temporal cycles plus a stall,
    on/off-loading and drain that are all >= 0."""
    if objective == "latency":
        return float(total_cycle)
    so_far = 0
    for part in parts:
        if part is not None:
            so_far += part[4]
    energy = ctx["fixed"][0] + so_far
    return energy if objective == "energy" else energy * total_cycle


def score_of(ctx: dict, total_cycle: int, parts: list[tuple], objective: str = "energy") -> float:
    """The energy (pJ) of :func:`operand_parts`' result: exactly ``NestCost.energy_pj`` of :func:`cost_of`'s
    cost, without building it. Latency and EDP need the whole mapping (:mod:`npukit.sim.nest_latency`)."""
    if objective != "energy":
        raise ValueError(f"score_of gives energy only, not {objective!r}: latency needs nest_latency")
    return ctx["fixed"][0] + sum([p[4] for p in parts])


def cost_of(ctx: dict, total_cycle: int, parts: list[tuple]) -> NestCost:
    """The :class:`NestCost` of :func:`operand_parts`' result: accesses and energies; of the cycles only the
    temporal ones and the drain (:func:`npukit.sim.nest_latency.with_latency` adds ZigZag's stall and
    on/off-loading)."""
    cost = NestCost()
    for op, (accs, ens, *_) in zip(("W", "I", "O"), parts, strict=True):
        cost.accesses[op], cost.energy[op] = accs, ens
    cost.mac_pj, cost.drain_cycles = ctx["fixed"]
    cost.temporal_cycles = total_cycle
    return cost


def _ir_prefix(op: str, loops: list[Loop]) -> int:
    """Product of the ir loops at the very bottom of ``loops``."""
    st = 1
    for d, s in loops:
        if d not in IR_DIMS[op]:
            break
        st *= s
    return st


_PORTS: dict[tuple, list] = {}


def _ports(hw: Hardware, op: str) -> tuple[list[tuple], int]:
    """Per memory level of ``op``: port bandwidths and (memory, port) keys in direction order tl, fh, fl,
    th, read and write cost; and :func:`_load_bw` (both cached per hardware)."""
    key = (id(hw), hw.name, op)
    out = _PORTS.get(key)
    if out is None or out[0] is not hw:
        mem_op = hw.links[op]
        levels = [(tuple(m.port_bw(mem_op, d) for d in ("tl", "fh", "fl", "th")),
                   tuple((m.name, m.port_of(mem_op, d)) for d in ("tl", "fh", "fl", "th")), m.r_cost_pj, m.w_cost_pj)
                  for m in hw.levels(op)]
        out = _PORTS[key] = [hw, (levels, _load_bw(hw, op))]
    return out[1]


def _operand_cost(hw: Hardware, layer: NestLayer, ctx: dict, op: str, tm_op: list[list[Loop]], total_cycle: int) -> tuple:
    """One operand's (accesses per level, energy per level, port busy cycles, on/off-loading cycles, energy,
    busiest port); ``tm_op`` is its temporal mapping after the merge-down (:func:`stationary`)."""
    su, boost, tot_sp = ctx[op]
    levels, load_bw = _ports(hw, op)
    L = len(levels)
    # cumulative sizes up to each level: its temporal loops, then the spatial loops it serves
    cur: dict[str, float] = {}
    elem = [round(r_size(layer, op, cur))]
    for a in range(L):
        for d, s in tm_op[a]:
            cur[d] = cur.get(d, 1) * s
        for d, s in su[a]:
            cur[d] = cur.get(d, 1) * s
        elem.append(round(r_size(layer, op, cur)))
    # An input's innermost level is not re-read while the ir loops at its very bottom run (ZigZag's
    # ``access_same_data_considered_as_no_access``): its read period spans them.
    st = _ir_prefix(op, tm_op[0]) if op != "O" else 1
    cyc = [st]
    cyc_hi = 1
    for lv in tm_op:
        for _, s in lv:
            cyc_hi *= s
        cyc.append(cyc_hi)
    bits = hw.bits[op]
    pb, fb = hw.bits["O"], hw.bits["O_final"]
    psum = [False] * (L + 1)
    if op == "O":
        ir_o = IR_DIMS["O"]
        sp_ir = ctx.get(("sp_ir", op))  # per level: does the unrolling put an ir loop there (kept per context)
        if sp_ir is None:
            sp_ir = ctx[("sp_ir", op)] = [any(d in ir_o and s > 1 for d, s in su[a]) for a in range(L + 1)]
        irf = [sp_ir[a] or (a > 0 and any(d in ir_o and s > 1 for d, s in tm_op[a - 1])) for a in range(L + 1)]
        psum = [any(irf[m + 1:]) for m in range(L)] + [False]
    accs, ens, ports = [], [], {}
    for m, (bw, pkeys, r_cost, w_cost) in enumerate(levels):
        units = tot_sp[m + 1]
        lo_amt, lo_pc = elem[m] * boost[m], total_cycle / cyc[m]
        hi_amt, hi_pc = (elem[m + 1], total_cycle / cyc[m + 1]) if m < L - 1 else (0, 0)
        tl = fh = fl = th = 0.0
        try:
            if op != "O":
                tl = _acc(lo_amt, bits, bw[0], lo_pc, units)
                fh = _acc(hi_amt, bits, bw[1], hi_pc, units)
            else:
                fl = _acc(lo_amt, pb if psum[m] else fb, bw[2], lo_pc, units)
                if psum[m]:
                    tl = _acc(lo_amt, pb, bw[0], lo_pc, units)
                th = _acc(hi_amt, pb if psum[m + 1] else fb, bw[3], hi_pc, units)
                if psum[m + 1]:
                    fh = _acc(hi_amt, pb, bw[1], hi_pc, units)
        except _NoPort:  # a file whose port allocation leaves out a way the operand moves: one line, not a traceback
            moves = {"tl": lo_amt and (op != "O" or psum[m]), "fh": hi_amt and (op != "O" or psum[m + 1]),
                     "fl": lo_amt and op == "O", "th": hi_amt and op == "O"}  # the transfers this layer makes here
            ways = ", ".join(d for d, b in zip(("tl", "fh", "fl", "th"), bw, strict=True) if b is None and moves[d])
            raise ConfigError(f"hardware '{hw.name}': memory '{pkeys[0][0]}' holds operand {hw.links[op]} ({op}) but "
                              f"no port of it is allocated '{hw.links[op]}, {ways}', a transfer this layer needs; "
                              "allocate it to a port") from None
        accs.append({"tl": tl, "fh": fh, "fl": fl, "th": th})
        ens.append((tl + th) * r_cost + (fh + fl) * w_cost)
        div = max(units, 1)
        if tl:
            ports[pkeys[0]] = ports.get(pkeys[0], 0.0) + tl / div
        if fh:
            ports[pkeys[1]] = ports.get(pkeys[1], 0.0) + fh / div
        if fl:
            ports[pkeys[2]] = ports.get(pkeys[2], 0.0) + fl / div
        if th:
            ports[pkeys[3]] = ports.get(pkeys[3], 0.0) + th / div
    load = 0.0
    if L >= 2 and op != "O":
        load = elem[1] * tot_sp[1] * bits / load_bw
    if op == "O" and L >= 2:
        load = math.ceil(elem[1] * tot_sp[1] * fb / load_bw)
    return accs, ens, ports, load, sum(ens), max(ports.values(), default=0.0)


def _load_bw(hw: Hardware, op: str) -> int:
    """The top level's max bandwidth on- (W, I: to lower) or off-loading (O: from lower) ``op`` (64 bits if
    it has no such port)."""
    mem_op = hw.links[op]
    return (hw.levels(op)[-1].port_bw(mem_op, "fl" if op == "O" else "tl") or (64, 64))[1]
