"""Simulate a workload on a multi-core NPU (:class:`~npukit.sim.multicore.MultiCoreArch`) under a schedule
(:mod:`npukit.sim.schedule`), or search the schedules for the best under the arch's objective.

Each operator's share on each core is costed by :mod:`npukit.sim._multicore_cost` (the single-core model on the
core's arch with its share of the DRAM channels). A split step's latency is its slowest core; a pipelined
step's is fill and drain over its tiles (:mod:`npukit.sim.schedule`). Everything lands in one Ledger: per-core
records under ``<workload>/<layer>/<core>`` (under ``<workload>/<layer>`` when the operator runs whole on one
core, as the single-core simulator does), the critical path's ``compute``, ``stall``, ``vector`` and exposed
``interconnect`` cycles per layer, interconnect transfers (component ``interconnect``, action ``transfer``, per
bit and hop) and shared-memory accesses (``shared_memory``). ``ledger.meta['multicore']`` holds the schedule,
the per-core busy cycles, the interconnect bytes and the timeline. A one-core arch under ``none/split`` gives
exactly the single-core simulator's ledger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ._accounting import declare_components
from ._multicore_balance import aligned_cut, balanced_cuts, whole_bounds
from ._multicore_branches import run_branches
from ._multicore_cost import (  # noqa: I001
    BUS,
    LINK,
    SHARED,
    Part,
    covered,
    default_bounds,
    gemm_part,
    halo_elements,
    lead_ranks,
    multicast,
    received,
    senders,
    split_extent,
    sub_layer,
    uneven_batch,
    vector_part,
    vector_shares,
    with_dram,
    write_epilogue,
)
from ._multicore_groups import fused_plan, run_fused_split, run_pipeline
from ._multicore_nest import components as nest_components
from ._multicore_nest import nest_objective
from ._multicore_prune import latency_bound, pick_split, split_floor
from ._old_call import OldCall
from .bounded import check_finite
from .dataflow import Dataflow
from .energy import EnergyTable, load_table
from .errors import ConfigError
from .ledger import Ledger
from .multicore import MultiCoreArch
from .multicore_ppa import multicore_area, multicore_ppa
from .schedule import (  # noqa: I001
    Schedule,
    Step,
    candidates,
    clip,
    layer_splits,
    make_schedule,
    objective_value,
    split_label,
    split_rank,
)
from .workload import Layer, VectorOp, Workload

MAX_FUSED_TILES = 256
# (where a fused GEMM's producer cut its rows, where the GEMM that made its ``bands`` right operand did): None, even
Near = tuple[tuple[int, ...] | None, tuple[int, ...] | None]


@dataclass
class MultiCoreResult:
    """A workload on a multi-core NPU: per-layer rows, the ledger, the timeline and totals (cycles, pJ, bytes)."""

    workload: str
    arch: MultiCoreArch
    schedule: Schedule
    ledger: Ledger
    layer_rows: list[dict[str, Any]]
    total_cycles: float
    core_busy: list[float]
    timeline: list[tuple[int, float, float, str]]  # (core, start cycle, end cycle, layer)
    energy_components: dict[str, float]
    interconnect_bytes: float
    interconnect_cycles: float  # exposed on the critical path
    macs: int
    searched: list[dict[str, Any]] = field(default_factory=list)

    @property
    def energy_pj(self) -> float:
        """Total energy (pJ), DRAM and interconnect included (``energy_pj()`` is the deprecated spelling)."""
        return OldCall(sum(self.energy_components.values()), "energy_pj")

    @property
    def latency_s(self) -> float:
        """Total cycles at the arch's clock, in seconds (``latency_s()`` is the deprecated spelling)."""
        return OldCall(self.total_cycles / (self.arch.clock_ghz * 1e9), "latency_s")

    @property
    def utilization(self) -> float:
        """MACs / (all MAC cores' PEs x total cycles, stalls and waits included; the single-core
        ``SimResult.utilization`` divides by compute cycles only)."""
        return self.macs / (self.arch.peak_macs_per_cycle * self.total_cycles) if self.total_cycles else 0.0

    @property
    def interconnect_share(self) -> float:
        """Fraction of the latency the critical path waits on the interconnect."""
        return self.interconnect_cycles / self.total_cycles if self.total_cycles else 0.0

    def rows(self) -> list[dict[str, Any]]:
        """Per-layer rows with the same columns each (a CSV's): every energy component any row has
        (``energy_<component>_pj``, pJ; 0 where the layer used none), then ``energy_total_pj``; other keys only some
        rows have (a pipeline's ``tiles``) are empty elsewhere. Before, the CSV took the first row's columns and
        dropped the rest: a Llama layer's first row, a norm, left out the PE array and most SRAMs."""
        keys = list(dict.fromkeys(k for r in self.layer_rows for k in r if not k.startswith("energy_")))
        comps = sorted({k for r in self.layer_rows for k in r if k.startswith("energy_")} - {"energy_total_pj"})
        return [{**{k: r.get(k, "") for k in keys}, **{c: r.get(c, 0.0) for c in comps},
                 "energy_total_pj": r.get("energy_total_pj", 0.0)} for r in self.layer_rows]


def _table(march: MultiCoreArch, table: EnergyTable | str | None) -> EnergyTable:
    if isinstance(table, EnergyTable):
        return table
    return march.table if table is None and march.table is not None else load_table(table or march.energy_table)


