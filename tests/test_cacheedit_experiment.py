"""``npukit experiment cacheedit --quick`` end to end (run through the module's run(args)) and the NPU cost."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest

from npukit.experiments.cacheedit import npu_cost, run
from npukit.models import cacheedit as ce
from npukit.sim.errors import ConfigError

pytestmark = pytest.mark.slow  # end-to-end runs; deselect with -m 'not slow'


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    run.add_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.skipif(not ce.WEIGHTS.is_file(), reason="shipped weights missing")
def test_quick_experiment_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "ce"
    assert run.run(_args("--quick", "--out", str(out), "--threads", "1")) == 0
    rows = {r["method"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert set(rows) == set(ce.METHODS)
    for col in ("speedup", "psnr_db", "ssim", "flops_saved", "edit_acc", "iou", "psnr_gt_db", "psnr_bg_db"):
        assert col in rows["cacheedit"]
    for m in ce.METHODS:  # the untouched pixels are a subset: no harder to keep than the whole image
        assert float(rows[m]["psnr_bg_db"]) >= float(rows[m]["psnr_gt_db"]) - 0.5, m
    assert float(rows["full"]["flops_saved"]) == 0.0
    assert 0.3 < float(rows["cacheedit"]["flops_saved"]) < 1.0
    assert float(rows["cacheedit"]["psnr_db"]) > 20.0
    assert float(rows["oracle"]["iou"]) > float(rows["toca-random"]["iou"])
    for name in ("summary.txt", "dle.csv", "dle.png", "npu.csv", "ledger.json", "curves.png"):
        assert (out / name).stat().st_size > 0
    curves = list(csv.DictReader((out / "curves.csv").open()))
    assert {"method", "knob", "speedup", "psnr_db", "ssim", "flops_saved"} <= set(curves[0])
    for m, n in (("cacheedit", 6), ("step-reuse", 7), ("toca-attn", 7), ("toca-random", 7), ("cacheedit+step", 4)):
        pts = [r for r in curves if r["method"] == m]
        assert len(pts) == n and all(float(r["speedup"]) > 0.5 for r in pts), m
    sr = sorted((int(r["knob"].split("=")[1]), float(r["flops_saved"])) for r in curves
                if r["method"] == "step-reuse" and r["knob"].startswith("steps="))
    assert [f for _, f in sr] == sorted((f for _, f in sr), reverse=True)  # fewer steps run -> more FLOPs saved
    summary = (out / "summary.txt").read_text()
    assert "equal speedup" in summary and "target (>= 2.5x" in summary
    dle = list(csv.DictReader((out / "dle.csv").open()))
    step0_last = [r for r in dle if r["step"] == "0" and r["layer"] == "3"][0]
    assert float(step0_last["div_in"]) > float(step0_last["div_out"])  # first-step divergence already localised


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--images"):
        run.run(_args("--images", "0", "--out", str(tmp_path)))
    with pytest.raises(ConfigError, match="--steps"):
        run.run(_args("--steps", "1", "--out", str(tmp_path)))
    with pytest.raises(ConfigError, match="--threads"):
        run.run(_args("--threads", "-1", "--out", str(tmp_path)))
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        run.run(_args("--out", str(f)))


def test_npu_cost_cached_is_cheaper_and_monotone() -> None:
    cfg = ce.DiTConfig().to_dict()
    small = npu_cost.session_cost([8, 8, 8], cfg, 10, "npu32", ref_blocks=4, images=10)
    big = npu_cost.session_cost([40, 40, 40], cfg, 10, "npu32", ref_blocks=4, images=10)
    assert small["full_cycles"] == big["full_cycles"]
    assert small["cached_cycles"] < big["cached_cycles"] < big["full_cycles"]
    assert small["cached_energy_uj"] < small["full_energy_uj"] and small["latency_speedup"] > 1.5


def test_npu_cost_counts_reference_rounds_full_steps_and_skips() -> None:
    cfg = ce.DiTConfig().to_dict()
    base = npu_cost.session_cost([16, 16, 16], cfg, 10, "npu32", ref_blocks=3, images=4)
    more_ref = npu_cost.session_cost([16, 16, 16], cfg, 10, "npu32", ref_blocks=3, images=4, ref_rounds=3)
    tail = npu_cost.session_cost([16, 16, 16], cfg, 10, "npu32", ref_blocks=3, images=4, full_extra=1)
    skip = npu_cost.session_cost([16, 16, 16], cfg, 10, "npu32", ref_blocks=3, images=4, skip_every=3)
    assert base["cached_cycles"] < more_ref["cached_cycles"] and base["cached_cycles"] < tail["cached_cycles"]
    assert skip["cached_cycles"] < base["cached_cycles"] and base["full_cycles"] == tail["full_cycles"] == skip["full_cycles"]
    # per round one sparse step (16 tokens) becomes a full-width step (64 tokens over 132 keys)
    from npukit.sim.arch import load_arch

    full_c = npu_cost.step_cost(64, 132, cfg, load_arch("npu32"), images=4)[0]
    sparse_c = npu_cost.step_cost(16, 132, cfg, load_arch("npu32"), images=4)[0]
    assert abs(tail["cached_cycles"] - base["cached_cycles"] - 3 * (full_c - sparse_c)) < 1e-6 * full_c


@pytest.mark.skipif(not ce.WEIGHTS.is_file(), reason="shipped weights missing")
def test_diagnose_probes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from npukit.experiments.cacheedit import diagnose

    assert diagnose.main(["--sessions", "3", "--steps", "6", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "diagnose.csv").open()))
    got = {(r["probe"], r["setting"]): float(r["value"]) for r in rows}
    assert {r["probe"] for r in rows} == {"split", "refresh", "background", "diversity"}
    for name in ("cacheedit", "oracle", "step-reuse (9 steps)"):
        assert 0.0 <= got[("split", f"{name}: share outside the edits")] <= 100.0
        assert got[("split", f"{name}: error vs full")] >= 0.0
    # more full steps (refresh 2: steps 0, 2, 4, 5 of 6) track full recomputation better than none in between
    assert got[("refresh", "refresh 2")] > got[("refresh", "refresh 14")]
    assert 0.0 < got[("background", "full seed 0 vs seed 1")] <= 100.0
    assert "wrote" in capsys.readouterr().out
    assert diagnose.main(["--sessions", "0", "--out", str(tmp_path)]) == 2
    f = tmp_path / "file"
    f.write_text("x")
    assert diagnose.main(["--out", str(f)]) == 2
