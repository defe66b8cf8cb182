"""LOMA's memory allocation (:func:`npukit.sim.nest_alloc.allocate`) of every loop order of a layer at once,
with numpy: one array row per order, the memories walked bottom-up once for all of them.

Per memory and operand it computes the tile sizes of every prefix of each order's unallocated loops (the
running products of :func:`~npukit.sim.nest_alloc._tile_sizes`), where they stop fitting, the traffic
to the level above (suffix product x tile size) and LOMA's choice (the split that fits and moves the
least; ties go to the last, as the scalar loop's ``<=`` does), and ``reach`` (the loops each order's
allocation read). Every float operation is the scalar code's, in the same order (per-dimension running
products in allocation order, the inputs' ``B*C*G`` base times each B/C/G loop, the whole tensor from
the first order to reach a memory, suffix products from 1.0 right to left, sums of the operands'
traffic left to right), so a fractional unrolling (n / ceil(n / f) PEs) gives the same bits and the
same ties; where the scalar code would hold an exact Python integer of 2**53 or more (a float64 cannot),
:func:`allocate_all` returns None and the caller allocates one order at a time. The batch equals the
scalar allocation order for order (``tests/test_nest_speed.py``).

:func:`stationary_groups` then groups the orders that fit by what their cost depends on (each operand's
loops per level after the merge-down), so that the mapper costs one order per group.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from .hardware import Hardware
from .loopnest import IR_DIMS, R_DIMS, Loop, NestLayer, r_size, spatial_per_level

_EXACT = 2.0**53


def allocate_all(hw: Hardware, layer: NestLayer, esm: dict[str, dict[str, float]], orders: list[list[Loop]],
                 su: dict[str, list[list[Loop]]] | None = None) -> list[tuple[dict[str, list[list[Loop]]] | None, int]] | None:
    """``(temporal mapping or None, reach)`` of each order (as ``allocate(..., reach)`` gives them), or None
    when the batch cannot be exact (a tile of 2**53 bits or more)."""
    if not orders:
        return []
    b = allocate_batch(hw, layer, esm, orders, su)
    if b is None:
        return None
    return [(temporal_mapping(b, r), int(b.reach[r])) for r in range(len(orders))]


@dataclass
class Batch:
    """:func:`allocate_batch`'s result: the ``orders``, which of them fit (``alive``, bool (N,)), the loops
    each read (``reach``, (N,)), per operand the end of each memory level's loops in the order (``cuts``,
    (N, levels)), and each loop's dimension (index into ``dims``) and factor (``D``, ``F``, (N, loops))."""

    orders: list[list[Loop]]
    alive: Any
    reach: Any
    cuts: dict[str, Any]
    D: Any
    F: Any
    dims: list[str]
    cut_lists: dict[str, list[list[int]]] | None = None  # ``cuts`` as Python lists (filled when first read)


def temporal_mapping(b: Batch, r: int) -> dict[str, list[list[Loop]]] | None:
    """Order ``r``'s temporal mapping ({operand: loops per memory level, innermost first}), None if it
    does not fit."""
    if not b.alive[r]:
        return None
    if b.cut_lists is None:
        b.cut_lists = {o: cc.tolist() for o, cc in b.cuts.items()}
    order = b.orders[r]
    tm = {}
    for o, cc in b.cut_lists.items():
        lv, prev = [], 0
        for x in cc[r]:
            lv.append(order[prev:x])
            prev = x
        tm[o] = lv
    return tm


