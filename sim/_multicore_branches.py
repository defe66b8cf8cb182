"""A ``parallel`` step on a multi-core NPU: independent branches of a workload (the experts of a mixture-of-experts
layer, the q, k and v projections; :func:`npukit.sim.schedule.branch_runs`) at once on disjoint shares of the MAC
cores. ``r`` is the simulation in progress (``multicore_sim._Run``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._multicore_cost import Part
from ._multicore_groups import fused_edges, one_at_a_time
from ._multicore_rows import step_scales
from .workload import Layer, VectorOp

if TYPE_CHECKING:
    from .multicore_sim import _Run


def shares(weights: list[float], cores: list[int], speed: list[float] | None = None) -> list[tuple[list[int], list[int]]]:
    """(cores, branches) of each share: with at least as many branches as cores, one core each, the branches dealt
    largest first to the core that would finish them first (by ``weights``: each branch's cycles on the first core;
    ``speed``: each core's throughput relative to the first's, 1 for all by default, so on identical cores the least
    loaded); with fewer, every branch its own share, the cores given one at a time to the branch with the most weight
    per core. Branches keep their order in a share."""
    k, n = len(weights), len(cores)
    speed = speed or [1.0] * n
    if k >= n:
        load = [0.0] * n
        owned: list[list[int]] = [[] for _ in range(n)]
        for b in sorted(range(k), key=lambda b: -weights[b]):
            c = min(range(n), key=lambda c: load[c] + weights[b] / speed[c])
            owned[c].append(b)
            load[c] += weights[b] / speed[c]
        return [([cores[c]], sorted(owned[c])) for c in range(n) if owned[c]]
    count = [1] * k
    for _ in range(n - k):
        count[max(range(k), key=lambda b: (weights[b] + 1) / count[b])] += 1
    start = [sum(count[:b]) for b in range(k)]
    return [(cores[start[b]:start[b] + count[b]], [b]) for b in range(k)]


def _weight(r: _Run, branch: list[Layer | VectorOp], core: int) -> float:
    """A branch's weight in :func:`shares`: its operators' cycles each alone on MAC core ``core`` (data through
    DRAM)."""
    return sum(max(p.busy for p in (r.vector_parts(op, [core], True, True) if isinstance(op, VectorOp) else
                                    r.best_dim(op, [core], "", "")[1])) for op in branch)


def run_parallel(r: _Run, branches: list[list[Layer | VectorOp]], macs: list[int],
                 fused: list[bool] | None = None, weights: list[float] | None = None) -> None:
    """The branches at once, each share's operators one after another on its share's cores (a GEMM on the split the
    objective picks, a vector op on its share or the simd core). A branch marked ``fused`` keeps what one of its
    GEMMs makes for another, or for the vector ops after its last GEMM, on chip
    (:func:`~npukit.sim._multicore_groups.fused_edges`: in the core's buffers on a one-core share, else through the
    shared memory), its first operator reading from DRAM and its last writing there, as a fused group does; any
    other branch's operators move their data through DRAM. The step takes its slowest share, or longer where the
    shares together need more: the DRAM channels' time for all their bytes, or the simd core's for all its vector
    ops (the shares' own timing assumes each has the channels and the simd core to itself). Every operator's cycles
    in the ledger and the rows are scaled so that they add up to the step's latency, as a pipeline's are; the
    timeline draws each where it runs. ``weights``: the branches' cycles on one core, if already known."""
    planned: list[tuple[int, Layer | VectorOp, list[Part], dict[str, Any], int]] = []  # (order, op, parts, extra, share)
    order = {id(op): k for k, op in enumerate(op for b in branches for op in b)}
    top = r.m.cores[macs[0]].macs_per_cycle
    split = shares(weights or [_weight(r, b, macs[0]) for b in branches], macs,
                   [r.m.cores[c].macs_per_cycle / top for c in macs])
    for s, (cs, owned) in enumerate(split):
        for b in owned:
            ops = branches[b]
            on_chip = bool(fused and fused[b])
            fin = fout = [False] * len(ops)
            if on_chip:
                fin, fout, _, _ = fused_edges(ops, r.flow, r.memo)
            where = "local" if len(cs) == 1 else "shared"
            for k, op in enumerate(ops):
                if isinstance(op, VectorOp):
                    ends = (k == 0, k == len(ops) - 1) if on_chip else (True, True)
                    parts, dim = r.vector_parts(op, cs, *ends), "-"
                else:
                    dim, parts = r.best_dim(op, cs, where if fin[k] else "", where if fout[k] else "")
                planned.append((order[id(op)], op, parts, {"step": f"branch {s}", "split": dim}, s))
    share_t = [0.0] * len(split)
    for _, _, parts, _, s in planned:
        share_t[s] += max(p.busy for p in parts)
    every = [p for _, _, parts, _, _ in planned for p in parts]
    dram_t = sum(p.dram_bytes for p in every) / r.m.dram.total_bandwidth if r.m.dram.total_bandwidth else 0.0
    simd_t = sum(p.busy for p in every if p.core in r.m.simd_cores)
    latency = max(max(share_t), dram_t, simd_t)
    ordered = sorted(planned, key=lambda x: x[0])  # the ledger and rows in program order
    scales = step_scales(r, [(op, parts) for _, op, parts, _, _ in ordered], latency)
    t0 = r.t
    inner = [0.0] * len(split)
    bars: list[tuple[int, float, float, str]] = []
    for (_, op, parts, extra, s), scale in zip(ordered, scales, strict=True):
        start = t0 + inner[s]
        r.commit(op, parts, start, scale, extra, draw=False)
        bars += [(p.core, start, start + p.busy, op.name) for p in parts]
        inner[s] += max(p.busy for p in parts)
    if r.record:
        r.timeline += one_at_a_time(bars, t0, t0 + latency)
    r.t = t0 + latency


def run_branches(r: _Run, branches: list[list[Layer | VectorOp]], macs: list[int], fused: list[bool],
                 rest: int = 0) -> None:
    """:func:`run_parallel` of the branches, but the ``rest`` lightest (by cycles on one core) run afterwards, one
    at a time on all of ``macs``: with more branches than cores and a remainder (8 experts on 3 cores), the others
    run in even rounds and the remainder split over every core, not piled onto some cores (3, 3 and 2)."""
    if not rest:
        run_parallel(r, branches, macs, fused)
        return
    weight = [_weight(r, b, macs[0]) for b in branches]
    light = set(sorted(range(len(branches)), key=lambda b: (weight[b], b))[:rest])
    keep = [b for b in range(len(branches)) if b not in light]
    run_parallel(r, [branches[b] for b in keep], macs, [fused[b] for b in keep], [weight[b] for b in keep])
    for b in sorted(light):
        run_parallel(r, [branches[b]], macs, [fused[b]], [weight[b]])
