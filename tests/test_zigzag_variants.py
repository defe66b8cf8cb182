"""benchmarks/bench_zigzag_variants.py without ZigZag: its variants are valid ZigZag files npukit reads with
the new sizes, its spatial mappings fit the resized arrays, and its network has the layers it says."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_zigzag_variants as bv  # noqa: E402

from npukit.sim.nest_sim import parse_zigzag_spec, simulate_nest  # noqa: E402

INPUTS = ROOT / "examples" / "zigzag"


@pytest.mark.parametrize("name", list(bv.VARIANTS))
def test_variant_files_read_back_with_the_new_sizes(name: str, tmp_path: Path) -> None:
    base, sizes, edits = bv.VARIANTS[name]
    hw_path, map_path = bv.write_variant(name, INPUTS, tmp_path)
    hw, spatial = parse_zigzag_spec(f"zigzag:{hw_path},{map_path}")
    orig, _ = parse_zigzag_spec(f"zigzag:{INPUTS}/hardware/{base}.yaml")
    assert list(hw.array.dims.values()) == sizes
    assert hw.array.units == math.prod(sizes)
    for entry in (spatial or {}).values():  # every unrolling fits its resized dimension
        for d, loops in entry.items():
            assert math.prod(loops.values()) <= hw.array.dims[d]
    for mem, fields in edits.items():
        new = next(m for m in hw.memories if m.name == mem)
        old = next(m for m in orig.memories if m.name == mem)
        for key, factor in fields.items():
            attr = {"size": "size_bits", "r_cost": "r_cost_pj", "w_cost": "w_cost_pj"}[key]
            assert getattr(new, attr) == pytest.approx(getattr(old, attr) * factor)


def test_small_network_layers(tmp_path: Path) -> None:
    from npukit.workloads import onnx_workload

    wl = onnx_workload(str(bv.write_small_onnx(tmp_path / "small.onnx")), None)
    macs = [28 * 28 * 32 * 16 * 9, 14 * 14 * 64 * 32 * 9, 14 * 14 * 64 * 9, 14 * 14 * 96 * 64, 7 * 7 * 96 * 96 * 9,
            96 * 7 * 7 * 100]
    assert sorted(layer.macs for layer in wl.layers) == sorted(macs)


def test_a_resized_variant_maps_and_scales(tmp_path: Path) -> None:
    """Halving the tpu_like array's sides keeps the energy close (the same data moves) and makes it slower,
    never faster than its 256 MACs per cycle allow."""
    from npukit.workloads import onnx_workload

    wl = onnx_workload(str(bv.write_small_onnx(tmp_path / "small.onnx")), None)
    res = {}
    for name in ("tpu_like", "tpu_16x16_1MB"):
        h, s = parse_zigzag_spec("zigzag:" + ",".join(map(str, bv.write_variant(name, INPUTS, tmp_path))))
        res[name] = simulate_nest(wl, h, s)
    assert res["tpu_16x16_1MB"].cycles > res["tpu_like"].cycles
    assert res["tpu_16x16_1MB"].cycles >= sum(layer.macs for layer in wl.layers) / 256
    assert res["tpu_16x16_1MB"].energy_pj == pytest.approx(res["tpu_like"].energy_pj, rel=0.1)
