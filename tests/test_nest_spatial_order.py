"""``ranked_spatial``'s depth-first enumeration (``nest_spatial._scored``, popped lazily from a heap) yields the
unrollings in the order of the plain one: every ``itertools.product`` choice scored, sorted by PEs used (most first),
ties in enumeration order, those that fit."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from npukit.sim import Layer, conv_layer
from npukit.sim.nest_sim import nest_layer
from npukit.sim.nest_spatial import SPATIAL_CANDIDATES, ranked_spatial, spatial_fits
from npukit.sim.stream_io import load_stream_hardware

HW = Path(__file__).parent / "data" / "stream_hw"


def _reference(hw, layer):  # noqa: ANN001, ANN202 - the enumeration before the depth-first one
    dims = list(hw.array.dims.items())
    allowed = getattr(hw.array, "allowed", None) or {}
    opts = [[d for d in allowed.get(name, SPATIAL_CANDIDATES) if layer.dims.get(d, 1) > 1] or ["K"] for name, _ in dims]
    scored = []
    for combo in itertools.product(*opts):
        left: dict[str, int] = {}
        fs, used = [], 1.0
        for (_, size), d in zip(dims, combo, strict=True):
            n = left[d] if d in left else layer.dims.get(d, 1)
            f = min(size, n)
            left[d] = math.ceil(n / max(f, 1))
            fs.append(f)
            used *= f
        scored.append((-used, len(scored), combo, fs))
    scored.sort(key=lambda x: (x[0], x[1]))
    out = [{name: {d: f} for (name, _), d, f in zip(dims, combo, fs, strict=True)} for _, _, combo, fs in scored]
    return [sm for sm in out if spatial_fits(hw, layer, sm)]


@pytest.mark.parametrize("chip", sorted(p.name for p in HW.glob("*.yaml")))
def test_the_ranked_unrollings_keep_their_order(chip: str) -> None:
    m = load_stream_hardware(HW / chip, warn=False)
    hw = m.cores[m.mac_cores[0]].nest
    for layer in (Layer("g", 64, 48, 96), Layer("v", 1, 300, 20, batch=4), conv_layer("c", 18, 18, 3, 3, 8, 16, 1),
                  conv_layer("s", 17, 17, 5, 5, 32, 8, 2)):
        nl = nest_layer(layer)
        assert list(ranked_spatial(hw, nl)) == _reference(hw, nl)