def _declare(led: Ledger, march: MultiCoreArch, core: int) -> None:
    """The core's buffers, the shared memory and the interconnect (priced per bit by its own declaration)."""
    declare_components(led, march.cores[core].arch)
    if march.shared_memory.kib > 0:
        led.declare(SHARED, kind="sram", capacity_bytes=march.shared_memory.bytes)
    led.declare(LINK, kind="interconnect", energy_pj_per_bit=march.interconnect.energy_pj_per_bit,
                source=march.interconnect.source)
    models: dict[str, list[str]] = {}  # component -> the loop-nest cores that report into it (cores may differ)
    for c in march.cores:
        if c.nest is not None:
            for comp in nest_components(c.nest):
                if c.nest.name not in models.setdefault(comp, []):
                    models[comp].append(c.nest.name)
    for comp, names in models.items():
        led.declare(comp, kind="nest", energy_pj_per_bit=1.0, source="loop-nest model of " + ", ".join(names))
    if march.bus is not None:
        led.declare(BUS, kind="interconnect", energy_pj_per_bit=march.bus.energy_pj_per_bit, source=march.bus.source)


def simulate_multicore(workload: Workload, march: MultiCoreArch, schedule: Schedule | str | None = None,
                       table: EnergyTable | str | None = None) -> MultiCoreResult:
    """Run ``workload`` on ``march`` under ``schedule`` (a :class:`Schedule`, a ``policy/mode`` label such as
    ``"blocks/split"``, or None: search all :func:`~npukit.sim.schedule.candidates` and keep the best by the
    arch's objective; ``result.searched`` lists every candidate's energy, cycles and objective)."""
    tab = _table(march, table)
    flow = Dataflow.of(workload)
    memo: dict = {"dataflow": flow}  # its runs share the memo, and the dataflow built once
    if schedule is None:
        best, tried = None, []
        for sched in candidates(workload, march, flow):
            res = _run(workload, march, sched, tab, memo, record=False)
            val = _finite(res, march.objective, sched.label)
            tried.append({"schedule": sched.label, "energy_pj": res.energy_pj, "cycles": res.total_cycles,
                          "objective": val})
            if best is None or val < best[0]:
                best = (val, sched)
        assert best is not None
        out = _run(workload, march, best[1], tab, memo)
        _finite(out, march.objective, best[1].label)
        out.searched = tried
        out.ledger.meta["multicore"]["searched"] = tried
        return out
    if isinstance(schedule, str):
        policy, _, mode = schedule.partition("/")
        schedule = make_schedule(workload, policy, mode or "split", bool(march.simd_cores), flow)
    out = _run(workload, march, schedule, tab, memo)
    _finite(out, march.objective, schedule.label)
    return out


def _finite(res: MultiCoreResult, objective: str, label: str) -> float:
    """``res``'s objective value; ConfigError when its cycles, energy or objective overflowed (an arch number too
    large or too small for the workload: a link of 1e-300 bytes per cycle)."""
    what = f"{res.arch.name} under schedule {label}"
    check_finite(float(res.total_cycles), f"the cycles of {what}", ConfigError)
    check_finite(float(res.energy_pj), f"the energy of {what}", ConfigError)
    return check_finite(objective_value(res.energy_pj, res.total_cycles, objective), f"the {objective} of {what}",
                        ConfigError)


