"""Each operand's part of ZigZag 3.9.1's latency model of one loop nest (:mod:`npukit.sim.nest_latency` says
the mechanism and combines the parts): its data-transfer links per memory level (``zigzag/mapping/mapping.py``'s
``unit_mem_data_movement``: amount, bits, period, count of each of ``tl``/``fh``/``fl``/``th``), the real
cycles of each on its port, its memory utilisation (the double-buffer flags), and the lower bounds they
alone give on the whole mapping's latency terms (:func:`npukit.sim.nest_latency.latency_bound`).

Two levels of detail, memoised per (hw, layer, spatial mapping) in the caller's ``memo``:
:class:`OperandTransfers` reads of the operand's loops only each level's multiset (and the ir loops at the
bottom of an input's innermost level); :class:`OperandLatency` also the ir and r runs at each level's top
(the updating windows and the utilisation). Loop orders that share the first share it, so the mapper bounds
many orders from few computations. (ZigZag 3.9.1, KU Leuven MICAS, MIT license,
https://github.com/KULeuven-MICAS/zigzag.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hardware import Hardware
from .loopnest import IR_DIMS, R_DIMS, Loop, NestLayer, _cum, r_size, spatial_per_level, stationary

DIRS = ("tl", "fh", "fl", "th")
_INPUT_MEM_OPS = ("I1", "I2")  # ZigZag's Constants.MEM_OP_1 / MEM_OP_2: the memory operands of layer inputs


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

    def link(a: int, amount: float, boosted: float = 1) -> _Link:
        return _Link(amount, prec[a], int(cyc[a]), int(total // cyc[a]), int(elem[a] * prec[a] / cyc[a] * boosted), a)

    for m in range(L):
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
        drain = sum(max(math.ceil(math.prod(min(f, layer.dims.get(d, 1), hw.array.dims.get(oa, f))
                                            for d, f in sm[oa].items())) - 1, 0)
                    for oa in hw.array.systolic if oa in sm)
        sm_int, sm_frac = unrolling(layer, sm, hw.array.dims, True), unrolling(layer, sm, hw.array.dims, False)
        ctx = memo["ctx"] = _Ctx(
            *_hw_context(hw, order),
            {op: _spatial(hw, layer, op, sm_int) for op in order}, {op: _spatial(hw, layer, op, sm_frac) for op in order},
            drain, math.ceil(layer.macs / hw.array.units))
    return ctx


_HW_CTX: dict[tuple, tuple] = {}


def _hw_context(hw: Hardware, order: tuple[str, ...]) -> tuple:
    """The fields of :class:`_Ctx` that depend on ``hw`` and the operand order only (cached per hardware):
    order, memories, link bandwidths, ports, port of each link, port bandwidths, ports shared by both
    inputs, and the (operand, level) pairs each memory holds."""
    key = (id(hw), hw.name, order)
    hit = _HW_CTX.get(key)
    if hit is not None and hit[0] is hw:
        return hit[1]
    ops = {hw.links[op]: op for op in order}
    mems = {op: hw.levels(op) for op in order}
    bws = {(op, m, d): (b[1] if (b := mem.port_bw(hw.links[op], d)) else 0)
           for op in order for m, mem in enumerate(mems[op]) for d in DIRS}
    ports = _ports(hw, ops)
    groups: dict[str, list[tuple[str, int]]] = {}
    for op in order:
        for m, mem in enumerate(mems[op]):
            groups.setdefault(mem.name, []).append((op, m))
    out = (order, mems, bws, ports, {s: i for i, served in enumerate(ports) for s in served},
           [bws[served[0]] for served in ports],
           [len({hw.links[op] for op, _, _ in served} & set(_INPUT_MEM_OPS)) > 1 for served in ports], groups)
    if len(_HW_CTX) > 256:
        _HW_CTX.clear()
    _HW_CTX[key] = (hw, out)
    return out


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
