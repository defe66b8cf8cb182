"""Area, leakage and power of a multi-core NPU and of a run on it: the multi-core twin of :mod:`npukit.sim.power`.

Units as there: area in um^2 per component (``mm2`` in mm^2), leakage in mW, energies in pJ, power in W.

* Each core is priced by :func:`npukit.sim.area.component_areas` of its own arch (identical cores once, times their
  count); a MAC core without a vector unit (``vector_unit = false``) has no ``vector_unit`` lanes. When the chip has
  cores of more than one kind of arch, the components of every group after the first carry its first core's name
  (``pe_array.simd``).
* The network-on-chip: the area rules' ``noc_um2_per_core`` and ``noc_mw_per_core`` once per core (Accelergy's XY
  NoC of its eyeriss-like exercise, as for :func:`~npukit.sim.area.arch_area` with ``cores > 1``; not sized by the
  link width: an estimate).
* The shared on-chip memory: one SRAM of its size (:func:`~npukit.sim.area.sram_area`, one port).
* DRAM and its PHYs are off the chip's area, as on one core.

A core costed by a loop-nest model (a Stream or ZigZag core YAML: ``Core.nest``) has no npukit area model, so a chip
with one has no PPA (:func:`multicore_area` returns None).
"""

from __future__ import annotations

from typing import Any

from .area import DEFAULT_AREA, ArchArea, ComponentArea, component_areas, node_scale, sram_area
from .energy import EnergyTable
from .multicore import MultiCoreArch
from .power import PJ_PER_MW_S, Power

__all__ = ["multicore_area", "multicore_ppa"]


def multicore_area(march: MultiCoreArch, table: EnergyTable) -> ArchArea | None:
    """Area and leakage of every component of ``march`` priced with ``table``'s ``[area]`` rules at its node (and
    its per-component overrides); None when a core is a loop-nest model."""
    if any(c.nest is not None for c in march.cores):
        return None
    rules = getattr(table, "area", None) or DEFAULT_AREA
    overrides = {name: {k: v for k, v in sec.items() if k in ("area_um2", "leakage_mw")}
                 for name, sec in table.components.items()}
    groups: dict[tuple[Any, bool], list[str]] = {}
    for c in march.cores:
        groups.setdefault((c.arch, c.vector_unit), []).append(c.name)
    out: list[ComponentArea] = []
    for i, ((arch, vector), names) in enumerate(groups.items()):
        suffix = f".{names[0]}" if i else ""
        for ca in component_areas(arch, rules, table.technology_nm, overrides, len(names)):
            if ca.component == "noc" or (ca.component == "vector_unit" and not vector):
                continue
            out.append(ComponentArea(ca.component + suffix, ca.count, ca.area_um2, ca.leakage_mw))
    s = node_scale(rules, table.technology_nm)
    if len(march.cores) > 1:
        out.append(ComponentArea("noc", len(march.cores), rules["noc_um2_per_core"] * s, rules["noc_mw_per_core"]))
    if march.shared_memory.kib > 0:
        um2, mw = sram_area(rules, march.shared_memory.bytes)
        o = overrides.get("shared_memory", {})
        out.append(ComponentArea("shared_memory", 1, o.get("area_um2", um2 * s), o.get("leakage_mw", mw)))
    return ArchArea(out)


def multicore_ppa(result: Any, area: ArchArea) -> dict[str, Any]:
    """The PPA of a :class:`~npukit.sim.multicore_sim.MultiCoreResult` on a chip of ``area``: the columns of
    :meth:`npukit.sim.power.Power.columns` plus ``leakage_mw`` and ``area_um2_by_component`` (what the ledger's
    ``meta["ppa"]`` and a sweep row carry). Every component leaks for the whole run (no power gating); the peak
    power is the highest layer's average, each layer's time its critical cycles."""
    hz = result.arch.clock_ghz * 1e9
    leak = area.leakage_mw
    peak = 0.0
    for r in result.layer_rows:
        t = r["cycles"] / hz
        if t > 0 and "energy_total_pj" in r:
            peak = max(peak, (r["energy_total_pj"] + leak * t * PJ_PER_MW_S) / 1e12 / t)
    t = result.total_cycles / hz
    run = Power(t, result.macs, float(result.energy_pj), leak * t * PJ_PER_MW_S, area.mm2, peak)
    return {"leakage_mw": leak, **run.columns(),
            "area_um2_by_component": {c: um2 for c, (um2, _) in area.by_component().items()}}
