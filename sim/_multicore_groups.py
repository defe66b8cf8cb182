"""A fused group's steps on a multi-core NPU (:func:`npukit.sim.multicore_sim.simulate_multicore`'s ``*/split`` and
``*/pipeline`` steps): each GEMM split over all MAC cores with its intermediates kept on chip, or the group's GEMMs as
pipeline stages on disjoint shares of the cores. ``r`` is the simulation in progress (``multicore_sim._Run``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from ._multicore_balance import common_fractions, fit_costs, pipeline_latency, pipeline_plans, refit_costs, whole_bounds
from ._multicore_cost import Part, default_bounds, even_bounds, prefetched, split_extent, sub_layer, uneven_batch
from ._multicore_prune import latency_bound, pick_split, split_floor
from ._multicore_rows import step_scales
from .dataflow import Dataflow
from .errors import ConfigError
from .schedule import fewer_counts, flattens, group_edges, split_dims, split_label, split_rank
from .workload import Layer, VectorOp

if TYPE_CHECKING:
    from .multicore_sim import Near, _Run


Cuts = list[tuple[int, ...] | None]


def run_fused_split(r: _Run, group: list[Layer | VectorOp], macs: list[int], of: int = 0,
                    cuts: Cuts | None = None, batches: str = "pick") -> None:
    """A fused group, every GEMM split over all MAC cores on the dim the objective picks: an intermediate stays in
    each core's own buffers when producer and consumer are both split on their rows (M or the batch), else it goes
    through the shared memory (every core reading the part it needs over the interconnect). An attention GEMM's
    keys or values made by a projection split on its rows are spread over the cores in row bands: each core reads the
    bands it lacks (``bands``), its own stays; it may receive them ahead, from when they are made and the links
    are free (:func:`~npukit.sim._multicore_cost.prefetched`; the links serve one transfer at a time, in order).
    ``of``: the chip's MAC cores when ``macs`` is only the first of them (the rows' splits read ``M@2``). ``cuts``
    (one per GEMM of the group, in order; :func:`fused_rows`): every GEMM split on its rows at those bounds instead
    of the split the objective picks (cores that differ: a producer's row shares are its consumer's); where then
    every core's rows stay its own from the group's first operator to its last (:func:`own_rows`), each core runs its
    rows of the operators one after another without waiting for the others (:func:`run_chains`). ``batches`` (without
    ``cuts``), for a GEMM that may be cut on its batch unevenly (split ``B``): ``pick`` offers ``B`` among its splits,
    ``all`` takes it, ``none`` leaves it out.
    """
    fin, fout, sib, ffil = fused_edges(group, r.flow, r.memo)
    chains: list[tuple[Layer | VectorOp, list[Part], dict[str, Any]]] | None = \
        [] if cuts is not None and len(macs) > 1 and own_rows(r, group, fin, fout, sib, ffil) else None
    at = {} if cuts is None else {j: cuts[n] for n, j in enumerate(i for i, g in enumerate(group) if isinstance(g, Layer))}
    # each vector op's GEMM: for row cuts, or for a B split's heads (else every vector op is cut evenly)
    own = owners(group, r.flow) if cuts is not None or any(isinstance(g, Layer) and uneven_batch(g, len(macs))
                                                            for g in group) else [None] * len(group)
    prev_dim = ""
    prev: Layer | None = None
    dims: dict[int, str] = {}
    made: dict[int, float] = {}  # end cycle of each GEMM of the group
    links_free = r.t  # the cycle from which the links are idle
    for k, (op, i_in, i_out, i_sib, i_fil) in enumerate(zip(group, fin, fout, sib, ffil, strict=True)):
        if isinstance(op, VectorOp):  # the group's first op reads its inputs from DRAM, its last writes there
            j = own[k]  # the GEMM whose rows it works on: its cut where given, else the batch cut of a B split
            vcut = row_cut(group, at, k, len(macs), own) if cuts is not None else \
                batch_cut(group[j], dims[j], len(macs)) if j is not None and j in dims else None  # type: ignore[arg-type]
            vparts = r.vector_parts(op, macs, k == 0, k == len(group) - 1, vcut)
            links_free = _links_after(links_free, r.t, max(p.link_cycles for p in vparts))
            if chains is not None:
                chains.append((op, vparts, {"step": "fused", "split": "-"}))
                continue
            r.t += r.commit(op, vparts, r.t, 1.0, {"step": "fused", "split": "-"})
            continue
        ahead = max(0.0, r.t - max(made[i_fil], links_free)) if i_fil >= 0 else 0.0
        flat = i_in and prev is not None and flattens(prev, op)
        fil = "" if i_fil < 0 else "local" if len(macs) < 2 else \
            "bands" if dims.get(i_fil) == "M" and group[i_fil].batch % len(macs) else "shared"
        if cuts is None:
            n = len(macs)
            batched = batches != "none" and uneven_batch(op, n)  # B offered, or under "all" taken
            splits = ("B",) if batched and batches == "all" else \
                (*split_dims(n), *(("B",) if batched else ())) if n > 1 else ("-",)
            # where B is one of several splits, the vector ops that follow on this GEMM's rows take its cut (on the
            # MAC cores), so each split is ranked with them
            after = tuple((v, j == len(group) - 1) for j, v in enumerate(group) if j > k and own[j] == k
                          and isinstance(v, VectorOp)) if batched and len(splits) > 1 and not r.m.simd_cores else ()
            aligned = prev is None or batch_cut(prev, "B", n) == batch_cut(op, "B", n)
            dim, parts, sent = _pick(r, op, macs, fil, prev, prev_dim, bool(i_in), bool(i_out), bool(i_sib),
                                     bool(flat), ahead, splits, after, aligned)
        else:
            dim = "M" if len(macs) > 1 else "-"
            near = (at.get(max((j for j in at if j < k), default=-1)), at.get(i_fil))
            parts, sent = _fused_parts(r, op, macs, dim, fil, prev, prev_dim, bool(i_in), bool(i_out), bool(i_sib),
                                       bool(flat), ahead, at[k], near)
        prev_dim, prev, dims[k] = dim, op, dim
        if ahead:  # the links carried the prefetched part first, from when its producer finished
            links_free = max(made[i_fil], links_free) + sent
        links_free = _links_after(links_free, r.t, max(p.link_cycles for p in parts))
        extra = {"step": "fused", "split": split_label(dim, len(macs), of or len(macs))}
        if chains is not None:
            chains.append((op, parts, extra))
            continue
        r.t += r.commit(op, parts, r.t, 1.0, extra)
        made[k] = r.t
    if chains is not None:
        run_chains(r, chains)


def own_rows(r: _Run, group: list[Layer | VectorOp], fin: list[bool], fout: list[bool], sib: list[bool],
             ffil: list[int], inside: list[int] | None = None) -> bool:
    """Whether the operators of a fused group at positions ``inside`` (default: all; a pipeline stage's), every GEMM
    split on its rows, keep each core's rows its own: no GEMM's right operand made among them, no input read through
    the shared memory from among them (a flattened map; a stage's first GEMM reads the stage before it), no conv
    reading a neighbour's halo rows, and no vector op among them on a simd core (it gathers every core's rows). Then
    no core waits for another's results within them (:func:`chain_ends`)."""
    inside = list(range(len(group))) if inside is None else inside
    if r.m.simd_cores and any(isinstance(group[k], VectorOp) for k in inside):
        return False
    prev: Layer | None = None
    for k in inside:
        op = group[k]
        if not isinstance(op, Layer):
            continue
        flat = fin[k] and prev is not None and flattens(prev, op)
        src, _ = _ends("M", "M" if prev is not None else "", fin[k], fout[k], sib[k], bool(flat))
        stage_in = prev is None and len(inside) < len(group)  # a later stage's first GEMM: made by the stage before
        if ffil[k] in inside or (src == "shared" and not stage_in) or (src == "local" and _halo(prev, op)):
            return False
        prev = op
    return True


def _halo(prod: Layer | None, cons: Layer) -> bool:
    """Whether conv ``cons``, fed on chip by conv ``prod`` with both cut on their output rows alike, may read rows
    another core made: unless it is a 1 x 1, stride-1 conv on as many rows as ``prod`` makes (each core's rows are
    then exactly its own producer rows)."""
    if prod is None or prod.conv is None or cons.conv is None:
        return False
    h, _, fh, _, _, _, s = cons.conv[:7]
    ph, _, pfh, _, _, _, ps = prod.conv[:7]
    return not (fh == 1 and s == 1 and (h - fh) // s == (ph - pfh) // ps)


def chain_ends(r: _Run, planned: list[tuple[Layer | VectorOp, list[Part]]], t0: float
               ) -> tuple[dict[int, float], list[tuple[int, float, float, str]]]:
    """Each core's end cycle, and its timeline bars, when it runs its parts of ``planned`` (operators with their
    parts, in order) one after another from ``t0`` without waiting for other cores' results (:func:`own_rows`),
    except for a GEMM's weights where the interconnect multicasts them: they come with the first part's DRAM fetch,
    so no other part of that GEMM starts before the first one does."""
    at: dict[int, float] = {}
    bars: list[tuple[int, float, float, str]] = []
    for op, parts in planned:
        lead = at.get(parts[0].core, t0)
        for n, p in enumerate(parts):
            start = at.get(p.core, t0)
            if n and isinstance(op, Layer) and r.ic.multicast:
                start = max(start, lead)
            bars.append((p.core, start, start + p.busy, op.name))
            at[p.core] = start + p.busy
    return at, bars


def run_chains(r: _Run, planned: list[tuple[Layer | VectorOp, list[Part], dict[str, Any]]]) -> None:
    """Commit a fused group's ``planned`` operators (each with its parts) as one step in which each core runs its
    parts one after another (:func:`chain_ends`: no core waits for another's results, only for multicast weights):
    the step takes the last core's end, or all its DRAM bytes over all the channels if longer. Each operator's row is
    scaled to share that latency (:func:`~npukit.sim._multicore_rows.step_scales`), as a pipelined group's are; the
    timeline draws each part where its core runs it. Before 2026-12-07 every operator waited for its slowest core: a
    vector op between two GEMMs cut to suit the cores' arrays took its largest share's time, not the cores' pace."""
    t0 = r.t
    ends, bars = chain_ends(r, [(op, parts) for op, parts, _ in planned], t0)
    bw = r.m.dram.total_bandwidth
    every = [p for _, parts, _ in planned for p in parts]
    latency = max(max(ends.values()) - t0, sum(p.dram_bytes for p in every) / bw if bw else 0.0)
    scales = step_scales(r, [(op, parts) for op, parts, _ in planned], latency)
    start = t0
    for (op, parts, extra), scale in zip(planned, scales, strict=True):
        start += r.commit(op, parts, start, scale, extra, draw=False)
    if r.record:
        r.timeline += bars
    r.t = t0 + latency


def fused_plan(r: _Run, group: list[Layer | VectorOp], macs: list[int]) -> tuple[list[int], Cuts | None, str]:
    """The MAC cores a fused split group runs on and its row cuts, if any: :func:`fused_cores`' cores (those of the
    fastest's peak, even shares) with the split the objective picks per GEMM, the same cores (identical cores) or every
    MAC core (cores that differ) with each GEMM's rows cut alike (:func:`fused_rows`), and on cores that differ every
    MAC core with even shares and the split picked per GEMM, whichever ranks best under the objective (each simulated
    on a scratch run; ties keep that order). Before 2026-12-07 a fused group always left the slower cores idle; then,
    until the third plan was added the same day, a 64 x 64 core beside two 48 x 48 made a chip slower than three 48 x
    48 cores on a Llama layer (6,904,167 against 6,714,737 cycles), since only rows could be cut over all three. Until
    the rows plan joined them (also 2026-12-07), identical cores ran only the split picked per GEMM, each by its own
    rank: on four 128 x 128 cores under ``energy`` a conv put on K to save 2.1 uJ made the next conv gather their
    intermediate over the links (2.2 uJ more), so the pair spent 0.08% more energy than with both on their rows, in
    4.6 times the cycles. Where a GEMM may be cut on its batch unevenly
    (:func:`~npukit.sim._multicore_cost.uneven_batch`), also the plans with every such GEMM on ``B`` and with none (the
    third item, ``batches``: :func:`run_fused_split`), since each GEMM's own pick does not see that its consumer reads
    its output locally only under the same cut (2026-12-08; a review's attention case ran 3.5% slower under
    ``latency`` than its ``edp`` result, and one under ``edp`` 0.9% above its EDP before ``B``)."""
    cores = fused_cores(r, group, macs)
    alike = len({r.m.cores[c].macs_per_cycle for c in macs}) < 2
    if alike and len(cores) < 2:
        return cores, None, "pick"
    plans: list[tuple[list[int], Cuts | None, str]] = [(cores, None, "pick")]
    rows_on = cores if alike else macs
    try:
        plans.append((rows_on, fused_rows(r, group, rows_on), "pick"))
    except ConfigError:  # a share of some cut maps on no core of its kind
        pass
    if not alike:
        plans.append((macs, None, "pick"))
    if any(isinstance(op, Layer) and uneven_batch(op, len(cores)) for op in group):
        plans += [(cores, None, "all"), (cores, None, "none")]
    ranks = []
    for cs, cut, batches in plans:
        trial = r.scratch()
        try:
            run_fused_split(trial, group, cs, len(macs), cut, batches)
        except ConfigError:
            continue
        ranks.append((trial.rank(), len(ranks), cs, cut, batches))
    return min(ranks)[2:] if ranks else (cores, None, "pick")


def fused_rows(r: _Run, group: list[Layer | VectorOp], macs: list[int]) -> Cuts:
    """Row cuts of a fused group's GEMMs over ``macs`` when every GEMM is split on its rows: one fraction per core
    for all of them (:func:`stage_bounds`, as one pipeline stage on those cores), so each intermediate stays on the
    core that makes it."""
    fin, fout, sib, _ = fused_edges(group, r.flow, r.memo)
    ends, prev = [], None
    for k, op in enumerate(group):
        if isinstance(op, Layer):
            flat = fin[k] and prev is not None and flattens(prev, op)
            ends.append((op, *_ends("M", "M" if prev is not None else "", fin[k], fout[k], sib[k], bool(flat))))
            prev = op
    return stage_bounds(r, ends, macs, tails(group, [k for k, op in enumerate(group) if isinstance(op, Layer)],
                                               owners(group, r.flow)))


def owners(group: list[Layer | VectorOp], flow: Dataflow | None = None) -> list[int | None]:
    """For each vector op of ``group``, the position of the GEMM whose rows it works on (None for a GEMM, or where
    the group has none): by the workload's recorded dataflow where it has one, the last GEMM of the group whose output
    reaches the op through vector ops only (its producer), else the first GEMM the op's output so reaches (which reads
    it); by position otherwise, or where the dataflow names no such GEMM: the nearest before it, else the first after
    it. One pass each way over the group's edges, inside the group: a contiguous slice of the workload, as every
    fused group is, so no path between two of its operators leaves it. (Before 2026-12-07 always by position:
    Llama's rope of the keys followed the value projection's row cut.)"""
    n = len(group)
    gemm = [isinstance(op, Layer) for op in group]
    feed: list[int | None] = [None] * n  # the last GEMM reaching each op through vector ops only
    read: list[int | None] = [None] * n  # the first GEMM each op reaches so
    if flow is not None:
        pos = {flow.index[op.name]: j for j, op in enumerate(group) if op.name in flow.index}
        prods = [[pos[i] for i in flow.producers(flow.index[op.name]) if i in pos and pos[i] < j]
                 if op.name in flow.index else [] for j, op in enumerate(group)]
        for j in range(n):
            got = [p if gemm[p] else feed[p] for p in prods[j]]
            feed[j] = max((g for g in got if g is not None), default=None)
        cons: list[list[int]] = [[] for _ in range(n)]
        for j in range(n):
            for p in prods[j]:
                cons[p].append(j)
        for j in reversed(range(n)):
            got = [c if gemm[c] else read[c] for c in cons[j]]
            read[j] = min((g for g in got if g is not None), default=None)
    out: list[int | None] = [None] * n
    last: int | None = None
    for j in range(n):
        if gemm[j]:
            last = j
        elif feed[j] is not None or read[j] is not None:
            out[j] = feed[j] if feed[j] is not None else read[j]
        else:
            out[j] = last
    nxt: int | None = None
    for j in reversed(range(n)):
        if gemm[j]:
            nxt = j
        elif out[j] is None:
            out[j] = nxt
    return out


def tails(group: list[Layer | VectorOp], gemm_idx: list[int], own: list[int | None]) -> list[list[VectorOp]]:
    """For each GEMM of ``group`` at ``gemm_idx``, the vector ops whose rows follow its cut (``own``:
    :func:`owners`)."""
    out: list[list[VectorOp]] = [[] for _ in gemm_idx]
    at = {j: n for n, j in enumerate(gemm_idx)}
    for k, op in enumerate(group):
        if isinstance(op, VectorOp) and own[k] in at:
            out[at[own[k]]].append(op)  # type: ignore[index]
    return out


def row_cut(group: list[Layer | VectorOp], cuts: dict[int, tuple[int, ...] | None], k: int, ways: int,
            own: list[int | None]) -> tuple[str, tuple[int, ...]] | None:
    """The row cut vector op ``group[k]`` works at, given ``cuts`` (by the group position of each GEMM cut on these
    cores; None or absent: even): its owner GEMM's (``own``: :func:`owners`; split_extent's ``what`` and the bounds),
    or None (even shares)."""
    j = own[k]
    cut = None if j is None else cuts.get(j)
    if j is None or cut is None:
        return None
    what = split_extent(group[j], "M", ways)  # type: ignore[arg-type]
    return None if what is None else (what[0], cut)


def fused_cores(r: _Run, group: list[Layer | VectorOp], macs: list[int]) -> list[int]:
    """The MAC cores a fused split group runs on: all of ``macs`` (fastest first), or with the arch's ``layer_cores =
    "search"`` the fastest 1, 2, 4, ... of them (and ``n - 1``: :func:`~npukit.sim.schedule.fewer_counts`)
    where that ranks strictly better under the objective (as a layer alone
    does: :func:`~npukit.sim.schedule.layer_splits`). Each count is simulated on a scratch run (totals only). A fused
    group's shares are even (a producer's and its consumer's must line up), so on unequal cores it takes only those
    of the fastest's peak (they may differ in DRAM port or buffers; before, only those identical to the first of
    them, so the order the file listed cores of one peak in decided which ran the group)."""
    lead = r.m.cores[macs[0]].macs_per_cycle
    macs = [c for c in macs if r.m.cores[c].macs_per_cycle == lead]
    if r.m.layer_cores != "search" or len(macs) < 2:
        return macs
    counts = [len(macs), *fewer_counts(len(macs))]  # all, then n - 1 and each power of two below
    best: tuple[tuple[float, float], list[int]] | None = None
    for k in counts:
        trial = r.scratch()
        run_fused_split(trial, group, macs[:k])
        val = trial.rank()
        if best is None or val < best[0]:  # a tie keeps more cores
            best = (val, macs[:k])
    assert best is not None
    return best[1]


def batch_cut(g: Layer, dim: str, ways: int) -> tuple[str, tuple[int, ...]] | None:
    """The cut (``batch`` and its bounds in batch elements, :func:`~npukit.sim._multicore_cost.vector_shares`) of GEMM
    ``g`` split ``ways`` ways on ``dim`` when that is ``B``, else None: a vector op on its rows (a softmax over its
    heads) takes the same heads on each core."""
    if dim != "B" or ways < 2 or not uneven_batch(g, ways):
        return None
    what, size = split_extent(g, "B", ways)  # type: ignore[misc]
    unit = g.shared if what == "groups" else 1
    return "batch", tuple(x * unit for x in default_bounds("B", size, ways))


def _ends(dim: str, prev_dim: str, i_in: bool, i_out: bool, i_sib: bool, flat: bool,
          aligned: bool = True) -> tuple[str, str]:
    """Where a fused GEMM's input comes from and where its output goes under split ``dim`` (its producer split on
    ``prev_dim``): ``""`` (DRAM), ``local`` or ``shared`` (:func:`~npukit.sim._multicore_cost.gemm_part`). A split on
    the rows (``M``) and one on the batch in uneven shares (``B``) each keep their output on its cores, but lay it out
    differently: a consumer finds its input local only under the same kind of split, and for ``B`` only where its
    batch shares are its producer's (``aligned``: the two have the same batch and groups)."""
    rows = dim in ("M", "-", "B")
    same = prev_dim == "B" and aligned if dim == "B" else prev_dim in ("M", "-")
    src = "" if not i_in else "local" if rows and same else "shared"
    if flat:  # a flattened map: a K-split matching the producer's row bands reads its own band
        src = "local" if (dim == "K" and prev_dim == "M") or dim == prev_dim == "-" else "shared"
    if i_sib and dim == prev_dim and (dim != "B" or aligned):
        src = "local"  # each core still holds its part of the common input
    return src, "" if not i_out else "local" if rows else "shared"


def _fused_parts(r: _Run, op: Layer, macs: list[int], dim: str, fil: str, prev: Layer | None, prev_dim: str,
                 i_in: bool, i_out: bool, i_sib: bool, flat: bool, ahead: float,
                 bounds: tuple[int, ...] | None = None, near: Near = (None, None),
                 aligned: bool = True) -> tuple[list[Part], float]:
    """(The parts of fused GEMM ``op`` split on ``dim`` over ``macs``, at ``bounds`` if given (``near``: its
    neighbours' cuts, :meth:`~npukit.sim.multicore_sim._Run.gemm_parts`), with the right operand received up to
    ``ahead`` cycles early; the cycles of it received early.)"""
    src, dst = _ends(dim, prev_dim, i_in, i_out, i_sib, flat, aligned)
    raw = r.gemm_parts(op, macs, dim, src, dst, fil, prev if src == "local" and not flat else None, bounds, near)
    parts = prefetched(raw, ahead)
    return parts, max(a.filter_link_cycles - b.filter_link_cycles for a, b in zip(raw, parts, strict=True))


def _pick(r: _Run, op: Layer, macs: list[int], fil: str, prev: Layer | None, prev_dim: str, i_in: bool, i_out: bool,
          i_sib: bool, flat: bool, ahead: float, splits: tuple[str, ...], after: tuple[tuple[VectorOp, bool], ...] = (),
          aligned: bool = True) -> tuple[str, list[Part], float]:
    """(The split of ``splits`` of fused GEMM ``op`` the objective picks, its parts with the right operand received
    up to ``ahead`` cycles early, the cycles of it received early); splits that cannot win are not mapped
    (:func:`~npukit.sim._multicore_prune.pick_split`). ``after``: the vector ops that follow on its rows (each with
    whether it is the group's last), ranked with each split as they will run under it (a ``B`` split's heads on
    each core; else even shares): before 2026-12-08 a softmax after a ``B`` split ran evenly on every core, also on
    cores that held none of its heads (a review: 2 heads on 6 cores, 134 cycles where their 2 cores take 387)."""

    def evaluate(dim: str) -> tuple[tuple[float, float], tuple[list[Part], float]]:
        parts, sent = _fused_parts(r, op, macs, dim, fil, prev, prev_dim, i_in, i_out, i_sib, flat, ahead,
                                   aligned=aligned)
        if not after:
            return r.rank(parts), (parts, sent)
        vps = [r.vector_parts(v, macs, False, last, batch_cut(op, dim, len(macs))) for v, last in after]
        cycles = max(p.busy for p in parts) + sum(max(p.busy for p in vp) for vp in vps)
        energy = sum(map(r._energy, parts)) + sum(r._energy(p) for vp in vps for p in vp)
        return split_rank(energy, cycles, r.m.objective), (parts, sent)

    def floor(dim: str) -> float:
        return split_floor(r, op, macs, dim, *_ends(dim, prev_dim, i_in, i_out, i_sib, flat, aligned), fil)

    dim, _, (parts, sent) = pick_split(splits, evaluate, floor if latency_bound(r) and len(splits) > 1 else None)
    return dim, parts, sent


def fused_edges(group: list[Layer | VectorOp], flow: Dataflow | None, memo: dict | None = None
                ) -> tuple[list[bool], list[bool], list[bool], list[int]]:
    """:func:`~npukit.sim.schedule.group_edges` (with the workload's recorded dataflow ``flow``, if any), and the
    last GEMM's output kept on chip when vector ops of the group follow it (its epilogue: they read it there);
    ``memo``: a run's memo, where a group with a dataflow (its operators' names unique) keeps them (each scratch run
    of a pipeline plan asks again)."""
    key = ("fused edges", tuple(op.name for op in group)) if memo is not None and flow is not None else None
    if key is not None and key in memo:  # type: ignore[operator]
        return tuple(list(x) for x in memo[key])  # type: ignore[index,return-value]
    fin, fout, sib, ffil = group_edges(group, flow)
    tail = max(i for i, op in enumerate(group) if isinstance(op, Layer))
    if tail < len(group) - 1:
        fout[tail] = True
    if key is not None:
        memo[key] = (tuple(fin), tuple(fout), tuple(sib), tuple(ffil))  # type: ignore[index]
    return fin, fout, sib, ffil


def group_key(group: list[Layer | VectorOp], edges: tuple[list[bool], list[bool], list[bool], list[int]],
              own: list[int | None]) -> tuple:
    """What a group's simulation on a fresh run depends on, without its operators' names: each operator's fields but
    its name, its fused ``edges`` (:func:`fused_edges`) and each vector op's owner GEMM (``own``: :func:`owners`). A
    model's repeated blocks share it."""
    ops = tuple((type(op).__name__, *(getattr(op, f.name) for f in fields(op) if f.name != "name")) for op in group)
    return ops, tuple(map(tuple, edges)), tuple(own)


def _links_after(free: float, start: float, cycles: float) -> float:
    """The cycle the links are idle from after a step starting at ``start`` uses them ``cycles`` (0: unchanged)."""
    return max(free, start) + cycles if cycles else free


Plan = tuple[list[int], list[list[int]]]  # the stage of each GEMM of a pipelined group, each stage's MAC cores


def _stages(r: _Run, gemms: list[Layer], macs: list[int], tiles: Callable[[int], int]) -> list[Plan]:
    """Plans of a pipelined group's stages, the first preferred: :func:`~npukit.sim._multicore_balance.pipeline_plans`'
    best plan of each number of stages, estimated from MACs and peaks, and its plans on fewer cores; on identical
    cores after a first plan of as many stages as GEMMs (at most one per core), cut where the MACs so far pass each
    stage's even part, the cores dealt evenly in order. :func:`run_pipeline` times them (before, on cores that differ
    the same rule put a stage on a small core alone: Llama-3-8B's MLP on one 128 x 128 and two 32 x 32 cores took 16
    times the big core's cycles for the up projection; and before 2026-12-07 identical cores had that one plan alone,
    which could put every GEMM in stage 0 and idle the other stages' cores: four 32 x 32 cores took a GEMM pair in
    10,998 cycles on two of them)."""
    kinds = [r.m.cores[c].model for c in macs]
    speed = [r.m.cores[c].macs_per_cycle * r.m.cores[c].arch.clock_ghz for c in macs]
    timed: list[Plan] = [(bounds, [[macs[j] for j in cs] for cs in idx])
                         for _, bounds, idx in pipeline_plans([g.macs for g in gemms], speed, tiles)]
    if any(k != kinds[0] for k in kinds):
        return timed
    n_st = min(len(gemms), len(macs))
    total = sum(g.macs for g in gemms)
    bounds, acc, s = [], 0, 0  # balanced by MACs
    for g in gemms:
        bounds.append(min(s, n_st - 1))
        acc += g.macs
        if acc >= total * (s + 1) / n_st:
            s += 1
    per = [len(macs) // n_st + (1 if s < len(macs) % n_st else 0) for s in range(n_st)]
    starts = [sum(per[:s]) for s in range(n_st)]
    first: Plan = (bounds, [macs[starts[s]:starts[s] + per[s]] for s in range(n_st)])
    return [first, *(p for p in timed if p != first)]


def stage_bounds(r: _Run, gemms: list[tuple[Layer, str, str]], cs: list[int],
                 after: list[list[VectorOp]] | None = None) -> list[tuple[int, ...] | None]:
    """Row cuts of one pipeline stage's GEMMs (each with its fused input and output) over its cores ``cs``: None
    (the even split) on identical cores. On cores that differ, one fraction per core for all of them, so a GEMM's
    row shares are its consumer's, sized for the cores to finish the stage together
    (:func:`~npukit.sim._multicore_balance.common_fractions`, each kind's cycles fitted at the even share and the
    whole rows, then refitted at the even share and the share so found); the even split and the two cuts are
    timed (the stage's cycles: each GEMM's slowest share) and the fastest kept, the even split on a tie (a small
    core that streams every weight matrix for a few rows can be slower than the fit says). ``after``: for each GEMM,
    the vector ops on its rows (:func:`tails`), run on the same cores at the same cut (no simd core): their cycles
    count with the GEMM's in the fit and the timing (before 2026-12-07 the cut saw the GEMMs alone, and the vector
    ops were split evenly whatever the cut)."""
    kinds = r.core_kinds(cs)
    if all(k == kinds[0] for k in kinds):
        return [None] * len(gemms)
    after = [[] for _ in gemms] if after is None or r.m.simd_cores else after
    key = ("stage", tuple((g.M, g.N, g.K, g.batch, g.kind, g.conv, g.shared, fi, fo) for g, fi, fo in gemms), tuple(cs),
           tuple(tuple(v) for v in after))
    if key not in r.memo:
        ways = len(cs)

        def cycles_of(g: Layer, fi: str, fo: str, size: int, ops: list[VectorOp]) -> Callable[[object, int], float]:
            what = split_extent(g, "M", ways)[0]  # type: ignore[index]

            def cycles(kind: object, share: int) -> float:
                cut = (0, share) + (size,) * (ways - 1)
                sub = sub_layer(g, "M", ways, 0, cut)
                assert sub is not None
                # every kind as a core that receives the multicast weights (i = 1), as a split alone is fitted: the
                # first core's own DRAM reads share the channels with the others' once the cut is timed; fitting it
                # at i = 0 cut worse (the 64 + 2 x 48 MLP stage 137,861 cycles against 133,039)
                core = cs[kind]  # type: ignore[index]
                return r._part(sub, core, 1, ways, "M", fi, fo, "", 0).busy + \
                    sum(r.vector_parts(v, [core, *cs[1:]], cut=(what, cut))[0].busy for v in ops)
            return cycles

        def stage_cycles(cuts: list[tuple[int, ...] | None]) -> float:
            return sum(max(p.busy for p in r.gemm_parts(g, cs, "M", fi, fo, bounds=b)) +
                       sum(max(p.busy for p in r.vector_parts(v, cs, cut=None if b is None else
                                                              (split_extent(g, "M", ways)[0], b)))  # type: ignore[index]
                           for v in ops)
                       for (g, fi, fo), b, ops in zip(gemms, cuts, after, strict=True))

        speed = lambda k: r.m.cores[cs[k]].macs_per_cycle  # noqa: E731
        cands: list[list[tuple[int, ...] | None]] = [[None] * len(gemms)]
        try:
            sizes = [split_extent(g, "M", ways)[1] for g, _, _ in gemms]  # type: ignore[index]
            evens = [even_bounds(n, ways)[1] for n in sizes]
            fits = [(n, fit_costs(n, kinds, cycles_of(g, fi, fo, n, ops), speed, e))
                    for (g, fi, fo), n, e, ops in zip(gemms, sizes, evens, after, strict=True)]
            frac = common_fractions(fits, kinds)
            cands.append([whole_bounds(n, frac) for n in sizes])
            refit = [(n, refit_costs(f, cycles_of(g, fi, fo, n, ops), e,  # through the even share and the share found
                                     {k: max(1, min(n, round(frac[kinds.index(k)] * n))) for k in dict.fromkeys(kinds)}))
                     for (g, fi, fo), n, e, (_, f), ops in zip(gemms, sizes, evens, fits, after, strict=True)]
            cands.append([whole_bounds(n, common_fractions(refit, kinds)) for n in sizes])
        except ConfigError:  # a trial share maps on no core of its kind: what was found so far
            pass
        timed = []
        for cand in cands:
            try:
                timed.append((stage_cycles(cand), len(timed), cand))
            except ConfigError:  # a cut whose share maps on no core of its kind (the even one raises as before)
                if not timed:
                    raise
        r.memo[key] = min(timed)[2]
    return r.memo[key]


def run_pipeline(r: _Run, group: list[Layer | VectorOp], macs: list[int], tiles: int, plan: Plan | None = None) -> None:
    """A fused group as a pipeline: contiguous stages of its GEMMs on disjoint shares of the MAC cores, its rows
    in ``tiles`` (at least twice the stages) tiles; stage boundaries cross the interconnect via the shared memory.
    ``plan``: the stages (:func:`_stages`); by default the plan that ranks best under the objective, each simulated
    on a scratch run and the choice kept in the run's memo by :func:`group_key`, so a model's repeated blocks choose
    once (before 2026-12-07 on cores that differ only, and there the estimate's first alone, blind to vector ops on a
    simd core and to each core's weight traffic: one 32 x 32 core made 96 x 96 slowed a group from 16,148 to 20,117
    cycles)."""
    gemm_idx = [i for i, op in enumerate(group) if isinstance(op, Layer)]
    rows = min(g.batch * g.M for g in group if isinstance(g, Layer))
    edges = fused_edges(group, r.flow, r.memo)
    own = owners(group, r.flow)
    key = ("pipeline plan", tuple(macs), tiles, group_key(group, edges, own)) if plan is None else None
    if key is not None and key in r.memo:
        plan = r.memo[key]
    elif plan is None:
        plans = _stages(r, [group[i] for i in gemm_idx], macs, lambda n: max(1, min(rows, max(tiles, 2 * n))))
        plan = plans[0]
        if len(plans) > 1:
            ranks = []
            for p in plans:
                trial = r.scratch()
                try:
                    run_pipeline(trial, group, macs, tiles, p)
                except ConfigError:  # a stage's share maps on no core of its kind
                    continue
                ranks.append((trial.rank(), len(ranks), p))
            if ranks:
                plan = min(ranks)[2]
        r.memo[key] = plan
    bounds, cores_of = plan
    n_st = len(cores_of)
    stage_of = {}
    cur, n = 0, 0
    for k, op in enumerate(group):
        if isinstance(op, Layer):
            cur, n = bounds[n], n + 1
        stage_of[k] = cur
    fin, fout, sib, ffil = edges
    tiles = max(1, min(rows, max(tiles, 2 * n_st)))
    ends: dict[int, tuple[str, str]] = {}  # each GEMM's fused input and output: on its stage's cores or shared
    for n, k in enumerate(gemm_idx):
        nxt = gemm_idx[n + 1] if n + 1 < len(gemm_idx) else None
        prv = gemm_idx[n - 1] if n else None
        st = stage_of[k]
        ends[k] = ("" if not fin[k] else "local" if prv is not None and stage_of[prv] == st else "shared",
                   "" if not fout[k] else "local" if nxt is not None and stage_of[nxt] == st else "shared")
    cuts: dict[int, tuple[int, ...] | None] = {}
    on = tails(group, gemm_idx, own)
    gemm_pos = {k: n for n, k in enumerate(gemm_idx)}
    for st, cs in enumerate(cores_of):
        mine = [k for k in gemm_idx if stage_of[k] == st]
        cuts.update(zip(mine, stage_bounds(r, [(group[k], *ends[k]) for k in mine], cs,
                                           [on[gemm_pos[k]] for k in mine]), strict=True))
    planned: list[tuple[Layer | VectorOp, list[Part], dict[str, Any], int]] = []
    staged = [{j: cuts[j] for j in gemm_idx if stage_of[j] == st} for st in range(len(cores_of))]
    for k, op in enumerate(group):
        st = stage_of[k]
        cs = cores_of[st]
        if isinstance(op, VectorOp):
            planned.append((op, r.vector_parts(op, cs, k == 0, k == len(group) - 1, row_cut(group, staged[st], k, len(cs), own)),
                            {"step": f"pipeline stage {st}", "split": "-"}, st))
            continue
        dim = "M" if len(cs) > 1 else "-"
        planned.append((op, r.gemm_parts(op, cs, dim, *ends[k], bounds=cuts[k]),
                        {"step": f"pipeline stage {st}", "split": dim}, st))
    stage_t = [0.0] * n_st
    for _, parts, _, st in planned:
        stage_t[st] += max(p.busy for p in parts)
    for st in {stage_of[k] for k in gemm_idx if cuts[k] is not None}:  # rows cut to suit cores that differ: each
        inside = [k for k in range(len(group)) if stage_of[k] == st]  # core at its own pace where none waits
        if own_rows(r, group, fin, fout, sib, ffil, inside):  # for another's results (as run_chains)
            done, _ = chain_ends(r, [(op, parts) for op, parts, _, s in planned if s == st], 0.0)
            stage_t[st] = max(done.values())
    latency = pipeline_latency(stage_t, tiles)
    # the stages run at once, but each was timed with the DRAM channels (and the simd core) to itself: the group
    # takes at least all its bytes over all the channels, and all its vector ops on the simd core, as a parallel
    # step does (before, a port-bound chip's pipeline moved its bytes several times faster than its port)
    every = [p for _, parts, _, _ in planned for p in parts]
    bw = r.m.dram.total_bandwidth
    latency = max(latency, sum(p.dram_bytes for p in every) / bw if bw else 0.0,
                  sum(p.busy for p in every if p.core in r.m.simd_cores))
    scales = step_scales(r, [(op, parts) for op, parts, _, _ in planned], latency)
    offset = [sum(stage_t[:s]) / tiles for s in range(n_st)]
    t0 = r.t
    inner = [0.0] * n_st
    for (op, parts, extra, st), scale in zip(planned, scales, strict=True):
        start = t0 + offset[st] + inner[st]
        extra = {**extra, "tiles": tiles}
        inner[st] += r.commit(op, parts, start, scale, extra, draw=False)
    if r.record:
        r.timeline += one_at_a_time(pipeline_bars(planned, stage_t, tiles, t0), t0, t0 + latency)
    r.t = t0 + latency


def one_at_a_time(bars: list[tuple[int, float, float, str]], lo: float, hi: float) -> list[tuple[int, float, float, str]]:
    """Timeline ``bars`` (core, start, end, name) of one step from ``lo`` to ``hi`` with no two on a core at once: a
    core several shares use (the simd core of a parallel step or of several pipeline stages) does their work one
    after another, each bar at its own start or after the one before, and the last ones moved back inside the step
    where they would pass ``hi`` (the step's latency already holds all that core's work). Other bars are unchanged."""
    by: dict[int, list[int]] = {}
    for i, bar in enumerate(bars):
        by.setdefault(bar[0], []).append(i)
    out = list(bars)
    for idx in by.values():
        idx.sort(key=lambda i: (bars[i][1], i))
        ends = []
        t = lo
        for i in idx:  # forward: after the one before
            start = max(bars[i][1], t)
            t = start + (bars[i][2] - bars[i][1])
            ends.append(t)
        limit = hi
        for j in range(len(idx) - 1, -1, -1):  # backward: inside the step
            i = idx[j]
            end = min(ends[j], limit)
            start = end - (bars[i][2] - bars[i][1])
            out[i] = (bars[i][0], start, end, bars[i][3])
            limit = start
    return out


PIPELINE_BARS = 512  # bars per core a pipelined group draws at most: its tiles are drawn in chunks beyond that


def pipeline_bars(planned: list[tuple[Any, list[Part], dict[str, Any], int]], stage_t: list[float], tiles: int,
                  t0: float) -> list[tuple[int, float, float, str]]:
    """The timeline bars (core, start cycle, end cycle, layer) of a pipelined group. Stage ``s`` takes ``d_s =
    stage_t[s] / tiles`` cycles per tile and starts tile ``j`` at ``S(s, j) = max(S(s, j - 1) + d_s, S(s - 1, j) +
    d_(s-1))`` after ``t0`` (so the last stage ends at the group's latency), its ops one after another inside the
    tile. Tiles are drawn in at most ``PIPELINE_BARS / ops`` chunks, a chunk of ``k`` tiles as one bar per op and core
    ``k`` tiles long at the chunk's first tile: every stage's bars sit where it works, from its first tile to its
    last (before, each stage's work was drawn packed at its first tile, leaving the rest of the pipeline blank)."""
    n = len(stage_t)
    d = [x / tiles for x in stage_t]
    begin = [[0.0] * tiles for _ in range(n)]
    for s in range(n):
        for j in range(tiles):
            begin[s][j] = max(begin[s][j - 1] + d[s] if j else 0.0, begin[s - 1][j] + d[s - 1] if s else 0.0)
    chunks = max(1, min(tiles, PIPELINE_BARS // max(1, len(planned))))
    edges = [round(c * tiles / chunks) for c in range(chunks + 1)]
    bars = []
    for j0, j1 in zip(edges, edges[1:], strict=False):
        k = (j1 - j0) / tiles
        inner = [0.0] * n
        for op, parts, _, st in planned:
            start = t0 + begin[st][j0] + inner[st]
            bars += [(p.core, start, start + p.busy * k, op.name) for p in parts]
            inner[st] += max(p.busy for p in parts) * k
    return bars
