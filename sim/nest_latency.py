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
``m`` (about 0.3 ms a call): ``.total`` is ZigZag's cycles for that mapping. Each operand's part
(:mod:`npukit.sim.nest_transfers`: its links, real cycles, utilisation) is computed once per distinct loops
and :func:`latency_of` combines three; :func:`latency_bound` bounds the total from any of them, so the mapper
cuts a loop order under the ``latency`` and ``edp`` objectives before its whole latency is computed.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace

from .hardware import Hardware
from .loopnest import Loop, NestCost, NestLayer
from .nest_transfers import OperandLatency, OperandTransfers, _Ctx, _onloading_parts, operand_latency


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
    import numpy as np  # only here: npukit sim on a SCALE-Sim-style arch imports no numpy

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


def latency_bound(memo: dict, parts: list[OperandLatency | OperandTransfers | None]) -> float:
    """A lower bound (cycles) on ZigZag's latency ``nest_latency(...).total`` of a mapping from the parts of
    some of its operands (:class:`~npukit.sim.nest_transfers.OperandTransfers` or the finer
    :class:`~npukit.sim.nest_transfers.OperandLatency`; None for the others), never above it in floating
    point either. ``total = (((temporal + stall) + onloading) + offloading) + drain``; the bound is the same
    sum, term by term no larger (IEEE rounding is monotone, so a sum of smaller terms >= 0 in the same order
    is no larger; the stall terms are Python integers, exact):

    * stall: ZigZag's stall is the max over ports of ``comb`` and at least 0. On a port with several
      active links (count >= 1), ``comb = P + max(0, N + muw - U)`` with P (N) the sum of the positive
      (other) ``ss = (real - allowed) * (count - 1)``, ``muw`` the sum of ``allowed * (count - 1)`` and U
      the window union; ``P + N + muw = R``, the sum of ``real * (count - 1)`` (``busy``), so ``comb =
      max(P, R - U)``. Every active link moves ``count`` times per ``period`` over exactly the temporal
      cycles T (``period * count == T``: its period is a product of loops that divides T), and U covers
      at most the longest period times its count, so ``U <= T``. A port with one active link has
      ``comb = ss >= R - T`` (``allowed * (count - 1) <= period * count``). All terms of P and R are >= 0,
      so the known operands' links give ``stall >= max(P_known, R_known - T)`` per port. ``allowed`` (in P)
      is the link's window ``int(period / top_ir)`` <= period or its period, as a double-buffer flag that
      reads all the operands sharing a memory says; the period is taken unless the flag is surely false:
      at the MAC level, or when the operand's own utilisation ``u`` fails both tests (``shared >= u`` in
      floating point as a sum of terms >= 0 that includes ``u``, so ``shared > 0.5`` and ``u > 1 -
      shared``); OperandTransfers (which lack the utilisation) always take the period.
    * loading values: a link that repeats loads its real cycles; one that runs once loads its real cycles
      reduced towards ``ceil(bits1 / port_bw)`` and never below it (``_reduce_ordered``), so at least the
      smaller of the two; the classification of a link (loaded or not, its port shared by both inputs)
      reads only the link and its port.
    * on-loading: ZigZag's ``min(s1 + max(s2 + h2 + i2, h1 + i1), s2 + max(s1 + h1 + i1, h2 + i2))`` is, for
      each input k, at least ``min(s_k + (h_k + i_k), (s_k + h_k) + i_k)`` (both orders of rounding), all
      terms >= 0; each input's (i, h, s) from the loading lower bounds, in ZigZag's order, is no larger.
    * off-loading: the outputs' pairs from the loading lower bounds, summed in the same order.
    * temporal and drain: exact (the temporal cycles are the product of every temporal loop: the same
      for every operand). ``tests/test_nest_latency.py`` checks bound <= latency on every loop order of
      three layers on four architectures, from every subset of parts."""
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
    real = {op: parts[op].real for op in order}
    total = parts["O"].temporal
    db = _double_buffered(ctx, {op: parts[op].ind for op in order})

    # stall / slack per physical port (combine_data_transfer_rate_per_physical_port)
    stall = 0.0
    active = []  # per port: its active links (link, key, real cycles)
    for served in ports:
        acts, act = [], []
        for s in served:
            op, m, d = s
            lk = links[op][m][d]
            if lk.count:
                r = real[op][s]
                act.append((lk, s, r))
                allowed = lk.period if db[op][m + (d in ("th", "fh"))] else int(lk.period / top_ir[op][lk.arch])
                acts.append((r, allowed, lk.period, lk.count))
        active.append(act)
        if len(acts) == 1:
            stall = max(stall, (acts[0][0] - acts[0][1]) * (acts[0][3] - 1))
        elif acts:
            ss = [(r - a) * (c - 1) for r, a, _, c in acts]
            muw = sum(a * (c - 1) for _, a, _, c in acts)
            comb = sum(x for x in ss if x > 0) + max(0, sum(x for x in ss if x <= 0) + muw - _window_union(acts))
            stall = max(stall, comb)

    # on/off-loading per port (calc_loading_single_port)
    loading: dict[tuple[str, int, str], tuple[float, bool]] = {}
    for i, act in enumerate(active):
        port_bw = ctx.port_bw[i]
        two_inputs = ctx.two_inputs[i]
        once, repeat = [], []
        for lk, s, r in act:
            if s[0] == "O" and s[2] in ("tl", "fh"):
                continue
            if lk.count == 1:
                once.append((lk, s, r))
            else:
                repeat.append((lk, s, r))
        for _, s, r in repeat:
            loading[s] = (r, two_inputs)
        if once:
            req = sum(math.ceil(lk.req_bw) for lk, _, _ in repeat)
            busy = total + stall
            surplus = max(0, (port_bw - req) / port_bw * busy)
            least = [math.ceil(parts[s[0]].bits1 / port_bw) for _, s, _ in once]
            left = _reduce_ordered([r for _, _, r in once], least, surplus)
            for (_, s, _), v in zip(once, left, strict=True):
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
