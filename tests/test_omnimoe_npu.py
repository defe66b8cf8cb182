"""OmniMoE on the 128x128 NPU model: workload shapes, gather traffic, side-by-side costs."""

import pytest

from npukit.experiments.omnimoe.npu_cost import npu_cost, uniform_counts, workloads


def test_uniform_counts_cover_every_pair():
    counts = uniform_counts(64, 8, 256, seed=1)
    assert sum(counts) == 64 * 8 and all(1 <= c <= 64 for c in counts)
    assert len(counts) <= 256
    assert uniform_counts(64, 8, 256, seed=1) == counts  # seeded


def test_both_schedules_do_the_same_macs():
    T, H, N, k, I = 32, 64, 1024, 8, 128
    counts = uniform_counts(T, k, N)
    wl = workloads(T, H, N, k, I, counts)
    shared = T * 2 * 32 * H + T * 2 * I * H + T * H * I
    assert wl["expert_centric"].macs == wl["token_centric"].macs == shared + 2 * T * k * H


def test_token_gathers_and_expert_scatter_are_dram_traffic():
    T, H, N, k = 16, 64, 256, 4
    res = npu_cost(T, H, N, k, intermediate=64)
    rows = {(r["path"], r["part"]): r for r in res["rows"]}
    # token-centric: per token its k expert rows of u and v are fetched (8-bit), plus x and the outputs
    assert rows[("token_centric", "experts")]["dram_bytes"] == T * (2 * H + 2 * H * k + 2 * k)
    # expert-centric extra: scatter-add read-back of P*H 32-bit partial outputs + sort/offset traffic
    P = T * k
    assert rows[("expert_centric", "extra")]["dram_bytes"] >= P * H * 4
    for path in ("expert_centric", "token_centric"):
        tot = rows[(path, "total")]
        parts = sum(rows[(path, p)]["energy_total_pj"] for p in ("shared", "experts", "extra"))
        assert tot["energy_total_pj"] == pytest.approx(parts, rel=1e-9)
        assert tot["cycles"] == pytest.approx(sum(rows[(path, p)]["cycles"] for p in ("shared", "experts", "extra")))
    assert res["ledgers"]["token_centric"].count("dram", "dram_read", "token_centric/extra") == P
