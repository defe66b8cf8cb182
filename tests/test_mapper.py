"""The mapper and the unique-data rules: brute-force checks and properties over random layers."""

from __future__ import annotations

import random

import pytest

from npukit.sim import Arch, Layer, SramKiB, _reuse, conv_layer, load_arch, resnet18, simulate
from npukit.sim.energy import load_table
from npukit.sim.mapper import candidates, choose, evaluate


def _brute_unique(conv: tuple[int, ...], p0: int, p1: int) -> int:
    """Distinct (y, x, c) input elements touched by output pixels [p0, p1), by enumeration."""
    h, w, fh, fw, cin, _cout, s = conv
    ow = (w - fw) // s + 1
    seen = set()
    for p in range(p0, p1):
        oy, ox = divmod(p, ow)
        for dy in range(fh):
            for dx in range(fw):
                seen.add((oy * s + dy, ox * s + dx))
    return len(seen) * cin


@pytest.mark.parametrize("seed", range(40))
def test_unique_rows_equal_enumeration(seed: int) -> None:
    rng = random.Random(seed)
    fh = rng.choice([1, 2, 3, 5, 7])
    s = rng.choice([1, 2, 3])
    h = rng.randint(fh, 16)
    layer = conv_layer("c", h, h, fh, fh, rng.choice([1, 3]), 4, s)
    m = layer.M
    p0 = rng.randrange(m)
    p1 = rng.randint(p0 + 1, m)
    assert _reuse.unique_rows(layer, p0, p1) == _brute_unique(layer.conv, p0, p1)
    assert _reuse.unique_rows(layer, 0, m) == _reuse.unique_total(layer) == _brute_unique(layer.conv, 0, m)


def test_gemm_rows_have_no_overlap() -> None:
    g = Layer("g", 100, 30, 70)
    assert _reuse.unique_rows(g, 10, 35) == 25 * 70
    assert _reuse.unique_total(g) == 100 * 70


def _random_layer(rng: random.Random):
    if rng.random() < 0.5:
        return Layer("g", rng.randint(1, 700), rng.randint(1, 300), rng.randint(1, 600))
    fh = rng.choice([1, 3, 5])
    h = rng.randint(fh + 1, 40)
    return conv_layer("c", h, h, fh, fh, rng.choice([3, 16, 64]), rng.choice([8, 64, 130]), rng.choice([1, 2]))


@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
@pytest.mark.parametrize("df", ["ws", "os", "is"])
def test_search_never_worse_than_fixed(df: str, objective: str) -> None:
    rng = random.Random(f"{df}-{objective}")  # deterministic (str seeds do not depend on PYTHONHASHSEED)
    table = load_table("horowitz45")
    for _ in range(12):
        layer = _random_layer(rng)
        kib = rng.choice([1, 4, 16, 64])
        arch = Arch(rows=16, cols=16, dataflow=df, mapping="search", objective=objective,
                    sram_kib=SramKiB(kib, kib, kib, kib)).with_(**{"bits.psum_buffer": rng.choice([8, 32])})
        fixed = candidates(layer, arch)[0]
        _, e0, t0 = evaluate(layer, arch, fixed, table)
        best = choose(layer, arch, table)
        _, e1, t1 = evaluate(layer, arch, best.mapping, table)
        score = {"energy": (e0, e1), "latency": (t0, t1), "edp": (e0 * t0, e1 * t1)}[objective]
        assert score[1] <= score[0] * (1 + 1e-9), (layer, arch.sram_kib)
        assert best.macs == layer.M * layer.N * layer.K  # the mapping never changes the work


def test_search_keeps_running_psums_on_chip_with_a_small_psum_buffer() -> None:
    # 256 KiB holds 512 x 128 32-bit psums: the fixed order (whole M per column fold) spills on
    # every layer with M > 512, the search tiles M so that nothing spills
    base = load_arch("npu128").with_(**{"sram_kib.psum": 256, "objective": "energy"})
    fixed = simulate(resnet18(), base.with_(mapping="fixed"))
    search = simulate(resnet18(), base.with_(mapping="search"))
    spill = [sum(r.traffic_bytes["dram_psum_write_bytes"] for r in res.layers) for res in (fixed, search)]
    assert spill[0] > 1e7 and spill[1] == 0
    assert search.energy_pj < 0.5 * fixed.energy_pj
    assert any("Mt=" in r.mapping for r in search.layers)
