"""A pipelined group's stages run at once, each timed with the DRAM channels to itself: the group takes at least all
its bytes over all the channels (before, a port-bound chip's pipeline moved its bytes several times faster than its
port: Llama-3-8B's layer on Stream's simba, chain/pipeline, 13.5 M cycles for 228 MB through an 8 B/cycle port)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.sim.multicore import load_multicore_arch
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.workload import Layer, Workload

FABRIC = """
[interconnect]
bandwidth_bytes_per_cycle = 32.0
latency_cycles = 20
energy_pj_per_bit = 0.1
[shared_memory]
kib = 4096
bandwidth_bytes_per_cycle = 256.0
[dram]
channels = 1
bandwidth_bytes_per_cycle = 4.0
"""


def test_a_pipeline_moves_its_bytes_no_faster_than_the_chips_dram(tmp_path: Path) -> None:
    # stages run at once, each timed with the channels to itself: together they are bound by all the channels
    p = tmp_path / "slow_dram.toml"
    p.write_text('name = "slow_dram"\n[[core]]\narch = "npu128"\ncount = 4\nkind = "mac"\n' + FABRIC)
    chip = load_multicore_arch(str(p))
    chain = Workload("c", [Layer(f"g{i}", 512, 1024, 1024) for i in range(4)])
    res = simulate_multicore(chain, chip, "chain/pipeline")
    dram = sum(r["dram_bytes"] for r in res.rows())
    assert dram > 0 and res.total_cycles >= dram / chip.dram.total_bandwidth
    assert sum(r["cycles"] for r in res.rows()) == pytest.approx(res.total_cycles)  # the rows add up to it


def test_a_vector_op_on_the_simd_core_waits_for_all_its_dram_bytes() -> None:
    # a norm on hetero4's simd core reads its weights from DRAM beside its input and output: all of them cross the port
    from npukit.sim.workload import VectorOp

    chip = load_multicore_arch("hetero4")
    norm = VectorOp("norm", "layernorm", 4096 * 64, reduce=4096, params=2 * 4096)
    res = simulate_multicore(Workload("v", [norm]), chip, "none/split")
    row = res.rows()[0]
    port = chip.cores[chip.simd_cores[0]].arch.dram_bandwidth_bytes_per_cycle
    assert row["dram_bytes"] > 0 and row["cycles"] >= row["dram_bytes"] / port * (1 - 1e-9)


def test_row_scales_keep_each_row_at_least_its_floor() -> None:
    from npukit.sim._multicore_rows import row_scales

    assert row_scales([10.0, 10.0], 10.0, [0.0, 0.0]) == [0.5, 0.5]  # one common factor
    assert row_scales([10.0, 10.0], 20.0, [15.0, 0.0]) == pytest.approx([1.5, 0.5])  # the other gives up its time
    assert row_scales([10.0, 10.0], 20.0, [15.0, 15.0], [12.0, 4.0]) == pytest.approx([1.2, 0.8])  # the next floors
    assert row_scales([10.0, 10.0], 20.0, [15.0, 15.0], [15.0, 15.0]) == pytest.approx([1.0, 1.0])  # in proportion
    # floors adding up to the total up to round-off still hold (before, -1e-16 left dropped them all)
    busy, floors = [201652.0, 732518.0], [25573 / 64, 9975346 / 64]
    got = row_scales(busy, (25573 + 9975346) / 64, floors)
    assert [g * b for g, b in zip(got, busy, strict=True)] == pytest.approx(floors)


@pytest.mark.parametrize("arch, workload", [("quad128", "resnet18"),
                                            pytest.param("stream:simba", "llama3-8b-layer:seq=128", marks=pytest.mark.slow)])
def test_no_pipelined_row_beats_its_cores(arch: str, workload: str) -> None:
    # before, each row took the common factor: ResNet-18's layer4 convs, one core each, at 66-67 B/cycle through a
    # 64 B/cycle port; on simba's 8 B/cycle port, rows at 8-10 B/cycle
    from npukit.sim.stream_io import load_stream_hardware
    from npukit.workloads import load_workload

    chip = load_stream_hardware(Path(__file__).parent / "data" / "stream_hw" / "simba.yaml", warn=False) \
        if arch.startswith("stream:") else load_multicore_arch(arch)
    res = simulate_multicore(load_workload(workload), chip, "chain/pipeline")
    piped = [r for r in res.rows() if str(r["step"]).startswith("pipeline")]
    assert piped and sum(r["cycles"] for r in res.rows()) == pytest.approx(res.total_cycles)
    bw = chip.dram.total_bandwidth
    for r in piped:
        cores = {int(c) for c in str(r["core_ids"]).split()}
        port = min(bw, sum(chip.cores[c].arch.dram_bandwidth_bytes_per_cycle for c in cores))
        pes = sum(chip.cores[c].macs_per_cycle for c in cores)
        # within the cores' own roofs where the step's overlap allows, always within the chip's
        assert r["dram_bytes"] <= bw * r["cycles"] * (1 + 1e-6), r["name"]
        assert r["macs"] <= chip.peak_macs_per_cycle * r["cycles"] * (1 + 1e-6) or r["kind"] == "vector", r["name"]
        if arch == "quad128":
            assert r["dram_bytes"] <= port * r["cycles"] * (1 + 1e-6), r["name"]
            assert r["kind"] == "vector" or r["macs"] <= pes * r["cycles"] * (1 + 1e-6), r["name"]


@pytest.mark.slow  # traces Mixtral (4 s on a cold cache)
def test_no_row_of_a_parallel_step_beats_the_chip() -> None:
    from npukit.workloads import load_workload

    chip = load_multicore_arch("hetero4")
    res = simulate_multicore(load_workload("mixtral-8x7b:seq=64"), chip, "branches/split")
    rows = [r for r in res.rows() if str(r["step"]).startswith("branch")]
    assert rows and sum(r["cycles"] for r in res.rows()) == pytest.approx(res.total_cycles)
    for r in rows:
        assert r["dram_bytes"] <= chip.dram.total_bandwidth * r["cycles"] * (1 + 1e-6), r["name"]
        assert r["macs"] <= chip.peak_macs_per_cycle * r["cycles"] * (1 + 1e-6), r["name"]


def test_a_pipeline_on_identical_cores_leaves_no_stage_idle() -> None:
    """On identical cores the stage plans are timed as on cores that differ, after the plan by MACs: that plan gave
    two stages two cores each and put both GEMMs in the first (the second holds 16 times the MACs), so two of four
    32 x 32 cores idled (10,998 cycles). Now the one stage on all four is among the plans timed."""
    from npukit.sim import Core, Dram, Interconnect, MultiCoreArch, SharedMemory, load_arch

    n32 = load_arch("npu32")
    chip = MultiCoreArch("t", tuple(Core(n32, "mac", f"core{i}") for i in range(4)),
                         Interconnect(32.0, 0, 0.1, "mesh", multicast=True), SharedMemory(4096, 256.0), Dram(4, 64.0),
                         "latency")
    wl = Workload("pair", [Layer("g0", 128, 64, 64), Layer("g1", 128, 1024, 64)])
    res = simulate_multicore(wl, chip, "chain/pipeline")
    assert {c for c, *_ in res.timeline} == {0, 1, 2, 3}
    assert res.total_cycles < 10_998
