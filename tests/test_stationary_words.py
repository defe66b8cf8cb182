"""PE register files of several stationary words: psums accumulate over that many K-folds inside the array."""

from __future__ import annotations

import math
import random

import pytest

from npukit.sim import Arch, ConfigError, Layer, simulate
from npukit.sim.simulator import map_layer
from npukit.sim.workload import Workload


def _gemm(M: int, N: int, K: int) -> Layer:
    return Layer(name="g", kind="gemm", M=M, N=N, K=K)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("df", ["ws", "is"])
@pytest.mark.parametrize("timing", ["scalesim", "double-buffered"])
def test_psum_updates_and_cycles_follow_the_groups(seed: int, df: str, timing: str) -> None:
    rng = random.Random(seed)
    R, C = rng.choice([1, 2, 4, 8]), rng.choice([1, 3, 8])
    M, N, K = rng.randint(1, 60), rng.randint(1, 40), rng.randint(1, 90)
    d = rng.choice([2, 3, 5, 64])
    base = Arch(rows=R, cols=C, dataflow=df, timing=timing, mapping="fixed")
    one, many = map_layer(_gemm(M, N, K), base), map_layer(_gemm(M, N, K), base.with_(stationary_words=d))
    S_c, T = (N, M) if df == "ws" else (M, N)
    kf, cf = math.ceil(K / R), math.ceil(S_c / C)
    groups = math.ceil(kf / d)
    # d = 1 is SCALE-Sim's PE: every K-fold after the first updates every psum in the buffer
    assert one.psum_reads == one.psum_writes == (kf - 1) * M * N
    assert many.psum_reads == many.psum_writes == (groups - 1) * M * N
    # what the PEs do is unchanged: MACs, SRAM reads, register writes
    assert (many.macs, many.ifmap_reads, many.filter_reads, many.reg_writes) == (
        one.macs, one.ifmap_reads, one.filter_reads, one.reg_writes)
    fill = R + C - 2
    if timing == "scalesim":
        want = groups * cf * fill + kf * cf * R + kf * cf * T - 1
        assert one.compute_cycles == kf * cf * (2 * R + C - 2 + T) - 1  # SCALE-Sim v3's formula
    else:
        want = R + groups * cf * fill + kf * cf * T  # a count of cycles: the last index + 1
    assert many.compute_cycles == want
    assert many.compute_cycles <= one.compute_cycles


def test_all_k_folds_held_keeps_every_psum_in_the_array() -> None:
    arch = Arch(rows=32, cols=32, stationary_words=128, mapping="fixed")
    res = simulate(Workload("w", [_gemm(3136, 64, 576)]), arch)  # 18 K-folds <= 128 words
    assert res.layers[0].energy_pj.get("psum_buffer", 0.0) == 0.0
    assert res.layers[0].traffic_bytes["sram_psum_read_bytes"] == 0.0
    # each MAC reads its stationary weight (and input and psum) from PE registers
    led = res.ledger
    assert led.count("weight_registers", "reg_read") == 3136 * 64 * 576


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8", 65537])
def test_bad_stationary_words_are_refused(value) -> None:
    with pytest.raises(ConfigError, match="stationary_words"):
        Arch(stationary_words=value)


def test_scalesim_memory_mode_needs_one_word() -> None:
    with pytest.raises(ConfigError, match="stationary_words = 1"):
        Arch(memory="scalesim", mapping="fixed", stationary_words=4)