def allocate_batch(hw: Hardware, layer: NestLayer, esm: dict[str, dict[str, float]], orders: list[list[Loop]],
                   su: dict[str, list[list[Loop]]] | None = None) -> Batch | None:
    """Every order's allocation as arrays (:class:`Batch`), or None when the batch cannot be exact (a tile
    of 2**53 bits or more)."""
    import numpy as np

    ops = ("W", "I", "O")
    if su is None:
        su = {o: spatial_per_level(hw, o, esm) for o in ops}
    n = len(orders[0])
    N = len(orders)
    flat = list(itertools.chain.from_iterable(orders))
    loops = list(dict.fromkeys(flat))  # the distinct loops; each order's as indices into them
    dims = sorted({d for d, _ in loops} | {d for o in ops for lv in su[o] for d, _ in lv} | set(layer.dims))
    di = {d: k for k, d in enumerate(dims)}
    code = {loop: k for k, loop in enumerate(loops)}
    idx = np.fromiter(map(code.__getitem__, flat), dtype=np.int64, count=len(flat)).reshape(N, n)
    D = np.array([di[d] for d, _ in loops], dtype=np.int64)[idx]
    F = np.array([f for _, f in loops], dtype=np.float64)[idx]
    in_d = {di[d] for d, _ in loops}
    rows = np.arange(N)
    # suffix products of each order, right to left from 1.0 (the scalar ``suf``)
    SP = np.ones((N, n + 1))
    for j in range(n - 1, -1, -1):
        SP[:, j] = SP[:, j + 1] * F[:, j]
    mem_to_op = {hw.links[o]: o for o in ops}
    tops = {o: hw.levels(o)[-1].name for o in ops}
    cum = {o: np.ones((len(dims), N)) for o in ops}
    for o in ops:
        for d, f in su[o][0]:
            cum[o][di[d]] *= f
    c = {o: np.zeros(N, dtype=np.int64) for o in ops}
    cuts: dict[str, list[Any]] = {o: [] for o in ops}
    level = dict.fromkeys(ops, 0)
    alive = np.ones(N, dtype=bool)
    reach = np.zeros(N, dtype=np.int64)
    ir_o = [di[d] for d in IR_DIMS["O"] if d in di]
    is_ir_o = _lut(np, len(dims), ir_o)[D]
    pos = np.arange(n)
    sy, sx = layer.stride
    ey, ex = layer.in_extent
    for mem in hw.memories:
        mops = [mem_to_op[m] for m in mem.operands if m in mem_to_op]
        if not mops:
            continue
        ok = alive.copy()
        choices = []  # per operand: (take counts (N, k), sizes (N, k), accs (N, k), valid (N, k))
        for o in mops:
            n_o = n - c[o]
            prec = np.full(N, float(hw.bits[o]))
            if o == "O":
                psum_up = any(d in IR_DIMS["O"] for lv in su[o][level[o] + 1:] for d, _ in lv)
                psum = (is_ir_o & (pos[None, :] >= c[o][:, None])).any(axis=1) | psum_up
                prec = np.where(psum, float(hw.bits["O"]), float(hw.bits["O_final"]))
            # the whole tensor as the scalar path computes it: from the first order that gets here (its
            # float products in that order's sequence)
            first = int(np.argmax(ok)) if ok.any() else 0
            seq, prev = list(su[o][0]), 0
            for lv_k, cc in enumerate(cuts[o]):
                x = int(cc[first])
                seq += orders[first][prev:x] + su[o][lv_k + 1]
                prev = x
            whole_el = _tensor(layer, o, seq + orders[first][prev:])
            if whole_el * max(hw.bits.values()) >= _EXACT:
                return None
            if mem.name == tops[o]:
                whole = whole_el * prec
                ok &= ~(whole > mem.size_bits)
                choices.append((n_o[:, None], whole[:, None], np.zeros((N, 1)), np.ones((N, 1), dtype=bool)))
                continue
            full = whole_el * prec if mem.double_buffered else None
            S, V = _sizes(np, o, cum[o], di, D, F, c[o], n_o, prec, full, mem.size_bits, (sy, sx), (ey, ex), n, in_d)
            ok &= V[:, 0]
            ln = V.sum(axis=1)
            ext = np.minimum(n, c[o] + ln)
            reach = np.where(ok, np.maximum(reach, ext), reach)
            take = np.broadcast_to(np.arange(n + 1), (N, n + 1))
            sufs = SP[rows[:, None], np.minimum(c[o][:, None] + take, n)]
            acc = np.where(V, sufs * S, np.inf)
            if np.any(S[V] >= _EXACT):
                return None
            choices.append((take, np.where(V, S, np.inf), acc, V))
        best = _choose(np, choices, mem.size_bits, N)
        ok &= best[0]
        alive = ok
        for k, o in enumerate(mops):
            t = np.where(alive, best[1][k], 0)
            cuts[o].append(c[o] + t)
            # the kept loops then the spatial loops of the next level join the allocated ones (in that order)
            kept = alive[:, None] & (pos[None, :] >= c[o][:, None]) & (pos[None, :] < (c[o] + t)[:, None])
            for j in np.nonzero(kept.any(axis=0))[0].tolist():
                sel = np.nonzero(kept[:, j])[0]
                cum[o][D[sel, j], sel] *= F[sel, j]
            c[o] = c[o] + t
            level[o] += 1
            for d, f in su[o][level[o]]:
                cum[o][di[d]] *= f
        if not alive.any():
            break
    if not alive.any():
        alive = np.zeros(N, dtype=bool)
    cut_arr = {o: np.stack(cuts[o], axis=1) if len(cuts[o]) == len(hw.levels(o)) else np.zeros((N, 0), dtype=np.int64)
               for o in ops}
    return Batch(orders, alive, reach, cut_arr, D, F, dims)


