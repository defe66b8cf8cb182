"""ZigZag 3.9.1's latency model for one loop nest (a spatial unrolling and a temporal mapping per memory
level, as :mod:`npukit.sim.loopnest` represents them) on a :class:`~npukit.sim.hardware.Hardware`.

A re-implementation of ``zigzag/mapping/mapping.py`` (``calc_req_mem_bw_and_data_transfer_rate``: the
periodic data-transfer pattern of each operand at each memory level), ``zigzag/cost_model/cost_model.py``
(``calc_latency``: double-buffer flags, allowed vs real transfer cycles, port combination, on/off-loading,
overall latency) and ``zigzag/cost_model/port_activity.py`` of ZigZag 3.9.1 (KU Leuven MICAS, MIT license,
https://github.com/KULeuven-MICAS/zigzag). All counts are clock cycles. The mechanism, per operand and
memory level m (``m`` counts only the memories holding that operand; arch level ``a`` = memory level
``a - 1``, arch level 0 is the MAC array):

* Each data-transfer link direction (``tl`` read to the level below, ``fh`` written from above, ``fl``
  written from below, ``th`` read to above) moves ``amount`` elements of ``bits`` bits once per
  ``period`` cycles (the temporal loops of the levels below), ``count = total / period`` times. Inputs:
  ``tl`` moves the level's tile times the bandwidth boost (spatial fan-out), period = cycles of the
  levels below (the innermost level's period spans the ir loops at its very bottom); ``fh`` moves the
  tile of level m + 1's arch level. Outputs: ``fl``/``th`` likewise, and ``tl``/``fh`` only while the
  data are partial sums. Traffic beyond the top memory is ignored. Latency uses the integer spatial
  unrolling (an uneven unrolling's PEs truncated), energy and buffer occupancy the fractional one.
* A link is *allowed* the whole period when the memory receiving its data is double-buffered (its
  effective tile, the tile over its top relevant loops, fills at most half the memory, or fits the room
  its sharers leave; ``calc_double_buffer_flag``), else ``period / top_ir`` (the window before the top
  irrelevant loops reuse the tile). *Real* cycles = ``ceil(amount * bits / max_bw)``.
* Stall (+) or slack (-) of a link = ``(real - allowed) * (count - 1)``; links sharing a physical port
  add their stalls, and their slack only up to the union of their updating windows (the memory-updating
  window union); the worst port sets the stall ``SS_comb`` (all ports work in parallel).
* On-loading (before compute): per port, links that run once (count 1) cost their real cycles, less a
  share of the port's spare bandwidth during compute (``reduce_ordered``); links that repeat cost their
  real cycles. Per input operand and level pair the longer of the two link ends counts, summed per
  operand; two operands overlap unless a port is shared by both. Off-loading: the outputs' ``th``/``fl``
  pairs in series. The last results leave each systolic dimension one cycle per unit (drain).

``total = temporal + stall_slack + onloading + offloading + drain`` is ZigZag's ``latency_total2``; its
``*_complete.json`` dumps hold ``computation`` (temporal + stall_slack), ``data_onloading`` and
``data_offloading`` (off-loading + drain). ``tests/test_nest_latency.py`` and
``benchmarks/bench_nest_latency.py`` check every term against ZigZag's own dumps.

Use: ``nest_latency(hw, layer, m.spatial, m.temporal)`` for a :class:`~npukit.sim.nest_mapper.NestMapping`
``m`` (about 0.3 ms a call): ``.total`` is ZigZag's cycles for that mapping.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace

import numpy as np

from .hardware import Hardware
from .loopnest import IR_DIMS, R_DIMS, Loop, NestCost, NestLayer, _cum, r_size, spatial_per_level, stationary

DIRS = ("tl", "fh", "fl", "th")
_INPUT_MEM_OPS = ("I1", "I2")  # ZigZag's Constants.MEM_OP_1 / MEM_OP_2: the memory operands of layer inputs


@dataclass(frozen=True)
class NestLatency:
    """ZigZag's latency terms of one mapping, in cycles: ``ideal`` (MACs / array units, rounded up),
    ``temporal`` (temporal loop iterations), ``stall_slack`` (worst port's stall, >= 0), ``onloading``,
    ``offloading`` and ``drain`` (systolic drain)."""

    ideal: int
    temporal: int
    stall_slack: float
    onloading: float
    offloading: float
    drain: int

    @property
    def computation(self) -> float:
        """ZigZag's ``latency_total0``: temporal cycles plus stall."""
        return self.temporal + self.stall_slack

    @property
    def total(self) -> float:
        """ZigZag's ``latency_total2`` (cycles)."""
        return self.computation + self.onloading + self.offloading + self.drain


@dataclass(frozen=True)
class _Link:
    """One direction of one operand's data-transfer link at one memory level (``DataMovePattern``)."""

    amount: float  # elements per period
    bits: int
    period: int
    count: int
    req_bw: int  # average required bandwidth, bits per cycle
    arch: int  # its arch level: the updating window is ``int(period / top_ir[arch])``


_IDLE = _Link(0, 0, 0, 0, 0, 0)


def unrolling(layer: NestLayer, sm: dict[str, dict[str, float]], array: dict[str, int],
              integer: bool) -> dict[str, dict[str, float]]:
    """ZigZag's limited spatial unrolling (``SpatialMappingConversionStage``): each factor is clipped to
    its array dimension and to the loop; on the first array dimension with the largest factor of a loop
    that the array does not divide evenly, the factor becomes ``n / ceil(n / f) / (earlier factors)``,
    truncated to an integer when ``integer`` (the one latency uses)."""
    out: dict[str, dict[str, float]] = {}
    for oa, loops in sm.items():
        out[oa] = {}
        for d, f in loops.items():
            n = layer.dims.get(d, 1)
            f = min(f, array.get(oa, f), n)
            sizes = [lp.get(d, 0) for lp in sm.values()]
            first_max = next(o for o, lp in sm.items() if lp.get(d, 0) == max(sizes))
            if oa == first_max:
                early = math.prod(out[o].get(d, 1) for o in out if o != oa)
                f = n / math.ceil(n / (f * early)) / early
                f = int(f) if integer else f
            out[oa][d] = f
    return out


def _top_run(loops: list[Loop], dims: tuple[str, ...]) -> float:
    """Product of the loops of ``dims`` at the top of ``loops`` (innermost first)."""
    p = 1
    for d, s in reversed(loops):
        if d not in dims:
            break
        p *= s
    return p


def _links_key(op: str, tms: list[list[Loop]]) -> tuple:
    """What :func:`_links` and :func:`_utilisation` read of ``op``'s loops: per level the loop multiset and
    the products of the irrelevant and of the relevant loops at its top, and the irrelevant loops at the
    bottom of the innermost level (the order inside a level matters only through these)."""
    bottom = 1
    if op != "O":
        for d, f in tms[0] if tms else ():
            if d not in IR_DIMS[op]:
                break
            bottom *= f
    return (op, bottom, tuple((tuple(sorted(lv)), _top_run(lv, IR_DIMS[op]), _top_run(lv, R_DIMS[op])) for lv in tms))


def _spatial(hw: Hardware, layer: NestLayer, op: str, sm: dict) -> tuple[list[list[Loop]], list[int], list[bool]]:
    """What ``op``'s tiles take of the spatial unrolling ``sm``: (spatial loops per arch level, bandwidth
    boost per memory level, per arch level: does it unroll an output-irrelevant loop)."""
    su = spatial_per_level(hw, op, sm)
    L = len(hw.levels(op))
    r_sp = [r_size(layer, op, c) for c in _cum(su)]
    boost = [round(r_sp[0])] + [round(r_sp[m] / r_sp[m - 1]) for m in range(1, L)]
    return su, boost, [any(d in IR_DIMS["O"] and s > 1 for d, s in lv) for lv in su]


def _tiles(layer: NestLayer, op: str, su: list[list[Loop]], tms: list[list[Loop]]) -> list[int]:
    """Elements per unrolled instance of ``op`` at each arch level (``su``: :func:`_spatial`'s loops)."""
    out = [round(r_size(layer, op, {}))]
    cur: dict[str, float] = {}
    for a, lv in enumerate(tms):
        for d, s in lv:
            cur[d] = cur.get(d, 1) * s
        for d, s in su[a]:
            cur[d] = cur.get(d, 1) * s
        out.append(round(r_size(layer, op, cur)))
    return out


def _psum_flags(op: str, sp_ir: list[bool], tms: list[list[Loop]]) -> list[bool]:
    """Per arch level: does it hold partial sums (an output-irrelevant loop above it)? Last entry False.
    ``sp_ir``: :func:`_spatial`'s flags."""
    L = len(tms)
    if op != "O":
        return [False] * (L + 1)
    seed = [[]] + tms
    irf = [sp_ir[a] or any(d in IR_DIMS["O"] and s > 1 for d, s in seed[a]) for a in range(L + 1)]
    return [any(irf[m + 1:]) for m in range(L)] + [False]


def _links(hw: Hardware, layer: NestLayer, op: str, sp: tuple,
           tms: list[list[Loop]]) -> tuple[list[dict[str, _Link]], int]:
    """(per memory level of ``op``: its four links (``mapping.py``'s ``unit_mem_data_movement``), bits of
    its arch level 1 tile); ``sp``: :func:`_spatial` of the integer unrolling."""
    L = len(tms)
    su, boost, sp_ir = sp
    elem = _tiles(layer, op, su, tms)
    boost = boost + [1]
    cabl = []
    c = 1
    for lv in tms:
        for _, s in lv:
            c *= s
        cabl.append(c)
    total = cabl[-1]
    st = 1
    if op != "O":  # the innermost level's period spans the ir loops at its very bottom
        for d, s in tms[0]:
            if d not in IR_DIMS[op]:
                break
            st *= s
    cyc = [st] + cabl
    psum = _psum_flags(op, sp_ir, tms)
    prec = [hw.bits["O"] if p else hw.bits["O_final"] for p in psum] if op == "O" else [hw.bits[op]] * (L + 1)
    out = []
    for m in range(L):
        def link(a: int, amount: float, boosted: float = 1) -> _Link:
            return _Link(amount, prec[a], int(cyc[a]), int(total // cyc[a]), int(elem[a] * prec[a] / cyc[a] * boosted), a)
        low = link(m, elem[m] * boost[m] if op != "O" else int(elem[m] * boost[m]), boost[m])
        high = link(m + 1, elem[m + 1]) if m < L - 1 else _IDLE
        if op != "O":
            out.append({"tl": low, "fh": high, "fl": _IDLE, "th": _IDLE})
        else:
            out.append({"tl": low if psum[m] else _IDLE, "fh": high if psum[m + 1] else _IDLE, "fl": low, "th": high})
    return out, elem[1] * prec[1]


def _utilisation(hw: Hardware, layer: NestLayer, op: str, sp: tuple, tms: list[list[Loop]]) -> list[float]:
    """Per memory level of ``op``: the share of the memory its effective tile (the tile over the level's top
    relevant loops) fills (``effective_mem_utili_individual``); ``sp``: :func:`_spatial` of the fractional
    unrolling."""
    elem = _tiles(layer, op, sp[0], tms)
    psum = _psum_flags(op, sp[2], tms)
    prec = [hw.bits["O"] if p else hw.bits["O_final"] for p in psum] if op == "O" else [hw.bits[op]] * len(elem)
    top_r = [1] + [_top_run(lv, R_DIMS[op]) for lv in tms]
    return [(elem[m + 1] * prec[m + 1]) // top_r[m + 1] / mem.size_bits for m, mem in enumerate(hw.levels(op))]


def _double_buffered(ctx: _Ctx, ind: dict[str, list[float]]) -> dict[str, list[bool]]:
    """Per operand, [False (MAC level)] + per memory level: can it double-buffer (``calc_double_buffer_flag``)?
    ``ind``: :func:`_utilisation` of each operand."""
    groups, order, mems = ctx.groups, ctx.order, ctx.mems
    shared = {op: [sum(ind[o][k] for o, k in groups[mem.name]) for mem in mems[op]] for op in order}
    flags: dict[str, list[bool]] = {}
    for op in order:
        flags[op] = [False]
        for m, mem in enumerate(mems[op]):
            if shared[op][m] <= 0.5:
                flags[op].append(True)
            elif ind[op][m] <= 1 - shared[op][m]:
                flags[op].append(True)
                for o, k in groups[mem.name]:
                    shared[o][k] += ind[op][m]
            else:
                flags[op].append(False)
    return flags


def _window_union(acts: list[tuple]) -> int:
    """Cycles covered by the union of the links' updating windows (``__calc_mem_updating_window_union``):
    each link (real, allowed, period, count) is busy the first ``allowed`` cycles of each period; the union
    over the longest period, times that link's period count."""
    for _, allowed, period, count in acts:
        if period == allowed:
            return period * count
    big = max(acts, key=lambda a: a[2])  # the first with the longest period
    chain = sorted((p, min(a, p)) for _, a, p, _ in acts)
    if all(q % p == 0 for (p, _), (q, _) in zip(chain, chain[1:], strict=False)):
        return _nested_union(chain, big[2]) * big[3]
    covered = np.zeros(big[2], dtype=bool)  # periods that do not nest: mark the cycles (as ZigZag does)
    for _, allowed, period, _ in acts:
        for start in range(0, big[2], period):
            covered[start:start + allowed] = True
    return int(covered.sum()) * big[3]


def _nested_union(chain: list[tuple[int, int]], x: int) -> int:
    """Cycles of [0, x) inside a window of any link of ``chain`` ((period, window), shortest period first,
    each period dividing the next), in closed form: whole periods of the longest link, then the rest of one;
    within one period, its window plus what the shorter links cover after it."""
    memo: dict[tuple[int, int], int] = {}

    def covered(j: int, x: int) -> int:
        if j < 0 or x <= 0:
            return 0
        if (j, x) not in memo:
            p, a = chain[j]
            q, r = divmod(x, p)
            memo[(j, x)] = q * first(j, p) + first(j, r)
        return memo[(j, x)]

    def first(j: int, r: int) -> int:
        w = min(r, chain[j][1])
        return w + max(0, covered(j - 1, r) - covered(j - 1, w))

    return covered(len(chain) - 1, x)


def _ports(hw: Hardware, ops: dict[str, str]) -> list[list[tuple[str, int, str]]]:
    """Every physical port in memory order: the (layer operand, memory level, direction) links it serves."""
    out = []
    for mem in hw.memories:
        served: dict[str, list[tuple[str, int, str]]] = {}
        for mem_op in mem.operands:
            op = ops.get(mem_op)
            for (o, d), pname in mem.port.items():
                if o == mem_op and op is not None:
                    served.setdefault(pname, []).append((op, hw.levels(op).index(mem), d))
        names = list(dict.fromkeys(mem.port.values()))
        out += [served[p] for p in names if p in served]
    return out


def _reduce_ordered(c: list[float], m: list[float], s: float) -> list[float]:
    """Reduce each c towards its m, largest c first, by at most ``s`` in all (ZigZag's ``reduce_ordered``)."""
    if s <= 0 or not c:
        return c
    out = list(c)
    for i in sorted(range(len(c)), key=lambda i: c[i], reverse=True):
        if s <= 0:
            break
        r = min(max(0.0, out[i] - m[i]), s)
        out[i] -= r
        s -= r
    return out


@dataclass(frozen=True)
class _Ctx:
    """What a latency depends on besides the temporal mapping (one per hw, layer and spatial mapping)."""

    order: tuple[str, ...]  # ZigZag's layer operand order
    mems: dict[str, list]
    bws: dict[tuple[str, int, str], int]  # max bandwidth of each link's port, bits per cycle
    ports: list[list[tuple[str, int, str]]]  # per physical port: the links it serves
    port_of: dict[tuple[str, int, str], int]
    port_bw: list[int]  # the bandwidth ZigZag's loading takes for each port (its first link's)
    two_inputs: list[bool]  # the port serves both input operands
    groups: dict[str, list[tuple[str, int]]]  # memory name -> the (operand, level) it holds
    sp_int: dict[str, tuple]  # per operand: _spatial of the integer unrolling
    sp_frac: dict[str, tuple]
    drain: int
    ideal: int


def _context(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], memo: dict) -> _Ctx:
    ctx = memo.get("ctx")
    if ctx is None:
        gemm = layer.in_extent == (0, 0) and all(layer.dims.get(d, 1) == 1 for d in ("OY", "OX", "FY", "FX"))
        order = ("O", "I", "W") if gemm else ("O", "W", "I")  # ZigZag's layer operand order (its equation's)
        ops = {hw.links[op]: op for op in order}
        mems = {op: hw.levels(op) for op in order}
        bws = {(op, m, d): (b[1] if (b := mem.port_bw(hw.links[op], d)) else 0)
               for op in order for m, mem in enumerate(mems[op]) for d in DIRS}
        drain = sum(max(math.ceil(math.prod(min(f, layer.dims.get(d, 1), hw.array.dims.get(oa, f))
                                            for d, f in sm[oa].items())) - 1, 0)
                    for oa in hw.array.systolic if oa in sm)
        ports = _ports(hw, ops)
        groups: dict[str, list[tuple[str, int]]] = {}
        for op in order:
            for m, mem in enumerate(mems[op]):
                groups.setdefault(mem.name, []).append((op, m))
        sm_int, sm_frac = unrolling(layer, sm, hw.array.dims, True), unrolling(layer, sm, hw.array.dims, False)
        ctx = memo["ctx"] = _Ctx(
            order, mems, bws, ports, {s: i for i, served in enumerate(ports) for s in served},
            [bws[served[0]] for served in ports],
            [len({hw.links[op] for op, _, _ in served} & set(_INPUT_MEM_OPS)) > 1 for served in ports], groups,
            {op: _spatial(hw, layer, op, sm_int) for op in order}, {op: _spatial(hw, layer, op, sm_frac) for op in order},
            drain, math.ceil(layer.macs / hw.array.units))
    return ctx


@dataclass(frozen=True)
class OperandTransfers:
    """What ZigZag's latency reads of one operand's loops up to their order inside each level (its
    transfer links, the real cycles of each, the bits of its arch level 1 tile, the temporal cycles), and
    the lower bounds those alone give on the mapping's terms (:func:`latency_bound`): per physical port,
    the stall the links prove with their period as allowed (``stall``) and their real cycles over all
    but one period (``busy``); the on-loading (inputs) or off-loading (outputs)."""

    links: list[dict[str, _Link]]
    bits1: int
    real: dict[tuple[str, int, str], int]
    temporal: int
    stall: tuple[int, ...]
    busy: tuple[int, ...]
    onload: float
    offload: float


@dataclass(frozen=True)
class OperandLatency:
    """One operand's part of ZigZag's latency of a mapping: its :class:`OperandTransfers` (``transfers``),
    the products of the ir loops at the top of each arch level (``top_ir``: the updating windows), its
    memory utilisation per level (``ind``: the double-buffer flags), and the stall bound per port with the
    windows where the flag is surely false (:func:`latency_bound`)."""

    transfers: OperandTransfers
    top_ir: list[int]
    ind: list[float]
    stall: tuple[int, ...]

    @property
    def links(self) -> list[dict[str, _Link]]:
        return self.transfers.links

    @property
    def real(self) -> dict[tuple[str, int, str], int]:
        return self.transfers.real

    @property
    def bits1(self) -> int:
        return self.transfers.bits1

    @property
    def temporal(self) -> int:
        return self.transfers.temporal

    @property
    def busy(self) -> tuple[int, ...]:
        return self.transfers.busy

    @property
    def onload(self) -> float:
        return self.transfers.onload

    @property
    def offload(self) -> float:
        return self.transfers.offload


def operand_transfers(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], op: str,
                      loops: list[list[Loop]], memo: dict, tms: list[list[Loop]] | None = None) -> OperandTransfers:
    """``op``'s :class:`OperandTransfers` for its temporal loops ``loops`` (per memory level, innermost
    first, before the merge-down; ``tms``: after it, when known); ``memo``: as :func:`nest_latency`'s."""
    ctx = _context(hw, layer, sm, memo)
    tms = stationary(op, loops) if tms is None else tms
    bottom = 1
    if op != "O":
        for d, f in tms[0] if tms else ():
            if d not in IR_DIMS[op]:
                break
            bottom *= f
    key = (op, "transfers", bottom, tuple(tuple(sorted(lv)) for lv in tms))
    hit = memo.get(key)
    if hit is None:
        lk, b1 = _links(hw, layer, op, ctx.sp_int[op], tms)
        hit = memo[key] = OperandTransfers(lk, b1, *_transfer_bounds(ctx, op, lk, b1, math.prod(s for lv in tms for _, s in lv)))
    return hit


def operand_latency(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], op: str,
                    loops: list[list[Loop]], memo: dict) -> OperandLatency:
    """``op``'s :class:`OperandLatency` for its temporal loops ``loops`` (per memory level, innermost
    first, before the merge-down); ``memo``: as :func:`nest_latency`'s (kept per operand by what the
    latency reads of its loops, :func:`_links_key`)."""
    ctx = _context(hw, layer, sm, memo)
    tms = stationary(op, loops)
    key = _links_key(op, tms)
    hit = memo.get(key)
    if hit is None:
        tr = operand_transfers(hw, layer, sm, op, loops, memo, tms)
        top_ir = [1] + [_top_run(lv, IR_DIMS[op]) for lv in tms]
        ind = _utilisation(hw, layer, op, ctx.sp_frac[op], tms)
        stall = list(tr.stall)
        for m, lv in enumerate(tr.links):
            for d, x in lv.items():
                p = ctx.port_of.get((op, m, d))
                if p is None or not x.count:
                    continue
                j = m + (d in ("th", "fh"))  # the double-buffer flag allowed() reads: 0 the MAC level, j memory j - 1
                u = ind[j - 1] if j else 0.0
                if j == 0 or not (u <= 0.5 or u <= 1 - u):  # surely single-buffered: the window is allowed
                    r, n = tr.real[(op, m, d)], x.count - 1
                    stall[p] += max(0, (r - int(x.period / top_ir[x.arch])) * n) - max(0, (r - x.period) * n)
        hit = memo[key] = OperandLatency(tr, top_ir, ind, tuple(stall))
    return hit


def _transfer_bounds(ctx: _Ctx, op: str, lk: list[dict[str, _Link]], b1: int, temporal: int) -> tuple:
    """(real cycles of each active link, ``temporal``, positive stall per port with the periods allowed, busy
    cycles per port, on-loading, off-loading) from ``op``'s links alone (see :func:`latency_bound` for why
    they bound the mapping's terms)."""
    stall = [0] * len(ctx.ports)
    busy = [0] * len(ctx.ports)
    rl: dict[tuple[str, int, str], int] = {}
    load: dict[tuple[int, str], tuple[float, bool]] = {}
    bws, port_of = ctx.bws, ctx.port_of
    for m, lv in enumerate(lk):
        for d, x in lv.items():
            if not x.count:
                continue
            s = (op, m, d)
            r = rl[s] = math.ceil(x.amount * x.bits / bws[s]) if bws[s] else 0
            p = port_of.get(s)
            if p is None:
                continue
            ss = (r - x.period) * (x.count - 1)
            if ss > 0:
                stall[p] += ss
            busy[p] += r * (x.count - 1)
            if op == "O" and d in ("tl", "fh"):
                continue
            load[(m, d)] = (min(r, math.ceil(b1 / ctx.port_bw[p])) if x.count == 1 else r, ctx.two_inputs[p])
    on = off = 0.0
    if op == "O":
        off = sum(max(load.get((m, "th"), (0, False))[0], load.get((m + 1, "fl"), (0, False))[0])
                  for m in range(len(lk) - 1))
    else:
        ind_, half, shared = _onloading_parts(len(lk), lambda m, d: load.get((m, d), (0, False)))
        on = min(shared + (half + ind_), (shared + half) + ind_)
    return rl, temporal, tuple(stall), tuple(busy), on, off


def latency_bound(memo: dict, parts: list[OperandLatency | OperandTransfers | None]) -> float:
    """A lower bound (cycles) on ZigZag's latency ``nest_latency(...).total`` of a mapping from the
    :class:`OperandLatency` of some of its operands (None for the others), never above it in floating point
    either. ``total = (((temporal + stall) + onloading) + offloading) + drain``; the bound is the same sum,
    term by term no larger (IEEE rounding is monotone, so a sum of smaller terms in the same order is no
    larger; the stall terms are Python integers, exact):

    * stall: ZigZag's stall is the max over ports of ``comb`` (a port with one active link: that link's
      ``(real - allowed) * (count - 1)``; with several: the sum of the positive ones plus a term clipped at
      0), and at least 0; so it is at least, per port, the sum over the known operands' links on that port
      of ``max(0, (real - allowed) * (count - 1))``. ``allowed`` is the link's window or its period (the
      window ``int(period / top_ir)`` <= period); which one depends on a double-buffer flag that reads all
      the operands sharing a memory, so the period is used unless the flag is surely false: at the MAC
      level, or when the operand's own utilisation ``u`` fails both tests (``shared >= u`` in floating
      point as a sum of terms >= 0 that includes ``u``, so ``shared > 0.5`` and ``u > 1 - shared``).
    * loading values: a link that repeats loads its real cycles; one that runs once loads its real cycles
      reduced towards ``ceil(bits1 / port_bw)`` and never below it (``_reduce_ordered``), so at least the
      smaller of the two; the classification of a link (loaded or not, its port shared by both inputs)
      reads only the link and its port.
    * on-loading: ZigZag's ``min(s1 + max(s2 + h2 + i2, h1 + i1), s2 + max(s1 + h1 + i1, h2 + i2))`` is, for
      each input k, at least ``min(s_k + (h_k + i_k), (s_k + h_k) + i_k)`` (both orders of rounding), all
      terms >= 0; each input's (i, h, s) from the loading lower bounds, in ZigZag's order, is no larger.
    * off-loading: the outputs' pairs from the loading lower bounds, summed in the same order.
    * temporal and drain: exact (the temporal cycles are the product of every temporal loop: the same
      for every operand)."""
    present = [p for p in parts if p is not None]
    if not present:
        return 0.0
    p = present[0]
    temporal, on, off, stall, busy = p.temporal, p.onload, p.offload, p.stall, p.busy
    for p in present[1:]:
        stall, busy = list(map(operator.add, stall, p.stall)), list(map(operator.add, busy, p.busy))
        on = max(on, p.onload)
        off = p.offload if p.offload else off
    worst = max(max(stall, default=0), max(busy, default=0) - temporal)  # per port max(stall, busy - temporal)
    return temporal + worst + max(on, 0.0) + off + memo["ctx"].drain


def latency_of(memo: dict, parts: dict[str, OperandLatency]) -> NestLatency:
    """ZigZag's latency of a mapping from its operands' :class:`OperandLatency` (``memo``: theirs)."""
    ctx: _Ctx = memo["ctx"]
    order, ports = ctx.order, ctx.ports
    links = {op: parts[op].links for op in order}
    top_ir = {op: parts[op].top_ir for op in order}
    real: dict = {}
    for op in order:
        real.update(parts[op].real)
    total = parts["O"].temporal
    db = _double_buffered(ctx, {op: parts[op].ind for op in order})

    def allowed(op: str, m: int, d: str) -> int:
        lk = links[op][m][d]
        return lk.period if db[op][m + (d in ("th", "fh"))] else int(lk.period / top_ir[op][lk.arch])

    # stall / slack per physical port (combine_data_transfer_rate_per_physical_port)
    stall = 0.0
    for served in ports:
        acts = [(real[s], allowed(*s), links[s[0]][s[1]][s[2]].period, links[s[0]][s[1]][s[2]].count)
                for s in served if links[s[0]][s[1]][s[2]].count]
        if len(acts) == 1:
            stall = max(stall, (acts[0][0] - acts[0][1]) * (acts[0][3] - 1))
        elif acts:
            ss = [(r - a) * (c - 1) for r, a, _, c in acts]
            muw = sum(a * (c - 1) for _, a, _, c in acts)
            comb = sum(x for x in ss if x > 0) + max(0, sum(x for x in ss if x <= 0) + muw - _window_union(acts))
            stall = max(stall, comb)

    # on/off-loading per port (calc_loading_single_port)
    loading: dict[tuple[str, int, str], tuple[float, bool]] = {}
    for i, served in enumerate(ports):
        port_bw = ctx.port_bw[i]
        two_inputs = ctx.two_inputs[i]
        once, repeat = [], []
        for s in served:
            op, m, d = s
            if op == "O" and d in ("tl", "fh"):
                continue
            n = links[op][m][d].count
            if n == 1:
                once.append(s)
            elif n > 1:
                repeat.append(s)
        for s in repeat:
            loading[s] = (real[s], two_inputs)
        if once:
            req = sum(math.ceil(links[op][m][d].req_bw) for op, m, d in repeat)
            busy = total + stall
            surplus = max(0, (port_bw - req) / port_bw * busy)
            least = [math.ceil(parts[op].bits1 / port_bw) for op, _, _ in once]
            left = _reduce_ordered([real[s] for s in once], least, surplus)
            for s, v in zip(once, left, strict=True):
                loading[s] = (v, two_inputs)
    on = _onloading(order, ctx.mems, loading)
    off = sum(max(loading.get(("O", m, "th"), (0, False))[0], loading.get(("O", m + 1, "fl"), (0, False))[0])
              for m in range(len(ctx.mems["O"]) - 1))
    return NestLatency(ctx.ideal, total, stall, on, off, ctx.drain)


def nest_latency(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]],
                 tm: dict[str, list[list[Loop]]], memo: dict | None = None) -> NestLatency:
    """ZigZag 3.9.1's latency of spatial mapping ``sm`` ({array dim: {loop dim: factor}}) and temporal mapping
    ``tm`` ({W, I, O: loops per memory level, innermost first}) of ``layer`` on ``hw``, in cycles. ``memo``: a
    dict the caller keeps for one (hw, layer, sm) across temporal mappings (what depends only on those, and
    each operand's links by its loops after the merge-down, are computed once)."""
    memo = {} if memo is None else memo
    return latency_of(memo, {op: operand_latency(hw, layer, sm, op, tm[op], memo) for op in ("W", "I", "O")})


