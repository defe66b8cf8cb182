"""``npukit experiment cacheedit`` through the plug-in contract (Config, config_from_args, run_experiment) on a tiny
editor, the CLI's option checks, and the FLUX.1 Kontext-dev NPU cost."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import pytest
from _cacheedit_util import tiny_model

from npukit.experiments import cacheedit as exp
from npukit.sim.errors import ConfigError


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="out/x")
    exp.add_arguments(p)
    return p.parse_args(list(argv))


def test_package_imports_nothing_heavy() -> None:
    import subprocess

    code = ("import sys, npukit.experiments.cacheedit as e; e.Config(); "
            "print(sorted(m for m in ('torch', 'diffusers', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("argv,flag", [(("--images", "0"), "--images"), (("--steps", "3"), "--steps"),
                                       (("--threads", "-1"), "--threads"), (("--rounds", "0"), "--rounds"),
                                       (("--batch", "0"), "--batch")])
def test_bad_numbers_are_config_errors_before_loading_anything(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        exp.config_from_args(_args(*argv))


@pytest.mark.slow
def test_quick_experiment_writes_every_output(tmp_path: Path) -> None:
    from npukit.experiments.cacheedit.train import save

    weights = save(tiny_model(), {"heldout": {}}, tmp_path / "tiny.pt")
    cfg = exp.config_from_args(_args("--quick", "--images", "3", "--batch", "2", "--steps", "4", "--rounds", "2",
                                     "--weights", str(weights)))
    assert cfg == exp.Config(quick=True, images=3, rounds=2, steps=4, weights=str(weights), batch=2)
    out = tmp_path / "o"
    out.mkdir()
    files = exp.run_experiment(out, cfg, progress=False)
    names = {f.name for f in files}
    assert names == {"results.csv", "curves.csv", "curves.png", "ledger.json", "dle.csv", "dle.png", "npu.csv",
                     "summary.txt"}
    assert sorted(p.name for p in out.iterdir()) == sorted(names)  # only what it reports
    rows = {r["method"]: r for r in csv.DictReader((out / "results.csv").open())}
    from npukit.models.cacheedit import SESSION_METHODS

    assert set(rows) == set(SESSION_METHODS)
    for col in ("method", "speedup", "psnr_db", "ssim", "flops_saved", "model", "edit_acc", "psnr_bg_src_db", "iou"):
        assert col in rows["cacheedit"], col
    assert float(rows["full"]["flops_saved"]) == 0.0
    assert 0.05 < float(rows["cacheedit"]["flops_saved"]) < 1.0  # 4 steps: 2 of them full, plus the reference call
    assert float(rows["oracle"]["iou"]) == 1.0
    assert "FluxTransformer2DModel" in rows["cacheedit"]["model"]
    curves = list(csv.DictReader((out / "curves.csv").open()))
    assert {r["method"] for r in curves} >= {"cacheedit", "fbcache", "magcache", "taylorseer", "pab", "toca-attn"}
    summary = (out / "summary.txt").read_text()
    assert "equal speedup" in summary and "target (>= 2.5x" in summary
    npu = list(csv.DictReader((out / "npu.csv").open()))
    assert npu[0]["measured"] == "True" and float(npu[0]["latency_speedup"]) > 1.0


@pytest.mark.slow
def test_kontext_npu_cost_falls_with_the_active_fraction() -> None:
    from npukit.experiments.cacheedit import npu_cost

    rows = npu_cost.kontext_cost(0.2, quick=True)
    by = {r["active_frac"]: r for r in rows}
    assert by[0.1]["latency_speedup"] > by[0.2]["latency_speedup"] > by[0.5]["latency_speedup"] > 1.0
    assert by[0.1]["energy_ratio"] > by[0.5]["energy_ratio"] > 1.0
    assert 0.0 < by[0.5]["sparse_step_cycles_frac"] < 1.0


@pytest.mark.slow
def test_kontext_npu_cost_on_a_multicore_chip() -> None:
    """``--arch quad128``: each step through the multi-core simulator's schedule search, faster than one core."""
    from npukit.experiments.cacheedit import npu_cost

    one = {r["active_frac"]: r for r in npu_cost.kontext_cost(0.2, "npu128", quick=True)}
    four = {r["active_frac"]: r for r in npu_cost.kontext_cost(0.2, "quad128", quick=True)}
    assert all(r["arch"] == "quad128" for r in four.values())
    assert four[0.2]["full_latency_s"] < 0.5 * one[0.2]["full_latency_s"]
    assert four[0.1]["latency_speedup"] > four[0.2]["latency_speedup"] > four[0.5]["latency_speedup"] > 1.0
