"""A workload's cost on the chip an experiment's ``--arch`` names (:func:`npukit.sim.load_chip`): one array through
:func:`npukit.sim.simulate`, several cores through :func:`npukit.sim.simulate_multicore` and its schedule search.
The experiments' NPU costs (omnimoe's expert- vs token-centric layers, cacheedit's FLUX.1 Kontext steps) read both
the same way."""

from __future__ import annotations

from dataclasses import dataclass

from npukit.sim import Arch, EnergyTable, Ledger, MultiCoreArch, Workload, simulate, simulate_multicore


@dataclass(frozen=True)
class ChipRun:
    """``ledger``; ``cycles`` (the chip's clock) and ``energy_pj`` (pJ) of the whole workload; ``layers``: per
    operator (name, cycles, DRAM bytes, energy in pJ by ledger component). On a multi-core chip a pipelined step's
    operators overlap, so their cycles may add up to more than ``cycles``."""

    ledger: Ledger
    cycles: float
    energy_pj: float
    layers: tuple[tuple[str, float, float, dict[str, float]], ...]


def run_on_chip(workload: Workload, chip: Arch | MultiCoreArch, table: EnergyTable | None = None) -> ChipRun:
    """Simulate ``workload`` on ``chip`` (priced with ``table``, default the chip's own)."""
    if not isinstance(chip, MultiCoreArch):
        res = simulate(workload, chip, table=table)
        return ChipRun(res.ledger, float(res.cycles), float(res.energy_pj),
                       tuple((r.name, float(r.cycles), float(r.dram_bytes), dict(r.energy_pj)) for r in res.layers))
    mres = simulate_multicore(workload, chip, table=table)
    return ChipRun(mres.ledger, float(mres.total_cycles), float(mres.energy_pj),
                   tuple((r["name"], float(r["cycles"]), float(r["dram_bytes"]),
                          {k[len("energy_"):-len("_pj")]: float(v) for k, v in r.items()
                           if k.startswith("energy_") and k != "energy_total_pj"}) for r in mres.layer_rows))