class _Run:
    """The state of one schedule's simulation."""

    def __init__(self, workload: Workload, march: MultiCoreArch, tab: EnergyTable, memo: dict, record: bool = True) -> None:
        self.wl, self.m, self.tab, self.memo, self.record = workload, march, tab, memo, record
        self.energy = 0.0  # pJ, search candidates only (record = False)
        self.ic = march.interconnect
        if "dataflow" not in memo:  # a run made outside simulate_multicore
            memo["dataflow"] = Dataflow.of(workload)
        self.flow: Dataflow | None = memo["dataflow"]
        self.ledger = Ledger()
        self.ref = march.cores[march.mac_cores[0]].arch
        self.ledger.meta.update(arch=self.ref.to_dict(), workload=workload.name, energy_table=tab.path or tab.name)
        if march.table is tab:  # a chip's own table (a Stream YAML's costs) has no file: the ledger carries it
            self.ledger.meta["energy_table_data"] = {"name": tab.name, "description": tab.description, **tab.sections}
        self._archs: dict[tuple[int, int], Any] = {}  # (core, active cores) -> its Arch (arch_for)
        self._components: dict[int, dict[str, dict[str, Any]]] = {}  # core -> what _declare declares for it
        self.ledger.components = self._declared(march.mac_cores[0]).components
        self.t = 0.0
        self.busy = [0.0] * len(march.cores)
        self.timeline: list[tuple[int, float, float, str]] = []
        self.rows: list[dict[str, Any]] = []
        self.link_bytes = 0.0  # links and bus together
        self.bus_bytes = 0.0
        self.link_exposed = 0.0
        self.hide = 0.0
        self.serial_one = len(march.mac_cores) == 1 and not march.simd_cores and self.ref.vector.overlap == "overlap"

    def arch_for(self, core: int, active: int, mapped: str = ""):  # -> Arch
        """The core's arch with its share of the DRAM channels when ``active`` cores use them (kept per run), its
        shares mapped under the chip's objective when that is ``energy`` or ``edp`` (under ``latency`` the core keeps
        its own, as the loop-nest cores map under ``edp``: :func:`~npukit.sim._multicore_nest.nest_objective`).
        Before, always the core's own: on a chip whose objective is ``energy`` a share's mapping was picked for EDP
        at its share of the DRAM bandwidth, so the same work's energy changed with the bandwidth (2% on a
        1526 x 154 x 145 GEMM over six npu128 cores). ``mapped``: another objective to map under, if given."""
        hit = self._archs.get((core, active, mapped))
        if hit is None:
            a = self.m.cores[core].arch
            want = mapped or (self.m.objective if self.m.objective != "latency" else a.objective)
            if a.objective != want:
                a = a.with_(objective=want)
            bw = self.m.dram.share(active, a.dram_bandwidth_bytes_per_cycle)
            hit = self._archs[(core, active, mapped)] = a if bw == a.dram_bandwidth_bytes_per_cycle else \
                a.with_(dram_bandwidth_bytes_per_cycle=bw)
        return hit

    def _declared(self, core: int) -> Ledger:
        """A new Ledger with :func:`_declare`'s components for ``core`` (declared once per run, then copied)."""
        comps = self._components.get(core)
        if comps is None:
            led = Ledger()
            _declare(led, self.m, core)
            comps = self._components[core] = led.components
        led = Ledger()
        led.components = dict(comps)
        return led

    def gemm_parts(self, layer: Layer, cores: list[int], dim: str, fin: str, fout: str, ffil: str = "",
                   prod: Layer | None = None, bounds: tuple[int, ...] | None = None, near: Near = (None, None)
                   ) -> list[Part]:
        """Each core's share of ``layer`` (cached by shape: a model's repeated blocks are costed once); ``prod``: the
        conv whose row bands this conv's row bands read on chip (their halo rows cross the interconnect); ``bounds``:
        where the split cuts the extent, if not :meth:`share_bounds`'s (a pipeline stage's shares, cut alike);
        ``near``: where the row cuts of ``prod`` and of the GEMM that made a ``bands`` right operand cut their rows,
        if not evenly (a fused group's rows cut alike over cores that differ: each core's halo and own band follow
        them; before 2026-12-07 both were counted as if the rows were cut evenly)."""
        halo = prod.conv if prod is not None and fin == "local" and dim == "M" else None
        near = (near[0] if halo else None, near[1] if ffil == "bands" else None)
        key = ("parts", layer.M, layer.N, layer.K, layer.batch, layer.kind, layer.conv, layer.shared, tuple(cores),
               dim, fin, fout, ffil, halo, bounds) + ((near,) if any(near) else ())
        if key not in self.memo:
            self.memo[key] = self._ranked_parts(layer, cores, dim, fin, fout, ffil, prod if halo else None, bounds,
                                                near)
        return self.memo[key]

    def _ranked_parts(self, layer: Layer, cores: list[int], dim: str, fin: str, fout: str, ffil: str,
                      prod: Layer | None, bounds: tuple[int, ...] | None, near: Near = (None, None)) -> list[Part]:
        """The split's parts, the DRAM channels shared (:meth:`_share_dram`). The mapper times a share's DRAM stalls
        as a layer alone on its share of the channels, the split re-times them with the channels shared (and a fused
        share moves other bytes than the layer the mapper saw), so on a chip of several MAC cores whose objective is
        ``latency`` or ``edp`` the shares are mapped under each of latency, energy and EDP and the set that ranks
        first under the chip's objective so re-timed is kept (2026-12-07; before, the chip's own mapping always:
        tpu_v4's 1024 x 256 x 768 GEMM took 4,894 cycles under latency, 3,552 under energy). Under ``energy`` a
        share's energy does not move with its stalls, but a share whose operand is fused, multicast to it or sent as
        partial sums does not pay that operand's DRAM traffic, which the mapping chose for the layer alone: so the
        energy-best mappings without that traffic, and with a multicast operand's sender's too (:meth:`_gemm_parts`'
        ``adjusted``), are ranked beside the energy-best ones (2026-12-07; before, a chip of two 16 x 16 cores under
        ``energy`` ran Llama's MLP fused for 18.6% more energy than under ``latency``). An unfused step on a one-core
        chip stays the single-core simulator (a fused one has no such twin and is ranked: 2026-12-07, before one
        npu128 took ResNet-18 in 449,853 cycles under latency, 448,076 under energy); loop-nest cores map by their
        own search."""
        parts = self._share_dram(self._gemm_parts(layer, cores, dim, fin, fout, ffil, prod, bounds, near=near))
        alone = len(self.m.mac_cores) < 2 and not (fin or fout or ffil or prod is not None)
        if alone or not parts or any(self.m.cores[c].nest for c in cores):
            return parts
        if self.m.objective == "energy":  # ties keep the layer's own energy-best mappings, then the first adjusted
            sent = self.ic.multicast and dim not in ("-", "K", "B")  # an operand may be multicast (level 2 differs)
            levels = (1, 2) if sent else (1,) if fin or fout or ffil or dim == "K" else ()  # else all equal ``parts``
            return min([parts] + [self._share_dram(self._gemm_parts(layer, cores, dim, fin, fout, ffil, prod, bounds,
                                                                    near=near, adjusted=level)) for level in levels],
                       key=self.rank)
        used = self.arch_for(cores[0], len(cores)).objective
        cands = [parts] + [self._share_dram(self._gemm_parts(layer, cores, dim, fin, fout, ffil, prod, bounds, alt,
                                                             near))
                           for alt in ("latency", "energy", "edp") if alt != used]
        if self.m.objective == "latency":  # ranked by cycles first: only the fastest need pricing (ties by energy)
            fastest = min(max(p.busy for p in ps) for ps in cands)
            cands = [ps for ps in cands if max(p.busy for p in ps) == fastest]
        return min(cands, key=self.rank)

    def _gemm_parts(self, layer: Layer, cores: list[int], dim: str, fin: str, fout: str, ffil: str,
                    prod: Layer | None, bounds: tuple[int, ...] | None, mapped: str = "",
                    near: Near = (None, None), adjusted: int = 0) -> list[Part]:
        """Each working core's part of the split (:meth:`_part`); a multicast operand's fetch covers the receiver
        that reads it most (:func:`covered`). ``adjusted`` 1: each share mapped for the least energy without the DRAM
        traffic it does not pay (a fused or multicast operand, partial sums sent to the reducer: ``free``); 2: the
        same, and a multicast operand's sender mapped without its traffic too (the receivers' passes set what it
        fetches, so its own passes come at no cost up to theirs)."""
        ways = len(cores)
        pb, fb = near
        band = [None if fb is None else (hi - lo) / fb[-1] for lo, hi in zip(fb or (), (fb or ())[1:], strict=False)]
        bounds = bounds or self.share_bounds(layer, cores, dim, fin, fout, ffil, prod)
        subs = [sub_layer(layer, dim, ways, i, bounds) for i in range(ways)]
        live = [i for i, sub in enumerate(subs) if sub is not None]  # a core given nothing takes no DRAM channel
        lead = lead_ranks(dim, live)  # and the first working core fetches the multicast operands and reduces
        got = received(layer, dim, ways, live, bounds) if self.ic.multicast else dict.fromkeys(live, "")

        multicast_ops = "+".join(got[i] for i in live if got[i])

        def part(i: int) -> Part:
            mine = got[i] if adjusted < 2 else multicast_ops
            free = "" if not adjusted else ("I" if fin or "ifmap" in mine else "") + \
                ("W" if ffil or "filter" in mine else "") + ("O" if fout or (dim == "K" and lead[i] > 0) else "")
            return self._part(subs[i], cores[i], lead[i], ways, dim, fin, fout, ffil,
                              halo_elements(prod, layer, ways, i, bounds, pb) if prod is not None else 0, len(live),
                              mapped, band[i] if band else None, got[i], free)

        parts = {i: part(i) for i in live}
        need: dict[tuple[str, int], float] = {}  # (operand, sender) -> the most bytes of it a receiver reads itself
        for (op, i), sender in senders(layer, dim, ways, live, got, bounds).items():
            if sender in parts:  # (a fused operand is not received: gemm_part records none)
                need[(op, sender)] = max(need.get((op, sender), 0.0), parts[i].received.get(op, 0.0))
        for (op, sender), most in need.items():
            parts[sender] = covered(parts[sender], op, most, self.arch_for(cores[sender], len(live), mapped))
        return [parts[i] for i in live]

    def _part(self, sub: Layer, core: int, i: int, ways: int, dim: str, fin: str, fout: str, ffil: str,
              halo: int, active: int = 0, mapped: str = "", own_band: float | None = None,
              got: str | None = None, free: str = "") -> Part:
        """Core ``core``'s part for share ``sub``, the ``i``-th of a ``ways``-way split on ``dim``, mapped at its share
        of the DRAM channels among ``active`` cores with work (default ``ways``; before 2026-12-07 always ``ways``, so
        one 128 x 128 core given a whole GEMM beside two idle 32 x 32 ones ran at a third of the channels);
        ``mapped``: the objective its mapping is searched under, if not :meth:`arch_for`'s; ``own_band``: see
        :func:`gemm_part`; ``got``: what it receives by multicast (:func:`received`), if not :func:`multicast`'s;
        ``free``: see :func:`gemm_part`."""
        return gemm_part(sub, core, self.arch_for(core, active or ways, mapped), self.tab, self.memo, dim=dim, ways=ways,
                         reducer=i == 0, fused_in=fin, fused_out=fout, fused_filter=ffil,
                         link_hops=self.ic.hops(len(self.m.cores)), link_bw=self.ic.bandwidth_bytes_per_cycle,
                         link_latency=self.ic.latency_cycles,
                         shared=SHARED if self.m.shared_memory.kib > 0 else "ofmap_sram",
                         multicast=(multicast(dim, i) if got is None else got) if self.ic.multicast else "", halo=halo,
                         nest=self.m.cores[core].nest, nest_objective=nest_objective(self.m.objective),
                         own_band=own_band, active=active or ways, free=free)

    def core_kinds(self, cores: list[int]) -> list[int]:
        """Each of ``cores``' kind: the position in ``cores`` of the first core identical to it (its :attr:`Core.model`;
        a model is no dict key, so its position keys it)."""
        models = [self.m.cores[c].model for c in cores]
        return [models.index(m) for m in models]

    def share_bounds(self, layer: Layer, cores: list[int], dim: str, fin: str, fout: str, ffil: str = "",
                     prod: Layer | None = None) -> tuple[int, ...] | None:
        """Where a 1-D split of ``layer`` over ``cores`` cuts its extent (:func:`split_extent`): on cores that differ,
        for a layer alone in its step, the cut that ranks first under the objective, as the cores' models time and
        price it (each candidate's shares mapped as a split's, :meth:`_ranked_parts`), of: the even split; the cuts
        balanced for time (:func:`~npukit.sim._multicore_balance.balanced_cuts`, the fit and its refit); shares in
        proportion to the cores' MACs per cycle; each of these with its shares on whole folds of the cores' arrays
        (:func:`~npukit.sim._multicore_balance.aligned_cut`); each kind's corner, the whole extent evenly on its cores;
        and a step on the cores' measured pace from each of the three best so far (shares in proportion to rows per
        cycle: a fit on two sizes misses a DRAM cliff). Under ``energy`` neither the time-fitted cuts nor the pace steps
        are offered: they move with the bandwidths, which do not change a share's energy (2026-12-07; before, two
        cores of 32 x 32 and 48 x 48 took a 100 x 512 x 256 GEMM for 76.5 uJ over 8 B/cycle links and 79.5 uJ over
        16; and the cuts by MACs and the corners were ranked under ``energy`` alone, so ``edp`` could lose to it on
        EDP by 16%). None (the even split) on identical cores, a grid, or a fused operand (its producer's and
        consumer's shares must line up)."""
        kinds = self.core_kinds(cores)
        ext = split_extent(layer, dim, len(cores))
        if ext is None or fin or fout or ffil or prod is not None or all(k == kinds[0] for k in kinds):
            return None
        key = ("bounds", layer.M, layer.N, layer.K, layer.batch, layer.kind, layer.conv, layer.shared, tuple(cores), dim)
        if key not in self.memo:
            ways, size = len(cores), ext[1]
            rep = {k: cores[k] for k in kinds}  # one core of each kind

            def cycles(kind: object, share: int) -> float:
                sub = sub_layer(layer, dim, ways, 0, (0, share) + (size,) * (ways - 1))
                assert sub is not None
                return self._part(sub, rep[kind], 1, ways, dim, "", "", "", 0).busy

            macs = [float(self.m.cores[rep[k]].macs_per_cycle) for k in kinds]
            energy = self.m.objective == "energy"  # a cut fitted for time moves with the bandwidths, which an energy
            cuts: list[tuple[int, ...]] = []  # chip's energy must not; every objective has the others to rank
            if not energy:
                try:
                    cuts = balanced_cuts(size, kinds, cycles, lambda k: macs[k], default_bounds(dim, size, ways)[1])
                except ConfigError:  # a trial share maps on no core of its kind: the other cuts
                    pass
            cuts.append(whole_bounds(size, macs))  # shares by MACs per cycle
            base = list(cuts)
            for unit in ("rows", "cols"):  # and each of these cuts with its shares on whole folds of the arrays
                cuts += [c for c in (aligned_cut(cut, [getattr(self.m.cores[x].arch, unit) for x in cores])
                                     for cut in base) if c is not None]
            # energy grows about linearly in a share, so its least often lies at a corner: every unit on one kind
            cuts += [whole_bounds(size, [float(k == kind) for k in kinds]) for kind in dict.fromkeys(kinds)]
            timed: list[tuple[tuple[float, float], int, tuple[int, ...] | None, list[Part]]] = []

            def rank_cut(cut: tuple[int, ...] | None) -> None:
                try:
                    parts = self._ranked_parts(layer, cores, dim, "", "", "", None, cut or default_bounds(dim, size, ways))
                except ConfigError:  # a cut whose share maps on no core of its kind
                    return
                timed.append((self.rank(parts), len(timed), cut, parts))  # (len(timed): no tie reaches the parts)

            for cut in [*dict.fromkeys(cuts), None]:  # None, the even split, wins no tie
                rank_cut(cut)
            # one step on the cores' measured pace from each of the best three cuts: each core's share in proportion
            # to its rows per cycle at that cut (a fit on two sizes misses a DRAM cliff between them; from the best
            # alone, one more candidate could move the step to a worse cut)
            for _, _, best, parts in ([] if energy else sorted(timed)[:3]):
                if best is None:
                    continue
                busy = {p.core: p.busy for p in parts}
                pace = [(b - a) / busy[c] if b > a and busy.get(c) else 0.0
                        for c, a, b in zip(cores, best, best[1:], strict=False)]
                step = whole_bounds(size, pace) if sum(pace) > 0 else None
                if step is not None and step not in cuts:
                    cuts.append(step)
                    rank_cut(step)
            self.memo[key] = min(timed)[2] if timed else None
        return self.memo[key]

    def _share_dram(self, parts: list[Part]) -> list[Part]:
        """The DRAM channels shared in proportion to each core's traffic (all finish together), each core at
        most its own port; a core alone keeps the single-core model's stalls."""
        total = sum(p.dram_bytes for p in parts)
        if len(parts) < 2 or not total or self.ref.bandwidth_mode == "calc" or self.ref.memory == "scalesim":
            return parts
        for p in parts:
            a = self.m.cores[p.core].arch
            bw = min(a.dram_bandwidth_bytes_per_cycle, self.m.dram.total_bandwidth * p.dram_bytes / total)
            if bw > 0:
                p.restall(a.with_(dram_bandwidth_bytes_per_cycle=bw))
        ports = sum(self.m.cores[p.core].arch.dram_bandwidth_bytes_per_cycle for p in parts)
        write_epilogue(parts, min(self.m.dram.total_bandwidth, ports))
        return parts

    def best_dim(self, layer: Layer, cores: list[int], fin: str, fout: str) -> tuple[str, list[Part]]:
        """The split of ``layer`` alone on ``cores`` (with the arch's ``layer_cores = "search"`` also on their first
        1, 2, 4, ...: :func:`layer_splits`) that ranks first under the objective: its label (:func:`split_label`)
        and its parts."""
        if len(cores) == 1:
            return "-", self.gemm_parts(layer, cores, "-", fin, fout)
        splits = layer_splits(len(cores), fewer=self.m.layer_cores == "search")
        ways = {split_label(d, k, len(cores)): (d, cores[:k]) for d, k in splits}
        for d, k in splits:  # last, so that a tie keeps the cuts above
            if d == "M" and uneven_batch(layer, k):
                ways[split_label("B", k, len(cores))] = ("B", cores[:k])

        def evaluate(label: str) -> tuple[tuple[float, float], list[Part]]:
            dim, used = ways[label]
            parts = self.gemm_parts(layer, used, dim, fin, fout)
            return self.rank(parts), parts

        floor = (lambda label: split_floor(self, layer, ways[label][1], ways[label][0], fin, fout)) \
            if latency_bound(self) else None
        label, _, parts = pick_split(list(ways), evaluate, floor)
        return label, parts

    def vector_parts(self, op: VectorOp, cores: list[int], src_dram: bool = False,
                     dst_dram: bool = False, cut: tuple[str, tuple[int, ...]] | None = None) -> list[Part]:
        """Each core's share of vector op ``op`` (cached by its sizes unless a pipelined vector unit hides it);
        ``src_dram`` / ``dst_dram``: on a simd core, its inputs come from / its result goes to DRAM (the op is not
        fused with its producer / consumer), else they cross the bus or links from / to the MAC cores; ``cut``: on
        the MAC cores, the row cut of the GEMM whose rows it works on (:func:`vector_shares`), else even shares."""
        if self.serial_one:
            return self._vector_parts(op, cores)
        key = ("vparts", op.op, op.elements, op.reduce, op.inputs, op.params, op.batch, tuple(cores),
               src_dram and bool(self.m.simd_cores), dst_dram and bool(self.m.simd_cores),
               None if self.m.simd_cores else cut)
        if key not in self.memo:
            self.memo[key] = self._vector_parts(op, cores, src_dram, dst_dram, cut)
        return self.memo[key]

    def _vector_parts(self, op: VectorOp, cores: list[int], src_dram: bool = False,
                      dst_dram: bool = False, cut: tuple[str, tuple[int, ...]] | None = None) -> list[Part]:
        bw, lat = self.ic.bandwidth_bytes_per_cycle, self.ic.latency_cycles
        if self.m.simd_cores:  # its inputs cross to the simd core and its result back (bus if any), or DRAM
            core = self.m.simd_cores[0]
            arch = self.m.cores[core].arch
            n = op.batch * op.elements * arch.vector.bits
            out = 0 if op.op == "kv_append" else n  # a KV append's result is the cache write (vector_unit)
            from_dram, to_dram = op.inputs * n if src_dram else 0, out if dst_dram else 0
            moved = op.inputs * n + out - from_dram - to_dram
            port = min(arch.dram_bandwidth_bytes_per_cycle, self.m.dram.total_bandwidth)
            bus = self.m.bus
            if bus is not None:
                part = vector_part(op, core, arch, 1, moved, 0.0, bus.bandwidth_bytes_per_cycle, bus.latency_cycles,
                                   BUS)
            else:
                part = vector_part(op, core, arch, 1, moved, 0.0, bw, lat, hops=self.ic.hops(len(self.m.cores)))
            return [with_dram(part, from_dram, to_dram, arch.vector.bits, port)]
        ways = len(cores)
        hide = self.hide if self.serial_one else 0.0
        if cut is not None and ways > 1:
            shares = vector_shares(op, cut, self.ic.multicast)
            live = [i for i, sh in enumerate(shares) if sh is not None]
            return [vector_part(op, cores[i], self.arch_for(cores[i], len(live)), ways, 0.0, hide, bw, lat,
                                share=shares[i]) for i in live]
        # split on its elements, every core needs all its parameters: one DRAM read multicast to all, else each reads
        # its own (before, each read them with multicast too: Llama's input norm 32,768 DRAM bytes on 4 cores, not 8,192)
        return [vector_part(op, c, self.arch_for(c, ways), ways, 0.0, hide, bw, lat,
                            params_from_dram=i == 0 or not self.ic.multicast) for i, c in enumerate(cores)]

    def rank(self, parts: list[Part] | None = None) -> tuple[float, float]:
        """How a step's ``parts`` rank under the chip's objective (:func:`split_rank`: its slowest part's cycles, the
        parts' energy); without ``parts``, how this run so far ranks (a scratch run's cycles and energy)."""
        if parts is None:
            return split_rank(self.energy, self.t, self.m.objective)
        return split_rank(sum(map(self._energy, parts)), max(p.busy for p in parts), self.m.objective)

    def scratch(self) -> _Run:
        """A scratch run (totals only) of this run's workload and chip, sharing its memo: a candidate to rank."""
        return type(self)(self.wl, self.m, self.tab, self.memo, record=False)

    def _energy(self, p: Part) -> float:
        key = ("energy", id(p))
        if key not in self.memo:
            # priced once per core and records: the shares of a split mapped alike under two objectives are one
            price_key = ("price", p.core, tuple(p.records))
            if price_key not in self.memo:
                self.memo[price_key] = self._price(p)
            self.memo[key] = (self.memo[price_key], p)  # p kept alive so that its id stays unique
        return self.memo[key][0]

    def _price(self, p: Part) -> float:
        led = self._declared(p.core)
        for comp, act, bits, cnt in p.records:
            led.record(comp, act, bits, cnt)
        return led.energy(self.tab)

    def commit(self, op: Layer | VectorOp, parts: list[Part], start: float, scale: float, extra: dict[str, Any],
               draw: bool = True) -> float:
        """Record ``op``'s parts; its critical time is ``scale`` x its slowest part; returns that time. ``draw``:
        its parts go on the timeline as one bar each from ``start`` (a pipelined group draws its own, per tile)."""
        crit = max(parts, key=lambda p: p.busy)
        if not self.record:  # a search candidate: totals only
            for p in parts:
                self.busy[p.core] += p.busy
                self.link_bytes += p.link_bytes
            self.link_exposed += crit.link_exposed * scale
            self.energy += sum(self._energy(p) for p in parts)
            self.rows.append({"name": op.name, "cycles": crit.busy * scale, **extra})
            return crit.busy * scale
        scope = f"{self.wl.name}/{op.name}"
        one = self._declared(self.m.mac_cores[0])
        whole = len(parts) == 1 and parts[0].core == self.m.mac_cores[0]
        for p in parts:
            sc = scope if whole else f"{scope}/{self.m.cores[p.core].name}"
            for comp, act, bits, cnt in p.records:
                one.record(self._comp(comp, p.core, one), act, bits, cnt, sc)
            self.busy[p.core] += p.busy
            if draw:
                self.timeline.append((p.core, start, start + p.busy * scale, op.name))
            self.link_bytes += p.link_bytes
            self.bus_bytes += p.bus_bytes
        kind = "vector" if isinstance(op, VectorOp) else "compute"
        one.add_cycles(crit.compute * scale, kind, scope)
        one.add_cycles(crit.stall * scale, "stall", scope)
        one.add_cycles(crit.link_exposed * scale, "interconnect", scope)
        self.link_exposed += crit.link_exposed * scale
        energy = one.energy_by(self.tab, "component")
        facts: dict[str, Any] = {"kind": op.kind, "mapping": extra.get("split", "")}
        if isinstance(op, Layer):  # macs: a loop-nest core's records carry its MAC energy, not a MAC count
            facts.update(M=op.M, N=op.N, K=op.K, macs=op.macs)
        one.describe(scope, **facts)
        self.ledger.merge(one)
        row = {"name": op.name, "kind": op.kind, "start_cycle": start, "cycles": crit.busy * scale,
               "compute_cycles": crit.compute * scale, "stall_cycles": crit.stall * scale,
               "vector_cycles": crit.vector_busy * scale,  # the vector unit's busy cycles, as one core's rows
               "interconnect_cycles": crit.link_exposed * scale, "cores": len(parts),
               "core_ids": " ".join(str(p.core) for p in parts), "macs": op.macs,
               "dram_bytes": sum(p.dram_bytes for p in parts), "interconnect_bytes": sum(p.link_bytes for p in parts),
               "bus_bytes": sum(p.bus_bytes for p in parts),
               "core_mapping": crit.mapping, **extra}
        for comp, e in sorted(energy.items()):
            row[f"energy_{comp}_pj"] = e
        row["energy_total_pj"] = sum(energy.values())
        self.rows.append(row)
        return crit.busy * scale

    def _comp(self, comp: str, core: int, led: Ledger) -> str:
        """Component name: a core whose buffers differ from the first MAC core's gets its own names."""
        a = self.m.cores[core].arch
        if comp.endswith("_sram") or comp in ("psum_buffer", "psum_features"):
            if a.sram_kib != self.ref.sram_kib:
                name = f"{comp}.{self.m.cores[core].name}"
                buf = {"ifmap_sram": "ifmap", "filter_sram": "filter", "psum_buffer": "psum", "ofmap_sram": "ofmap",
                       "psum_features": "ifmap"}[comp]
                led.declare(name, kind="sram", capacity_bytes=a.sram_bytes(buf))
                return name
        return comp


