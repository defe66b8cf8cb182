"""Experiment grids on the sweep executor: the CacheEdit batches on a real 2-worker Dask LocalCluster
give the same fidelity numbers as in-process (timings differ, so speedup columns are not compared)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from npukit.experiments import cacheedit as ce_exp
from npukit.models import cacheedit as ce

pytestmark = pytest.mark.slow  # end-to-end runs; deselect with -m 'not slow'

distributed = pytest.importorskip("distributed")

COMPARED = ("psnr_db", "ssim", "flops_saved", "edit_acc", "iou", "active_frac", "psnr_bg_src_db")


def _rows(out: Path) -> dict[str, dict[str, str]]:
    return {r["method"]: {k: r[k] for k in COMPARED} for r in csv.DictReader((out / "results.csv").open())}


@pytest.mark.skipif(not ce.FLUX_WEIGHTS.is_file(), reason="shipped weights missing")
def test_cacheedit_sessions_on_dask_equal_in_process(tmp_path: Path) -> None:
    from npukit.sweeps._dask import DaskExecutor

    cfg = ce_exp.Config(quick=True, images=3, rounds=2, steps=4, threads=1, batch=2)  # jobs: batches of 2 and 1
    for name in ("serial", "dask"):
        (tmp_path / name).mkdir()
    ce_exp.run_experiment(tmp_path / "serial", cfg, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        with DaskExecutor(scheduler=c.scheduler_address) as ex:
            ce_exp.run_experiment(tmp_path / "dask", cfg, executor=ex, progress=False)
    serial, dask = _rows(tmp_path / "serial"), _rows(tmp_path / "dask")
    assert set(serial) == set(ce.SESSION_METHODS)
    assert dask == serial


def test_cacheedit_unreachable_scheduler_fails_before_writing(tmp_path: Path) -> None:
    from npukit.cli import main

    out = tmp_path / "never"
    assert main(["experiment", "cacheedit", "--quick", "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "0.5",
                 "--out", str(out)]) == 2
    assert not out.exists()


def test_psumquant_families_on_dask_equal_in_process(psumquant_quick_run, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process run is the session's quick run (conftest.py); the Dask run reads the weights it
    cached (same cache names) and evaluates two families (--families digits,lm: the quick ones; MiniLM
    and ResNet-18 take the same job path) on the workers at policies none and psumquant, 8-bit psums:
    its rows must equal the in-process run's rows of those settings, and it writes no other family."""
    from npukit.cli import main

    rc, serial_out, cache = psumquant_quick_run
    assert rc == 0
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(cache))  # workers spawned below inherit it
    base = ["experiment", "psumquant", "--quick", "--no-progress", "--policies", "psumquant", "--psum-buffer-bits", "8",
            "--families", "lm,digits"]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        assert main([*base, "--scheduler", c.scheduler_address, "--out", str(tmp_path / "dask")]) == 0
    assert sorted(p.name for p in (tmp_path / "dask").glob("*.csv")) == ["digits.csv", "energy.csv", "lm.csv"]
    compared = 0
    for f in sorted((tmp_path / "dask").glob("*.csv")):
        serial = {_key(r): _values(r) for r in csv.DictReader((serial_out / f.name).open())}
        dask = {_key(r): _values(r) for r in csv.DictReader(f.open())}
        wanted = {k for k in serial if f.name == "energy.csv" or (k[2] in ("none", "psumquant") and k[3] == "8")}
        assert set(dask) == wanted, f.name
        for key, a in dask.items():  # workers run torch on 1 thread, as the in-process run: float sums may differ
            b = serial[key]
            assert a.keys() == b.keys(), f.name
            for k in a:
                fa, fb = _num(a[k]), _num(b[k])
                if fa is None or fb is None:
                    assert a[k] == b[k], (f.name, k)
                else:
                    assert fa == pytest.approx(fb, rel=1e-4, abs=1e-6, nan_ok=True), (f.name, key, k)  # NaN where both are
        compared += len(dask)
    assert compared > 20


_ID = ("model", "workload", "policy", "bits", "array", "wa", "attention", "mapping")


def _key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(c, "") for c in _ID)


def _values(row: dict[str, str]) -> dict[str, str]:
    """Every column but timings and the comparison with policy static (the Dask run evaluates no static)."""
    return {k: v for k, v in row.items() if "time" not in k and not k.endswith("_s") and not k.startswith("minus_static")}


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None
