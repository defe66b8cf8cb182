"""``npukit experiment cacheedit --quick`` end to end (run through the module's run(args)) and the NPU cost."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest

from npukit.experiments.cacheedit import npu_cost, run
from npukit.models import cacheedit as ce
from npukit.sim.errors import ConfigError


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
    for col in ("speedup", "psnr_db", "ssim", "flops_saved", "edit_acc", "iou"):
        assert col in rows["cacheedit"]
    assert float(rows["full"]["flops_saved"]) == 0.0
    assert 0.3 < float(rows["cacheedit"]["flops_saved"]) < 1.0
    assert float(rows["cacheedit"]["psnr_db"]) > 20.0
    assert float(rows["oracle"]["iou"]) > float(rows["toca-random"]["iou"])
    for name in ("summary.txt", "dle.csv", "dle.png", "npu.csv", "ledger.json"):
        assert (out / name).stat().st_size > 0
    dle = list(csv.DictReader((out / "dle.csv").open()))
    step0_last = [r for r in dle if r["step"] == "0" and r["layer"] == "3"][0]
    assert float(step0_last["div_in"]) > float(step0_last["div_out"])  # first-step divergence already localised


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--images"):
        run.run(_args("--images", "0", "--out", str(tmp_path)))
    with pytest.raises(ConfigError, match="--steps"):
        run.run(_args("--steps", "1", "--out", str(tmp_path)))
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