def stationary_groups(b: Batch, coarse: bool = False) -> list[tuple]:
    """The orders that fit, one per group of equal cost, in order, each with an id per operand (W, I, O) of
    its loops after the merge-down (equal ids: equal loops): an order is left out when an earlier
    one has, for every operand, the same loops (as multisets) at every memory level after ZigZag's
    merge-down (:func:`npukit.sim.loopnest.stationary`), the same product of ir loops at the bottom (what
    :func:`npukit.sim.loopnest.operand_parts` keys its cost on) and, per level, the same products of the ir
    and of the r loops at its top (what ZigZag's latency adds, :mod:`npukit.sim.nest_latency`). The
    merge-down in closed form: level m then starts at the first non-ir loop from its start on, or where level
    m + 1 now starts if earlier. ``coarse``: each also with a coarser id per operand, of its loop multisets
    per level and product of ir loops at the bottom only (what its transfers read,
    :func:`npukit.sim.nest_transfers.operand_transfers`)."""
    import numpy as np

    rows = np.nonzero(b.alive)[0]
    if rows.size == 0:
        return []
    D, F = b.D[rows], b.F[rows]
    N, n = D.shape
    Fi = F.astype(np.int64)
    _, kind = np.unique(D * (int(Fi.max()) + 1) + Fi, return_inverse=True)
    kind = kind.reshape(N, n)
    T = int(kind.max()) + 1
    CP = np.ones((N, n + 1))
    CP[:, 1:] = np.cumprod(F, axis=1)
    r = np.arange(N)
    pos = np.arange(n)
    keys, widths = [], []
    for o, cc in b.cuts.items():
        C = cc[rows]
        L = C.shape[1]
        ir_idx = [k for k, d in enumerate(b.dims) if d in IR_DIMS[o]]
        isir = _lut(np, len(b.dims), ir_idx)[D]
        NN = np.full((N, n + 1), n, dtype=np.int64)  # first non-ir position from p on
        NN[:, :n] = np.minimum.accumulate(np.where(isir, n, pos[None, :])[:, ::-1], axis=1)[:, ::-1]
        bp = np.zeros((N, L + 1), dtype=np.int64)
        bp[:, L] = n
        for m in range(L - 1, 0, -1):
            bp[:, m] = np.minimum(NN[r, C[:, m - 1]], bp[:, m + 1])
        lev = np.zeros((N, n), dtype=np.int64)
        for m in range(1, L):
            lev += pos[None, :] >= bp[:, m][:, None]
        flat = (r[:, None] * (L * T) + lev * T + kind).ravel()
        counts = np.bincount(flat, minlength=N * L * T).reshape(N, L * T)
        st = CP[r, np.minimum(NN[:, 0], bp[:, 1])]  # product of the ir run at the very bottom
        # ZigZag's latency also reads, per level, the products of the ir loops and of the r loops at its top
        # (npukit.sim.nest_latency: the updating window and the effective tile): two orders that differ only
        # there cost the same energy but not the same cycles
        r_idx = [k for k, d in enumerate(b.dims) if d in R_DIMS[o]]
        isr = _lut(np, len(b.dims), r_idx)[D]
        tops = []
        for flags in (isir, isr):
            # last position <= p whose loop is not in the run (-1: none)
            LN = np.maximum.accumulate(np.where(flags, -1, pos[None, :]), axis=1)
            for m in range(L):
                lo, hi = (bp[:, m] if m else np.zeros(N, dtype=np.int64)), bp[:, m + 1]
                e = np.maximum(hi - 1, 0)
                start = np.where(hi > lo, np.maximum(LN[r, e] + 1, lo), hi)
                tops.append(np.rint(CP[r, hi] / CP[r, start]).astype(np.int64))
        keys.append(np.hstack([counts, st.astype(np.int64)[:, None], np.stack(tops, axis=1)]))
        widths.append(counts.shape[1] + (o != "O"))  # an output's cost does not read its bottom ir run
    fine = [_row_codes(np, k) for k in keys]
    crs = [_row_codes(np, k[:, :w]) for k, w in zip(keys, widths, strict=True)] if coarse else []
    if all(c is not None for c in fine + crs):  # the codes as the ids (they mean only equal or not)
        _, first = _unique_rows(np, np.stack(fine, axis=1))
        first.sort()
        ids = [c[first].tolist() for c in fine]
        out = rows[first].tolist()
        if not coarse:
            return list(zip(out, zip(*ids, strict=True), strict=True))
        return list(zip(out, zip(*ids, strict=True), zip(*[c[first].tolist() for c in crs], strict=True), strict=True))
    _, first = _unique_rows(np, np.hstack(keys))
    first.sort()
    ids = [_unique_rows(np, k[first])[0].tolist() for k in keys]
    if not coarse:
        return list(zip(rows[first].tolist(), zip(*ids, strict=True), strict=True))
    cids = [_unique_rows(np, k[first][:, :w])[0].tolist() for k, w in zip(keys, widths, strict=True)]
    return list(zip(rows[first].tolist(), zip(*ids, strict=True), zip(*cids, strict=True), strict=True))