def _tiles_needed(ops: list[Layer | VectorOp], m: MultiCoreArch) -> int:
    """How many row tiles a fused group needs so that its largest intermediate fits on chip (0: never)."""
    cap = m.shared_memory.bytes + sum(m.cores[i].arch.sram_bytes("ofmap") for i in m.mac_cores)
    gemms = [op for op in ops if isinstance(op, Layer)]
    worst = max((g.batch * g.M * g.N * m.cores[m.mac_cores[0]].arch.bits.output / 8 for g in gemms[:-1]), default=0)
    tiles = max(1, math.ceil(worst / cap))
    rows = min(g.batch * g.M for g in gemms)
    return tiles if tiles <= min(rows, MAX_FUSED_TILES) else 0


def _fitting(steps: list[Step], ops: list[Layer | VectorOp], march: MultiCoreArch) -> list[Step]:
    """``steps`` with every fused group whose intermediates never fit on chip run layer by layer instead."""
    out: list[Step] = []
    for st in steps:
        if st.fused and not _tiles_needed([ops[i] for i in st.indices], march):
            out += [Step(i, i) for i in st.indices]
        else:
            out.append(st)
    return out


def _run_steps(r: _Run, steps: list[Step]) -> None:
    """Run ``steps`` (none ``parallel``) one after another on every MAC core, from ``r.t``."""
    ops, macs = r.wl.layers, r.m.mac_cores
    for st in steps:
        group = [ops[i] for i in st.indices]
        if not st.fused:
            op = group[0]
            if isinstance(op, VectorOp):  # not fused: on a simd core its data goes through DRAM, as a GEMM's does
                r.t += r.commit(op, r.vector_parts(op, macs, True, True), r.t, 1.0, {"step": "layer", "split": "-"})
                r.hide = max(0.0, r.hide - r.rows[-1]["cycles"]) if r.serial_one else 0.0
            else:
                dim, parts = r.best_dim(op, macs, "", "")
                r.t += r.commit(op, parts, r.t, 1.0, {"step": "layer", "split": dim})
                r.hide += r.rows[-1]["cycles"]
            if r.ref.vector.overlap == "serial":
                r.hide = 0.0
        elif st.mode == "split" or len(macs) < 2:
            cores, cuts, batches = fused_plan(r, group, macs)
            run_fused_split(r, group, cores, len(macs), cuts, batches)
        else:
            run_pipeline(r, group, macs, _tiles_needed(group, r.m))


