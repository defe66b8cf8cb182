"""LOMA's memory allocation of one loop order (:func:`allocate`), one order at a time: each memory's
decision shared by the orders that read the same loops (a prefix tree kept as a dict). The mapper
(:mod:`npukit.sim.nest_mapper`) allocates a layer's orders all at once with :mod:`npukit.sim.nest_batch`
where that is exact, and with this module otherwise; :func:`allocate` is the reference the batch equals.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from .hardware import Hardware, MemLevel
from .loopnest import IR_DIMS, R_DIMS, Loop, NestLayer, _pr, r_size, spatial_per_level


def allocate(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, float]], order: list[Loop],
             reach: list[int] | None = None, su: dict | None = None,
             memo: dict | None = None) -> dict[str, list[list[Loop]]] | None:
    """LOMA's memory allocation of one loop order (innermost first); None if it does not fit. ``reach[0]``
    is set to how many loops of the order the allocation looked at (it depends on no later one); ``su``:
    the spatial loops per level of each operand (computed when not given); ``memo``: a dict kept across
    the orders of one layer and unrolling (the whole tensors, which every order shares, and each memory's
    decision keyed by the loops it read: see :func:`_decide`)."""
    ops = ("W", "I", "O")
    if su is None:
        su = {o: spatial_per_level(hw, o, sm) for o in ops}
    if memo is None:
        memo = {}
    ctx = memo.get("ctx")
    if ctx is None:
        mem_to_op = {hw.links[o]: o for o in ops}
        ctx = memo["ctx"] = {"tops": {o: hw.levels(o)[-1].name for o in ops}, "dec": {},
                             "mops": [[mem_to_op[m] for m in mem.operands if m in mem_to_op] for mem in hw.memories]}
    dec = ctx["dec"]
    n = len(order)
    key_order = tuple(order)
    allocated = {o: list(su[o][0]) for o in ops}
    unalloc = {o: list(order) for o in ops}
    level = dict.fromkeys(ops, 0)
    tm: dict[str, list[list[Loop]]] = {o: [] for o in ops}
    for mi, mem in enumerate(hw.memories):
        mops = ctx["mops"][mi]
        if not mops:
            continue
        # The decision at this memory depends only on how many loops each operand has allocated below
        # (``state``) and the order's first ``read`` loops: orders sharing them share it (a prefix tree).
        state = (mi, tuple(n - len(unalloc[o]) for o in mops))
        slot = dec.get(state)
        hit = None
        if slot is not None:
            for read, table in slot.items():
                hit = table.get(key_order[:read])
                if hit is not None:
                    break
        if hit is None:
            hit = _decide(hw, layer, mem, mops, ctx["tops"], memo, su, n, allocated, unalloc, level)
            dec.setdefault(state, {}).setdefault(hit[1], {})[key_order[:hit[1]]] = hit
        takes, _, seen = hit
        if reach is not None and seen > reach[0]:
            reach[0] = seen
        if takes is None:
            return None
        for o, i in zip(mops, takes, strict=True):
            tm[o].append(unalloc[o][:i])
            allocated[o] += unalloc[o][:i]
            del unalloc[o][:i]
            level[o] += 1
            allocated[o] += su[o][level[o]]
    return tm


def _decide(hw: Hardware, layer: NestLayer, mem: MemLevel, mops: list[str], tops: dict[str, str], memo: dict,
            su: dict, n: int, allocated: dict[str, list[Loop]], unalloc: dict[str, list[Loop]],
            level: dict[str, int]) -> tuple[tuple[int, ...] | None, int, int]:
    """LOMA's choice at one memory: how many of the next unallocated loops each operand it holds keeps
    there (the split that fits and moves the least to the level above; ties go to the last). Returns
    (loops kept per operand or None if nothing fits, loops of the order read, the ``reach`` they
    imply). The suffix products ``suf`` use only the multiset of the unread loops (integers, exact)."""
    ir_o = IR_DIMS["O"]
    read, seen = 0, 0
    sizes = {}
    for o in mops:
        un = unalloc[o]
        prec = hw.bits[o]
        if o == "O":
            psum = any(d in ir_o for d, _ in un) or any(d in ir_o for lv in su[o][level[o] + 1:] for d, _ in lv)
            prec = hw.bits["O"] if psum else hw.bits["O_final"]
        # The whole tensor (every loop, allocated or not) is the same for every order: computed once.
        wkey = ("whole", o, level[o])
        whole_el = memo.get(wkey)
        if whole_el is None:
            whole_el = memo[wkey] = _tensor(layer, o, allocated[o] + un)
        done_o = n - len(un)
        read = max(read, done_o)
        if mem.name == tops[o]:  # the top level takes every remaining loop: only the whole must fit
            whole = whole_el * prec
            if whole > mem.size_bits:
                return None, read, seen
            sizes[o] = [whole]
            continue
        full = whole_el * prec if mem.double_buffered else 0.0
        sz = _tile_sizes(layer, o, allocated[o], un, prec, full if mem.double_buffered else None, mem.size_bits)
        if sz is None:
            return None, read, seen
        sizes[o] = sz
        ext = min(n, done_o + len(sz))
        read = max(read, ext)
        seen = max(seen, ext)
    choices = []
    for o in mops:
        if mem.name == tops[o]:
            choices.append([(len(unalloc[o]), sizes[o][0], 0.0)])
        else:
            un = unalloc[o]
            suf = [1.0] * (len(un) + 1)
            for i in range(len(un) - 1, -1, -1):
                suf[i] = suf[i + 1] * un[i][1]
            choices.append([(i, s, suf[i] * s) for i, s in enumerate(sizes[o])])
    best, best_acc, cap = None, math.inf, mem.size_bits
    if len(choices) == 1:
        for c in choices[0]:
            if c[1] <= cap and c[2] <= best_acc:
                best, best_acc = (c,), c[2]
    elif len(choices) == 2:
        for a in choices[0]:
            for b in choices[1]:
                if a[1] + b[1] <= cap and a[2] + b[2] <= best_acc:
                    best, best_acc = (a, b), a[2] + b[2]
    elif len(choices) == 3:  # the same combinations in the same order as itertools.product, pruned
        for a in choices[0]:
            if a[1] > cap or a[2] > best_acc:
                continue
            for b in choices[1]:
                sab, cab = a[1] + b[1], a[2] + b[2]
                if sab > cap or cab > best_acc:
                    continue
                for c in choices[2]:
                    if sab + c[1] <= cap and cab + c[2] <= best_acc:
                        best, best_acc = (a, b, c), cab + c[2]
    else:
        for combo in itertools.product(*choices):
            if sum(c[1] for c in combo) > cap:
                continue
            acc = sum(c[2] for c in combo)
            if acc <= best_acc:
                best, best_acc = combo, acc
    if best is None:
        return None, read, seen
    return tuple(c[0] for c in best), read, seen


def _tile_sizes(layer: NestLayer, o: str, allocated: list[Loop], un: list[Loop], prec: int,
                full: float | None, cap: float) -> list[float] | None:
    """Bits of operand ``o``'s tile at one memory holding the allocated loops plus the first i unallocated
    ones, for i = 0, 1, ... while it fits ``cap`` (doubled when double-buffered and smaller than the
    ``full`` tensor); None if even i = 0 does not fit. W and O tiles grow by a running product of their
    relevant loops, I tiles through their pr sizes (closed form, no per-step dict of every dimension)."""
    cum: dict[str, float] = {}
    for d, f in allocated:
        cum[d] = cum.get(d, 1) * f
    sz: list[float] = []
    for i, elements in enumerate(_tile_elements(layer, o, cum, un)):
        s = elements * prec
        if full is not None and i < len(un) and s < full:
            s *= 2
        if s > cap:
            return None if i == 0 else sz
        sz.append(s)
    return sz


def _tile_elements(layer: NestLayer, o: str, cum: dict[str, float], un: list[Loop]) -> Iterator[float]:
    """Elements of operand ``o``'s tile holding the loops in ``cum`` plus the first i of ``un``, for
    i = 0 .. len(un) (``cum`` is updated in place)."""
    if o == "I":
        sy, sx = layer.stride
        ey, ex = layer.in_extent
        g = cum.get
        base = g("B", 1) * g("C", 1) * g("G", 1)
        oy, fy, ox, fx = g("OY", 1), g("FY", 1), g("OX", 1), g("FX", 1)
        for i in range(len(un) + 1):
            if i:
                d, f = un[i - 1]
                if d == "OY":
                    oy *= f
                elif d == "FY":
                    fy *= f
                elif d == "OX":
                    ox *= f
                elif d == "FX":
                    fx *= f
                elif d in ("B", "C", "G"):
                    base *= f
            yield base * _pr(int(oy), int(fy), sy, ey) * _pr(int(ox), int(fx), sx, ex)
        return
    rel = R_DIMS[o]
    s_el = r_size(layer, o, cum)
    for i in range(len(un) + 1):
        if i:
            d, f = un[i - 1]
            if d in rel:
                cum[d] = cum.get(d, 1) * f
                s_el = r_size(layer, o, cum)
        yield s_el


def _tensor(layer: NestLayer, op: str, loops: list[tuple[str, float]]) -> float:
    cum: dict[str, float] = {}
    for d, s in loops:
        cum[d] = cum.get(d, 1) * s
    return r_size(layer, op, cum)