def _row_codes(np: Any, a: Any) -> Any:
    """One int64 per row of an int64 matrix, equal exactly when the rows are (its non-constant columns as
    the digits of a mixed radix), or None when that does not fit 62 bits."""
    if a.shape[1] == 0:
        return np.zeros(a.shape[0], dtype=np.int64)
    lo = a.min(axis=0)
    span = a.max(axis=0) - lo + 1
    keep = span > 1
    mult, total = [], 1
    for x in span[keep].tolist():
        mult.append(total)
        total *= x
    if total >= 2**62:
        return None
    return (a[:, keep] - lo[keep]) @ np.array(mult, dtype=np.int64)


def _unique_rows(np: Any, a: Any) -> tuple[Any, Any]:
    """(row id, equal rows sharing one, and the first row of each id) of an int64 matrix: its rows as
    bytes (equal rows, equal bytes), sorted stably."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    v = a.view(np.dtype((np.void, a.shape[1] * 8))).reshape(-1)
    _, first, inverse = np.unique(v, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first


def _sizes(np: Any, o: str, cum: Any, di: dict[str, int], D: Any, F: Any, c: Any, n_o: Any, prec: Any,
           full: Any, cap: float, stride: tuple[int, int], extent: tuple[int, int], n: int,
           in_d: set[int]) -> tuple[Any, Any]:
    """Tile bits ``S`` (N, n + 1) of operand ``o`` keeping i = 0..n more loops, and ``V``: the sizes the scalar
    list holds (i <= loops left, every size up to i fits ``cap``); ``in_d``: the dimensions the orders' loops have."""
    N = D.shape[0]
    S = np.zeros((N, n + 1))
    V = np.zeros((N, n + 1), dtype=bool)
    rows = np.arange(N)
    cur = cum.copy()
    one = np.ones(N)

    def g(d: str) -> Any:
        return cur[di[d]] if d in di else one

    still = np.ones(N, dtype=bool)
    base = g("B") * g("C") * g("G")  # inputs: B*C*G once, then times each B/C/G loop (the scalar order)
    in_bcg = _lut(np, len(di), [di[d] for d in ("B", "C", "G") if d in di])
    # the r dimensions whose running products can differ from 1 (a loop of the orders has it, or it is not 1
    # already): multiplying by the others' exact 1.0 changes no bit, so they are left out
    active = [di[d] for d in R_DIMS[o] if d in di and (di[d] in in_d or bool((cur[di[d]] != 1.0).any()))]
    for i in range(n + 1):
        if i:
            p = c + i - 1
            step = p < n
            pc = np.minimum(p, n - 1)
            d_idx, f = D[rows, pc], F[rows, pc]
            cur[d_idx[step], rows[step]] *= f[step]
            if o == "I":
                on = step & in_bcg[d_idx]
                base = np.where(on, base * f, base)
        if o == "I":
            py = _pr(np, g("OY"), g("FY"), stride[0], extent[0])
            px = _pr(np, g("OX"), g("FX"), stride[1], extent[1])
            s = base * py * px * prec
        else:
            el = one
            for d in active:
                el = el * cur[d]
            s = el * prec
        if full is not None:
            s = np.where((i < n_o) & (s < full), s * 2, s)
        inside = i <= n_o
        still = still & inside & (s <= cap)
        V[:, i] = still
        S[:, i] = s
    return S, V