Branches = tuple[list[list[Layer | VectorOp]], list[int], list[bool]]


def _branches(r: _Run, st: Step) -> Branches:
    """``run_parallel``'s arguments for parallel step ``st``: its branches' operators, the MAC cores, and whether each
    branch may keep its intermediates on chip (a branch with two GEMMs or more whose largest intermediate fits the
    chip's on-chip memory whole: a branch is not cut into row tiles)."""
    groups = [[r.wl.layers[i] for i in b] for b in st.branches]
    fused = [sum(isinstance(op, Layer) for op in g) >= 2 and _tiles_needed(g, r.m) == 1 for g in groups]
    return groups, r.m.mac_cores, fused


def _parallel_choice(r: _Run, branches: Branches, serial: list[Step]) -> int | None:
    """How a parallel step (``branches``: :func:`_branches`) runs: its branches at once (0), at once but for the ``k``
    lightest, which then run one at a time on every core (``k``: the remainder of more branches than MAC cores), or
    ``serial`` (None: the same operators as the chain schedule runs them), whichever ranks first under the objective,
    each simulated alone on a scratch run (totals only); a tie keeps the earlier of serial, all at once, the remainder
    apart."""
    groups, macs, fused = branches
    extra = len(groups) % len(macs) if len(groups) > len(macs) else 0
    best: tuple[tuple[float, float], int | None] | None = None
    for choice in (None, 0) + ((extra,) if extra else ()):
        trial = r.scratch()
        if choice is None:
            _run_steps(trial, serial)
        else:
            run_branches(trial, groups, macs, fused, choice)
        rank = trial.rank()
        if best is None or rank < best[0]:
            best = (rank, choice)
    assert best is not None
    return best[1]