def _onloading_parts(levels: int, get) -> tuple[float, float, float]:
    """One input's (independent, half-shared, shared) on-loading from its link pairs (``get(m, d)``: the
    (cycles, port shared by both inputs) of a link): per level pair the longer of the two ends."""
    ind = half = shared = 0.0
    for m in range(levels - 1):
        (c1, s1), (c2, s2) = get(m, "fh"), get(m + 1, "tl")
        c = max(c1, c2)
        if not s1 and not s2:
            ind += c
        elif s1 and s2:
            shared += c
        else:
            half = c  # ZigZag assigns (does not add) the half-shared part
    return ind, half, shared


def _onloading(order: tuple[str, ...], mems: dict, loading: dict) -> float:
    """Combine the inputs' on-loading link pairs (``calc_onloading_combined``)."""
    parts = {op: _onloading_parts(len(mems[op]), lambda m, d, op=op: loading.get((op, m, d), (0, False)))
             for op in order[1:]}
    (i1, h1, s1), (i2, h2, s2) = parts.values()
    return min(s1 + max(s2 + h2 + i2, h1 + i1), s2 + max(s1 + h1 + i1, h2 + i2))


def with_latency(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]], tm: dict[str, list[list[Loop]]],
                 cost: NestCost, lat: NestLatency | None = None) -> NestCost:
    """``cost`` with ZigZag's latency terms of the mapping (``lat``, computed when not given) as its cycles."""
    lat = lat if lat is not None else nest_latency(hw, layer, sm, tm)
    return replace(cost, temporal_cycles=lat.temporal, stall_cycles=lat.stall_slack, onload_cycles=lat.onloading,
                   offload_cycles=lat.offloading, drain_cycles=lat.drain)