def _lut(np: Any, size: int, members: list[int]) -> Any:
    """A bool table over dimension indices 0..size-1, True at ``members`` (``table[D]`` is ``np.isin(D, members)``)."""
    t = np.zeros(size, dtype=bool)
    t[members] = True
    return t


def _pr(np: Any, a: Any, b: Any, s: int, cap: int) -> Any:
    a, b = np.trunc(a), np.trunc(b)
    v = a * b - np.maximum(0, b - s) * (a - 1)
    return np.minimum(v, cap) if cap else v


def _choose(np: Any, choices: list, cap: float, N: int) -> tuple[Any, list[Any]]:
    """LOMA's split per order: the combination (one choice per operand, lexicographic as
    ``itertools.product``) that fits ``cap`` with the least summed traffic, the last of equal ones.
    Returns (found, take per operand)."""
    takes = [ch[0] for ch in choices]
    sizes = [ch[1] for ch in choices]
    accs = [ch[2] for ch in choices]
    valid = [ch[3] for ch in choices]
    shape = [N] + [a.shape[1] for a in accs]
    tot_s = np.zeros(shape)
    tot_a = np.zeros(shape)
    ok = np.ones(shape, dtype=bool)
    k = len(choices)
    for j in range(k):
        idx = [slice(None)] + [None] * k
        idx[j + 1] = slice(None)
        tot_s = tot_s + sizes[j][tuple(idx)] if j else np.broadcast_to(sizes[j][tuple(idx)], shape).copy()
        tot_a = tot_a + accs[j][tuple(idx)] if j else np.broadcast_to(accs[j][tuple(idx)], shape).copy()
        ok = ok & valid[j][tuple(idx)]
    ok = ok & (tot_s <= cap)
    flat_a = np.where(ok, tot_a, np.inf).reshape(N, -1)
    m = flat_a.min(axis=1)
    found = np.isfinite(m)
    hit = (flat_a == m[:, None]) & found[:, None]
    last = flat_a.shape[1] - 1 - np.argmax(hit[:, ::-1], axis=1)
    sub = np.unravel_index(last, shape[1:])
    rows = np.arange(N)
    return found, [takes[j][rows, np.minimum(sub[j], takes[j].shape[1] - 1)] for j in range(k)]


def _tensor(layer: NestLayer, op: str, loops: list[Loop]) -> float:
    cum: dict[str, float] = {}
    for d, f in loops:
        cum[d] = cum.get(d, 1) * f
    return r_size(layer, op, cum)
