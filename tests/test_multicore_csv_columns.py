"""A multi-core run's CSV has one column per energy component any layer used, not only the first layer's: a
transformer block starts with a norm (DRAM, an SRAM and the vector unit), and before, the CSV then left out the PE
array, the registers and most SRAMs of every GEMM below it (56% of a Llama q projection's energy had no column)."""

from __future__ import annotations

import csv
import io

import pytest

from npukit.sim.multicore import load_multicore_arch
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.output import csv_text
from npukit.sim.workload import Layer, VectorOp, Workload


@pytest.mark.parametrize("schedule", ["none/split", "chain/pipeline"])
def test_every_component_has_a_column_and_the_columns_add_up(schedule: str) -> None:
    wl = Workload("w", [VectorOp("norm", "rmsnorm", 64 * 256, reduce=256, params=256), Layer("up", 64, 512, 256),
                        VectorOp("act", "silu", 64 * 512), Layer("down", 64, 256, 512)])
    res = simulate_multicore(wl, load_multicore_arch("quad128"), schedule)
    rows = list(csv.DictReader(io.StringIO(csv_text(res.rows()))))
    head = list(rows[0])
    assert "energy_pe_array_pj" in head and head[-1] == "energy_total_pj"
    for r in rows:
        parts = sum(float(v) for k, v in r.items() if k.startswith("energy_") and k != "energy_total_pj")
        assert parts == pytest.approx(float(r["energy_total_pj"]), rel=1e-9)
    assert sum(float(r["energy_total_pj"]) for r in rows) == pytest.approx(res.energy_pj, rel=1e-9)
    assert all(len(r) == len(head) for r in res.rows())