def _run(workload: Workload, march: MultiCoreArch, sched: Schedule, tab: EnergyTable, memo: dict,
         record: bool = True) -> MultiCoreResult:
    r = _Run(workload, march, tab, memo, record)
    ops = workload.layers
    chain: list[tuple[int, int]] | None = None  # the chain schedule's fused groups
    steps: list[Step] = []  # as run
    for st in _fitting(sched.steps, ops, march):
        if st.mode == "parallel":  # at once, or as the chain schedule runs the same operators: the better one
            if chain is None:
                chain = [(c.first, c.last) for c in make_schedule(workload, "chain", sched.mode,
                                                                  bool(march.simd_cores), r.flow).steps if c.fused]
            outside = [(0, st.first - 1), (st.last + 1, len(ops) - 1)]
            serial = _fitting([Step(f, la, sched.mode, fused=True) for f, la in clip(workload, chain, outside)],
                              ops, march)
            covered = {i for c in serial for i in c.indices}
            serial = sorted(serial + [Step(i, i) for i in st.indices if i not in covered], key=lambda c: c.first)
            branches = _branches(r, st)
            choice = _parallel_choice(r, branches, serial)
            if choice is not None:
                run_branches(r, *branches, choice)
                steps.append(st)
            else:
                _run_steps(r, serial)
                steps += serial
        else:
            _run_steps(r, [st])
            steps.append(st)
    meta = {"schedule": sched.label, "steps": [[s.first, s.last, s.mode, s.fused] for s in steps],
            "core_names": [c.name for c in march.cores], "core_busy_cycles": r.busy,
            "interconnect_bytes": r.link_bytes, "bus_bytes": r.bus_bytes,
            "interconnect_exposed_cycles": r.link_exposed, "arch": march.to_dict(),
            "timeline": [[c, a, b, n] for c, a, b, n in r.timeline]}
    r.ledger.meta["multicore"] = meta
    energy = r.ledger.energy_by(tab, "component") if record else {"total": r.energy}
    out = MultiCoreResult(workload.name, march, sched, r.ledger, r.rows, r.t, r.busy, r.timeline, energy,
                          r.link_bytes, r.link_exposed, workload.macs)
    area = multicore_area(march, tab) if record else None
    if area is not None:  # area, leakage and power (npukit.sim.multicore_ppa); none for loop-nest cores
        r.ledger.meta["ppa"] = multicore_ppa(out, area)
    return out
