"""Which split of a GEMM over the MAC cores to keep, with the splits that cannot win left unmapped (branch and
bound): :func:`multicore_sim._Run.best_dim` (every split of :func:`~npukit.sim.schedule.layer_splits`) and
:func:`_multicore_groups.run_fused_split` (every split of :func:`~npukit.sim.schedule.split_dims`), each with ``B``
last where :func:`~npukit.sim._multicore_cost.uneven_batch` offers it, keep the first of the best under
:func:`~npukit.sim.schedule.split_rank`. Under the ``latency`` objective a split's rank starts with its slowest
core's busy cycles, which is at least the largest of its cores' floors (:func:`split_floor`, from
:func:`~npukit.sim._multicore_cost.gemm_floor`, no mapping needed); so the splits are mapped in the order of their
floors and one whose floor is above the best rank's cycles found so far is never mapped: it could not rank first
(nor tie: equal cycles then compare energy, which a floor does not bound, so a floor equal to the best is mapped).
The split kept is the one the full search keeps (ties: the first in the order given). Other objectives map
every split. ``PRUNE = False`` maps every split always (the reference: ``tests/test_nest_floor.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._multicore_cost import gemm_floor, lead_ranks, received, sub_layer
from .errors import ConfigError
from .workload import Layer

if TYPE_CHECKING:
    from .multicore_sim import _Run

PRUNE = True  # False: every split is mapped (the reference the pruned search must equal)
T = TypeVar("T")


def pick_split(dims: Sequence[str], evaluate: Callable[[str], tuple[tuple[float, float], T]],
               floor: Callable[[str], float] | None) -> tuple[str, tuple[float, float], T]:
    """(dim, rank, payload) of the first of ``dims`` whose ``evaluate(dim)`` rank (a :func:`split_rank` tuple,
    cycles first when ``floor`` is given) is least; ``floor(dim)``: a lower bound on that rank's first term (None:
    no bound, every dim evaluated in order). With a bound, dims are evaluated by rising floor and those whose
    floor exceeds the best rank's first term are not evaluated."""
    if floor is None or not PRUNE:
        order = list(range(len(dims)))
        floors = None
    else:
        floors = [floor(d) for d in dims]
        order = sorted(range(len(dims)), key=lambda i: (floors[i], i))
    best: tuple[tuple[float, float], int, Any] | None = None
    failed: ConfigError | None = None
    for i in order:
        if best is not None and floors is not None and floors[i] > best[0][0]:
            break  # this floor and every later one (sorted) above the best: none can rank first
        try:
            val, payload = evaluate(dims[i])
        except ConfigError as err:  # this split's shares fit no loop order of the core: another split may
            failed = failed or err
            continue
        if best is None or val < best[0] or (val == best[0] and i < best[1]):
            best = (val, i, payload)
    if best is None:
        raise failed or ConfigError(f"no split of {', '.join(dims)} maps")
    return dims[best[1]], best[0], best[2]


def split_floor(r: _Run, layer: Layer, cores: list[int], dim: str, fin: str, fout: str, ffil: str = "") -> float:
    """A lower bound (cycles) on the slowest part of ``r.gemm_parts(layer, cores, dim, fin, fout, ffil)``, kept in
    ``r.memo``: the largest over its cores of the compute floor plus the DRAM stall of the bytes floor
    (:func:`~npukit.sim._multicore_cost.gemm_floor`). The stall as ``gemm_parts`` prices it: at least the bytes over
    the core's own port; with the DRAM channels shared in proportion to traffic (``_Run._share_dram``: two parts or
    more), each part moving bytes waits at least all parts' bytes over all channels; else at least its bytes over its
    equal share of the channels (``_Run.arch_for``)."""
    key = ("floor", layer.M, layer.N, layer.K, layer.batch, layer.kind, layer.conv, layer.shared, tuple(cores), dim,
           fin, fout, ffil)
    hit = r.memo.get(key)
    if hit is not None:
        return hit
    ways = len(cores)
    shares = []
    bounds = r.share_bounds(layer, cores, dim, fin, fout, ffil)  # the shares gemm_parts gives them
    subs = [sub_layer(layer, dim, ways, i, bounds) for i in range(ways)]
    live = [i for i, sub in enumerate(subs) if sub is not None]
    lead = lead_ranks(dim, live)  # as gemm_parts: the first working core fetches and reduces
    got = received(layer, dim, ways, live, bounds)
    for i in live:
        c = r.m.cores[cores[i]]
        shares.append((c.arch, *gemm_floor(subs[i], c.arch, r.memo, dim=dim, ways=ways, reducer=lead[i] == 0,
                                           fused_in=fin, fused_out=fout, fused_filter=ffil, nest=c.nest,
                                           multicast=got[i] if r.ic.multicast else "")))
    dram = r.m.dram
    pooled = len(shares) >= 2 and r.ref.bandwidth_mode != "calc" and r.ref.memory != "scalesim"
    moved = sum(s[2] for s in shares)
    hit = 0.0
    for arch, cycles, byts in shares:
        stall = 0.0
        if byts > 0 and arch.bandwidth_mode != "calc":
            port = arch.dram_bandwidth_bytes_per_cycle
            stall = max(byts / port, moved / dram.total_bandwidth if pooled else byts / dram.share(len(shares), port))
        hit = max(hit, (cycles + stall) * (1 - 1e-9))
    r.memo[key] = hit
    return hit


def latency_bound(r: _Run) -> bool:
    """Whether a split's rank starts with its cycles (the ``latency`` objective), so floors may cut splits."""
    return r.m.objective == "latency"
