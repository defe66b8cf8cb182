"""Power, performance and area of a simulated run: static and dynamic energy, average and peak power,
performance per mm^2 and per watt, per layer and for the run.

Units: area in mm^2, energies in pJ, power in W (1 W = 1e12 pJ/s), time in s at the arch's clock.

* dynamic energy: the ledger priced by the energy table (what :func:`~npukit.sim.simulator.simulate`
  reports as ``energy_pj``, DRAM included);
* static energy = on-chip leakage (mW, :mod:`npukit.sim.area`) x the layer's run time (every component
  leaks for the whole run: no power gating is modelled); DRAM's background power is not included;
* average power of a layer = (dynamic + static energy) / its time; the run's = total energy / total
  time; peak power = the highest layer's average power (npukit has no finer time resolution than a layer);
* perf/area = MACs per second per mm^2 (``gops_per_mm2``: 2 ops per MAC, in GOP/s/mm^2), perf/W =
  ``tops_per_w`` (2 ops per MAC, TOP/s per W).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .area import ArchArea, arch_area

PJ_PER_MW_S = 1e9  # 1 mW for 1 s


@dataclass(frozen=True)
class Power:
    """PPA of a layer or a run (see the module docstring for units)."""

    seconds: float
    macs: float
    dynamic_pj: float
    static_pj: float
    area_mm2: float
    peak_w: float

    @property
    def energy_pj(self) -> float:
        return self.dynamic_pj + self.static_pj

    @property
    def avg_w(self) -> float:
        return self.energy_pj / 1e12 / self.seconds if self.seconds > 0 else 0.0

    @property
    def gops(self) -> float:
        return 2 * self.macs / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gops_per_mm2(self) -> float:
        return self.gops / self.area_mm2 if self.area_mm2 > 0 else 0.0

    @property
    def tops_per_w(self) -> float:
        w = self.avg_w
        return self.gops / 1e3 / w if w > 0 else 0.0

    def columns(self) -> dict[str, float]:
        """The PPA columns of a CSV row or a sweep point."""
        return {
            "area_mm2": self.area_mm2, "energy_dynamic_pj": self.dynamic_pj, "energy_static_pj": self.static_pj,
            "power_avg_w": self.avg_w, "power_peak_w": self.peak_w,
            "gops_per_mm2": self.gops_per_mm2, "tops_per_w": self.tops_per_w,
        }


PPA_COLUMNS = ("area_mm2", "leakage_mw", "energy_dynamic_pj", "energy_static_pj", "power_avg_w", "power_peak_w",
               "gops_per_mm2", "tops_per_w")


def run_power(result: Any, area: ArchArea | None = None) -> tuple[Power, list[Power]]:
    """(the run's PPA, each layer's) of a :class:`~npukit.sim.simulator.SimResult`; ``area`` defaults
    to :func:`~npukit.sim.area.arch_area` of the result's arch."""
    arch = result.arch
    area = area if area is not None else arch_area(arch)
    hz = arch.clock_ghz * 1e9
    leak_mw = area.leakage_mw
    layers = []
    for r in result.layers:
        t = r.total_cycles / hz
        p = Power(t, r.macs, r.energy_total_pj, leak_mw * t * PJ_PER_MW_S, area.mm2, 0.0)
        layers.append(Power(t, r.macs, p.dynamic_pj, p.static_pj, area.mm2, p.avg_w))
    t = result.total_cycles / hz
    run = Power(t, result.macs, result.energy_pj, leak_mw * t * PJ_PER_MW_S, area.mm2,
                max((p.peak_w for p in layers), default=0.0))
    return run, layers


def ppa_summary(result: Any, area: ArchArea | None = None) -> dict[str, float]:
    """The run's PPA columns plus ``leakage_mw``: what a sweep row and the ledger's meta carry."""
    area = area if area is not None else arch_area(result.arch)
    run, _ = run_power(result, area)
    return {"leakage_mw": area.leakage_mw, **run.columns()}


def ppa_lines(result: Any, area: ArchArea | None = None) -> list[str]:
    """The lines ``npukit sim`` prints under its table: area, leakage, energies, power, perf/area, perf/W."""
    area = area if area is not None else arch_area(result.arch)
    run, _ = run_power(result, area)
    top = sorted(area.by_component().items(), key=lambda kv: -kv[1][0])[:3]
    share = ", ".join(f"{c} {um2 / 1e6:,.2f}" for c, (um2, _) in top)
    return [
        f"area {area.mm2:,.2f} mm^2 (largest: {share} mm^2); leakage {area.leakage_mw:,.1f} mW",
        f"energy {run.energy_pj / 1e6:,.2f} uJ = dynamic {run.dynamic_pj / 1e6:,.2f} + static {run.static_pj / 1e6:,.2f} uJ; "
        f"power avg {run.avg_w:,.3f} W, peak {run.peak_w:,.3f} W (highest layer)",
        f"perf/area {run.gops_per_mm2:,.1f} GOP/s/mm^2; perf/W {run.tops_per_w:,.3f} TOP/s/W",
    ]
