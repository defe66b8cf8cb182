"""The ``tpu_v4`` multi-core preset (sim/archs/tpu_v4.toml) is the chip of its public specifications, and npukit's
general simulator on it predicts measured TPU v4 matmuls once two parameters are calibrated
(benchmarks/_tpu_sim.py)."""

from __future__ import annotations

import pytest

from npukit.benchmarks import bench_vs_tpu as bench
from npukit.benchmarks._tpu_sim import fit_simulator, simulated_us
from npukit.sim.multicore import load_multicore_arch
from npukit.sim.tpu import TPU_V4


def test_the_preset_is_the_public_chip() -> None:
    chip = load_multicore_arch("tpu_v4")
    assert len(chip.mac_cores) == 8 and not chip.simd_cores
    core = chip.cores[0].arch
    assert (core.rows, core.cols, core.dataflow, core.clock_ghz) == (128, 128, "ws", 1.05)
    assert (core.bits.input, core.bits.weight, core.bits.pe_psum) == (16, 16, 32)  # bf16 in, fp32 accumulation
    peak_tflops = 2 * chip.peak_macs_per_cycle * chip.clock_ghz / 1e3
    assert peak_tflops == pytest.approx(TPU_V4.peak_tflops) == pytest.approx(275.3, abs=0.1)
    assert chip.dram.total_bandwidth * chip.clock_ghz == pytest.approx(1200.0, rel=1e-6)  # GB/s of HBM2
    assert chip.shared_memory.kib == 128 * 1024  # CMEM
    assert sum(vars(core.sram_kib).values()) * 4 == 16 * 1024  # four MXUs share a TensorCore's 16 MiB VMEM


def test_the_simulator_is_bounded_by_the_chips_peaks_and_below_silicon() -> None:
    rows = {r[1]: r[2] for r in bench.shipped_rows()}
    shapes = [(1024, 1024, 1024), (128, 1024, 1024), (1024, 128, 128), (32, 32, 32), (512, 896, 640)]
    sim = simulated_us(shapes)
    for m, n, k in shapes:
        compute = 2 * m * n * k / (TPU_V4.peak_tflops * 1e6)  # µs at the MXUs' peak
        hbm = 2 * (m * k + k * n + m * n) / (TPU_V4.hbm_gbps * 1e3)  # µs to move A, B and C once
        assert sim[m, n, k] >= max(compute, hbm)
        assert sim[m, n, k] < rows[m, n, k]  # no launch cost, no XLA overheads: faster than the measurement


def test_two_parameters_are_recovered() -> None:
    sim = {(1, 1, i): float(i) for i in range(1, 20)}
    rows = [("k", s, 0.7 + 2.5 * t) for s, t in sim.items()]
    pred, (t0, scale) = fit_simulator(rows, sim)
    assert (t0, scale) == (pytest.approx(0.7), pytest.approx(2.5))
    assert pred((1, 1, 7)) == pytest.approx(0.7 + 2.5 * 7)
