"""The psumquant experiment's vision evaluation: batched logits equal image-by-image ones, and the
per-layer psum SQNR measure orders the bit widths and is exact for 32-bit-equivalent psums."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from npukit.experiments.psumquant import _digits
from npukit.experiments.psumquant._policy import PsumSweep
from npukit.experiments.psumquant._sqnr import LayerProbe, layer_sqnr, sqnr_db


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(16 * 8 * 8, 10)).eval()


@pytest.fixture(scope="module")
def sweep() -> PsumSweep:
    g = torch.Generator().manual_seed(1)
    calib = [torch.rand(16, 1, 8, 8, generator=g) for _ in range(2)]
    return PsumSweep(_cnn(), 16, calib, calib_rows=128)


def _images(n: int) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(2))


@pytest.mark.slow
@pytest.mark.ml
@pytest.mark.parametrize("policy,bits", [("none", 8), ("static", 5), ("psumquant", 5)])
def test_batched_logits_equal_image_by_image(sweep: PsumSweep, policy: str, bits: int) -> None:
    x = _images(6)
    model = sweep.set(policy, bits)
    batched = _digits.logits(model, x, batch=256)
    single = _digits.logits(model, x, batch=1)
    assert torch.equal(batched, single)
    y = batched.argmax(1)
    assert _digits.accuracy(batched, y) == 1.0 and _digits.top1(model, x, y) == 1.0


@pytest.mark.slow
@pytest.mark.ml
def test_layer_sqnr_orders_bits_and_policies(sweep: PsumSweep) -> None:
    x = _images(8)
    rows = layer_sqnr(sweep, x, [("static", 16), ("static", 4), ("psumquant", 4), ("none", 8)])
    layers = {r["layer"] for r in rows}
    assert len(layers) == 3 and len(rows) == 4 * 3
    by = {(r["layer"], r["policy"], r["bits"]): r["sqnr_db"] for r in rows}
    for n in layers:
        assert by[(n, "none", 8)] == math.inf  # same psums as the reference
        assert math.isfinite(by[(n, "static", 4)]) and by[(n, "static", 16)] > by[(n, "static", 4)] + 20
        assert math.isfinite(by[(n, "psumquant", 4)])
    assert {r["k_tiles"] for r in rows} == {1, 5, 64}  # K = 9, 72, 1024 on 16 rows
    # a probe leaves the sweep at its setting and measures it: the same figures as layer_sqnr
    sweep.set("static", 4)
    probe = LayerProbe(sweep, x)
    again = {(r["layer"], r["policy"], r["bits"]): r["sqnr_db"] for r in probe.rows()}
    assert again == {k: v for k, v in by.items() if k[1:] == ("static", 4)}


def test_sqnr_db() -> None:
    ref = torch.tensor([3.0, 4.0])
    assert sqnr_db(ref, ref) == math.inf
    assert sqnr_db(ref, ref + torch.tensor([0.5, 0.0])) == pytest.approx(10 * math.log10(25 / 0.25))


@pytest.mark.parametrize("value", ["0", "720", "x"])
def test_bad_resnet_images_exits_2_and_writes_nothing(tmp_path, capsys, value: str) -> None:
    from npukit.cli import main

    out = tmp_path / "o"
    code = None
    try:
        code = main(["experiment", "psumquant", "--quick", "--out", str(out), "--resnet-images", value])
    except SystemExit as exc:  # argparse: not an integer
        code = exc.code
    assert code == 2
    assert "--resnet-images" in capsys.readouterr().err
    assert not out.exists()


def test_resnet_images_sets_the_plan() -> None:
    from npukit.experiments.psumquant.run import FULL, QUICK, make_plan

    assert FULL.resnet_eval == 719 and make_plan(False).resnet_eval == 719
    assert make_plan(True, resnet_images=40).resnet_eval == 40 and QUICK.resnet_eval == 12
